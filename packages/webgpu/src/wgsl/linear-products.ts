/**
 * The linear-layout versions of the two tile products every FlashAttention kernel is made of
 * (products.ts dispatches between these and the swizzled layout); every tile and the generic
 * kernels use them:
 *
 *   rowdot   acc[r][c] += Σ_d A[r][d]·B[c][d]   (S = Q·Kᵀ, dPᵀ = V·dOᵀ, …)   A, B staged from global
 *   pmul     acc[r][d] += Σ_c P[r][c]·Y[c][d]   (O += P·V, dV += Pᵀ·dO, …)   P in workgroup memory
 */
import { acc } from './accumulators.js';
import { type KernelSpec, dExpr, dims, encoding, isVec } from './spec.js';
import type { Src } from './src-builder.js';
import { ld1, ld2 } from './storage.js';
import { stageLoad, stageLoad4, stageStore } from './workgroup.js';

/** A tile of a [tokens, heads, D] tensor: rows tok0 … tok0+n−1 of head `head` (WGSL exprs). */
export interface TileRef {
  readonly buf: string;
  readonly tok0: string;
  readonly n: string;
  readonly head: string;
  readonly heads: string;
}

/**
 * rowdot: acc[r][c] += Σ_d A[r][d]·B[c][d] over the head dim, staging DK-wide chunks of both
 * tiles transposed in workgroup memory (sbuf[dd·NR + r], sbuf[NR·DK + dd·NC + c]).
 * Ends with a barrier, so sbuf may be reused right after.
 */
export function rowdotLinear(src: Src, s: KernelSpec, a: TileRef, b: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, CN, DP1, pairs } = dims(s);
  const D = dExpr(s);
  const offB = t.nr * t.dk;
  src.open(s.dynamic ? `for (var d0 = 0u; d0 < P.dp1; d0 = d0 + ${t.dk}u) {` : `for (var d0 = 0u; d0 < ${DP1}u; d0 = d0 + ${t.dk}u) {`);
  for (const [ref, rows, off] of [[a, t.nr, 0], [b, t.nc, offB]] as const) {
    if (pairs) {
      const half = t.dk / 2;
      src.open(`for (var e = lid; e < ${(rows * t.dk) / 2}u; e = e + ${NT}u) {`);
      src.line(`let r = e / ${half}u; let dd = (e % ${half}u) * 2u; let d = d0 + dd;`);
      src.line(`var xv = vec2<f32>(0.0);`);
      src.line(`if (r < ${ref.n} && d < ${D}) { xv = ${ld2(ref.buf, encoding(s), `((${ref.tok0} + r) * ${ref.heads} + ${ref.head}) * ${D} + d`)}; }`);
      src.line(stageStore(s, `${off}u + dd * ${rows}u + r`, 'xv.x') + ' ' + stageStore(s, `${off}u + (dd + 1u) * ${rows}u + r`, 'xv.y'));
      src.close();
    } else {
      src.open(`for (var e = lid; e < ${rows * t.dk}u; e = e + ${NT}u) {`);
      src.line(`let r = e / ${t.dk}u; let dd = e % ${t.dk}u; let d = d0 + dd;`);
      src.line(`var xv = 0.0;`);
      src.line(`if (r < ${ref.n} && d < ${D}) { xv = ${ld1(ref.buf, encoding(s), `((${ref.tok0} + r) * ${ref.heads} + ${ref.head}) * ${D} + d`, s.dynamic)}; }`);
      src.line(stageStore(s, `${off}u + dd * ${rows}u + r`, 'xv'));
      src.close();
    }
  }
  src.line('workgroupBarrier();');
  src.open(`for (var kk = 0u; kk < ${t.dk}u${s.dynamic ? ' + P.zero' : ''}; kk = kk + 1u) {`);
  if (isVec(s)) {
    src.line(`let ab = (kk * ${t.nr}u + tr * ${RM}u) >> 2u; let bb = (${offB}u + kk * ${t.nc}u + tc * ${CN}u) >> 2u;`);
    for (let i = 0; i < RM / 4; i++) src.line(`let a4_${i} = ${stageLoad4(s, `ab + ${i}u`)};`);
    for (let j = 0; j < CN / 4; j++) src.line(`let b4_${j} = ${stageLoad4(s, `bb + ${j}u`)};`);
    for (let i = 0; i < RM; i++) src.line(`let a${i} = a4_${Math.floor(i / 4)}[${i % 4}];`);
    for (let j = 0; j < CN; j++) src.line(`let b${j} = b4_${Math.floor(j / 4)}[${j % 4}];`);
  } else {
    src.line(`let ab = kk * ${t.nr}u + tr * ${RM}u; let bb = ${offB}u + kk * ${t.nc}u + tc;`);
    for (let i = 0; i < RM; i++) src.line(`let a${i} = ${stageLoad(s, `ab + ${i}u`)};`);
    for (let j = 0; j < CN; j++) src.line(`let b${j} = ${stageLoad(s, `bb + ${j * t.tc}u`)};`);
  }
  for (let i = 0; i < RM; i++) {
    const st: string[] = [];
    for (let j = 0; j < CN; j++) st.push(`${acc(out, i, j)} = fma(a${i}, b${j}, ${acc(out, i, j)});`);
    src.line(st.join(' '));
  }
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}

/**
 * pmul: acc[r][d] += Σ_c sp[c·NR + r] · Y[c][d], staging KC rows of the Y tile at a time
 * (sbuf[kc·DP2 + d]). sp holds the NC × NR probabilities (or dS) written by the caller, who
 * must have put a barrier between writing sp and calling this. Ends with a barrier.
 */
export function pmulLinear(src: Src, s: KernelSpec, y: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, DP2, DN, pairs } = dims(s);
  const D = dExpr(s);
  if (s.dynamic) {
    pmulDynamic(src, s, y, out);
    return;
  }
  src.open(`for (var c0 = 0u; c0 < ${t.nc}u; c0 = c0 + ${t.kc}u) {`);
  if (pairs) {
    src.open(`for (var e = lid; e < ${(t.kc * DP2) / 2}u; e = e + ${NT}u) {`);
    src.line(`let r = e / ${DP2 / 2}u; let d = (e % ${DP2 / 2}u) * 2u;`);
    src.line(`var xv = vec2<f32>(0.0);`);
    src.line(`if (c0 + r < ${y.n} && d < ${D}) { xv = ${ld2(y.buf, encoding(s), `((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * ${D} + d`)}; }`);
    src.line(stageStore(s, `r * ${DP2}u + d`, 'xv.x') + ' ' + stageStore(s, `r * ${DP2}u + d + 1u`, 'xv.y'));
    src.close();
  } else {
    src.open(`for (var e = lid; e < ${t.kc * DP2}u; e = e + ${NT}u) {`);
    src.line(`let r = e / ${DP2}u; let d = e % ${DP2}u;`);
    src.line(`var xv = 0.0;`);
    src.line(`if (c0 + r < ${y.n} && d < ${D}) { xv = ${ld1(y.buf, encoding(s), `((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * ${D} + d`, s.dynamic)}; }`);
    src.line(stageStore(s, `r * ${DP2}u + d`, 'xv'));
    src.close();
  }
  src.line('workgroupBarrier();');
  src.open(`for (var kc = 0u; kc < ${t.kc}u; kc = kc + 1u) {`);
  if (isVec(s)) {
    src.line(`let pb = ((c0 + kc) * ${t.nr}u + tr * ${RM}u) >> 2u; let yb = (kc * ${DP2}u + 4u * tc) >> 2u;`);
    for (let i = 0; i < RM / 4; i++) src.line(`let p4_${i} = sp[pb + ${i}u];`);
    for (let i = 0; i < RM; i++) src.line(`let p${i} = p4_${Math.floor(i / 4)}[${i % 4}];`);
    for (let jj = 0; jj < DN / 4; jj++) src.line(`let y${jj} = ${stageLoad4(s, `yb + ${jj * t.tc}u`)};`);
    for (let i = 0; i < RM; i++) {
      const st: string[] = [];
      for (let jj = 0; jj < DN / 4; jj++) {
        for (let e = 0; e < 4; e++) st.push(`${acc(out, i, 4 * jj + e)} = fma(p${i}, y${jj}[${e}], ${acc(out, i, 4 * jj + e)});`);
      }
      src.line(st.join(' '));
    }
    src.close();
    src.line('workgroupBarrier();');
    src.close();
    return;
  }
  src.line(`let pb = (c0 + kc) * ${t.nr}u + tr * ${RM}u; let yb = kc * ${DP2}u + 2u * tc;`);
  for (let i = 0; i < RM; i++) src.line(`let p${i} = sp[pb + ${i}u];`);
  for (let jj = 0; jj < DN / 2; jj++) src.line(`let y${jj} = vec2<f32>(${stageLoad(s, `yb + ${2 * jj * t.tc}u`)}, ${stageLoad(s, `yb + ${2 * jj * t.tc + 1}u`)});`);
  for (let i = 0; i < RM; i++) {
    const st: string[] = [];
    for (let jj = 0; jj < DN / 2; jj++) {
      st.push(`${acc(out, i, 2 * jj)} = fma(p${i}, y${jj}.x, ${acc(out, i, 2 * jj)});`);
      st.push(`${acc(out, i, 2 * jj + 1)} = fma(p${i}, y${jj}.y, ${acc(out, i, 2 * jj + 1)});`);
    }
    src.line(st.join(' '));
  }
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}

/** pmul of the generic kernels: run-time head dim, loops the compiler does not unroll. */
function pmulDynamic(src: Src, s: KernelSpec, y: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, DN } = dims(s);
  src.open(`for (var c0 = 0u; c0 < ${t.nc}u + P.zero; c0 = c0 + ${t.kc}u) {`);
  src.open(`for (var e = lid; e < ${t.kc}u * P.dp2; e = e + ${NT}u) {`);
  src.line(`let r = e / P.dp2; let d = e % P.dp2;`);
  src.line(`var xv = 0.0;`);
  src.line(`if (c0 + r < ${y.n} && d < P.d) { xv = ld1_${y.buf}(((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * P.d + d); }`);
  src.line(stageStore(s, 'r * P.dp2 + d', 'xv'));
  src.close();
  src.line('workgroupBarrier();');
  src.open(`for (var kc = 0u; kc < ${t.kc}u + P.zero; kc = kc + 1u) {`);
  src.line(`let pb = (c0 + kc) * ${t.nr}u + tr * ${RM}u; let yb = kc * P.dp2 + 2u * tc;`);
  for (let i = 0; i < RM; i++) src.line(`let p${i} = sp[pb + ${i}u];`);
  src.open(`for (var jj = 0u; jj < P.dp2 / ${2 * t.tc}u; jj = jj + 1u) {`);
  src.line(`let y0 = ${stageLoad(s, `yb + jj * ${2 * t.tc}u`)}; let y1 = ${stageLoad(s, `yb + jj * ${2 * t.tc}u + 1u`)};`);
  for (let i = 0; i < RM; i++) {
    src.line(`${out}_acc[${i * DN}u + 2u * jj] = fma(p${i}, y0, ${out}_acc[${i * DN}u + 2u * jj]); ${out}_acc[${i * DN}u + 2u * jj + 1u] = fma(p${i}, y1, ${out}_acc[${i * DN}u + 2u * jj + 1u]);`);
  }
  src.close();
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}
