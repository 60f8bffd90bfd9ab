/**
 * The model ops of the wasm and native engines (@fa/core's HostModelOps): the matrix product and
 * the element-wise and per-row ops (csrc/gemm.c, csrc/layer_ops.c), synchronous, on the calling
 * thread. Every call is checked by @fa/core's checkers first (one-line FAErrors, nothing written).
 *
 * native: the addon's direct entries (csrc/native/direct.c) run on the caller's typed arrays in
 * place, no copy; the product also spreads over the engine's threads (the calling one and helper
 * threads the addon starts).
 *
 * wasm: WebAssembly reaches only its own memory, so a call copies its inputs (and the outputs it
 * accumulates into) into a scratch region of the engine's memory above everything the engine
 * holds (memory.ts, Arena.scratch), runs the kernel there and copies the outputs back. The region
 * is reused by the next call, and the memory keeps the size of the largest call (WebAssembly
 * memories never shrink). Nothing else allocates while it runs (the call is synchronous), so it
 * may run while an attention call of the same engine waits on its workers.
 */
import {
  checkAdamW, checkCrossEntropy, checkCrossEntropyBackward, checkGelu, checkGeluBackward, checkGemm, checkLayerNorm, checkLayerNormBackward, checkRmsNorm, checkRmsNormBackward,
  checkRotary, checkSilu, checkSiluBackward, checkSumRows, checkDropout, resolveDropout,
  FAError, type GemmCall, type HostModelOps,
} from '@fa/core';
import { runJob, type Kernels, type WasmJob } from './job.js';
import type { Arena } from './memory.js';
import type { DirectOps } from './native.js';
import type { WasmPool } from './threads.js';

/** What the model ops need of the engine (backend.ts). */
export interface ModelOpsEngine {
  readonly name: 'wasm' | 'native';
  readonly memory: WebAssembly.Memory;
  readonly arena: Arena;
  readonly kernels: Kernels;
  /** The native addon's direct entries (native only). */
  readonly direct?: DirectOps;
  /** Threads the product may use (the engine's threads, at least 1). */
  readonly threads: number;
  /** wasm: the engine's worker pool once started (undefined before, or with no threads). */
  pool?(): WasmPool | undefined;
  /** Throws E_DEVICE once the backend is disposed. */
  alive(): void;
}

/** Cache-line alignment of each operand and of the packed panels (misaligned panel rows cost AVX2 ~10 %). */
const LINE = 64;
const alignLine = (n: number): number => Math.ceil(n / LINE) * LINE;

type Arr = Float32Array | Int32Array | Float64Array;
/** One array of a call in scratch: copied in (`in`), copied back out (`out`), or only room (neither). */
interface Slot {
  data: Arr | null;
  in?: boolean;
  out?: boolean;
  /** Room without a source array (a workspace), in bytes. */
  bytes?: number;
}

/**
 * Lays the slots out in scratch, copies the inputs in, runs `kernel` with their addresses (0 for a
 * null slot), and copies the outputs back.
 */
function inScratch<R>(e: ModelOpsEngine, what: string, slots: Slot[], kernel: (at: number[]) => R): R {
  const sizes = slots.map((s) => alignLine(s.data ? s.data.byteLength : (s.bytes ?? 0)));
  const base = alignLine(e.arena.scratch(LINE + sizes.reduce((a, b) => a + b, 0), what));
  const at: number[] = [];
  let p = base;
  for (let i = 0; i < slots.length; i++) {
    at.push(slots[i].data || slots[i].bytes ? p : 0);
    p += sizes[i];
  }
  // views after the memory grew (an unshared memory's buffer is replaced when it grows)
  const buf = e.memory.buffer;
  const view = (s: Slot, ptr: number): Arr => {
    const d = s.data!;
    const C = d.constructor as { new (b: ArrayBufferLike, o: number, n: number): Arr };
    return new C(buf, ptr, d.length);
  };
  slots.forEach((s, i) => {
    if (s.data && s.in) (view(s, at[i]) as Float32Array).set(s.data as Float32Array);
  });
  let r: R;
  try {
    r = kernel(at);
  } catch (err) {
    throw new FAError('E_DEVICE', `${e.name} ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  slots.forEach((s, i) => {
    if (s.data && s.out) (s.data as Float32Array).set(view(s, at[i]) as Float32Array);
  });
  return r;
}

/** A workspace array kept across calls (native), grown when too small. */
function keeper<T extends Float32Array | Float64Array>(make: (n: number) => T): (n: number) => T {
  let ws = make(0);
  return (n) => (ws.length >= n ? ws : (ws = make(Math.ceil(n * 1.25))));
}

/** The HostModelOps of an engine; `kernel` describes what runs the product, for reports. */
export function createModelOps(e: ModelOpsEngine, kernel: string): HostModelOps {
  const k = e.kernels;
  const d = e.direct;
  const gemmWs = keeper((n) => new Float32Array(n));
  const f32Ws = keeper((n) => new Float32Array(n));
  const f64Ws = keeper((n) => new Float64Array(n));
  const tanh = (a: 'none' | 'tanh') => (a === 'tanh' ? 1 : 0);
  const guard = <R>(what: string, run: () => R): R => {
    try {
      return run();
    } catch (err) {
      throw new FAError('E_DEVICE', `${e.name} ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  };
  const ops: HostModelOps = {
    engine: e.name,
    kernel,
    gemm(g: GemmCall): void {
      checkGemm(g, `${e.name} gemm`);
      e.alive();
      const { M, N, K } = g;
      if (M === 0 || N === 0) return;
      const ta = g.transA ? 1 : 0, tb = g.transB ? 1 : 0, acc = g.accumulate ? 1 : 0;
      if (d) {
        const ws = gemmWs(Math.ceil(d.gemmWsBytes(ta, tb, M, N, K, e.threads) / 4));
        guard('gemm', () => d.gemm(ta, tb, M, N, K, g.a, g.b, g.c, acc, g.bias ?? null, ws, e.threads));
        return;
      }
      if (K === 0) {
        if (!g.accumulate) g.c.fill(0);
        if (g.bias) inScratch(e, 'gemm bias', [{ data: g.c, in: true, out: true }, { data: g.bias, in: true }], ([c, b]) => k.fa_add_bias_f32(c, b, M, N));
        return;
      }
      // wasm on several threads: blocks of C's rows, one a thread, the caller taking blocks too
      const pool = e.threads > 1 && 2 * M * N * K >= MIN_THREADED_FLOPS && M >= 16 * e.threads && canWait() ? e.pool?.() : undefined;
      const parts = pool ? e.threads : 1;
      const step = Math.ceil(M / parts / 8) * 8;
      const wsEach = alignLine(k.fa_gemm_ws_bytes(ta, tb, Math.min(M, step), N, K));
      inScratch(
        e,
        `a ${M}×${K}·${K}×${N} product's operands`,
        [{ data: g.a, in: true }, { data: g.b, in: true }, { data: g.c, in: g.accumulate === true, out: true }, { data: g.bias ?? null, in: true }, { data: null, bytes: parts * (wsEach + (pool ? STACK : 0)) }],
        ([a, b, c, bias, ws]) => {
          if (!pool) {
            k.fa_gemm_f32(ta, tb, M, N, K, a, b, c, acc, ws);
            if (bias) k.fa_add_bias_f32(c, bias, M, N);
            return;
          }
          threadedGemm(pool, k, { ta, tb, M, N, K, a, b, c, acc, bias, ws, wsEach, step, parts });
        },
      );
    },
    gelu(c) {
      checkGelu(c, `${e.name} gelu`);
      e.alive();
      if (d) return guard('gelu', () => d.gelu(c.x, c.y, tanh(c.approximate)));
      const inPlace = c.y === c.x;
      inScratch(e, 'gelu', [{ data: c.x, in: true, out: inPlace }, { data: inPlace ? null : c.y, out: true }], ([x, y]) => k.fa_gelu_f32(x, inPlace ? x : y, c.x.length, tanh(c.approximate)));
    },
    geluBackward(c) {
      checkGeluBackward(c, `${e.name} geluBackward`);
      e.alive();
      const acc = c.accumulate ? 1 : 0;
      if (d) return guard('geluBackward', () => d.geluBackward(c.x, c.dy, c.dx, tanh(c.approximate), acc));
      inScratch(e, 'geluBackward', [{ data: c.x, in: true }, { data: c.dy, in: true }, { data: c.dx, in: acc === 1, out: true }], ([x, dy, dx]) => k.fa_gelu_backward_f32(x, dy, dx, c.x.length, tanh(c.approximate), acc));
    },
    layerNorm(c) {
      checkLayerNorm(c, `${e.name} layerNorm`);
      e.alive();
      if (d) return guard('layerNorm', () => d.layerNorm(c.x, c.weight, c.bias, c.y, c.mean, c.rstd, c.rows, c.cols, c.eps));
      inScratch(e, 'layerNorm', [{ data: c.x, in: true }, { data: c.weight, in: true }, { data: c.bias, in: true }, { data: c.y, out: true }, { data: c.mean, out: true }, { data: c.rstd, out: true }], ([x, w, b, y, mean, rstd]) =>
        k.fa_layer_norm_f32(x, w, b, y, mean, rstd, c.rows, c.cols, c.eps),
      );
    },
    layerNormBackward(c) {
      checkLayerNormBackward(c, `${e.name} layerNormBackward`);
      e.alive();
      if (d) return guard('layerNormBackward', () => d.layerNormBackward(c.x, c.mean, c.rstd, c.weight, c.dy, c.dx, c.dweight, c.dbias, c.rows, c.cols, f64Ws(2 * c.cols)));
      inScratch(
        e,
        'layerNormBackward',
        [{ data: c.x, in: true }, { data: c.mean, in: true }, { data: c.rstd, in: true }, { data: c.weight, in: true }, { data: c.dy, in: true }, { data: c.dx, out: true }, { data: c.dweight, out: true }, { data: c.dbias, out: true }, { data: null, bytes: 16 * c.cols + 8 }],
        ([x, mean, rstd, w, dy, dx, dw, db, ws]) => k.fa_layer_norm_backward_f32(x, mean, rstd, w, dy, dx, dw, db, c.rows, c.cols, ws),
      );
    },
    crossEntropy(c) {
      checkCrossEntropy(c, `${e.name} crossEntropy`);
      e.alive();
      let count = 0;
      for (let r = 0; r < c.rows; r++) if (c.targets[r] !== c.ignoreIndex) count++;
      if (d) return { loss: guard('crossEntropy', () => d.crossEntropy(c.logits, c.targets, c.lse, c.rows, c.classes, c.ignoreIndex)), count };
      const loss = inScratch(e, 'crossEntropy', [{ data: c.logits, in: true }, { data: c.targets, in: true }, { data: c.lse, out: true }], ([x, t, lse]) => k.fa_cross_entropy_f32(x, t, lse, c.rows, c.classes, c.ignoreIndex));
      return { loss, count };
    },
    crossEntropyBackward(c) {
      checkCrossEntropyBackward(c, `${e.name} crossEntropyBackward`);
      e.alive();
      if (d) return guard('crossEntropyBackward', () => d.crossEntropyBackward(c.logits, c.lse, c.targets, c.dlogits, c.rows, c.classes, c.ignoreIndex, c.scale));
      inScratch(e, 'crossEntropyBackward', [{ data: c.logits, in: true }, { data: c.lse, in: true }, { data: c.targets, in: true }, { data: c.dlogits, out: true }], ([x, lse, t, g]) =>
        k.fa_cross_entropy_backward_f32(x, lse, t, g, c.rows, c.classes, c.ignoreIndex, c.scale),
      );
    },
    adamw(c) {
      checkAdamW(c, `${e.name} adamw`);
      e.alive();
      // the scalars in float64 (bias corrections of late steps are close to 1)
      const decay = 1 - c.lr * c.weightDecay, stepSize = c.lr / (1 - c.beta1 ** c.step), invSqrtBc2 = 1 / Math.sqrt(1 - c.beta2 ** c.step);
      if (d) return guard('adamw', () => d.adamw(c.param, c.grad, c.m, c.v, c.beta1, c.beta2, c.eps, decay, stepSize, invSqrtBc2));
      inScratch(e, 'adamw', [{ data: c.param, in: true, out: true }, { data: c.grad, in: true }, { data: c.m, in: true, out: true }, { data: c.v, in: true, out: true }], ([p, g, m, v]) =>
        k.fa_adamw_f32(p, g, m, v, c.param.length, c.beta1, c.beta2, c.eps, decay, stepSize, invSqrtBc2),
      );
    },
    sumRows(c) {
      checkSumRows(c, `${e.name} sumRows`);
      e.alive();
      const acc = c.accumulate ? 1 : 0;
      if (d) return guard('sumRows', () => d.sumRows(c.x, c.out, c.rows, c.cols, acc, f32Ws(3 * c.cols + 2)));
      inScratch(e, 'sumRows', [{ data: c.x, in: true }, { data: c.out, in: acc === 1, out: true }, { data: null, bytes: 12 * c.cols + 8 }], ([x, out, ws]) => k.fa_sum_rows_f32(x, out, c.rows, c.cols, acc, ws));
    },
    rmsNorm(c) {
      checkRmsNorm(c, `${e.name} rmsNorm`);
      e.alive();
      if (d) return guard('rmsNorm', () => d.rmsNorm(c.x, c.weight, c.y, c.rstd, c.rows, c.cols, c.eps));
      inScratch(e, 'rmsNorm', [{ data: c.x, in: true }, { data: c.weight, in: true }, { data: c.y, out: true }, { data: c.rstd, out: true }], ([x, w, y, rstd]) => k.fa_rms_norm_f32(x, w, y, rstd, c.rows, c.cols, c.eps));
    },
    rmsNormBackward(c) {
      checkRmsNormBackward(c, `${e.name} rmsNormBackward`);
      e.alive();
      if (d) return guard('rmsNormBackward', () => d.rmsNormBackward(c.x, c.rstd, c.weight, c.dy, c.dx, c.dweight, c.rows, c.cols, f64Ws(c.cols)));
      inScratch(
        e,
        'rmsNormBackward',
        [{ data: c.x, in: true }, { data: c.rstd, in: true }, { data: c.weight, in: true }, { data: c.dy, in: true }, { data: c.dx, out: true }, { data: c.dweight, out: true }, { data: null, bytes: 8 * c.cols + 8 }],
        ([x, rstd, w, dy, dx, dw, ws]) => k.fa_rms_norm_backward_f32(x, rstd, w, dy, dx, dw, c.rows, c.cols, ws),
      );
    },
    silu(c) {
      checkSilu(c, `${e.name} silu`);
      e.alive();
      if (d) return guard('silu', () => d.silu(c.x, c.gate, c.y));
      // y may be x or the gate: then it is written through that slot
      const onX = c.y === c.x, onGate = c.gate !== null && c.y === c.gate;
      inScratch(e, 'silu', [{ data: c.x, in: true, out: onX }, { data: c.gate, in: true, out: onGate }, { data: onX || onGate ? null : c.y, out: true }], ([x, g, y]) => k.fa_silu_f32(x, g, onX ? x : onGate ? g : y, c.x.length));
    },
    siluBackward(c) {
      checkSiluBackward(c, `${e.name} siluBackward`);
      e.alive();
      const acc = c.accumulate ? 1 : 0;
      if (d) return guard('siluBackward', () => d.siluBackward(c.x, c.gate, c.dy, c.dx, c.dgate, acc));
      inScratch(e, 'siluBackward', [{ data: c.x, in: true }, { data: c.gate, in: true }, { data: c.dy, in: true }, { data: c.dx, in: acc === 1, out: true }, { data: c.dgate, out: true }], ([x, g, dy, dx, dg]) =>
        k.fa_silu_backward_f32(x, g, dy, dx, dg, c.x.length, acc),
      );
    },
    rotary(c) {
      checkRotary(c, `${e.name} rotary`);
      e.alive();
      const args = [c.batch, c.seq, c.heads, c.dim, c.rotaryDim, c.positionOffset, c.interleaved ? 1 : 0, c.inverse ? 1 : 0] as const;
      if (d) return guard('rotary', () => d.rotary(c.x, c.y, c.cos, c.sin, ...args));
      const inPlace = c.y === c.x;
      inScratch(e, 'rotary', [{ data: c.x, in: true, out: inPlace }, { data: inPlace ? null : c.y, out: true }, { data: c.cos, in: true }, { data: c.sin, in: true }], ([x, y, co, si]) => k.fa_rotary_f32(x, inPlace ? x : y, co, si, ...args));
    },
    dropout(c) {
      checkDropout(c, `${e.name} dropout`);
      e.alive();
      // (p below 2^-32 resolves to none: threshold 0 keeps every element, scale 1)
      const dr = resolveDropout({ p: c.p, seed: c.seed, offset: c.offset ?? 0 });
      const args = [dr?.threshold ?? 0, dr?.k0 ?? 0, dr?.k1 ?? 0, dr?.offset ?? 0, dr ? Math.fround(dr.keepScale) : 1, c.accumulate ? 1 : 0] as const;
      if (d) return guard('dropout', () => d.dropout(c.x, c.y, ...args));
      const inPlace = c.y === c.x;
      inScratch(e, 'dropout', [{ data: c.x, in: true, out: inPlace }, { data: inPlace ? null : c.y, in: !!c.accumulate, out: true }], ([x, y]) => k.fa_dropout_f32(x, inPlace ? x : y, c.x.length, ...args));
    },
  };
  return ops;
}

/** Below this a product stays on the calling thread (waking workers costs ~0.1 ms). */
const MIN_THREADED_FLOPS = 16e6;
/** Each worker's stack in a threaded product (csrc's product needs a few hundred bytes). */
const STACK = 64 * 1024;

let waitable: boolean | undefined;
/** Whether this thread may block in Atomics.wait (not a browser's main thread). */
function canWait(): boolean {
  if (waitable === undefined) {
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, 0);
      waitable = true;
    } catch {
      waitable = false;
    }
  }
  return waitable;
}

/**
 * The product on the pool's workers and the calling thread, synchronously: the workers get a
 * 'gemm' job (job.ts) of row blocks from a shared counter; the caller takes blocks too, then
 * waits on the count of blocks done. Busy workers (an attention call's units) simply take none:
 * the caller computes what is left. Each block has its own workspace; each worker its stack.
 */
function threadedGemm(pool: WasmPool, k: Kernels, g: { ta: number; tb: number; M: number; N: number; K: number; a: number; b: number; c: number; acc: number; bias: number; ws: number; wsEach: number; step: number; parts: number }): void {
  const lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
  const units = new Int32Array(14 * g.parts);
  let n = 0;
  for (let i = 0; i < g.parts; i++) {
    const lo = i * g.step;
    if (lo >= g.M) break;
    const m = Math.min(g.step, g.M - lo);
    const aPart = g.ta ? g.a + 4 * lo : g.a + 4 * lo * lda;
    units.set([g.ta, g.tb, m, g.N, g.K, aPart, lda, g.b, ldb, g.c + 4 * lo * g.N, g.N, g.acc, g.ws + i * g.wsEach, g.bias], 14 * n);
    n++;
  }
  const counter = new Int32Array(new SharedArrayBuffer(12));
  const stacks = g.ws + g.parts * g.wsEach;
  const job: WasmJob = { kind: 'gemm', problem: 0, units: units.subarray(0, 14 * n), unitSize: 14, privates: [], counter, slots: stacks, slotBytes: STACK };
  pool.post(job, g.parts - 1);
  // the caller keeps its own stack (slot unused): runJob with ownStack false
  runJob(job, k, false);
  for (let done = Atomics.load(counter, 2); done < n; done = Atomics.load(counter, 2)) Atomics.wait(counter, 2, done, 50);
}

/** What runs the product on each binary (HostModelOps.kernel). */
export function gemmKernelName(isa: string, threads: number): string {
  const tiles = isa === 'x86-64-v4' ? 'AVX-512 8x32' : isa === 'x86-64-v3' ? 'AVX2 6x16' : isa === 'relaxed' ? 'relaxed SIMD (fused multiply-add) 4x8' : 'SIMD128 4x8';
  const native = isa.startsWith('x86');
  const t = `${threads} thread${threads > 1 ? 's' : ''} (the calling one${threads > 1 ? (native ? ' and helpers' : ' and the engine\'s workers') : ''}), ${native ? 'in place' : 'through scratch'}`;
  return `${tiles} micro-kernels, kc 256 x nc 256 packed panels, ${t}`;
}
