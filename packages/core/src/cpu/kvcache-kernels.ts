/**
 * The KV-cache kernel's two products, reading key and value rows in place: row j of a tile is
 * `src[off[j] … off[j] + D)` of the cache itself, through the block table. f32 caches are read
 * as they are (or from a float32 tile when D is not a multiple of 4); 16-bit caches (f16, bf16)
 * are widened as they are read, through a 65,536-entry float64 table of every bit pattern
 * (`buf[src[i]]`: exact, one load, no decode pass and no second copy of the tile). Queries,
 * scores and accumulators are float64 as everywhere in the engine.
 *
 * The 16-bit kernels (…T) read the table, the query rows and the scores from ONE Float64Array
 * (`buf`: table at [0, 65536), queries from qb, scores from sb; WideBuffer in kvcache.ts). V8
 * (TurboFan, Node 20) re-checks every typed array's map and reloads its length and data pointer
 * on each iteration of an inner loop (the loop's stack check kills what it knew): one array
 * fewer is one such check fewer an iteration, and a float64 table needs no float32 → float64
 * conversion a load (KERNEL_NOTES.md "KV-cache decode" #14–#15). For the same reason the 4-row
 * P·V kernels have …S forms for tiles whose rows lie a constant stride apart (one block of a
 * paged cache, or a contiguous one: tiles inside one block, or over blocks that the table lists
 * in order; checked per tile over every row),
 * with a running row index instead of an off[j] load (#16).
 *
 * Decode has few query rows (the GQA group's heads × Tq), so the register blocks are 4 rows ×
 * 2 keys for Q·Kᵀ (8 accumulators, 4 q values and 2 keys: 14 doubles, which fit the 16 vector
 * registers V8 allocates, where 4 × 4 spilled) and 4 rows × 4 (f32) or 2 (16-bit) columns for
 * P·V where 4 rows exist, and 1 row × 4 otherwise: no work is spent on padding rows. Every sum
 * runs over k (or j) in order, so the blocking never changes a bit of the result.
 * KERNEL_NOTES.md ("KV-cache decode") has the variants and their speeds.
 */

/**
 * S[r·ld + c] = Σ_{k<d} Q[r·d4 + k]·src[off[c] + k] for rows [r0, r0 + 4) and keys c < nc
 * (nc even; off has nc entries).
 */
export function scoresRows4(Q: Float64Array, d4: number, r0: number, src: Float32Array, off: Int32Array, nc: number, d: number, S: Float64Array, ld: number): void {
  const a0 = r0 * d4, a1 = a0 + d4, a2 = a1 + d4, a3 = a2 + d4;
  const o0 = r0 * ld, o1 = o0 + ld, o2 = o1 + ld, o3 = o2 + ld;
  for (let c = 0; c < nc; c += 2) {
    const b0 = off[c], b1 = off[c + 1];
    let s00 = 0, s01 = 0, s10 = 0, s11 = 0, s20 = 0, s21 = 0, s30 = 0, s31 = 0;
    for (let k = 0; k < d; k++) {
      const y0 = src[b0 + k], y1 = src[b1 + k];
      const x0 = Q[a0 + k];
      s00 += x0 * y0; s01 += x0 * y1;
      const x1 = Q[a1 + k];
      s10 += x1 * y0; s11 += x1 * y1;
      const x2 = Q[a2 + k];
      s20 += x2 * y0; s21 += x2 * y1;
      const x3 = Q[a3 + k];
      s30 += x3 * y0; s31 += x3 * y1;
    }
    S[o0 + c] = s00; S[o0 + c + 1] = s01; S[o1 + c] = s10; S[o1 + c + 1] = s11;
    S[o2 + c] = s20; S[o2 + c + 1] = s21; S[o3 + c] = s30; S[o3 + c + 1] = s31;
  }
}

/**
 * scoresRows4 over a 16-bit cache: src[i] is a bit pattern, buf[src[i]] its value; Q row r is
 * buf[qb + r·d4 …) and S row r is buf[sb + r·ld …) (see the module comment).
 */
export function scoresRows4T(buf: Float64Array, qb: number, d4: number, r0: number, src: Uint16Array, off: Int32Array, nc: number, d: number, sb: number, ld: number): void {
  const a0 = qb + r0 * d4, a1 = a0 + d4, a2 = a1 + d4, a3 = a2 + d4;
  const o0 = sb + r0 * ld, o1 = o0 + ld, o2 = o1 + ld, o3 = o2 + ld;
  for (let c = 0; c < nc; c += 2) {
    const b0 = off[c], b1 = off[c + 1];
    let s00 = 0, s01 = 0, s10 = 0, s11 = 0, s20 = 0, s21 = 0, s30 = 0, s31 = 0;
    for (let k = 0; k < d; k++) {
      const y0 = buf[src[b0 + k]], y1 = buf[src[b1 + k]];
      const x0 = buf[a0 + k];
      s00 += x0 * y0; s01 += x0 * y1;
      const x1 = buf[a1 + k];
      s10 += x1 * y0; s11 += x1 * y1;
      const x2 = buf[a2 + k];
      s20 += x2 * y0; s21 += x2 * y1;
      const x3 = buf[a3 + k];
      s30 += x3 * y0; s31 += x3 * y1;
    }
    buf[o0 + c] = s00; buf[o0 + c + 1] = s01; buf[o1 + c] = s10; buf[o1 + c + 1] = s11;
    buf[o2 + c] = s20; buf[o2 + c + 1] = s21; buf[o3 + c] = s30; buf[o3 + c + 1] = s31;
  }
}

/** scoresRows4 for the single row r and keys c < nc (nc a multiple of 4): 1 row × 4 keys, 5 loads per 4 multiply-adds. */
export function scoresRow1(Q: Float64Array, d4: number, r: number, src: Float32Array, off: Int32Array, nc: number, d: number, S: Float64Array, ld: number): void {
  const a = r * d4;
  for (let c = 0; c < nc; c += 4) {
    const b0 = off[c], b1 = off[c + 1], b2 = off[c + 2], b3 = off[c + 3];
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (let k = 0; k < d; k++) {
      const x = Q[a + k];
      s0 += x * src[b0 + k];
      s1 += x * src[b1 + k];
      s2 += x * src[b2 + k];
      s3 += x * src[b3 + k];
    }
    const o = r * ld + c;
    S[o] = s0; S[o + 1] = s1; S[o + 2] = s2; S[o + 3] = s3;
  }
}

/**
 * acc[r·d4 + c] += Σ_{j<nk} P[r·ld + j]·src[off[j] + c] for rows [r0, r0 + 4) and columns c < d
 * (d4 = d rounded up to 4; the padding columns read past the row, into the next one, and
 * accumulate into acc's padding, which is never stored — except for the tile's very last row,
 * whose `off` is then clamped by the caller to leave room).
 */
export function pvRows4(P: Float64Array, ld: number, r0: number, src: Float32Array, off: Int32Array, nk: number, d4: number, acc: Float64Array): void {
  const p0 = r0 * ld, p1 = p0 + ld, p2 = p1 + ld, p3 = p2 + ld;
  const o0 = r0 * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
  for (let c = 0; c < d4; c += 4) {
    let s00 = acc[o0 + c], s01 = acc[o0 + c + 1], s02 = acc[o0 + c + 2], s03 = acc[o0 + c + 3];
    let s10 = acc[o1 + c], s11 = acc[o1 + c + 1], s12 = acc[o1 + c + 2], s13 = acc[o1 + c + 3];
    let s20 = acc[o2 + c], s21 = acc[o2 + c + 1], s22 = acc[o2 + c + 2], s23 = acc[o2 + c + 3];
    let s30 = acc[o3 + c], s31 = acc[o3 + c + 1], s32 = acc[o3 + c + 2], s33 = acc[o3 + c + 3];
    for (let j = 0; j < nk; j++) {
      const b = off[j] + c;
      const x0 = P[p0 + j], x1 = P[p1 + j], x2 = P[p2 + j], x3 = P[p3 + j];
      const y0 = src[b], y1 = src[b + 1], y2 = src[b + 2], y3 = src[b + 3];
      s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
      s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
      s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
      s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
    }
    acc[o0 + c] = s00; acc[o0 + c + 1] = s01; acc[o0 + c + 2] = s02; acc[o0 + c + 3] = s03;
    acc[o1 + c] = s10; acc[o1 + c + 1] = s11; acc[o1 + c + 2] = s12; acc[o1 + c + 3] = s13;
    acc[o2 + c] = s20; acc[o2 + c + 1] = s21; acc[o2 + c + 2] = s22; acc[o2 + c + 3] = s23;
    acc[o3 + c] = s30; acc[o3 + c + 1] = s31; acc[o3 + c + 2] = s32; acc[o3 + c + 3] = s33;
  }
}

/**
 * pvRows4 over rows a constant stride apart (row j at b0 + j·w: a tile inside one block of a
 * paged cache, or of a contiguous one): no row offset to load an iteration (see pvRows4TS).
 */
export function pvRows4S(P: Float64Array, ld: number, r0: number, src: Float32Array, b0: number, w: number, nk: number, d4: number, acc: Float64Array): void {
  const p0 = r0 * ld, p1 = p0 + ld, p2 = p1 + ld, p3 = p2 + ld;
  const o0 = r0 * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
  for (let c = 0; c < d4; c += 4) {
    let s00 = acc[o0 + c], s01 = acc[o0 + c + 1], s02 = acc[o0 + c + 2], s03 = acc[o0 + c + 3];
    let s10 = acc[o1 + c], s11 = acc[o1 + c + 1], s12 = acc[o1 + c + 2], s13 = acc[o1 + c + 3];
    let s20 = acc[o2 + c], s21 = acc[o2 + c + 1], s22 = acc[o2 + c + 2], s23 = acc[o2 + c + 3];
    let s30 = acc[o3 + c], s31 = acc[o3 + c + 1], s32 = acc[o3 + c + 2], s33 = acc[o3 + c + 3];
    let b = b0 + c;
    for (let j = 0; j < nk; j++) {
      const x0 = P[p0 + j], x1 = P[p1 + j], x2 = P[p2 + j], x3 = P[p3 + j];
      const y0 = src[b], y1 = src[b + 1], y2 = src[b + 2], y3 = src[b + 3];
      s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
      s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
      s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
      s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
      b += w;
    }
    acc[o0 + c] = s00; acc[o0 + c + 1] = s01; acc[o0 + c + 2] = s02; acc[o0 + c + 3] = s03;
    acc[o1 + c] = s10; acc[o1 + c + 1] = s11; acc[o1 + c + 2] = s12; acc[o1 + c + 3] = s13;
    acc[o2 + c] = s20; acc[o2 + c + 1] = s21; acc[o2 + c + 2] = s22; acc[o2 + c + 3] = s23;
    acc[o3 + c] = s30; acc[o3 + c + 1] = s31; acc[o3 + c + 2] = s32; acc[o3 + c + 3] = s33;
  }
}

/** pvRows4 for the single row r. */
export function pvRow1(P: Float64Array, ld: number, r: number, src: Float32Array, off: Int32Array, nk: number, d4: number, acc: Float64Array): void {
  const p = r * ld;
  const o = r * d4;
  for (let c = 0; c < d4; c += 4) {
    let s0 = acc[o + c], s1 = acc[o + c + 1], s2 = acc[o + c + 2], s3 = acc[o + c + 3];
    for (let j = 0; j < nk; j++) {
      const b = off[j] + c;
      const x = P[p + j];
      s0 += x * src[b];
      s1 += x * src[b + 1];
      s2 += x * src[b + 2];
      s3 += x * src[b + 3];
    }
    acc[o + c] = s0; acc[o + c + 1] = s1; acc[o + c + 2] = s2; acc[o + c + 3] = s3;
  }
}

/** scoresRow1 over a 16-bit cache (buf, qb, sb as in scoresRows4T). */
export function scoresRow1T(buf: Float64Array, qb: number, d4: number, r: number, src: Uint16Array, off: Int32Array, nc: number, d: number, sb: number, ld: number): void {
  const a = qb + r * d4;
  for (let c = 0; c < nc; c += 4) {
    const b0 = off[c], b1 = off[c + 1], b2 = off[c + 2], b3 = off[c + 3];
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (let k = 0; k < d; k++) {
      const x = buf[a + k];
      s0 += x * buf[src[b0 + k]];
      s1 += x * buf[src[b1 + k]];
      s2 += x * buf[src[b2 + k]];
      s3 += x * buf[src[b3 + k]];
    }
    const o = sb + r * ld + c;
    buf[o] = s0; buf[o + 1] = s1; buf[o + 2] = s2; buf[o + 3] = s3;
  }
}

/**
 * acc[r·d4 + c] += Σ_{j<nk} P[r·ld + j]·buf[src[off[j] + c]] for rows [r0, r0 + 4) and columns
 * c < d (pairs of columns, then the last one of an odd d): nothing is read past a row. P row r
 * is buf[sb + r·ld …) (see scoresRows4T).
 */
export function pvRows4T(buf: Float64Array, sb: number, ld: number, r0: number, src: Uint16Array, off: Int32Array, nk: number, d: number, d4: number, acc: Float64Array): void {
  const p0 = sb + r0 * ld, p1 = p0 + ld, p2 = p1 + ld, p3 = p2 + ld;
  const o0 = r0 * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
  const d2 = d & ~1;
  for (let c = 0; c < d2; c += 2) {
    let s00 = acc[o0 + c], s01 = acc[o0 + c + 1], s10 = acc[o1 + c], s11 = acc[o1 + c + 1];
    let s20 = acc[o2 + c], s21 = acc[o2 + c + 1], s30 = acc[o3 + c], s31 = acc[o3 + c + 1];
    for (let j = 0; j < nk; j++) {
      const b = off[j] + c;
      const y0 = buf[src[b]], y1 = buf[src[b + 1]];
      const x0 = buf[p0 + j];
      s00 += x0 * y0; s01 += x0 * y1;
      const x1 = buf[p1 + j];
      s10 += x1 * y0; s11 += x1 * y1;
      const x2 = buf[p2 + j];
      s20 += x2 * y0; s21 += x2 * y1;
      const x3 = buf[p3 + j];
      s30 += x3 * y0; s31 += x3 * y1;
    }
    acc[o0 + c] = s00; acc[o0 + c + 1] = s01; acc[o1 + c] = s10; acc[o1 + c + 1] = s11;
    acc[o2 + c] = s20; acc[o2 + c + 1] = s21; acc[o3 + c] = s30; acc[o3 + c + 1] = s31;
  }
  if (d2 < d) {
    let s0 = acc[o0 + d2], s1 = acc[o1 + d2], s2 = acc[o2 + d2], s3 = acc[o3 + d2];
    for (let j = 0; j < nk; j++) {
      const y = buf[src[off[j] + d2]];
      s0 += buf[p0 + j] * y; s1 += buf[p1 + j] * y; s2 += buf[p2 + j] * y; s3 += buf[p3 + j] * y;
    }
    acc[o0 + d2] = s0; acc[o1 + d2] = s1; acc[o2 + d2] = s2; acc[o3 + d2] = s3;
  }
}

/**
 * pvRows4T over rows a constant stride apart (row j at b0 + j·w): the row offset is a running
 * index instead of an off[j] load, which in V8 is one typed array (map check, length, data
 * pointer, bounds check) fewer an iteration.
 */
export function pvRows4TS(buf: Float64Array, sb: number, ld: number, r0: number, src: Uint16Array, b0: number, w: number, nk: number, d: number, d4: number, acc: Float64Array): void {
  const p0 = sb + r0 * ld, p1 = p0 + ld, p2 = p1 + ld, p3 = p2 + ld;
  const o0 = r0 * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
  const d2 = d & ~1;
  for (let c = 0; c < d2; c += 2) {
    let s00 = acc[o0 + c], s01 = acc[o0 + c + 1], s10 = acc[o1 + c], s11 = acc[o1 + c + 1];
    let s20 = acc[o2 + c], s21 = acc[o2 + c + 1], s30 = acc[o3 + c], s31 = acc[o3 + c + 1];
    let b = b0 + c;
    for (let j = 0; j < nk; j++) {
      const y0 = buf[src[b]], y1 = buf[src[b + 1]];
      const x0 = buf[p0 + j];
      s00 += x0 * y0; s01 += x0 * y1;
      const x1 = buf[p1 + j];
      s10 += x1 * y0; s11 += x1 * y1;
      const x2 = buf[p2 + j];
      s20 += x2 * y0; s21 += x2 * y1;
      const x3 = buf[p3 + j];
      s30 += x3 * y0; s31 += x3 * y1;
      b += w;
    }
    acc[o0 + c] = s00; acc[o0 + c + 1] = s01; acc[o1 + c] = s10; acc[o1 + c + 1] = s11;
    acc[o2 + c] = s20; acc[o2 + c + 1] = s21; acc[o3 + c] = s30; acc[o3 + c + 1] = s31;
  }
  if (d2 < d) {
    let s0 = acc[o0 + d2], s1 = acc[o1 + d2], s2 = acc[o2 + d2], s3 = acc[o3 + d2];
    for (let j = 0; j < nk; j++) {
      const y = buf[src[b0 + j * w + d2]];
      s0 += buf[p0 + j] * y; s1 += buf[p1 + j] * y; s2 += buf[p2 + j] * y; s3 += buf[p3 + j] * y;
    }
    acc[o0 + d2] = s0; acc[o1 + d2] = s1; acc[o2 + d2] = s2; acc[o3 + d2] = s3;
  }
}

/** pvRows4T for the single row r (4 columns at a time, then the rest one by one). */
export function pvRow1T(buf: Float64Array, sb: number, ld: number, r: number, src: Uint16Array, off: Int32Array, nk: number, d: number, d4: number, acc: Float64Array): void {
  const p = sb + r * ld;
  const o = r * d4;
  const dq = d & ~3;
  for (let c = 0; c < dq; c += 4) {
    let s0 = acc[o + c], s1 = acc[o + c + 1], s2 = acc[o + c + 2], s3 = acc[o + c + 3];
    for (let j = 0; j < nk; j++) {
      const b = off[j] + c;
      const x = buf[p + j];
      s0 += x * buf[src[b]];
      s1 += x * buf[src[b + 1]];
      s2 += x * buf[src[b + 2]];
      s3 += x * buf[src[b + 3]];
    }
    acc[o + c] = s0; acc[o + c + 1] = s1; acc[o + c + 2] = s2; acc[o + c + 3] = s3;
  }
  for (let c = dq; c < d; c++) {
    let s0 = acc[o + c];
    for (let j = 0; j < nk; j++) s0 += buf[p + j] * buf[src[off[j] + c]];
    acc[o + c] = s0;
  }
}
