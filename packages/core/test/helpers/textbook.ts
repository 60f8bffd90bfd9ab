/**
 * Textbook attention in float64, written straight from DESIGN.md without mask.ts or
 * reference.ts: explicit visibility predicate, full score matrix, softmax Jacobian in the
 * backward (dS = P∘(dP − rowsum(P∘dP)), not the rowsum(dO∘O) form). A sink is one more score
 * column with a zero value row, whose column is dropped after the softmax (as model code does it). An independent check of
 * the reference, and, through its hooks, the base of deliberately wrong engines.
 */
import type { AttentionOptions, HostTensor } from '../../dist/index.js';
import { tensorValues } from '../../dist/testing/index.js';
import { philox4x32 } from '../../dist/index.js';

export interface TextbookHooks {
  /** Replaces the visibility rule (default: DESIGN.md's bottom-right window/causal). */
  visible?: (i: number, j: number, tq: number, tk: number, left: number, right: number) => boolean;
  /** Which kv head query head h reads (default floor(h / (H / Hkv))). */
  headMap?: (h: number, H: number, Hkv: number) => number;
  /** Overrides the scale. */
  scale?: number;
  /** Ignore softcap. */
  noSoftcap?: boolean;
  /** Multiply ALiBi bias by this (default 1). */
  alibiSign?: number;
  /** Output of rows that see no key: 'zero' (right) or 'nan' (0/0). */
  emptyRow?: 'zero' | 'nan';
  /** Ignore sinks. */
  noSinks?: boolean;
  /** Ignore dropout. */
  noDropout?: boolean;
}

export interface TextbookResult {
  out: Float64Array;
  lse: Float64Array;
  dq?: Float64Array;
  dk?: Float64Array;
  dv?: Float64Array;
  dsinks?: Float64Array;
}

export function designVisible(i: number, j: number, tq: number, tk: number, left: number, right: number): boolean {
  const pos = i + tk - tq;
  if (left >= 0 && j < pos - left) return false;
  if (right >= 0 && j > pos + right) return false;
  return true;
}

export function textbook(q: HostTensor, k: HostTensor, v: HostTensor, opts: AttentionOptions = {}, dOut?: HostTensor, hooks: TextbookHooks = {}): TextbookResult {
  const Q = tensorValues(q), K = tensorValues(k), V = tensorValues(v);
  const dO = dOut ? tensorValues(dOut) : undefined;
  const varlen = opts.cuSeqlensQ !== undefined;
  const H = q.shape[q.shape.length - 2];
  const D = q.shape[q.shape.length - 1];
  const Hkv = k.shape[k.shape.length - 2];
  const Dv = v.shape[v.shape.length - 1]; // v (and out) may have a head dim of their own
  let cuQ: number[], cuK: number[];
  if (varlen) {
    cuQ = [...(opts.cuSeqlensQ as ArrayLike<number> as number[])];
    cuK = [...(opts.cuSeqlensK as ArrayLike<number> as number[])];
  } else {
    const [B, Tq] = q.shape;
    const Tk = k.shape[1];
    cuQ = Array.from({ length: B + 1 }, (_, b) => b * Tq);
    cuK = Array.from({ length: B + 1 }, (_, b) => b * Tk);
  }
  const B = cuQ.length - 1;
  const totalQ = cuQ[B];
  const maxTq = Math.max(0, ...cuQ.slice(1).map((c, b) => c - cuQ[b]));
  const scale = hooks.scale ?? opts.scale ?? 1 / Math.sqrt(D);
  const cap = hooks.noSoftcap ? 0 : opts.softcap ?? 0;
  let left = -1, right = -1;
  if (opts.window) [left, right] = opts.window;
  if (opts.causal) right = 0;
  const vis = hooks.visible ?? designVisible;
  const map = hooks.headMap ?? ((h: number, HH: number, HK: number) => Math.floor(h / (HH / HK)));
  const sl = opts.alibiSlopes ? Array.from(opts.alibiSlopes as ArrayLike<number>) : undefined;
  const sinks = opts.sinks && !hooks.noSinks ? Array.from(opts.sinks as ArrayLike<number>) : undefined;
  const dsinks = dO && sinks ? new Float64Array(H) : undefined;
  // dropout, keyed as DESIGN.md says: key (seed mod 2^32, seed / 2^32), counter (j/4, i, b·H + h, offset)
  const dr = opts.dropout && opts.dropout.p > 0 && !hooks.noDropout ? opts.dropout : undefined;
  const words = new Uint32Array(4);
  const kept = (b: number, h: number, i: number, j: number): number => {
    if (!dr) return 1;
    philox4x32(Math.floor(j / 4), i, b * H + h, dr.offset ?? 0, dr.seed % 2 ** 32, Math.floor(dr.seed / 2 ** 32), words);
    return words[j % 4] < Math.floor(dr.p * 2 ** 32) ? 0 : 1 / (1 - dr.p);
  };
  const out = new Float64Array((Q.length / D) * Dv);
  const lse = new Float64Array(H * totalQ);
  const dq = dO ? new Float64Array(Q.length) : undefined;
  const dk = dO ? new Float64Array(K.length) : undefined;
  const dv = dO ? new Float64Array(V.length) : undefined;
  const qi = (row: number, h: number) => (row * H + h) * D;
  const ki = (row: number, g: number) => (row * Hkv + g) * D;
  const oi = (row: number, h: number) => (row * H + h) * Dv;
  const vi = (row: number, g: number) => (row * Hkv + g) * Dv;
  for (let b = 0; b < B; b++) {
    const tq = cuQ[b + 1] - cuQ[b], tk = cuK[b + 1] - cuK[b];
    for (let h = 0; h < H; h++) {
      const g = map(h, H, Hkv);
      const slope = sl ? (sl.length === H ? sl[h] : sl[b * H + h]) * (hooks.alibiSign ?? 1) : 0;
      for (let i = 0; i < tq; i++) {
        const li = varlen ? h * totalQ + cuQ[b] + i : (b * H + h) * maxTq + i;
        const s: number[] = [];
        const t: number[] = [];
        const js: number[] = [];
        for (let j = 0; j < tk; j++) {
          if (!vis(i, j, tq, tk, left, right)) continue;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += Q[qi(cuQ[b] + i, h) + d] * K[ki(cuK[b] + j, g) + d];
          let x = dot * scale;
          let th = 0;
          if (cap > 0) {
            th = Math.tanh(x / cap);
            x = cap * th;
          }
          x -= slope * Math.abs(i + tk - tq - j);
          s.push(x);
          t.push(th);
          js.push(j);
        }
        if (js.length === 0 && hooks.emptyRow === 'nan') {
          lse[li] = sinks ? sinks[h] : -Infinity;
          for (let d = 0; d < Dv; d++) out[oi(cuQ[b] + i, h) + d] = NaN;
          continue;
        }
        // the sink: a last column with logit sinks[h] and a zero value row
        if (sinks) {
          s.push(sinks[h]);
          t.push(0);
          js.push(-1);
        }
        if (js.length === 0) {
          lse[li] = -Infinity;
          if (hooks.emptyRow === 'nan') for (let d = 0; d < Dv; d++) out[oi(cuQ[b] + i, h) + d] = NaN;
          continue;
        }
        const m = Math.max(...s);
        const e = s.map((x) => Math.exp(x - m));
        const z = e.reduce((a, c) => a + c, 0);
        const P = e.map((x) => x / z);
        lse[li] = m + Math.log(z);
        const o = qi(cuQ[b] + i, h);
        const oo = oi(cuQ[b] + i, h);
        const M = js.map((j) => (j >= 0 ? kept(b, h, i, j) : 0)); // the kept entries' scale, 0 when dropped
        js.forEach((j, n) => {
          if (j >= 0 && M[n] !== 0) for (let d = 0; d < Dv; d++) out[oo + d] += P[n] * M[n] * V[vi(cuK[b] + j, g) + d];
        });
        if (dO && dq && dk && dv) {
          const dP = js.map((j, n) => {
            if (j < 0) return 0; // the sink's value row is 0
            let a = 0;
            for (let d = 0; d < Dv; d++) a += dO[oo + d] * V[vi(cuK[b] + j, g) + d];
            return a * M[n]; // dropout: d out / d P_j is M_j·v_j
          });
          const r = P.reduce((a, p, n) => a + p * dP[n], 0);
          js.forEach((j, n) => {
            const dS = P[n] * (dP[n] - r);
            if (j < 0) {
              dsinks![h] += dS; // the sink's logit is not scaled
              return;
            }
            const dx = dS * scale * (cap > 0 ? 1 - t[n] * t[n] : 1);
            const ko = ki(cuK[b] + j, g);
            for (let d = 0; d < D; d++) {
              dq[o + d] += dx * K[ko + d];
              dk[ko + d] += dx * Q[o + d];
            }
            const vo = vi(cuK[b] + j, g);
            for (let d = 0; d < Dv; d++) dv[vo + d] += P[n] * M[n] * dO[oo + d];
          });
        }
      }
    }
  }
  return { out, lse, dq, dk, dv, ...(dsinks ? { dsinks } : {}) };
}
