/**
 * A small seeded random source (SplitMix32 state, Box–Muller normals) so that parameter init,
 * data and gradcheck are reproducible across runs and machines.
 */
export class Rng {
  private state: number;
  private spare: number | undefined;

  constructor(seed = 0) {
    this.state = seed >>> 0;
  }

  /** A uint32. */
  nextU32(): number {
    let z = (this.state = (this.state + 0x9e3779b9) >>> 0);
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** Uniform in [0, 1), 53 random bits. */
  random(): number {
    const hi = this.nextU32() >>> 5;
    const lo = this.nextU32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  uniform(lo = 0, hi = 1): number {
    return lo + (hi - lo) * this.random();
  }

  /** Standard normal. */
  normal(mean = 0, std = 1): number {
    if (this.spare !== undefined) {
      const s = this.spare;
      this.spare = undefined;
      return mean + std * s;
    }
    let u = 0;
    while (u === 0) u = this.random();
    const v = this.random();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return mean + std * r * Math.cos(2 * Math.PI * v);
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.random() * n);
  }

  /** Fisher–Yates shuffle in place. */
  shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
}
