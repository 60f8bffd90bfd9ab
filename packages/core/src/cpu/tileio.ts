/**
 * Moving rows between the caller's tensors (f32, or f16/bf16 bit patterns, layout [rows, H, D]
 * with a row stride of H·D) and the engine's float64 tiles (row-major, row length d4 = D
 * rounded up to 4, zero-padded on the right and below).
 *
 * Decoding happens here, as tiles are loaded, so f16/bf16 inputs are never widened to a
 * full-size float32 copy. Outputs are rounded once, from float64, to the tensor's dtype.
 */
import { decode, toBF16Bits, toF16Bits, type DType } from '../dtype.js';
import type { HostData } from '../tensor.js';

let f16Table: Float32Array | undefined;
/** All 65536 f16 bit patterns decoded (exact), built once per thread. */
export function f16ToF32(): Float32Array {
  if (!f16Table) {
    const all = new Uint16Array(65536);
    for (let i = 0; i < 65536; i++) all[i] = i;
    f16Table = decode('f16', all);
  }
  return f16Table;
}

let bf16Table: Float32Array | undefined;
/** All 65536 bf16 bit patterns decoded (exact: each is a float32's top half), built once per thread. */
export function bf16ToF32(): Float32Array {
  if (!bf16Table) {
    bf16Table = new Float32Array(65536);
    const u = new Uint32Array(bf16Table.buffer);
    for (let i = 0; i < 65536; i++) u[i] = i << 16;
  }
  return bf16Table;
}

// bf16 → f32 is a 16-bit shift of the bit pattern.
const bfF32 = new Float32Array(1);
const bfU32 = new Uint32Array(bfF32.buffer);

/**
 * Loads rows [rowStart, rowStart + nrows) of `src`, columns [colOff, colOff + d), into `dst`
 * (row length d4) from its row `dstRow` on, and zeroes the padding columns and rows
 * nrows..rows4 (counted from dstRow). Returns whether every loaded value is finite (the kernels
 * then need no care for 0·∞ = NaN at masked positions). The KV-cache kernel stacks the query
 * rows of a GQA group through dstRow: each query head's rows after the previous head's.
 */
export function loadRows(src: HostData, dtype: DType, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, rows4: number, dst: Float64Array, dstRow = 0): boolean {
  let probe: number;
  const o0 = dstRow * d4;
  if (dtype === 'f32') probe = loadF32(src as Float32Array, rowStart, nrows, rowStride, colOff, d, d4, dst, o0);
  else if (dtype === 'bf16') probe = loadBF16(src as Uint16Array, rowStart, nrows, rowStride, colOff, d, d4, dst, o0);
  else probe = loadF16(src as Uint16Array, f16ToF32(), rowStart, nrows, rowStride, colOff, d, d4, dst, o0);
  if (d4 !== d) {
    for (let r = 0; r < nrows; r++) for (let c = d; c < d4; c++) dst[o0 + r * d4 + c] = 0;
  }
  if (rows4 > nrows) dst.fill(0, o0 + nrows * d4, o0 + rows4 * d4);
  return probe === 0;
}

function loadF32(src: Float32Array, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, dst: Float64Array, o0: number): number {
  let probe = 0; // Σ x·0: NaN as soon as one x is NaN or ±∞
  for (let r = 0; r < nrows; r++) {
    const s = (rowStart + r) * rowStride + colOff;
    const o = o0 + r * d4;
    for (let c = 0; c < d; c++) {
      const x = src[s + c];
      dst[o + c] = x;
      probe += x * 0;
    }
  }
  return probe;
}

function loadF16(src: Uint16Array, table: Float32Array, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, dst: Float64Array, o0: number): number {
  let probe = 0; // Σ x·0: NaN as soon as one x is NaN or ±∞
  for (let r = 0; r < nrows; r++) {
    const s = (rowStart + r) * rowStride + colOff;
    const o = o0 + r * d4;
    for (let c = 0; c < d; c++) {
      const x = table[src[s + c]];
      dst[o + c] = x;
      probe += x * 0;
    }
  }
  return probe;
}

function loadBF16(src: Uint16Array, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, dst: Float64Array, o0: number): number {
  let probe = 0; // Σ x·0: NaN as soon as one x is NaN or ±∞
  for (let r = 0; r < nrows; r++) {
    const s = (rowStart + r) * rowStride + colOff;
    const o = o0 + r * d4;
    for (let c = 0; c < d; c++) {
      bfU32[0] = src[s + c] << 16;
      const x = bfF32[0];
      dst[o + c] = x;
      probe += x * 0;
    }
  }
  return probe;
}

/** Stores rows of a float64 tile into `dst`, rounding once to its dtype. */
export function storeRows(dst: HostData, dtype: DType, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, src: Float64Array): void {
  if (dtype === 'f32') {
    const f = dst as Float32Array;
    for (let r = 0; r < nrows; r++) {
      const o = (rowStart + r) * rowStride + colOff;
      const s = r * d4;
      for (let c = 0; c < d; c++) f[o + c] = src[s + c];
    }
    return;
  }
  const u = dst as Uint16Array;
  const enc = dtype === 'f16' ? toF16Bits : toBF16Bits;
  for (let r = 0; r < nrows; r++) {
    const o = (rowStart + r) * rowStride + colOff;
    const s = r * d4;
    for (let c = 0; c < d; c++) u[o + c] = enc(src[s + c]);
  }
}

/** dst[rows…] += src: accumulates a float64 tile into a float32 buffer (the dQ accumulator). */
export function addRows(dst: Float32Array, rowStart: number, nrows: number, rowStride: number, colOff: number, d: number, d4: number, src: Float64Array): void {
  for (let r = 0; r < nrows; r++) {
    const o = (rowStart + r) * rowStride + colOff;
    const s = r * d4;
    for (let c = 0; c < d; c++) dst[o + c] += src[s + c];
  }
}
