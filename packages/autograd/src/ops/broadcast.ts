/**
 * NumPy broadcasting for the elementwise ops: the output shape, a way to find each output
 * element's source element, and the reverse (summing a gradient back to an input's shape).
 */
import type { Data } from '../tensor.js';
import { alloc, precisionOf, sizeOf } from '../tensor.js';
import { saveBuffer, type Saved } from '../node.js';
import { shapeError, shapeStr } from './util.js';

export function broadcastShapes(op: string, a: readonly number[], b: readonly number[]): number[] {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) throw shapeError(op, `shapes ${shapeStr(a)} and ${shapeStr(b)} do not broadcast`);
    out.push(x === 1 ? y : x);
  }
  return out;
}

/**
 * Where output element i reads from an input of shape `inShape`: 'same' (index i), 'mod'
 * (i % size: the input is a suffix of the output, like a bias), or an explicit index map.
 */
export type SourceMap = { kind: 'same' } | { kind: 'mod'; size: number } | { kind: 'map'; index: Int32Array };

export function sourceMap(inShape: readonly number[], outShape: readonly number[]): SourceMap {
  const inSize = sizeOf(inShape);
  const outSize = sizeOf(outShape);
  if (inSize === outSize) return { kind: 'same' };
  // Strip leading 1s; if what is left equals the output's trailing dims, it repeats every inSize.
  let s = 0;
  while (s < inShape.length && inShape[s] === 1) s++;
  const core = inShape.slice(s);
  const tail = outShape.slice(outShape.length - core.length);
  if (core.every((x, i) => x === tail[i])) return { kind: 'mod', size: inSize };
  const rank = outShape.length;
  const strides = new Array<number>(rank).fill(0);
  let st = 1;
  for (let d = rank - 1; d >= 0; d--) {
    const k = d - (rank - inShape.length);
    const ext = k >= 0 ? inShape[k] : 1;
    strides[d] = ext === 1 ? 0 : st;
    st *= ext;
  }
  const index = new Int32Array(outSize);
  const ctr = new Array<number>(rank).fill(0);
  let src = 0;
  for (let i = 0; i < outSize; i++) {
    index[i] = src;
    for (let d = rank - 1; d >= 0; d--) {
      ctr[d]++;
      src += strides[d];
      if (ctr[d] < outShape[d]) break;
      src -= strides[d] * outShape[d];
      ctr[d] = 0;
    }
  }
  return { kind: 'map', index };
}

export function read(m: SourceMap, data: Data, i: number): number {
  return m.kind === 'same' ? data[i] : m.kind === 'mod' ? data[i % m.size] : data[m.index[i]];
}

/** Sums an output-shaped gradient back to an input of `inSize` elements read through `m`. */
export function reduceTo(m: SourceMap, g: Data, inSize: number): Data {
  if (m.kind === 'same') return g;
  const out = alloc(precisionOf(g), inSize);
  if (m.kind === 'mod') {
    for (let i = 0; i < g.length; i++) out[i % inSize] += g[i];
  } else {
    const idx = m.index;
    for (let i = 0; i < g.length; i++) out[idx[i]] += g[i];
  }
  return out;
}

/** The index maps a backward keeps (reported as saved buffers; empty in the common cases). */
export function mapBuffers(...maps: SourceMap[]): Saved[] {
  return maps.filter((m): m is { kind: 'map'; index: Int32Array } => m.kind === 'map').map((m) => saveBuffer('broadcast index', m.index));
}
