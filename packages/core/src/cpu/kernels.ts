/**
 * The CPU engine's matrix micro-kernels: the three products attention needs, on float64 tiles,
 * register-blocked 4×4 (16 accumulators held in locals, 8 loads per 16 multiply-adds).
 *
 * JavaScript has no SIMD and V8 does not vectorise, so the whole game is keeping the scalar
 * pipes busy: few loads per flop, no bounds-check-heavy indexing in the inner loop, no calls,
 * no closures and no allocation. KERNEL_NOTES.md records the variants tried and their speeds.
 *
 * Layouts (all float64, d4 = D rounded up to 4, padding is zero):
 * - row-major tile X: element (r, c) at r·ld + c;
 * - packed panels ("P4"): rows in groups of 4 interleaved by column, element (r, k) at
 *   (r>>2)·4·d4 + k·4 + (r&3), so one k step of a 4-row panel is 4 consecutive numbers.
 * Row counts passed as nr4/nc4 are multiples of 4 (tiles are padded with zero rows).
 */

/**
 * C[r·ldc + c] = Σ_k A[r,k]·B[c,k] for r < nr4, c < nc4: scores S = Q·Kᵀ, and dP = dO·Vᵀ.
 * A and B are packed panels with row length d4.
 */
export function gemmABtPacked(Ap: Float64Array, Bp: Float64Array, C: Float64Array, nr4: number, nc4: number, d4: number, ldc: number): void {
  const n4 = 4 * d4;
  for (let r = 0; r < nr4; r += 4) {
    const pa = r * d4;
    const end = pa + n4;
    for (let c = 0; c < nc4; c += 4) {
      let pb = c * d4;
      let p = pa;
      let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
      let s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
      while (p < end) {
        const x0 = Ap[p], x1 = Ap[p + 1], x2 = Ap[p + 2], x3 = Ap[p + 3];
        const y0 = Bp[pb], y1 = Bp[pb + 1], y2 = Bp[pb + 2], y3 = Bp[pb + 3];
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
        p += 4;
        pb += 4;
      }
      let o = r * ldc + c;
      C[o] = s00; C[o + 1] = s01; C[o + 2] = s02; C[o + 3] = s03; o += ldc;
      C[o] = s10; C[o + 1] = s11; C[o + 2] = s12; C[o + 3] = s13; o += ldc;
      C[o] = s20; C[o + 1] = s21; C[o + 2] = s22; C[o + 3] = s23; o += ldc;
      C[o] = s30; C[o + 1] = s31; C[o + 2] = s32; C[o + 3] = s33;
    }
  }
}

/**
 * C[r·d4 + c] += Σ_{j<nk} A[r·lda + j]·B[j·d4 + c] for r < nr4, c < d4: acc += P·V, and the
 * dQ tile dS·K. A is row-major (the probability tile), B row-major with row length d4.
 */
export function gemmAB(A: Float64Array, lda: number, nr4: number, B: Float64Array, nk: number, d4: number, C: Float64Array): void {
  for (let r = 0; r < nr4; r += 4) {
    const a0 = r * lda, a1 = a0 + lda, a2 = a1 + lda, a3 = a2 + lda;
    const o0 = r * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
    for (let c = 0; c < d4; c += 4) {
      let s00 = C[o0 + c], s01 = C[o0 + c + 1], s02 = C[o0 + c + 2], s03 = C[o0 + c + 3];
      let s10 = C[o1 + c], s11 = C[o1 + c + 1], s12 = C[o1 + c + 2], s13 = C[o1 + c + 3];
      let s20 = C[o2 + c], s21 = C[o2 + c + 1], s22 = C[o2 + c + 2], s23 = C[o2 + c + 3];
      let s30 = C[o3 + c], s31 = C[o3 + c + 1], s32 = C[o3 + c + 2], s33 = C[o3 + c + 3];
      let b = c;
      for (let j = 0; j < nk; j++) {
        const x0 = A[a0 + j], x1 = A[a1 + j], x2 = A[a2 + j], x3 = A[a3 + j];
        const y0 = B[b], y1 = B[b + 1], y2 = B[b + 2], y3 = B[b + 3];
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
        b += d4;
      }
      C[o0 + c] = s00; C[o0 + c + 1] = s01; C[o0 + c + 2] = s02; C[o0 + c + 3] = s03;
      C[o1 + c] = s10; C[o1 + c + 1] = s11; C[o1 + c + 2] = s12; C[o1 + c + 3] = s13;
      C[o2 + c] = s20; C[o2 + c + 1] = s21; C[o2 + c + 2] = s22; C[o2 + c + 3] = s23;
      C[o3 + c] = s30; C[o3 + c + 1] = s31; C[o3 + c + 2] = s32; C[o3 + c + 3] = s33;
    }
  }
}

/**
 * C[j·d4 + c] += Σ_{i<ni} A[i·lda + j]·B[i·d4 + c] for j < nc4, c < d4: dV += Pᵀ·dO and
 * dK += dSᵀ·Q. A is row-major (ni rows, at least nc4 columns), B row-major with row length d4.
 */
export function gemmAtB(A: Float64Array, lda: number, ni: number, B: Float64Array, nc4: number, d4: number, C: Float64Array): void {
  for (let j = 0; j < nc4; j += 4) {
    const o0 = j * d4, o1 = o0 + d4, o2 = o1 + d4, o3 = o2 + d4;
    for (let c = 0; c < d4; c += 4) {
      let s00 = C[o0 + c], s01 = C[o0 + c + 1], s02 = C[o0 + c + 2], s03 = C[o0 + c + 3];
      let s10 = C[o1 + c], s11 = C[o1 + c + 1], s12 = C[o1 + c + 2], s13 = C[o1 + c + 3];
      let s20 = C[o2 + c], s21 = C[o2 + c + 1], s22 = C[o2 + c + 2], s23 = C[o2 + c + 3];
      let s30 = C[o3 + c], s31 = C[o3 + c + 1], s32 = C[o3 + c + 2], s33 = C[o3 + c + 3];
      let a = j;
      let b = c;
      for (let i = 0; i < ni; i++) {
        const x0 = A[a], x1 = A[a + 1], x2 = A[a + 2], x3 = A[a + 3];
        const y0 = B[b], y1 = B[b + 1], y2 = B[b + 2], y3 = B[b + 3];
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
        a += lda;
        b += d4;
      }
      C[o0 + c] = s00; C[o0 + c + 1] = s01; C[o0 + c + 2] = s02; C[o0 + c + 3] = s03;
      C[o1 + c] = s10; C[o1 + c + 1] = s11; C[o1 + c + 2] = s12; C[o1 + c + 3] = s13;
      C[o2 + c] = s20; C[o2 + c + 1] = s21; C[o2 + c + 2] = s22; C[o2 + c + 3] = s23;
      C[o3 + c] = s30; C[o3 + c + 1] = s31; C[o3 + c + 2] = s32; C[o3 + c + 3] = s33;
    }
  }
}

/**
 * Copies a row-major tile (rows4 rows of length d4) into packed panels. Both are zero-padded,
 * so the result is too.
 */
export function packPanels(src: Float64Array, rows4: number, d4: number, dst: Float64Array): void {
  for (let r = 0; r < rows4; r += 4) {
    const s0 = r * d4, s1 = s0 + d4, s2 = s1 + d4, s3 = s2 + d4;
    let o = r * d4;
    for (let k = 0; k < d4; k++) {
      dst[o] = src[s0 + k];
      dst[o + 1] = src[s1 + k];
      dst[o + 2] = src[s2 + k];
      dst[o + 3] = src[s3 + k];
      o += 4;
    }
  }
}

/**
 * The masked-aware forms of gemmAB and gemmAtB, for a tile pair that is partly masked AND holds
 * a non-finite value (NaN, ±∞) in the operand the probabilities multiply: there a masked
 * probability 0 times ∞ would make NaN where attention has no term at all. These sum over the
 * visible (row, key) pairs only — rows r < nr, keys c ∈ [rowLo[rowBase+r] − j0, rowHi[…] − j0]
 * ∩ [0, nc) — exactly as the definition does. Slow and rare.
 */
export function maskedAB(A: Float64Array, lda: number, nr: number, B: Float64Array, nc: number, d4: number, C: Float64Array, rowLo: Int32Array, rowHi: Int32Array, rowBase: number, j0: number): void {
  for (let r = 0; r < nr; r++) {
    const lo = Math.max(0, rowLo[rowBase + r] - j0);
    const hi = Math.min(nc - 1, rowHi[rowBase + r] - j0);
    const o = r * d4;
    for (let c = lo; c <= hi; c++) {
      const a = A[r * lda + c];
      const b = c * d4;
      for (let x = 0; x < d4; x++) C[o + x] += a * B[b + x];
    }
  }
}

/** C[c] += Σ over visible r of A[r, c]·B[r]: the masked-aware gemmAtB (see maskedAB). */
export function maskedAtB(A: Float64Array, lda: number, nr: number, B: Float64Array, nc: number, d4: number, C: Float64Array, rowLo: Int32Array, rowHi: Int32Array, rowBase: number, j0: number): void {
  for (let r = 0; r < nr; r++) {
    const lo = Math.max(0, rowLo[rowBase + r] - j0);
    const hi = Math.min(nc - 1, rowHi[rowBase + r] - j0);
    const b = r * d4;
    for (let c = lo; c <= hi; c++) {
      const a = A[r * lda + c];
      const o = c * d4;
      for (let x = 0; x < d4; x++) C[o + x] += a * B[b + x];
    }
  }
}
