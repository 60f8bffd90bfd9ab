import { describe, expect, it, afterEach } from 'vitest';
import {
  FAError, referenceBackward, referenceForward, referenceMaxBytes, referenceRows, setReferenceMaxBytes, tensor,
  type AttentionOptions, type DType, type HostTensor,
} from '../dist/index.js';
import { caseInputs, conformanceCases, createRng, hostTensor, makeCase, randomTensor, type CaseSpec } from '../dist/testing/index.js';
import { textbook } from './helpers/textbook.js';

function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let e = 0;
  let r = 0;
  for (let i = 0; i < a.length; i++) {
    e += (a[i] - b[i]) ** 2;
    r += b[i] ** 2;
  }
  return r === 0 ? Math.sqrt(e) : Math.sqrt(e / r);
}

function sameFinite(a: ArrayLike<number>, b: ArrayLike<number>): void {
  expect(a.length).toBe(b.length);
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(b[i])) expect(a[i]).toBe(b[i]);
  }
}

describe('referenceForward: hand-computed', () => {
  it('B1 T2 H1 D1, scale 1', () => {
    const q = tensor(new Float32Array([1, 2]), [1, 2, 1, 1], 'f32');
    const k = tensor(new Float32Array([1, 0]), [1, 2, 1, 1], 'f32');
    const v = tensor(new Float32Array([3, 5]), [1, 2, 1, 1], 'f32');
    const r = referenceForward(q, k, v, { scale: 1 });
    const e = Math.E;
    expect(r.out[0]).toBeCloseTo((3 * e + 5) / (e + 1), 14);
    expect(r.out[1]).toBeCloseTo((3 * e * e + 5) / (e * e + 1), 14);
    expect(r.lse[0]).toBeCloseTo(Math.log(e + 1), 14);
    expect(r.lse[1]).toBeCloseTo(Math.log(e * e + 1), 14);
    // causal: row 0 sees key 0 only
    const c = referenceForward(q, k, v, { scale: 1, causal: true });
    expect(c.out[0]).toBe(3);
    expect(c.lse[0]).toBe(1);
    expect(c.out[1]).toBeCloseTo((3 * e * e + 5) / (e * e + 1), 14);
    // softcap 1: s = tanh(s); ALiBi slope 0.5 on row 1: s1j -= 0.5·|1 - j|
    const s = referenceForward(q, k, v, { scale: 1, softcap: 1, alibiSlopes: [0.5] });
    // row 0: key 0 → tanh(1) − 0, key 1 → tanh(0) − 0.5; row 1: key 0 → tanh(2) − 0.5, key 1 → 0.
    expect(s.out[0]).toBeCloseTo((3 * Math.exp(Math.tanh(1)) + 5 * Math.exp(-0.5)) / (Math.exp(Math.tanh(1)) + Math.exp(-0.5)), 14);
    expect(s.lse[1]).toBeCloseTo(Math.log(Math.exp(Math.tanh(2) - 0.5) + 1), 14);
  });

  it('rows that see no key: out 0, lse -Infinity; backward gives 0 there', () => {
    // Tq 4 > Tk 2, causal: rows 0 and 1 sit at positions -2, -1 and see nothing.
    const rng = createRng(3);
    const q = randomTensor(rng, [1, 4, 2, 8], 'f32');
    const k = randomTensor(rng, [1, 2, 1, 8], 'f32');
    const v = randomTensor(rng, [1, 2, 1, 8], 'f32');
    const dO = randomTensor(rng, [1, 4, 2, 8], 'f32');
    const r = referenceBackward(q, k, v, dO, { causal: true });
    for (const h of [0, 1]) for (const i of [0, 1]) expect(r.lse[h * 4 + i]).toBe(-Infinity);
    for (let x = 0; x < 2 * 2 * 8; x++) {
      expect(r.out[x]).toBe(0);
      expect(r.dq[x]).toBe(0);
    }
    expect(Number.isFinite(r.lse[2])).toBe(true);
  });

  it('NaN in an input propagates to the rows that see it, and only there', () => {
    const rng = createRng(5);
    const qv = Float32Array.from({ length: 6 * 4 }, () => rng.normal());
    const kv = Float32Array.from({ length: 6 * 4 }, () => rng.normal());
    qv[2 * 4 + 1] = NaN; // row 2
    kv[4 * 4 + 3] = NaN; // key 4
    const q = tensor(qv, [1, 6, 1, 4], 'f32');
    const k = tensor(kv, [1, 6, 1, 4], 'f32');
    const v = randomTensor(rng, [1, 6, 1, 4], 'f32');
    const r = referenceForward(q, k, v, { causal: true });
    for (let i = 0; i < 6; i++) {
      const nan = i === 2 || i >= 4;
      expect(Number.isNaN(r.lse[i])).toBe(nan);
      for (let d = 0; d < 4; d++) expect(Number.isNaN(r.out[i * 4 + d])).toBe(nan);
    }
  });

  it('refuses device tensors', () => {
    const dev = { kind: 'device', backend: 'x', dtype: 'f32', shape: [1, 1, 1, 1], handle: null, disposed: false } as const;
    const h = tensor(new Float32Array(1), [1, 1, 1, 1], 'f32');
    expect(() => referenceForward(dev as unknown as HostTensor, h, h)).toThrowError(/host tensors/);
  });
});

describe('referenceForward/Backward vs an independent textbook implementation', () => {
  const cases = conformanceCases({ count: 150 }).filter((c) => c.work < 4e5).slice(0, 70);
  it(`agrees to 1e-12 on ${cases.length} generated cases (every option, every dtype)`, () => {
    for (const c of cases) {
      const i = caseInputs(c);
      const r = referenceBackward(i.q, i.k, i.v, i.dOut, i.options);
      const t = textbook(i.q, i.k, i.v, i.options, i.dOut);
      sameFinite(r.lse, t.lse);
      const fin = (a: Float64Array) => a.map((x) => (Number.isFinite(x) ? x : 0));
      const errs = {
        out: relErr(r.out, t.out),
        lse: relErr(fin(r.lse), fin(t.lse)),
        dq: relErr(r.dq, t.dq!),
        dk: relErr(r.dk, t.dk!),
        dv: relErr(r.dv, t.dv!),
        ...(r.dsinks || t.dsinks ? { dsinks: relErr(r.dsinks!, t.dsinks!) } : {}),
      };
      for (const [name, e] of Object.entries(errs)) expect(e, `${c.name}: ${name}`).toBeLessThan(1e-12);
    }
  });
});

describe('referenceBackward vs central finite differences of referenceForward', () => {
  // Inputs are multiples of 2^-8 in [-4, 4] so x ± 2^-14 is exact in float32.
  const H = 2 ** -14;
  function grid(rng: ReturnType<typeof createRng>, shape: number[], dtype: DType = 'f32'): HostTensor {
    const n = shape.reduce((a, b) => a * b, 1);
    return hostTensor(Float32Array.from({ length: n }, () => Math.round(rng.uniform(-3, 3) * 256) / 256), shape, dtype);
  }
  function withValue(t: HostTensor, idx: number, x: number): HostTensor {
    const data = Float32Array.from(t.data as Float32Array);
    data[idx] = x;
    return tensor(data, t.shape, 'f32');
  }
  const loss = (q: HostTensor, k: HostTensor, v: HostTensor, dO: Float32Array, o: AttentionOptions) => {
    const r = referenceForward(q, k, v, o);
    let s = 0;
    for (let x = 0; x < r.out.length; x++) s += dO[x] * r.out[x];
    return s;
  };
  const setups: { name: string; qs: number[]; ks: number[]; vs?: number[]; o: AttentionOptions }[] = [
    { name: 'plain', qs: [1, 4, 1, 3], ks: [1, 5, 1, 3], o: {} },
    { name: 'causal Tq<Tk', qs: [2, 4, 1, 3], ks: [2, 6, 1, 3], o: { causal: true } },
    { name: 'causal Tq>Tk (empty rows)', qs: [1, 6, 1, 3], ks: [1, 4, 1, 3], o: { causal: true } },
    { name: 'window [1,1]', qs: [1, 5, 1, 3], ks: [1, 5, 1, 3], o: { window: [1, 1] } },
    { name: 'window [2,-1] + causal', qs: [1, 5, 1, 3], ks: [1, 7, 1, 3], o: { window: [2, -1], causal: true } },
    { name: 'softcap 0.7, scale 1.3', qs: [1, 4, 1, 3], ks: [1, 5, 1, 3], o: { softcap: 0.7, scale: 1.3 } },
    { name: 'ALiBi per (b,h)', qs: [2, 4, 2, 3], ks: [2, 5, 2, 3], o: { alibiSlopes: [0.5, 0.25, -0.3, 1] } },
    { name: 'GQA H4/2', qs: [1, 4, 4, 3], ks: [1, 5, 2, 3], o: { causal: true } },
    { name: 'MQA H3/1 + softcap + ALiBi', qs: [1, 3, 3, 3], ks: [1, 4, 1, 3], o: { softcap: 2, alibiSlopes: [0.5, 0.25, 0.125] } },
    { name: 'negative scale', qs: [1, 4, 1, 3], ks: [1, 4, 1, 3], o: { scale: -0.8 } },
    { name: 'varlen with empty segments', qs: [7, 2, 3], ks: [9, 1, 3], o: { cuSeqlensQ: [0, 2, 2, 5, 7], cuSeqlensK: [0, 4, 4, 4, 9], causal: true } },
    { name: 'Dv 5 ≠ Dqk 3, GQA H4/2, causal', qs: [1, 4, 4, 3], ks: [1, 5, 2, 3], vs: [1, 5, 2, 5], o: { causal: true } },
    { name: 'Dv 2 < Dqk 4, varlen, softcap, sinks', qs: [7, 2, 4], ks: [9, 1, 4], vs: [9, 1, 2], o: { cuSeqlensQ: [0, 2, 2, 5, 7], cuSeqlensK: [0, 4, 4, 4, 9], softcap: 2, sinks: [0.5, -1] } },
    { name: 'dropout 0.4 + GQA + causal (a fixed mask: the loss is smooth in q, k, v)', qs: [2, 4, 4, 3], ks: [2, 5, 2, 3], o: { causal: true, dropout: { p: 0.4, seed: 7, offset: 3 } } },
    { name: 'dropout 0.3 + Dv + sinks, varlen', qs: [7, 2, 4], ks: [9, 1, 4], vs: [9, 1, 3], o: { cuSeqlensQ: [0, 2, 2, 5, 7], cuSeqlensK: [0, 4, 4, 4, 9], sinks: [0.5, -1], dropout: { p: 0.3, seed: 2 ** 33 + 5 } } },
    { name: 'sinks, GQA H4/2, causal Tq>Tk (empty rows)', qs: [1, 6, 4, 3], ks: [1, 4, 2, 3], o: { causal: true, sinks: [0.5, -1.25, 2, 0] } },
    { name: 'sinks + softcap + ALiBi, varlen', qs: [7, 2, 3], ks: [9, 1, 3], o: { cuSeqlensQ: [0, 2, 2, 5, 7], cuSeqlensK: [0, 4, 4, 4, 9], softcap: 2, alibiSlopes: [0.5, 0.25], sinks: [1.5, -0.5] } },
  ];
  for (const s of setups) {
    it(s.name, () => {
      const rng = createRng(s.name.length * 31 + 7);
      const q = grid(rng, s.qs);
      const k = grid(rng, s.ks);
      const vs = s.vs ?? s.ks;
      const v = grid(rng, vs);
      const dOt = grid(rng, [...s.qs.slice(0, -1), vs[vs.length - 1]]);
      const dO = dOt.data as Float32Array;
      const an = referenceBackward(q, k, v, dOt, s.o);
      for (const [name, which, grad] of [['dq', 0, an.dq], ['dk', 1, an.dk], ['dv', 2, an.dv]] as const) {
        const base = [q, k, v][which];
        const fd = new Float64Array(base.data.length);
        for (let x = 0; x < fd.length; x++) {
          const x0 = (base.data as Float32Array)[x];
          const args = (t: HostTensor) => [which === 0 ? t : q, which === 1 ? t : k, which === 2 ? t : v] as const;
          const lp = loss(...args(withValue(base, x, x0 + H)), dO, s.o);
          const lm = loss(...args(withValue(base, x, x0 - H)), dO, s.o);
          fd[x] = (lp - lm) / (2 * H);
        }
        expect(relErr(fd, grad), `${s.name} ${name}`).toBeLessThan(2e-7);
      }
      if (s.o.sinks) {
        // dsinks: the sinks are multiples of 2^-4, so s ± 2^-14 is exact in float32
        const s0 = Array.from(s.o.sinks as ArrayLike<number>);
        const fd = s0.map((_, h) => {
          const at = (x: number) => loss(q, k, v, dO, { ...s.o, sinks: s0.map((y, g) => (g === h ? x : y)) });
          return (at(s0[h] + H) - at(s0[h] - H)) / (2 * H);
        });
        expect(an.dsinks).toBeDefined();
        expect(relErr(Float64Array.from(fd), an.dsinks!), `${s.name} dsinks`).toBeLessThan(2e-7);
      } else expect(an.dsinks).toBeUndefined();
    });
  }
});

describe('E_TOO_LARGE', () => {
  afterEach(() => setReferenceMaxBytes(512 * 1024 * 1024));
  const rng = createRng(1);
  const q = randomTensor(rng, [1, 64, 1, 8], 'f16');
  const k = randomTensor(rng, [1, 64, 1, 8], 'f16');

  it('says how many bytes it needs and how to raise the limit', () => {
    expect(referenceMaxBytes()).toBe(512 * 1024 * 1024);
    let err: unknown;
    try {
      referenceForward(q, k, k, {}, { maxBytes: 1000 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FAError);
    const e = err as FAError;
    expect(e.code).toBe('E_TOO_LARGE');
    expect(e.message).toMatch(/would allocate \d+ bytes/);
    expect(e.message).toMatch(/limit of 1000 bytes/);
    expect(e.message).toMatch(/maxBytes/);
    expect(e.message).toMatch(/setReferenceMaxBytes/);
    expect(e.message).toMatch(/referenceRows/);
    expect(e.message).toMatch(/64x64/);
  });

  it('honours the module-level setter and a per-call maxBytes', () => {
    setReferenceMaxBytes(2000);
    expect(() => referenceForward(q, k, k)).toThrowError(/E_TOO_LARGE|would allocate/);
    expect(() => referenceBackward(q, k, k, q)).toThrowError(/would allocate/);
    expect(referenceForward(q, k, k, {}, { maxBytes: 1e6 }).out.length).toBe(64 * 8);
    setReferenceMaxBytes(1e6);
    expect(referenceForward(q, k, k).out.length).toBe(64 * 8);
    expect(() => setReferenceMaxBytes(-1)).toThrowError(FAError);
  });

  it('refuses a 100K-token problem without allocating it', () => {
    const big = { kind: 'host', dtype: 'bf16', shape: [1, 100_000, 1, 64], data: new Uint16Array(100_000 * 64) } as const;
    expect(() => referenceForward(big, big, big)).toThrowError(/E_TOO_LARGE|would allocate 8\d{10} bytes/);
  });
});

describe('referenceRows', () => {
  it('agrees exactly with referenceForward on every row of generated cases', () => {
    const specs: CaseSpec[] = [
      { dtype: 'f32', batch: 2, tq: 9, tk: 13, h: 4, hkv: 2, d: 16, causal: true, softcap: 3, alibi: 'BH' },
      { dtype: 'f16', seqlensQ: [3, 0, 5], seqlensK: [4, 2, 0], h: 2, hkv: 1, d: 8, window: [1, 2] },
      { dtype: 'bf16', batch: 1, tq: 7, tk: 5, h: 3, hkv: 3, d: 40, scale: -0.7, causal: true },
    ];
    for (const s of specs) {
      const c = makeCase(s);
      const i = caseInputs(c);
      const f = referenceForward(i.q, i.k, i.v, i.options);
      const p = f.problem;
      const rows = [];
      for (let b = 0; b < p.batch; b++) {
        const tq = p.cuSeqlensQ[b + 1] - p.cuSeqlensQ[b];
        for (let h = 0; h < p.h; h++) for (let r = 0; r < tq; r++) rows.push({ b, h, i: r });
      }
      const res = referenceRows(i.q, i.k, i.v, i.options, rows);
      expect(res.length).toBe(rows.length);
      for (const r of res) {
        const row = p.cuSeqlensQ[r.b] + r.i;
        const li = p.varlen ? r.h * p.totalQ + row : (r.b * p.h + r.h) * p.tq + r.i;
        expect(r.lse).toBe(f.lse[li]);
        const o = (row * p.h + r.h) * p.d;
        expect(Array.from(r.out)).toEqual(Array.from(f.out.subarray(o, o + p.d)));
      }
    }
  });

  it('checks row indices', () => {
    const c = makeCase({ dtype: 'f32', tq: 4, d: 8 });
    const i = caseInputs(c);
    expect(() => referenceRows(i.q, i.k, i.v, {}, [{ b: 0, h: 0, i: 4 }])).toThrowError(/out of range/);
    expect(() => referenceRows(i.q, i.k, i.v, {}, [{ b: 1, h: 0, i: 0 }])).toThrowError(/out of range/);
    expect(() => referenceRows(i.q, i.k, i.v, {}, [{ b: 0, h: 1, i: 0 }])).toThrowError(/out of range/);
  });

  it('handles a 100K-key problem on sampled rows with O(Tk) memory', () => {
    const T = 100_000;
    const D = 8;
    const rng = createRng(9);
    const q = randomTensor(rng, [1, 2, 1, D], 'bf16');
    const k = randomTensor(rng, [1, T, 1, D], 'bf16');
    const v = randomTensor(rng, [1, T, 1, D], 'bf16');
    const rows = referenceRows(q, k, v, { causal: true }, [{ b: 0, h: 0, i: 1 }, { b: 0, h: 0, i: 0 }]);
    const t = textbook(q, k, v, { causal: true });
    for (const r of rows) {
      expect(r.out.length).toBe(D);
      expect(Math.abs(r.lse - t.lse[r.i])).toBeLessThan(1e-12);
      expect(relErr(r.out, t.out.subarray(r.i * D, r.i * D + D))).toBeLessThan(1e-12);
    }
  });
});

describe('magnitudes', () => {
  it('bound the values they describe (mag ≥ |x| elementwise)', () => {
    for (const s of [
      { dtype: 'f32', batch: 2, tq: 9, tk: 13, h: 4, hkv: 2, d: 16, causal: true, softcap: 3, alibi: 'BH' },
      { dtype: 'bf16', seqlensQ: [3, 0, 5], seqlensK: [4, 2, 0], h: 2, hkv: 1, d: 8, window: [1, 2], magnitude: 30 },
    ] as CaseSpec[]) {
      const i = caseInputs(makeCase(s));
      const r = referenceBackward(i.q, i.k, i.v, i.dOut, i.options, { magnitudes: true });
      const m = r.magGrad!;
      const check = (x: Float64Array, mm: Float64Array) => x.forEach((val, n) => expect(mm[n] * (1 + 1e-12)).toBeGreaterThanOrEqual(Math.abs(val)));
      check(r.out, r.mag!.out);
      check(r.dq, m.dq);
      check(r.dk, m.dk);
      check(r.dv, m.dv);
      r.lse.forEach((l, n) => {
        if (Number.isFinite(l)) expect(r.mag!.lse[n]).toBeGreaterThanOrEqual(Math.abs(l));
      });
    }
  });
});
