/**
 * The demo's results, machine-readable (`fa demo --json`), and what the report and the web page
 * draw from. Eight parts, as the story tells them (the eighth in the CLI only).
 */
import type { TrainingResult } from './train.js';
import type { DType, OnlineSoftmaxStep } from '@fa/core';
import type { ErrStat } from './exact.js';
import type { GenerationResult } from './generate.js';

export const SCHEMA = 'fa-demo/1';

export interface Rates {
  readonly T: number;
  readonly forwardSeconds: number;
  readonly backwardSeconds: number;
  /** FLOP/s (DESIGN.md's FLOP counts). */
  readonly forwardRate: number;
  readonly backwardRate: number;
}

export interface ThroughputEntry extends Rates {
  readonly backend: string;
  readonly device: string;
  readonly D: number;
  readonly dtype: DType;
  readonly causal: boolean;
}

export interface PassSummary {
  readonly seconds: number;
  readonly flops: number;
  readonly rate: number;
  /** Query chunks the pass ran in (host engines; 1 = one call). */
  readonly chunks: number;
  readonly peakExtraBytes: number | null;
}

export interface IoSummary {
  readonly T: number;
  readonly sramBytes: number;
  readonly elementBytes: number;
  readonly forward: { readonly flops: number; readonly naive: { readonly bytes: number; readonly intensity: number }; readonly flash: { readonly bytes: number; readonly intensity: number } };
  readonly backward: { readonly flops: number; readonly naive: { readonly bytes: number; readonly intensity: number }; readonly flash: { readonly bytes: number; readonly intensity: number } };
}

export interface MemoryPoint {
  readonly T: number;
  /** Measured extra bytes of the tiled forward (engine), if measured at this T. */
  readonly flash?: number;
  /** Measured extra bytes of the textbook naive forward, if run at this T. */
  readonly naive?: number;
}

/** Part 8: ring attention's zigzag plan for a causal sequence over a few GPUs (no run). */
export interface ParallelSummary {
  readonly T: number;
  readonly ranks: number;
  readonly perRank: readonly { readonly ranges: readonly (readonly [number, number])[]; readonly pairs: number; readonly calls: readonly number[] }[];
  readonly totalPairs: number;
  /** "NCCL 2.28.3 at …" or why NCCL cannot be used here. */
  readonly nccl: string;
}

export interface DemoResult {
  readonly schema: typeof SCHEMA;
  readonly createdAt: string;
  readonly engine: { readonly name: string; readonly device: string; readonly dtype: DType; readonly onDevice: boolean };
  /** Every engine considered, and why the one used was picked. */
  readonly candidates: readonly { readonly name: string; readonly status: string }[];
  readonly machine: {
    readonly runtime: string;
    readonly cpus: number;
    readonly ramTotal: number;
    readonly ramFree: number;
    /** The engine's device memory, when it says (CUDA). */
    readonly gpuTotal: number | null;
    readonly gpuFree: number | null;
    /** WebGPU: the largest buffer and storage binding the device allows. */
    readonly maxBufferBytes: number | null;
    readonly maxBindingBytes: number | null;
  };
  readonly config: {
    readonly T: number;
    readonly D: number;
    readonly causal: boolean;
    readonly seed: number;
    readonly budgetSeconds: number;
    /** How T was chosen. */
    readonly tokensFrom: 'flag' | 'budget' | 'gpu-default';
  };
  /** 1. Naive attention at 100K tokens, one head. */
  readonly naive: {
    readonly T: number;
    readonly entries: number;
    readonly scoresBytes: { readonly bf16: number; readonly f32: number };
    /** S and P in the engine's dtype. */
    readonly forwardBytes: number;
    /** What this machine has for it: GPU memory for a GPU engine, RAM otherwise. */
    readonly available: number;
    readonly availableLabel: string;
  };
  /** 2. The run: calibration, the chosen size, forward and backward. */
  readonly run: {
    readonly calibration: readonly Rates[];
    readonly predicted: { readonly forwardSeconds: number; readonly backwardSeconds: number };
    readonly forward: PassSummary;
    readonly backward: PassSummary;
    /** This engine's estimated time for forward + backward at 100K tokens. */
    readonly fullRunSeconds: number;
  };
  /** 3. Exactness on sampled rows against the float64 reference. */
  readonly exactness: {
    readonly rows: number;
    readonly sampledRows: readonly number[];
    readonly out: ErrStat;
    readonly lse: ErrStat;
    readonly dq: ErrStat | null;
    readonly rule: string;
    readonly verified: boolean;
    readonly seconds: number;
  };
  /** 4. Memory, traffic, time. */
  readonly memory: {
    readonly method: string;
    /** CPU engine: bytes of the worker threads' tiles (threads × working set), kept between calls; not in the measurement. */
    readonly tileBytes: number | null;
    readonly forwardPeakExtra: number | null;
    readonly backwardPeakExtra: number | null;
    readonly naiveForwardBytes: number;
    readonly naiveBackwardBytes: number;
    readonly points: readonly MemoryPoint[];
    readonly io: IoSummary;
    readonly io100k: IoSummary;
  };
  /** 5. The online softmax, step by step (core's explainOnlineSoftmax). */
  readonly walkthrough: {
    readonly blocks: readonly (readonly number[])[];
    readonly steps: readonly OnlineSoftmaxStep[];
    readonly out: readonly number[];
    readonly lse: number;
    readonly direct: { readonly out: readonly number[]; readonly lse: number };
    readonly lines: readonly string[];
  };
  /** 6. Backward: recompute from Q, K, V and the LSE against storing P. */
  readonly backward: {
    readonly storedPBytes: number;
    readonly storedPBytes100k: number;
    readonly lseBytes: number;
    readonly lseBytes100k: number;
    readonly measuredExtra: number | null;
    /** Backward FLOPs: 2.5× the forward, recomputing S = QKᵀ and P tile by tile. */
    readonly flops: number;
  };
  /** Forward/backward throughput of every available engine (the report's bar chart). */
  readonly throughput: readonly ThroughputEntry[];
  /** 7. Generation with a KV cache (absent where the story was told without it, e.g. the web page). */
  readonly generation?: GenerationResult | { readonly skipped: string };
  /** 8. Past one GPU (the CLI; absent on the web page). */
  readonly parallel?: ParallelSummary;
  /** 9. A model on the engines (absent with --train-seconds 0). */
  readonly training?: TrainingResult;
}
