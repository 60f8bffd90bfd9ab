/**
 * The error function and the normal CDF in float64, to about 1e-15 relative: the op kit's
 * reference for gelu, and @fa/autograd's float64 gelu (gradcheck's twin).
 */
const SQRT1_2 = Math.SQRT1_2;

/**
 * erf to about 1e-15 relative: the everywhere-positive series
 * erf(z) = 2/√π · e^{−z²} · Σ 2ⁿ z^{2n+1} / (1·3···(2n+1)) for |z| < 3, and the continued
 * fraction of erfc (modified Lentz) beyond.
 */
const INV_ODD = Float64Array.from({ length: 200 }, (_, n) => 1 / (2 * n + 1));

export function erf(z: number): number {
  if (Number.isNaN(z)) return NaN;
  const a = Math.abs(z);
  if (a < 3) {
    let term = a;
    let sum = a;
    const z2 = a * a;
    for (let n = 1; n < 200; n++) {
      term *= 2 * z2 * INV_ODD[n];
      sum += term;
      if (term < sum * 1e-17) break;
    }
    const r = (2 / Math.sqrt(Math.PI)) * Math.exp(-z2) * sum;
    return z < 0 ? -r : r;
  }
  const r = 1 - erfcLarge(a);
  return z < 0 ? -r : r;
}

/** erfc(a) for a >= 3 by the continued fraction a + 1/2 / (a + 1 / (a + 3/2 / (a + …))). */
function erfcLarge(a: number): number {
  if (a > 27) return 0;
  const tiny = 1e-300;
  let f = a;
  let C = a;
  let D = 0;
  for (let n = 1; n < 300; n++) {
    const an = n / 2;
    D = a + an * D;
    D = D === 0 ? tiny : 1 / D;
    C = a + an / C;
    if (C === 0) C = tiny;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-a * a) / Math.sqrt(Math.PI) / f;
}

/** Φ(v), the standard normal CDF, without cancellation in the far left tail. */
export function normalCdf(v: number): number {
  const z = v * SQRT1_2;
  if (z < -3) return 0.5 * erfcLarge(-z);
  return 0.5 * (1 + erf(z));
}
