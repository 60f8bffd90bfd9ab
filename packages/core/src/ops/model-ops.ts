/**
 * Model ops (DESIGN.md, "Model ops"): the operations model code needs beside attention, which
 * each engine implements in its own package and @fa/autograd runs through an engine's
 * `modelOps`: the matrix product (the op a transformer's step spends most of its time in, with
 * a bias epilogue) and the element-wise and per-row passes of layer-ops.ts. The host engines
 * (cpu, native, wasm) run them synchronously on float32 arrays in host memory.
 */
import { FAError } from '../errors.js';
import type { AdamWCall, CrossEntropyBackwardCall, CrossEntropyCall, GeluBackwardCall, GeluCall, LayerNormBackwardCall, LayerNormCall, RmsNormBackwardCall, RmsNormCall, RotaryCall, SiluBackwardCall, SiluCall, SumRowsCall, DropoutCall } from './layer-ops.js';

/**
 * One matrix product, row-major: C (M×N) = op(A)·op(B), or C += op(A)·op(B) with `accumulate`.
 * op(A) is M×K, stored K×M when `transA`; op(B) is K×N, stored N×K when `transB`. The arrays
 * hold exactly M·K, K·N and M·N values (pass subarray views for parts of larger buffers).
 */
export interface GemmCall {
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
  a: Float32Array;
  b: Float32Array;
  c: Float32Array;
  accumulate?: boolean;
  /** [N], added to every row of C after the product (linear's bias). */
  bias?: Float32Array | null;
}

/** The model ops of an engine that computes in host memory, synchronously. */
export interface HostModelOps {
  /** The engine ("cpu", "native", "wasm"), and what runs the product, for reports. */
  readonly engine: string;
  readonly kernel: string;
  gemm(g: GemmCall): void;
  gelu(c: GeluCall): void;
  geluBackward(c: GeluBackwardCall): void;
  layerNorm(c: LayerNormCall): void;
  layerNormBackward(c: LayerNormBackwardCall): void;
  /** Writes each row's logsumexp; returns the counted rows' summed loss and their number. */
  crossEntropy(c: CrossEntropyCall): { loss: number; count: number };
  crossEntropyBackward(c: CrossEntropyBackwardCall): void;
  adamw(c: AdamWCall): void;
  sumRows(c: SumRowsCall): void;
  rmsNorm(c: RmsNormCall): void;
  rmsNormBackward(c: RmsNormBackwardCall): void;
  silu(c: SiluCall): void;
  siluBackward(c: SiluBackwardCall): void;
  rotary(c: RotaryCall): void;
  /** y (+)= x·mask/(1 − p), the mask philox.ts's element keying (layer-ops.ts). */
  dropout(c: DropoutCall): void;
}

/** The ops every HostModelOps carries (setModelEngine checks an object against this list). */
export const MODEL_OP_NAMES = ['gemm', 'gelu', 'geluBackward', 'layerNorm', 'layerNormBackward', 'crossEntropy', 'crossEntropyBackward', 'adamw', 'sumRows', 'rmsNorm', 'rmsNormBackward', 'silu', 'siluBackward', 'rotary', 'dropout'] as const;

const isDim = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0 && (x as number) < 2 ** 31;

/** Checks a GemmCall's sizes against its arrays: one-line FAErrors, nothing computed. */
export function checkGemm(g: GemmCall, who = 'gemm'): void {
  if (typeof g !== 'object' || g === null) throw new FAError('E_ARG', `${who}: the call must be an object { transA, transB, M, N, K, a, b, c }`);
  for (const k of ['M', 'N', 'K'] as const) {
    if (!isDim(g[k])) throw new FAError('E_SHAPE', `${who}: ${k} must be an integer from 0 to 2^31 - 1, got ${String(g[k])}`);
  }
  for (const [name, arr, n] of [['a', g.a, g.M * g.K], ['b', g.b, g.K * g.N], ['c', g.c, g.M * g.N]] as const) {
    if (!(arr instanceof Float32Array)) throw new FAError('E_DTYPE', `${who}: ${name} must be a Float32Array`);
    if (arr.length !== n) throw new FAError('E_SHAPE', `${who}: ${name} holds ${arr.length} values; M ${g.M}, N ${g.N}, K ${g.K} need ${n}`);
  }
  if (g.bias != null) {
    if (!(g.bias instanceof Float32Array)) throw new FAError('E_DTYPE', `${who}: bias must be a Float32Array or null`);
    if (g.bias.length !== g.N) throw new FAError('E_SHAPE', `${who}: bias holds ${g.bias.length} values; N ${g.N} needs ${g.N}`);
    if (g.c.buffer === g.bias.buffer && overlaps(g.c, g.bias)) throw new FAError('E_ARG', `${who}: c must not overlap bias`);
  }
  if (g.c === g.a || g.c === g.b || (g.c.buffer === g.a.buffer && overlaps(g.c, g.a)) || (g.c.buffer === g.b.buffer && overlaps(g.c, g.b))) {
    throw new FAError('E_ARG', `${who}: c must not overlap a or b`);
  }
}

function overlaps(x: Float32Array, y: Float32Array): boolean {
  return x.byteOffset < y.byteOffset + y.byteLength && y.byteOffset < x.byteOffset + x.byteLength && x.length > 0 && y.length > 0;
}

/** FLOPs of a product (for GFLOP/s reports): 2·M·N·K. */
export const gemmFlops = (g: Pick<GemmCall, 'M' | 'N' | 'K'>): number => 2 * g.M * g.N * g.K;
