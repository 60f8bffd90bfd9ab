/**
 * Splitting host tensors into the shards of a layout, and joining shards back: q, k, v, out,
 * dOut, dq, dk, dv along their token axis, and LSE along its last axis. For preparing inputs
 * and checking results; the ring itself never sees the whole tensor.
 */
import { check } from '../errors.js';
import { allocHost, numel, type HostTensor } from '../tensor.js';
import { rangeRows, type ShardLayout, type TokenRange } from './layout.js';

/** Which tensor of the problem: q-like (q, out, dOut, dq, lse) or k-like (k, v, dk, dv). */
export type ShardSide = 'q' | 'k';

/**
 * The token axis of a tensor: 1 for dense [B, T, H, D], 0 for varlen [totalT, H, D], and the
 * last axis of an LSE ([B, H, T] or [H, totalT]).
 */
export function tokenAxis(t: { readonly shape: readonly number[] }, kind: 'tokens' | 'lse'): number {
  if (kind === 'lse') return t.shape.length - 1;
  return t.shape.length === 4 ? 1 : 0;
}

function gather(t: HostTensor, ranges: readonly TokenRange[], axis: number): HostTensor {
  const shape = [...t.shape];
  const outer = numel(shape.slice(0, axis));
  const inner = numel(shape.slice(axis + 1));
  const len = shape[axis];
  shape[axis] = rangeRows(ranges);
  const data = allocHost(t.dtype, numel(shape));
  let o = 0;
  for (let a = 0; a < outer; a++) {
    for (const g of ranges) {
      const n = (g.end - g.start) * inner;
      data.set(t.data.subarray((a * len + g.start) * inner, (a * len + g.start) * inner + n), o);
      o += n;
    }
  }
  return { kind: 'host', dtype: t.dtype, shape, data };
}

/**
 * One tensor per rank: rank r gets its ranges of the token axis (`axis`, default tokenAxis).
 * The tensor's axis must have the layout's length for that side.
 */
export function splitShards(t: HostTensor, layout: ShardLayout, side: ShardSide, axis: number = tokenAxis(t, 'tokens')): HostTensor[] {
  const total = side === 'q' ? layout.tq : layout.tk;
  check(axis >= 0 && axis < t.shape.length && t.shape[axis] === total, 'E_SHAPE', `splitShards: axis ${axis} of shape [${t.shape.join(', ')}] must have the layout's ${side} length ${total}`);
  const lists = side === 'q' ? layout.q : layout.k;
  return lists.map((ranges) => gather(t, ranges, axis));
}

/** The inverse of splitShards: one tensor from every rank's shard. */
export function joinShards(parts: readonly HostTensor[], layout: ShardLayout, side: ShardSide, axis: number = tokenAxis(parts[0], 'tokens')): HostTensor {
  check(parts.length === layout.ranks, 'E_ARG', `joinShards: ${parts.length} shards for ${layout.ranks} ranks`);
  const lists = side === 'q' ? layout.q : layout.k;
  const total = side === 'q' ? layout.tq : layout.tk;
  const first = parts[0];
  const shape = [...first.shape];
  shape[axis] = total;
  const outer = numel(shape.slice(0, axis));
  const inner = numel(shape.slice(axis + 1));
  const data = allocHost(first.dtype, numel(shape));
  parts.forEach((part, r) => {
    const rows = rangeRows(lists[r]);
    check(part.dtype === first.dtype && part.shape.length === shape.length && part.shape[axis] === rows, 'E_SHAPE', `joinShards: shard ${r} has shape [${part.shape.join(', ')}], expected ${rows} rows on axis ${axis}`);
    let i = 0;
    for (let a = 0; a < outer; a++) {
      for (const g of lists[r]) {
        const n = (g.end - g.start) * inner;
        data.set(part.data.subarray(i, i + n), (a * total + g.start) * inner);
        i += n;
      }
    }
  });
  return { kind: 'host', dtype: first.dtype, shape, data };
}
