/**
 * A thread's register accumulators (unrolled scalars, or an array in the generic kernels):
 * declaring, zeroing, scaling, and storing them as output rows.
 */
import { type KernelSpec, dExpr, dims, outCol } from './spec.js';
import type { Src } from './src-builder.js';

/** Names of a thread's accumulators. */
export const acc = (name: string, i: number, j: number) => `${name}_${i}_${j}`;

/**
 * Declares a thread's output accumulators (RM × DN). The generic kernels keep them in an
 * array walked by loops whose trip count the compiler cannot see (so it does not unroll them).
 */
export function declOut(src: Src, s: KernelSpec, name: string): void {
  const { RM, DN } = dims(s);
  if (s.dynamic) src.line(`var ${name}_acc: array<f32, ${RM * DN}>;`);
  else declAcc(src, name, RM, DN);
}

/** Multiplies row i of the output accumulators by `f`. */
export function scaleOut(src: Src, s: KernelSpec, name: string, i: number, f: string): void {
  const { DN } = dims(s);
  if (s.dynamic) {
    src.line(`for (var x = 0u; x < P.dp2 / ${s.tile.tc}u; x = x + 1u) { ${name}_acc[${i * DN}u + x] = ${name}_acc[${i * DN}u + x] * ${f}; }`);
    return;
  }
  const sc: string[] = [];
  for (let d = 0; d < DN; d++) sc.push(`${acc(name, i, d)} = ${acc(name, i, d)} * ${f};`);
  src.line(sc.join(' '));
}

/** Declares RM×CN (or RM×DN) f32 accumulators set to zero. */
export function declAcc(src: Src, name: string, rows: number, cols: number): void {
  for (let i = 0; i < rows; i++) {
    const names: string[] = [];
    for (let j = 0; j < cols; j++) names.push(`${acc(name, i, j)} = 0.0`);
    src.line(`var ${names.join('; var ')};`);
  }
}

export function zeroAcc(src: Src, name: string, rows: number, cols: number): void {
  for (let i = 0; i < rows; i++) {
    const names: string[] = [];
    for (let j = 0; j < cols; j++) names.push(`${acc(name, i, j)} = 0.0;`);
    src.line(names.join(' '));
  }
}

/**
 * Stores a thread's RM×DN output accumulators (times `mul`, a WGSL f32 expression per row i)
 * into rows tok0 + r (r < n) of head `head` of `buf`.
 */
export function storeRows(src: Src, s: KernelSpec, buf: string, tok0: string, n: string, head: string, heads: string, name: string, mul: (i: number) => string): void {
  const t = s.tile;
  const { RM, DN, pairs } = dims(s);
  const D = dExpr(s);
  const packed = s.storage !== 'f32' && !s.outF32 && !s.f16;
  if (s.dynamic) {
    for (let i = 0; i < RM; i++) {
      src.open(`if (tr * ${RM}u + ${i}u < ${n}) {`);
      src.line(`let base = ((${tok0} + tr * ${RM}u + ${i}u) * ${heads} + ${head}) * P.d;`);
      src.line(`let m = ${mul(i)};`);
      src.open(`for (var jj = 0u; jj < P.dp2 / ${2 * t.tc}u; jj = jj + 1u) {`);
      src.line(`let d = 2u * tc + jj * ${2 * t.tc}u;`);
      src.line(`let x0 = ${name}_acc[${i * DN}u + 2u * jj] * m; let x1 = ${name}_acc[${i * DN}u + 2u * jj + 1u] * m;`);
      if (s.f16) {
        src.line(`if (d < P.d) { ${buf}[base + d] = f16(x0); }`);
        src.line(`if (d + 1u < P.d) { ${buf}[base + d + 1u] = f16(x1); }`);
        src.close();
        src.close();
        continue;
      }
      // f32 (or the f32 staging of an odd D): one word per element; else a packed pair.
      src.open(`if (P.dtype == 0u || P.out_f32 != 0u) {`);
      src.line(`if (d < P.d) { ${buf}[base + d] = bitcast<u32>(x0); }`);
      src.line(`if (d + 1u < P.d) { ${buf}[base + d + 1u] = bitcast<u32>(x1); }`);
      src.close(`} else if (d < P.d) { ${buf}[(base + d) >> 1u] = pack_any(vec2<f32>(x0, x1)); }`);
      src.close();
      src.close();
    }
    return;
  }
  for (let i = 0; i < RM; i++) {
    src.open(`if (tr * ${RM}u + ${i}u < ${n}) {`);
    src.line(`let base = ((${tok0} + tr * ${RM}u + ${i}u) * ${heads} + ${head}) * ${D};`);
    src.line(`let m = ${mul(i)};`);
    for (let jj = 0; jj < DN / 2; jj++) {
      const col = outCol(s, 2 * jj);
      const x0 = `${acc(name, i, 2 * jj)} * m`;
      const x1 = `${acc(name, i, 2 * jj + 1)} * m`;
      src.open(`{ let d = ${col};`);
      if (packed && pairs) {
        src.line(`if (d < ${D}) { ${buf}[(base + d) >> 1u] = pack2(vec2<f32>(${x0}, ${x1})); }`);
      } else if (s.f16) {
        src.line(`if (d < ${D}) { ${buf}[base + d] = f16(${x0}); }`);
        src.line(`if (d + 1u < ${D}) { ${buf}[base + d + 1u] = f16(${x1}); }`);
      } else {
        src.line(`if (d < ${D}) { ${buf}[base + d] = ${x0}; }`);
        src.line(`if (d + 1u < ${D}) { ${buf}[base + d + 1u] = ${x1}; }`);
      }
      src.close();
    }
    src.close();
  }
}
