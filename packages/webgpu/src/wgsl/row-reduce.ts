/** Reductions across the TC threads that share a row (the online softmax's max and sum). */
import { type KernelSpec, dims } from './spec.js';
import type { Src } from './src-builder.js';

/**
 * Reduces v (a WGSL f32 expression) over the TC threads that share a row; `op` is 'max' or
 * '+'. With subgroups: a butterfly of subgroupShuffleXor. Without: through `sred` (NR·TC
 * floats), bracketed by barriers. Emits `let ${dst} = …;`.
 */
export function rowReduce(src: Src, s: KernelSpec, dsts: string[], vals: string[], op: 'max' | '+'): void {
  const t = s.tile;
  const comb = (a: string, b: string) => (op === 'max' ? `max(${a}, ${b})` : `(${a} + ${b})`);
  if (s.subgroups) {
    for (let i = 0; i < dsts.length; i++) {
      src.line(`var ${dsts[i]} = ${vals[i]};`);
      for (let o = t.tc / 2; o >= 1; o /= 2) src.line(`${dsts[i]} = ${comb(dsts[i], `subgroupShuffleXor(${dsts[i]}, ${o}u)`)};`);
    }
    return;
  }
  const { RM } = dims(s);
  for (let i = 0; i < dsts.length; i++) src.line(`sred[(tr * ${RM}u + ${i}u) * ${t.tc}u + tc] = ${vals[i]};`);
  src.line('workgroupBarrier();');
  for (let i = 0; i < dsts.length; i++) {
    src.line(`var ${dsts[i]} = sred[(tr * ${RM}u + ${i}u) * ${t.tc}u];`);
    src.line(`for (var x = 1u; x < ${t.tc}u; x = x + 1u) { ${dsts[i]} = ${comb(dsts[i], `sred[(tr * ${RM}u + ${i}u) * ${t.tc}u + x]`)}; }`);
  }
  src.line('workgroupBarrier();');
}
