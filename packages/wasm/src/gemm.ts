/**
 * The model ops of the wasm and native engines (@fa/core's HostModelOps; so far the matrix
 * product): `gemm(g)` runs csrc/gemm.c (cache-blocked, packed panels, the engine's generated
 * micro-kernels) synchronously on the calling thread, through the kernels the engine already has
 * there (the main thread's wasm instance, or the addon bound over the same memory).
 *
 * A call copies a and b (and c, with accumulate) into a scratch region of the engine's memory
 * above everything the engine holds (memory.ts, Arena.scratch), runs the kernel, and copies c out.
 * The region is reused by the next call, and the memory keeps the size of the largest product
 * (WebAssembly memories never shrink). Nothing else allocates while it runs (the call is
 * synchronous), so it may run while an attention call of the same engine waits on its workers.
 */
import { checkGemm, FAError, type GemmCall, type HostModelOps } from '@fa/core';
import type { Kernels } from './job.js';
import type { Arena } from './memory.js';

/** What gemm needs of the engine (backend.ts). */
export interface GemmEngine {
  readonly name: 'wasm' | 'native';
  readonly memory: WebAssembly.Memory;
  readonly arena: Arena;
  readonly kernels: Kernels;
  /** Throws E_DEVICE once the backend is disposed. */
  alive(): void;
}

/** Cache-line alignment of each operand and of the packed panels (misaligned panel rows cost AVX2 ~10 %). */
const LINE = 64;
const alignLine = (n: number): number => Math.ceil(n / LINE) * LINE;

/** The HostModelOps of an engine; `kernel` describes what runs, for reports. */
export function createModelOps(e: GemmEngine, kernel: string): HostModelOps {
  return {
    engine: e.name,
    kernel,
    gemm(g: GemmCall): void {
      checkGemm(g, `${e.name} gemm`);
      e.alive();
      runGemm(e, g);
    },
  };
}

function runGemm(e: GemmEngine, g: GemmCall): void {
  const { M, N, K } = g;
  if (M === 0 || N === 0) return;
  if (K === 0) {
    if (!g.accumulate) g.c.fill(0);
    return;
  }
  const ta = g.transA ? 1 : 0, tb = g.transB ? 1 : 0;
  const wsBytes = e.kernels.fa_gemm_ws_bytes(ta, tb, M, N, K);
  const aBytes = alignLine(4 * M * K), bBytes = alignLine(4 * K * N), cBytes = alignLine(4 * M * N);
  const at = e.arena.scratch(LINE + aBytes + bBytes + cBytes + wsBytes, `a ${M}×${K}·${K}×${N} product's operands`);
  const pa = alignLine(at), pb = pa + aBytes, pc = pb + bBytes, ws = pc + cBytes;
  // views after the memory grew (an unshared memory's buffer is replaced when it grows)
  const buf = e.memory.buffer;
  new Float32Array(buf, pa, M * K).set(g.a);
  new Float32Array(buf, pb, K * N).set(g.b);
  const c = new Float32Array(buf, pc, M * N);
  if (g.accumulate) c.set(g.c);
  try {
    e.kernels.fa_gemm_f32(ta, tb, M, N, K, pa, pb, pc, g.accumulate ? 1 : 0, ws);
  } catch (err) {
    throw new FAError('E_DEVICE', `${e.name} gemm: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  g.c.set(c);
}

/** What runs the product on each binary (HostModelOps.kernel). */
export function gemmKernelName(isa: string): string {
  const tiles = isa === 'x86-64-v4' ? 'AVX-512 8x32' : isa === 'x86-64-v3' ? 'AVX2 6x16' : isa === 'relaxed' ? 'relaxed SIMD (fused multiply-add) 4x8' : 'SIMD128 4x8';
  return `${tiles} micro-kernels, kc 256 x nc 256 packed panels, 1 thread (the calling one)`;
}
