/** The parts of the story computed from models (no measurement), shared by the CLI and the page. */
import { backwardFlops, describeProblem, explainOnlineSoftmax, ioModel, planRing, zigzagLayout, type DType } from '@fa/core';
import { lseBytes, naiveMemory } from './model.js';
import type { DemoResult, IoSummary } from './result.js';

export const FULL_T = 100_000;

/** The seed example of the online softmax: a block [1, 2, 3], then a block with 4. */
export const WALKTHROUGH_BLOCKS: readonly (readonly number[])[] = [[1, 2, 3], [4]];

export function naivePart(dtype: DType, available: number, availableLabel: string, T = FULL_T): DemoResult['naive'] {
  const n = naiveMemory(T, dtype);
  return { T, entries: n.entries, scoresBytes: { bf16: n.scores.bf16, f32: n.scores.f32 }, forwardBytes: n.forward, available, availableLabel };
}

export function ioSummary(T: number, D: number, dtype: DType): IoSummary {
  const m = ioModel({ batch: 1, heads: 1, tq: T, d: D }, { dtype, schedule: 'fa2' });
  const pass = (p: typeof m.forward) => ({
    flops: p.flops,
    naive: { bytes: p.naive.traffic.bytes, intensity: p.naive.intensity },
    flash: { bytes: p.flash.traffic.bytes, intensity: p.flash.intensity },
  });
  return { T, sramBytes: m.sramBytes, elementBytes: m.elementBytes, forward: pass(m.forward), backward: pass(m.backward) };
}

export function walkthroughPart(): DemoResult['walkthrough'] {
  const t = explainOnlineSoftmax(WALKTHROUGH_BLOCKS);
  return { blocks: WALKTHROUGH_BLOCKS, steps: t.steps, out: t.out, lse: t.lse, direct: t.direct, lines: t.lines };
}

export function backwardPart(T: number, D: number, causal: boolean, dtype: DType, measuredExtra: number | null): DemoResult['backward'] {
  return {
    storedPBytes: naiveMemory(T, dtype).storedP,
    storedPBytes100k: naiveMemory(FULL_T, dtype).storedP,
    lseBytes: lseBytes(T),
    lseBytes100k: lseBytes(FULL_T),
    measuredExtra,
    flops: backwardFlops({ batch: 1, heads: 1, tq: T, d: D }, causal),
  };
}

/**
 * Part 8: how ring attention shards a causal sequence of T tokens over `ranks` GPUs (zigzag):
 * the tokens each rank holds, the query–key pairs it computes, the engine calls per ring step
 * (from core's planRing; nothing runs). `nccl` says whether NCCL is usable here.
 */
export function parallelPart(nccl: string, T = FULL_T, ranks = 2): NonNullable<DemoResult['parallel']> {
  const v = (shape: number[]) => ({ kind: 'device' as const, backend: 'plan', dtype: 'bf16' as const, shape, handle: null, disposed: false });
  const p = describeProblem(v([1, T, 1, 128]), v([1, T, 1, 128]), v([1, T, 1, 128]), { causal: true });
  const layout = zigzagLayout(ranks, T);
  const perRank = layout.q.map((ranges, r) => {
    const plan = planRing(p, layout, r);
    return { ranges: ranges.map((g) => [g.start, g.end] as const), pairs: plan.steps.reduce((a, s) => a + s.pairs, 0), calls: plan.steps.map((s) => s.calls.length) };
  });
  return { T, ranks, perRank, totalPairs: (T * (T + 1)) / 2, nccl };
}
