/**
 * The KV-cache kernel's two products, reading key and value rows in place: row j of a tile is
 * `src[off[j] … off[j] + D)` of a Float32Array (the f32 cache itself, through the block table,
 * or a tile the 16-bit caches are decoded into — exact, and one array type keeps every load
 * site monomorphic). Queries, scores and accumulators are float64 as everywhere in the engine.
 *
 * Decode has few query rows (the GQA group's heads × Tq), so the register blocks are 4 rows × 4
 * keys / columns where 4 rows exist and 1 row × 4 otherwise: no work is spent on padding rows.
 * KERNEL_NOTES.md ("KV-cache decode") has the variants and their speeds.
 */

/**
 * S[r·ld + c] = Σ_{k<d} Q[r·d4 + k]·src[off[c] + k] for rows [r0, r0 + 4) and keys c < nc
 * (nc a multiple of 4; off has nc entries).
 */
export function scoresRows4(Q: Float64Array, d4: number, r0: number, src: Float32Array, off: Int32Array, nc: number, d: number, S: Float64Array, ld: number): void {
  const a0 = r0 * d4, a1 = a0 + d4, a2 = a1 + d4, a3 = a2 + d4;
  for (let c = 0; c < nc; c += 4) {
    const b0 = off[c], b1 = off[c + 1], b2 = off[c + 2], b3 = off[c + 3];
    let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    let s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
    for (let k = 0; k < d; k++) {
      const x0 = Q[a0 + k], x1 = Q[a1 + k], x2 = Q[a2 + k], x3 = Q[a3 + k];
      const y0 = src[b0 + k], y1 = src[b1 + k], y2 = src[b2 + k], y3 = src[b3 + k];
      s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
      s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
      s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
      s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
    }
    let o = r0 * ld + c;
    S[o] = s00; S[o + 1] = s01; S[o + 2] = s02; S[o + 3] = s03; o += ld;
    S[o] = s10; S[o + 1] = s11; S[o + 2] = s12; S[o + 3] = s13; o += ld;
    S[o] = s20; S[o + 1] = s21; S[o + 2] = s22; S[o + 3] = s23; o += ld;
    S[o] = s30; S[o + 1] = s31; S[o + 2] = s32; S[o + 3] = s33;
  }
}

/** scoresRows4 for the single row r (1 row × 4 keys: 5 loads per 4 multiply-adds). */
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
