/**
 * KV-cache operations on host tensors, all through kvCacheRow (kvcache.ts), the one address
 * rule: the in-place append (what the cpu engine does, and what GPU engines do for a cache the
 * caller keeps on the host), the gather of the keys each sequence attends to, the dense varlen
 * problem a KV-cache call is equal to, and the float64 reference over it (reference.ts, not a
 * second copy of the attention math).
 */
import { check } from './errors.js';
import { describeKVCacheProblem, kvAttended, kvCacheRow, kvFirstKey, kvLseIndex, type KVCacheOptions, type KVCacheProblem } from './kvcache.js';
import { referenceForward, type ReferenceOptions } from './reference.js';
import { hostValues, requireHost } from './reference-util.js';
import type { AttentionOptions } from './problem.js';
import { allocHost, isHostTensor, tensor, type HostData, type HostTensor } from './tensor.js';
import { encode } from './dtype.js';

function hostOf(t: unknown, what: string, fn: string): HostTensor {
  requireHost(t, what, fn);
  check(isHostTensor(t), 'E_ARG', `${fn}: ${what} must be a host tensor`);
  return t;
}

/**
 * Writes kNew/vNew into the host caches at each sequence's length, in place (a no-op without an
 * append). `p` must come from describeKVCacheProblem on these very tensors, which has checked
 * every row written.
 */
export function appendKVCacheHost(p: KVCacheProblem, kCache: HostTensor, vCache: HostTensor, kNew0: HostTensor | undefined, vNew: HostTensor | undefined): void {
  if (p.tnew === 0 || !kNew0 || (!vNew && !p.latent)) return;
  const kNew = rotateKVInputs(p, undefined, kNew0).kNew!; // (the call's rotary embedding, if any: keys are written rotated)
  // (a latent cache is one tensor: its rows, kNew's, are V's too)
  const parts = p.latent ? [[kCache.data, kNew.data, p.hkv * p.d]] as const : [[kCache.data, kNew.data, p.hkv * p.d], [vCache.data, vNew!.data, p.hkv * p.vDim]] as const;
  for (const [cache, src, w] of parts) {
    for (let b = 0; b < p.batch; b++) {
      const len = p.cacheSeqlens[b];
      for (let t = 0; t < p.tnew; t++) {
        const s = (b * p.tnew + t) * w;
        (cache as HostData).set((src as HostData).subarray(s, s + w), kvCacheRow(p, b, len + t) * w);
      }
    }
  }
}

/**
 * q and kNew with the call's rotary embedding applied (new copies, rounded to the dtype; the same
 * tensors when the call has none): key t of the append at position len − leftpad + t, query i at
 * len − leftpad + i (causal or windowed calls) or len − leftpad (otherwise).
 */
export function rotateKVInputs<Q extends HostTensor | undefined>(p: KVCacheProblem, q: Q, kNew: HostTensor | undefined): { q: Q; kNew: HostTensor | undefined } {
  const r = p.rotary;
  if (!r) return { q, kNew };
  const moving = p.windowLeft >= 0 || p.windowRight >= 0; // causal is window [-1, 0]
  const rot = (t: HostTensor, rows: number, heads: number, pos: (b: number, i: number) => number): HostTensor => {
    const x = hostValues(t);
    const y = Float32Array.from(x);
    const D = p.d, half = r.half;
    for (let b = 0; b < p.batch; b++) {
      for (let i = 0; i < rows; i++) {
        const at = pos(b, i) * half;
        for (let h = 0; h < heads; h++) {
          const o = ((b * rows + i) * heads + h) * D;
          for (let m = 0; m < half; m++) {
            const [a, c] = r.interleaved ? [o + 2 * m, o + 2 * m + 1] : [o + m, o + m + half];
            const cs = r.cos[at + m], sn = r.sin[at + m];
            y[a] = x[a] * cs - x[c] * sn;
            y[c] = x[c] * cs + x[a] * sn;
          }
        }
      }
    }
    return tensor(p.dtype === 'f32' ? y : encode(p.dtype, y), t.shape, p.dtype);
  };
  const base = (b: number) => p.cacheSeqlens[b] - kvFirstKey(p, b);
  return {
    q: (q ? rot(q, p.tq, p.h, (b, i) => base(b) + (moving ? i : 0)) : q) as Q,
    kNew: kNew && p.tnew > 0 ? rot(kNew, p.tnew, p.hkv, (b, t) => base(b) + t) : kNew,
  };
}

export interface GatheredKV {
  /** [totalK, Hkv, D] in the cache's dtype: sequence b's len[b] + Tnew keys, one sequence after another. */
  readonly k: HostTensor;
  readonly v: HostTensor;
  /** Offsets of the sequences in k and v, [B + 1]. */
  readonly cuSeqlensK: Int32Array;
}

/**
 * The keys and values each sequence attends to, copied out of the cache (positions below its
 * length) and kNew/vNew (the appended ones), without changing the cache. Without kNew/vNew the
 * appended positions are read from the cache too (a cache the append has already written).
 */
export function gatherKVCache(p: KVCacheProblem, kCache: HostTensor, vCache: HostTensor, kNew?: HostTensor, vNew?: HostTensor): GatheredKV {
  const cu = new Int32Array(p.batch + 1);
  for (let b = 0; b < p.batch; b++) cu[b + 1] = cu[b] + kvAttended(p, b);
  const k = allocHost(p.dtype, p.totalK * p.hkv * p.d);
  const v = allocHost(p.dtype, p.totalK * p.hkv * p.vDim);
  // [destination, source rows, appended rows, source row width, destination row width]
  // (a latent cache's V rows are the first Dv columns of each of its K rows, per kv head)
  const vSrc = p.latent ? [kCache.data, kNew?.data, p.d] as const : [vCache.data, vNew?.data, p.vDim] as const;
  for (const [dst, cache, add, sw, dw] of [[k, kCache.data, kNew?.data, p.d, p.d], [v, vSrc[0], vSrc[1], vSrc[2], p.vDim]] as const) {
    for (let b = 0; b < p.batch; b++) {
      const len = p.cacheSeqlens[b];
      const lp = kvFirstKey(p, b); // (rows before the left padding are never read)
      for (let t = lp; t < len + p.tnew; t++) {
        const fromCache = t < len || add === undefined;
        const base = fromCache ? kvCacheRow(p, b, t) : b * p.tnew + t - len;
        const src = (fromCache ? cache : add) as HostData;
        for (let g = 0; g < p.hkv; g++) {
          const o = (base * p.hkv + g) * sw;
          (dst as HostData).set(src.subarray(o, o + dw), ((cu[b] + t - lp) * p.hkv + g) * dw);
        }
      }
    }
  }
  return {
    k: { kind: 'host', dtype: p.dtype, shape: [p.totalK, p.hkv, p.d], data: k },
    v: { kind: 'host', dtype: p.dtype, shape: [p.totalK, p.hkv, p.vDim], data: v },
    cuSeqlensK: cu,
  };
}

export interface VarlenEquivalent {
  /** q as packed [B·Tq, H, D] (the same data). */
  readonly q: HostTensor;
  readonly k: HostTensor;
  readonly v: HostTensor;
  /** Varlen options with the call's score options: run them through any dense engine. */
  readonly options: AttentionOptions;
}

/**
 * The dense varlen attention problem a KV-cache call computes: packed queries (B sequences of
 * Tq), the gathered keys, and the same options. Its out equals the call's out element for
 * element; its LSE is [H, B·Tq] (lseToKVCache reorders it to [B, H, Tq]).
 */
export function kvCacheAsVarlen(p: KVCacheProblem, q0: HostTensor, kCache: HostTensor, vCache: HostTensor, kNew0?: HostTensor, vNew?: HostTensor): VarlenEquivalent {
  const { q, kNew } = rotateKVInputs(p, q0, kNew0); // (the rotary embedding of the call, if any)
  const g = gatherKVCache(p, kCache, vCache, kNew, vNew);
  const cuQ = new Int32Array(p.batch + 1);
  for (let b = 0; b <= p.batch; b++) cuQ[b] = b * p.tq;
  const options: AttentionOptions = {
    cuSeqlensQ: cuQ,
    cuSeqlensK: g.cuSeqlensK,
    scale: p.scale,
    ...(p.windowLeft >= 0 || p.windowRight >= 0 ? { window: [p.windowLeft, p.windowRight] as const } : {}),
    ...(p.softcap > 0 ? { softcap: p.softcap } : {}),
    ...(p.alibi ? { alibiSlopes: p.alibi } : {}),
    ...(p.sinks ? { sinks: p.sinks } : {}),
  };
  return { q: { kind: 'host', dtype: p.dtype, shape: [p.batch * p.tq, p.h, p.d], data: q.data }, k: g.k, v: g.v, options };
}

/** Reorders a varlen LSE [H, B·Tq] into the KV-cache call's [B, H, Tq]. */
export function lseToKVCache<T extends Float64Array | Float32Array>(p: KVCacheProblem, varlenLse: T): T {
  const out = new (varlenLse.constructor as { new (n: number): T })(varlenLse.length);
  const totalQ = p.batch * p.tq;
  for (let b = 0; b < p.batch; b++) {
    for (let h = 0; h < p.h; h++) {
      for (let i = 0; i < p.tq; i++) out[kvLseIndex(p, b, h, i)] = varlenLse[h * totalQ + b * p.tq + i];
    }
  }
  return out;
}

export interface ReferenceKVCache {
  /** q's shape, float64. */
  readonly out: Float64Array;
  /** [B, H, Tq], float64; -Infinity for rows that see no key. */
  readonly lse: Float64Array;
  readonly problem: KVCacheProblem;
  /** With `magnitudes: true`, as referenceForward's (out in q's layout, lse in [B, H, Tq]). */
  readonly mag?: { readonly out: Float64Array; readonly lse: Float64Array };
}

/**
 * The float64 reference of a KV-cache call: referenceForward over the keys the call attends to
 * (gatherKVCache). Host tensors only; the caches are not changed.
 */
export function referenceKVCache(q: HostTensor, kCache: HostTensor, vCache: HostTensor, opts: KVCacheOptions, ropts: ReferenceOptions = {}): ReferenceKVCache {
  const fn = 'referenceKVCache';
  const p = describeKVCacheProblem(q, kCache, vCache, opts);
  const kn = opts.kNew === undefined ? undefined : hostOf(opts.kNew, 'kNew', fn);
  const vn = opts.vNew === undefined ? undefined : hostOf(opts.vNew, 'vNew', fn);
  const e = kvCacheAsVarlen(p, hostOf(q, 'q', fn), hostOf(kCache, 'kCache', fn), hostOf(vCache, 'vCache', fn), kn, vn);
  const r = referenceForward(e.q, e.k, e.v, e.options, ropts);
  return {
    out: r.out,
    lse: lseToKVCache(p, r.lse),
    problem: p,
    ...(r.mag ? { mag: { out: r.mag.out, lse: lseToKVCache(p, r.mag.lse) } } : {}),
  };
}
