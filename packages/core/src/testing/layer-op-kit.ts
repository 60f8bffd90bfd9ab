/**
 * The op kit's cases for the element-wise and per-row model ops (ops/layer-ops.ts): gelu (both
 * forms), layerNorm, RMSNorm, SiLU/SwiGLU, rotary embedding, softmax cross-entropy, AdamW and the
 * row sum, forward and backward, each
 * checked output against a float64 reference by float32's rule (‖x − ref‖ / ‖ref‖ ≤ 1e-5), plus
 * bad calls that must be refused with a one-line FAError and untouched outputs.
 */
import { isFAError } from '../errors.js';
import { normalCdf } from '../ops/erf.js';
import type { HostModelOps } from '../ops/model-ops.js';
import { dropoutKeepElements } from '../philox.js';
import { resolveDropout } from '../problem.js';
import { createRng, randomValues, type Rng } from './random.js';

export const LAYER_OP_TOLERANCE = 1e-5;

export interface LayerOpCase {
  name: string;
  /** Runs the op on fresh inputs; returns each output with its float64 reference. */
  run(ops: HostModelOps, rng: Rng): LayerOpOutput[];
}

/**
 * One checked output. `floor`: where the exact result cancels (it is far smaller than the terms
 * it is computed from), the error is measured against max(‖ref‖, floor) instead: float32 cannot
 * resolve a difference below an ulp of its terms (as core's attention tolerance does for rows
 * whose dq cancels).
 */
export interface LayerOpOutput {
  what: string;
  got: ArrayLike<number>;
  ref: ArrayLike<number>;
  floor?: number;
}

const TANH_C = Math.sqrt(2 / Math.PI);
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);

function geluRef(v: number, approx: 'none' | 'tanh'): number {
  return approx === 'tanh' ? 0.5 * v * (1 + Math.tanh(TANH_C * (v + 0.044715 * v ** 3))) : v * normalCdf(v);
}
function geluGradRef(v: number, approx: 'none' | 'tanh'): number {
  if (approx === 'tanh') {
    const t = Math.tanh(TANH_C * (v + 0.044715 * v ** 3));
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * TANH_C * (1 + 3 * 0.044715 * v * v);
  }
  return normalCdf(v) + v * INV_SQRT_2PI * Math.exp(-0.5 * v * v);
}

/** Inputs of an element-wise case: Gaussian at a scale, with the far tails and zeros spliced in. */
function ewInput(rng: Rng, n: number, scale: number): Float32Array {
  const x = randomValues(rng, n, scale);
  const special = [0, -0, -12, 12, -7.5, 7.5, -3.25, 3.25, 1e-20, -1e-20, 40, -40];
  for (let i = 0; i < n && i < special.length; i++) x[(i * 7919) % n] = special[i];
  return x;
}

function layerNormRef(x: Float32Array, rows: number, C: number, w: Float32Array | null, b: Float32Array | null, eps: number) {
  const y = new Float64Array(rows * C), mean = new Float64Array(rows), rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < C; j++) s += x[r * C + j];
    const mu = s / C;
    let v = 0;
    for (let j = 0; j < C; j++) v += (x[r * C + j] - mu) ** 2;
    const rs = 1 / Math.sqrt(v / C + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (let j = 0; j < C; j++) y[r * C + j] = (x[r * C + j] - mu) * rs * (w ? w[j] : 1) + (b ? b[j] : 0);
  }
  return { y, mean, rstd };
}

export function layerOpCases(): LayerOpCase[] {
  const cases: LayerOpCase[] = [];
  for (const approximate of ['none', 'tanh'] as const) {
    for (const [n, scale] of [[0, 1], [1, 1], [13, 1], [1000, 1], [4099, 4], [65537, 2]] as const) {
      cases.push({
        name: `gelu ${approximate} n${n} x${scale}`,
        run(ops, rng) {
          const x = ewInput(rng, n, scale), y = new Float32Array(n).fill(Number.NaN);
          ops.gelu({ x, y, approximate });
          return [{ what: 'y', got: y, ref: Array.from(x, (v) => geluRef(v, approximate)) }];
        },
      });
      for (const accumulate of [false, true]) {
        cases.push({
          name: `geluBackward ${approximate} n${n} x${scale}${accumulate ? ' +=' : ''}`,
          run(ops, rng) {
            const x = ewInput(rng, n, scale), dy = randomValues(rng, n), dx0 = randomValues(rng, n);
            const dx = accumulate ? Float32Array.from(dx0) : new Float32Array(n).fill(Number.NaN);
            ops.geluBackward({ x, dy, dx, approximate, accumulate });
            return [{ what: 'dx', got: dx, ref: Array.from(x, (v, i) => (accumulate ? dx0[i] : 0) + dy[i] * geluGradRef(v, approximate)) }];
          },
        });
      }
    }
    cases.push({
      name: `gelu ${approximate} in place`,
      run(ops, rng) {
        const x = ewInput(rng, 777, 3), x0 = Float32Array.from(x);
        ops.gelu({ x, y: x, approximate });
        return [{ what: 'y', got: x, ref: Array.from(x0, (v) => geluRef(v, approximate)) }];
      },
    });
  }
  // layerNorm: widths around every vector width, a row far from zero (cancellation), no affine
  const lnShapes: [number, number, number, boolean][] = [[1, 1, 0, true], [3, 7, 0, true], [17, 256, 0, true], [64, 1000, 0, false], [5, 4097, 0, true], [9, 33, 1000, true], [0, 8, 0, true]];
  for (const [rows, C, offset, affine] of lnShapes) {
    const tag = `rows${rows} cols${C}${offset ? ` mean ${offset}` : ''}${affine ? '' : ' no affine'}`;
    const inputs = (rng: Rng) => {
      const x = randomValues(rng, rows * C).map((v) => v + offset);
      const w = affine ? randomValues(rng, C) : null, b = affine ? randomValues(rng, C) : null;
      return { x, w, b };
    };
    cases.push({
      name: `layerNorm ${tag}`,
      run(ops, rng) {
        const { x, w, b } = inputs(rng);
        const y = new Float32Array(rows * C).fill(Number.NaN), mean = new Float32Array(rows), rstd = new Float32Array(rows);
        ops.layerNorm({ rows, cols: C, x, weight: w, bias: b, eps: 1e-5, y, mean, rstd });
        const ref = layerNormRef(x, rows, C, w, b, 1e-5);
        return [{ what: 'y', got: y, ref: ref.y }, { what: 'mean', got: mean, ref: ref.mean }, { what: 'rstd', got: rstd, ref: ref.rstd }];
      },
    });
    cases.push({
      name: `layerNormBackward ${tag}`,
      run(ops, rng) {
        const { x, w } = inputs(rng);
        const dy = randomValues(rng, rows * C);
        const ref = layerNormRef(x, rows, C, null, null, 1e-5);
        const mean = Float32Array.from(ref.mean), rstd = Float32Array.from(ref.rstd);
        const dx = new Float32Array(rows * C).fill(Number.NaN), dw = affine ? new Float32Array(C).fill(Number.NaN) : null, db = affine ? new Float32Array(C).fill(Number.NaN) : null;
        ops.layerNormBackward({ rows, cols: C, x, mean, rstd, weight: w, dy, dx, dweight: dw, dbias: db });
        // reference from the float32 mean/rstd the call was given, in float64
        const rdx = new Float64Array(rows * C), rdw = new Float64Array(C), rdb = new Float64Array(C);
        for (let r = 0; r < rows; r++) {
          let s1 = 0, s2 = 0;
          for (let j = 0; j < C; j++) {
            const h = (x[r * C + j] - mean[r]) * rstd[r], g = dy[r * C + j], d = g * (w ? w[j] : 1);
            rdw[j] += g * h;
            rdb[j] += g;
            s1 += d;
            s2 += d * h;
          }
          for (let j = 0; j < C; j++) {
            const h = (x[r * C + j] - mean[r]) * rstd[r], d = dy[r * C + j] * (w ? w[j] : 1);
            rdx[r * C + j] = rstd[r] * (d - s1 / C - h * (s2 / C));
          }
        }
        const out = [{ what: 'dx', got: dx, ref: rdx }];
        if (dw && db) out.push({ what: 'dweight', got: dw, ref: rdw }, { what: 'dbias', got: db, ref: rdb });
        return out;
      },
    });
  }
  // cross-entropy: tiny and large vocabularies, large logits (the max must be subtracted), ignored rows
  for (const [rows, V, scale, ignored] of [[1, 1, 1, false], [5, 3, 1, true], [64, 256, 2, true], [3, 5003, 1, false], [17, 100, 60, true], [4, 9, 1, true]] as const) {
    const tag = `rows${rows} classes${V} x${scale}${ignored ? ' with ignored rows' : ''}`;
    const inputs = (rng: Rng) => {
      const x = randomValues(rng, rows * V, scale);
      const t = new Int32Array(rows).map(() => Math.floor(rng.next() * V));
      if (ignored) for (let r = 0; r < rows; r += 3) t[r] = -100;
      return { x, t };
    };
    const lseRef = (x: Float32Array, t: Int32Array) =>
      Array.from(t, (tr, r) => {
        if (tr === -100) return 0;
        let m = -Infinity, s = 0;
        for (let j = 0; j < V; j++) m = Math.max(m, x[r * V + j]);
        for (let j = 0; j < V; j++) s += Math.exp(x[r * V + j] - m);
        return m + Math.log(s);
      });
    cases.push({
      name: `crossEntropy ${tag}`,
      run(ops, rng) {
        const { x, t } = inputs(rng);
        const lse = new Float32Array(rows).fill(Number.NaN);
        const r = ops.crossEntropy({ rows, classes: V, logits: x, targets: t, ignoreIndex: -100, lse });
        const ref = lseRef(x, t);
        let loss = 0, count = 0;
        t.forEach((tr, i) => { if (tr !== -100) { loss += ref[i] - x[i * V + tr]; count++; } });
        // (read when checked: an engine that computes on a device fills r then)
        return [{ what: 'lse', got: lse, ref }, { what: 'loss', get got() { return [r.loss]; }, ref: [loss] }, { what: 'count', get got() { return [r.count]; }, ref: [count] }];
      },
    });
    cases.push({
      name: `crossEntropyBackward ${tag}`,
      run(ops, rng) {
        const { x, t } = inputs(rng);
        const lse = Float32Array.from(lseRef(x, t));
        const dx = new Float32Array(rows * V).fill(Number.NaN);
        const scale1 = 1 / Math.max(1, t.filter((v) => v !== -100).length);
        ops.crossEntropyBackward({ rows, classes: V, logits: x, lse, targets: t, ignoreIndex: -100, scale: scale1, dlogits: dx });
        const ref = new Float64Array(rows * V);
        t.forEach((tr, r) => {
          if (tr === -100) return;
          for (let j = 0; j < V; j++) ref[r * V + j] = scale1 * (Math.exp(x[r * V + j] - lse[r]) - (j === tr ? 1 : 0));
        });
        return [{ what: 'dlogits', got: dx, ref }];
      },
    });
  }
  for (const [n, step, wd] of [[1, 1, 0], [13, 1, 0.1], [10007, 7, 0.01], [4096, 1000, 0]] as const) {
    cases.push({
      name: `adamw n${n} step${step} weightDecay ${wd}`,
      run(ops, rng) {
        const x = randomValues(rng, n), g = randomValues(rng, n, 0.1), m = randomValues(rng, n, 0.01), v = randomValues(rng, n, 0.01).map((a) => a * a);
        const [x0, m0, v0] = [Float32Array.from(x), Float32Array.from(m), Float32Array.from(v)];
        const c = { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: wd, step };
        ops.adamw({ param: x, grad: g, m, v, ...c });
        const rx = new Float64Array(n), rm = new Float64Array(n), rv = new Float64Array(n);
        for (let j = 0; j < n; j++) {
          rm[j] = c.beta1 * m0[j] + (1 - c.beta1) * g[j];
          rv[j] = c.beta2 * v0[j] + (1 - c.beta2) * g[j] * g[j];
          rx[j] = x0[j] * (1 - c.lr * wd) - (c.lr * rm[j]) / (1 - c.beta1 ** step) / (Math.sqrt(rv[j] / (1 - c.beta2 ** step)) + c.eps);
        }
        return [{ what: 'param', got: x, ref: rx }, { what: 'm', got: m, ref: rm }, { what: 'v', got: v, ref: rv }];
      },
    });
  }
  for (const [rows, cols, accumulate] of [[0, 5, false], [1, 1, false], [1024, 256, false], [3, 1027, true], [777, 33, true]] as const) {
    cases.push({
      name: `sumRows rows${rows} cols${cols}${accumulate ? ' +=' : ''}`,
      run(ops, rng) {
        const x = randomValues(rng, rows * cols), o0 = randomValues(rng, cols);
        const out = accumulate ? Float32Array.from(o0) : new Float32Array(cols).fill(Number.NaN);
        ops.sumRows({ rows, cols, x, out, accumulate });
        const ref = Array.from(o0, (v, j) => {
          let s = accumulate ? v : 0;
          for (let r = 0; r < rows; r++) s += x[r * cols + j];
          return s;
        });
        return [{ what: 'out', got: out, ref }];
      },
    });
  }
  // RMSNorm: widths around every vector width, large values, no weight
  for (const [rows, C, scale, weighted] of [[1, 1, 1, true], [3, 7, 1, true], [17, 256, 1, true], [64, 1000, 100, false], [5, 4097, 1, true], [0, 8, 1, true]] as const) {
    const tag = `rows${rows} cols${C}${scale !== 1 ? ` x${scale}` : ''}${weighted ? '' : ' no weight'}`;
    const rstdRef = (x: Float32Array) => Array.from({ length: rows }, (_, r) => {
      let q = 0;
      for (let j = 0; j < C; j++) q += x[r * C + j] ** 2;
      return 1 / Math.sqrt(q / C + 1e-6);
    });
    cases.push({
      name: `rmsNorm ${tag}`,
      run(ops, rng) {
        const x = randomValues(rng, rows * C, scale), w = weighted ? randomValues(rng, C) : null;
        const y = new Float32Array(rows * C).fill(Number.NaN), rstd = new Float32Array(rows);
        ops.rmsNorm({ rows, cols: C, x, weight: w, eps: 1e-6, y, rstd });
        const rs = rstdRef(x);
        return [{ what: 'y', got: y, ref: Array.from(x, (v, i) => v * rs[Math.floor(i / C)] * (w ? w[i % C] : 1)) }, { what: 'rstd', got: rstd, ref: rs }];
      },
    });
    cases.push({
      name: `rmsNormBackward ${tag}`,
      run(ops, rng) {
        const x = randomValues(rng, rows * C, scale), w = weighted ? randomValues(rng, C) : null, dy = randomValues(rng, rows * C);
        const rstd = Float32Array.from(rstdRef(x));
        const dx = new Float32Array(rows * C).fill(Number.NaN), dw = weighted ? new Float32Array(C).fill(Number.NaN) : null;
        ops.rmsNormBackward({ rows, cols: C, x, rstd, weight: w, dy, dx, dweight: dw });
        const rdx = new Float64Array(rows * C), rdw = new Float64Array(C);
        for (let r = 0; r < rows; r++) {
          let s = 0;
          for (let j = 0; j < C; j++) {
            const h = x[r * C + j] * rstd[r];
            rdw[j] += dy[r * C + j] * h;
            s += dy[r * C + j] * (w ? w[j] : 1) * h;
          }
          for (let j = 0; j < C; j++) rdx[r * C + j] = rstd[r] * (dy[r * C + j] * (w ? w[j] : 1) - x[r * C + j] * rstd[r] * (s / C));
        }
        // dx = rstd·(d − h·mean(d·h)) cancels where d lines up with h (one column, always): the
        // floor is a tenth of the terms' size, ‖rstd·d‖
        let terms = 0;
        for (let i = 0; i < rows * C; i++) terms += (rstd[Math.floor(i / C)] * dy[i] * (w ? w[i % C] : 1)) ** 2;
        const out: LayerOpOutput[] = [{ what: 'dx', got: dx, ref: rdx, floor: 0.1 * Math.sqrt(terms) }];
        if (dw) out.push({ what: 'dweight', got: dw, ref: rdw });
        return out;
      },
    });
  }
  // SiLU and SwiGLU (silu(x)·gate), forward and backward, with the far tails
  const sig = (v: number) => 1 / (1 + Math.exp(-v));
  for (const gated of [false, true]) {
    for (const [n, scale] of [[0, 1], [1, 1], [13, 1], [1000, 1], [4099, 4], [65537, 2]] as const) {
      const tag = `${gated ? 'swiglu' : 'silu'} n${n} x${scale}`;
      cases.push({
        name: `silu ${tag}`,
        run(ops, rng) {
          const x = ewInput(rng, n, scale), gate = gated ? randomValues(rng, n) : null, y = new Float32Array(n).fill(Number.NaN);
          ops.silu({ x, gate, y });
          return [{ what: 'y', got: y, ref: Array.from(x, (v, i) => v * sig(v) * (gate ? gate[i] : 1)) }];
        },
      });
      for (const accumulate of [false, true]) {
        cases.push({
          name: `siluBackward ${tag}${accumulate ? ' +=' : ''}`,
          run(ops, rng) {
            const x = ewInput(rng, n, scale), gate = gated ? randomValues(rng, n) : null, dy = randomValues(rng, n), dx0 = randomValues(rng, n);
            const dx = accumulate ? Float32Array.from(dx0) : new Float32Array(n).fill(Number.NaN);
            const dgate = gated ? new Float32Array(n).fill(Number.NaN) : null;
            ops.siluBackward({ x, gate, dy, dx, dgate, accumulate });
            const out = [{ what: 'dx', got: dx, ref: Array.from(x, (v, i) => (accumulate ? dx0[i] : 0) + dy[i] * (gate ? gate[i] : 1) * (sig(v) + v * sig(v) * (1 - sig(v)))) }];
            if (dgate) out.push({ what: 'dgate', got: dgate, ref: Array.from(x, (v, i) => dy[i] * v * sig(v)) });
            return out;
          },
        });
      }
    }
  }
  cases.push({
    name: 'silu swiglu in place (y is the gate)',
    run(ops, rng) {
      const x = ewInput(rng, 777, 3), gate = randomValues(rng, 777), g0 = Float32Array.from(gate);
      ops.silu({ x, gate, y: gate });
      return [{ what: 'y', got: gate, ref: Array.from(x, (v, i) => v * sig(v) * g0[i]) }];
    },
  });
  // rotary: both pairings, partial rotaryDim, a position offset, the inverse, in place
  const rotaryShapes: [number, number, number, number, number, number, boolean][] = [
    [1, 1, 1, 2, 2, 0, false], [2, 5, 3, 16, 16, 0, false], [2, 7, 2, 64, 32, 3, false], [1, 9, 4, 128, 128, 5, true], [2, 3, 2, 24, 8, 0, true], [1, 4, 1, 6, 0, 0, false], [0, 4, 2, 8, 8, 0, false],
  ];
  for (const [B, T, H, D, rd, offset, interleaved] of rotaryShapes) {
    for (const inverse of [false, true]) {
      cases.push({
        name: `rotary B${B} T${T} H${H} D${D} rd${rd} offset${offset}${interleaved ? ' interleaved' : ''}${inverse ? ' inverse' : ''}`,
        run(ops, rng) {
          const n = B * T * H * D, half = rd / 2, maxPos = offset + T + 2;
          const x = randomValues(rng, n), y = new Float32Array(n).fill(Number.NaN);
          const theta = Array.from({ length: maxPos * half }, (_, i) => Math.floor(i / Math.max(half, 1)) * 10000 ** (-(i % Math.max(half, 1)) / Math.max(half, 1)));
          const cos = Float32Array.from(theta, Math.cos), sin = Float32Array.from(theta, Math.sin);
          ops.rotary({ batch: B, seq: T, heads: H, dim: D, rotaryDim: rd, x, y, cos, sin, positionOffset: offset, interleaved, inverse });
          const ref = Float64Array.from(x);
          for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) for (let h = 0; h < H; h++) {
            const o = ((b * T + t) * H + h) * D;
            for (let m = 0; m < half; m++) {
              const ia = interleaved ? o + 2 * m : o + m, ib = interleaved ? ia + 1 : o + m + half;
              const c = cos[(offset + t) * half + m], s = (inverse ? -1 : 1) * sin[(offset + t) * half + m];
              ref[ia] = x[ia] * c - x[ib] * s;
              ref[ib] = x[ib] * c + x[ia] * s;
            }
          }
          return [{ what: 'y', got: y, ref }];
        },
      });
    }
  }
  cases.push({
    name: 'rotary in place, then its inverse gives x back',
    run(ops, rng) {
      const [B, T, H, D] = [2, 6, 2, 32], n = B * T * H * D;
      const x = randomValues(rng, n), x0 = Float32Array.from(x);
      const theta = Array.from({ length: 8 * 16 }, (_, i) => Math.floor(i / 16) * 10000 ** (-(i % 16) / 16));
      const cos = Float32Array.from(theta, Math.cos), sin = Float32Array.from(theta, Math.sin);
      const call = { batch: B, seq: T, heads: H, dim: D, rotaryDim: D, x, y: x, cos, sin, positionOffset: 1, interleaved: false, inverse: false };
      ops.rotary(call);
      ops.rotary({ ...call, inverse: true });
      return [{ what: 'x', got: x, ref: x0 }];
    },
  });
  // the product's bias epilogue
  for (const [M, N, K, accumulate] of [[5, 7, 3, false], [64, 96, 128, true], [300, 257, 64, false]] as const) {
    cases.push({
      name: `gemm nt M${M} N${N} K${K} + bias${accumulate ? ' +=' : ''}`,
      run(ops, rng) {
        const a = randomValues(rng, M * K), b = randomValues(rng, N * K), bias = randomValues(rng, N), c0 = randomValues(rng, M * N);
        const c = accumulate ? Float32Array.from(c0) : new Float32Array(M * N).fill(Number.NaN);
        ops.gemm({ transA: false, transB: true, M, N, K, a, b, c, accumulate, bias });
        const ref = new Float64Array(M * N);
        for (let m = 0; m < M; m++) for (let n = 0; n < N; n++) {
          let s = (accumulate ? c0[m * N + n] : 0) + bias[n];
          for (let k = 0; k < K; k++) s += a[m * K + k] * b[n * K + k];
          ref[m * N + n] = s;
        }
        return [{ what: 'c', got: c, ref }];
      },
    });
  }
  // dropout: philox.ts's element mask (the same entries on every engine), kept values ·1/(1 − p);
  // across a Philox quad boundary, past 2^32 / 4 counters' worth of seeds, accumulate, in place
  for (const [n, p, seed, offset] of [[0, 0.5, 1, 0], [1, 0.5, 3, 0], [13, 0.1, 7, 2], [4099, 0.5, 2 ** 40 + 5, 9], [65537, 0.9, 11, 0], [1000, 0, 5, 0]] as const) {
    for (const accumulate of [false, true]) {
      cases.push({
        name: `dropout n${n} p${p} seed${seed} offset${offset}${accumulate ? ' +=' : ''}`,
        run(ops, rng) {
          const x = randomValues(rng, n), y0 = randomValues(rng, n);
          const y = accumulate ? Float32Array.from(y0) : new Float32Array(n).fill(Number.NaN);
          ops.dropout({ x, y, p, seed, offset, accumulate });
          const d = resolveDropout({ p, seed, offset });
          const keep = new Uint8Array(n).fill(1);
          if (d) dropoutKeepElements(d, 0, keep);
          const scale = d ? 1 / (1 - p) : 1;
          return [{ what: 'y', got: y, ref: Array.from(x, (v, i) => (accumulate ? y0[i] : 0) + (keep[i] ? v * scale : 0)) }];
        },
      });
    }
  }
  cases.push({
    name: 'dropout in place',
    run(ops, rng) {
      const x = randomValues(rng, 515), x0 = Float32Array.from(x);
      ops.dropout({ x, y: x, p: 0.3, seed: 42 });
      const keep = new Uint8Array(515);
      dropoutKeepElements(resolveDropout({ p: 0.3, seed: 42 })!, 0, keep);
      return [{ what: 'y', got: x, ref: Array.from(x0, (v, i) => (keep[i] ? v / 0.7 : 0)) }];
    },
  });
  return cases;
}

/** ‖x − ref‖ / max(‖ref‖, floor) (NaN when the lengths differ). */
export function relError(x: ArrayLike<number>, ref: ArrayLike<number>, floor = 0): number {
  if (x.length !== ref.length) return Number.NaN;
  let num = 0, den = 0;
  for (let i = 0; i < ref.length; i++) {
    num += (x[i] - ref[i]) ** 2;
    den += ref[i] * ref[i];
  }
  const scale = Math.max(Math.sqrt(den), floor);
  return ref.length === 0 ? 0 : scale === 0 ? Math.sqrt(num) : Math.sqrt(num) / scale;
}

export interface LayerOpResult {
  name: string;
  pass: boolean;
  error: number;
  message?: string;
}

export function checkLayerOpCase(ops: HostModelOps, c: LayerOpCase, seed: number): LayerOpResult {
  let outs;
  try {
    outs = c.run(ops, createRng(seed));
  } catch (e) {
    return { name: c.name, pass: false, error: Number.NaN, message: `threw: ${e instanceof Error ? e.message : String(e)}` };
  }
  let worst = 0, what = '';
  for (const o of outs) {
    const err = relError(o.got, o.ref, o.floor);
    if (!(err <= worst)) [worst, what] = [err, o.what];
  }
  const pass = worst <= LAYER_OP_TOLERANCE;
  return { name: c.name, pass, error: worst, message: pass ? undefined : `${what}: error ${worst.toExponential(3)} > ${LAYER_OP_TOLERANCE}` };
}

/** Bad calls of the layer ops: each must throw an FAError with the code and leave its outputs as they were. */
export function badLayerOpCalls(): { name: string; code: string; outputs: () => Float32Array[]; call: (ops: HostModelOps, outs: Float32Array[]) => unknown }[] {
  const f = (n: number) => new Float32Array(n).fill(0.5);
  return [
    { name: 'gelu y too short', code: 'E_SHAPE', outputs: () => [f(3)], call: (o, [y]) => o.gelu({ x: f(4), y, approximate: 'none' }) },
    { name: "gelu approximate 'erf'", code: 'E_ARG', outputs: () => [f(4)], call: (o, [y]) => o.gelu({ x: f(4), y, approximate: 'erf' as 'none' }) },
    { name: 'geluBackward dy a Float64Array', code: 'E_DTYPE', outputs: () => [f(4)], call: (o, [dx]) => o.geluBackward({ x: f(4), dy: new Float64Array(4) as unknown as Float32Array, dx, approximate: 'tanh' }) },
    { name: 'layerNorm weight of the wrong width', code: 'E_SHAPE', outputs: () => [f(6), f(2), f(2)], call: (o, [y, mean, rstd]) => o.layerNorm({ rows: 2, cols: 3, x: f(6), weight: f(4), bias: null, eps: 1e-5, y, mean, rstd }) },
    { name: 'layerNorm negative eps', code: 'E_ARG', outputs: () => [f(6), f(2), f(2)], call: (o, [y, mean, rstd]) => o.layerNorm({ rows: 2, cols: 3, x: f(6), weight: null, bias: null, eps: -1, y, mean, rstd }) },
    { name: 'layerNormBackward dx overlaps dy', code: 'E_ARG', outputs: () => [f(12)], call: (o, [buf]) => o.layerNormBackward({ rows: 2, cols: 3, x: f(6), mean: f(2), rstd: f(2), weight: null, dy: buf.subarray(0, 6), dx: buf.subarray(3, 9), dweight: null, dbias: null }) },
    { name: 'crossEntropy target out of range', code: 'E_ARG', outputs: () => [f(2)], call: (o, [lse]) => o.crossEntropy({ rows: 2, classes: 3, logits: f(6), targets: Int32Array.of(1, 3), ignoreIndex: -100, lse }) },
    { name: 'crossEntropy targets a plain array', code: 'E_DTYPE', outputs: () => [f(2)], call: (o, [lse]) => o.crossEntropy({ rows: 2, classes: 3, logits: f(6), targets: [0, 1] as unknown as Int32Array, ignoreIndex: -100, lse }) },
    { name: 'crossEntropyBackward scale NaN', code: 'E_ARG', outputs: () => [f(6)], call: (o, [dlogits]) => o.crossEntropyBackward({ rows: 2, classes: 3, logits: f(6), lse: f(2), targets: Int32Array.of(0, 1), ignoreIndex: -100, scale: Number.NaN, dlogits }) },
    { name: 'adamw beta2 = 1', code: 'E_ARG', outputs: () => [f(4), f(4), f(4)], call: (o, [param, m, v]) => o.adamw({ param, grad: f(4), m, v, lr: 1e-3, beta1: 0.9, beta2: 1, eps: 1e-8, weightDecay: 0, step: 1 }) },
    { name: 'adamw m too short', code: 'E_SHAPE', outputs: () => [f(4), f(3), f(4)], call: (o, [param, m, v]) => o.adamw({ param, grad: f(4), m, v, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 1 }) },
    { name: 'adamw step 0', code: 'E_ARG', outputs: () => [f(4), f(4), f(4)], call: (o, [param, m, v]) => o.adamw({ param, grad: f(4), m, v, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, step: 0 }) },
    { name: 'sumRows rows fractional', code: 'E_SHAPE', outputs: () => [f(3)], call: (o, [out]) => o.sumRows({ rows: 1.5, cols: 3, x: f(6), out }) },
    { name: 'rmsNorm rstd too short', code: 'E_SHAPE', outputs: () => [f(6), f(1)], call: (o, [y, rstd]) => o.rmsNorm({ rows: 2, cols: 3, x: f(6), weight: null, eps: 1e-6, y, rstd }) },
    { name: 'siluBackward dgate without a gate', code: 'E_ARG', outputs: () => [f(4), f(4)], call: (o, [dx, dgate]) => o.siluBackward({ x: f(4), gate: null, dy: f(4), dx, dgate }) },
    { name: 'rotary rotaryDim odd', code: 'E_SHAPE', outputs: () => [f(8)], call: (o, [y]) => o.rotary({ batch: 1, seq: 2, heads: 1, dim: 4, rotaryDim: 3, x: f(8), y, cos: f(6), sin: f(6), positionOffset: 0, interleaved: false, inverse: false }) },
    { name: 'rotary positions past the tables', code: 'E_SHAPE', outputs: () => [f(8)], call: (o, [y]) => o.rotary({ batch: 1, seq: 2, heads: 1, dim: 4, rotaryDim: 4, x: f(8), y, cos: f(4), sin: f(4), positionOffset: 1, interleaved: false, inverse: false }) },
    { name: 'dropout p = 1', code: 'E_ARG', outputs: () => [f(4)], call: (o, [y]) => o.dropout({ x: f(4), y, p: 1, seed: 1 }) },
    { name: 'dropout seed fractional', code: 'E_ARG', outputs: () => [f(4)], call: (o, [y]) => o.dropout({ x: f(4), y, p: 0.5, seed: 1.5 }) },
    { name: 'dropout y too short', code: 'E_SHAPE', outputs: () => [f(3)], call: (o, [y]) => o.dropout({ x: f(4), y, p: 0.5, seed: 1 }) },
    { name: 'gemm bias of the wrong length', code: 'E_SHAPE', outputs: () => [f(6)], call: (o, [c]) => o.gemm({ transA: false, transB: false, M: 2, N: 3, K: 1, a: f(2), b: f(3), c, bias: f(2) }) },
  ];
}

/** Runs the bad calls; a result per call. */
export function checkBadLayerOpCalls(ops: HostModelOps): LayerOpResult[] {
  return badLayerOpCalls().map((bad) => {
    const outs = bad.outputs();
    const before = outs.map((o) => Float32Array.from(o));
    try {
      bad.call(ops, outs);
      return { name: `bad ${bad.name}`, pass: false, error: Number.NaN, message: 'did not throw' };
    } catch (e) {
      const code = isFAError(e) ? e.code : undefined;
      const same = outs.every((o, k) => o.every((x, i) => Object.is(x, before[k][i])));
      const oneLine = e instanceof Error && !e.message.includes('\n');
      const pass = code === bad.code && same && oneLine;
      return { name: `bad ${bad.name}`, pass, error: 0, message: pass ? undefined : `got ${code ?? String(e)} (want ${bad.code})${same ? '' : ', an output changed'}${oneLine ? '' : ', message not one line'}` };
    }
  });
}
