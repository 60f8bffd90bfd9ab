/**
 * A unit of @fa/wasm work as plain data, what a worker receives (structured-cloned: numbers and
 * SharedArrayBuffer views), and runJob, what every thread does with it. The units are core's
 * (planForward / planBackward in packages/core/src/cpu), taken from a shared Atomics counter as
 * in the TypeScript engine; only the kernels are WebAssembly. (No runtime import of @fa/core here:
 * the worker bundle stays small.)
 */
export interface WasmJob {
  readonly kind: 'forward' | 'backward' | 'kvcache' | 'copy' | 'gemm';
  /** Address of the call's fa_problem (kvcache: its fa_kv; copy: the copy method, 0 or 1). */
  readonly problem: number;
  /**
   * Forward: (batch, kv head, query tile) triples. Backward: (batch, kv head, first tile, end
   * tile, private) 5-tuples. KV cache: (batch, first kv head, end kv head, query tile, key
   * chunk, slot of the first head) 6-tuples, core's units of consecutive kv heads together
   * (kvcall.ts). Copy: (address, bytes) pairs. Gemm: a block of C's rows each, (transA, transB, m, n,
   * k, a, lda, b, ldb, c, ldc, accumulate, workspace, bias) 14-tuples (model-ops.ts); counter[2]
   * counts the blocks done, for a caller that waits on it.
   */
  readonly units: Int32Array;
  /** Entries per unit: core's FWD_UNIT (3), BWD_UNIT (5); KV cache 6; copy 2. */
  readonly unitSize: number;
  /** Backward: address of each private dQ accumulator (index = a unit's `private`). */
  readonly privates: readonly number[];
  /**
   * [0]: next unit (Atomics.add); [1]: next thread slot; with `pre`, [2]: next pre unit and [3]:
   * pre units done.
   */
  readonly counter: Int32Array;
  /**
   * Forward: the (batch, kv head) pairs whose key tiles fa_pack_kv packs first, in the same job:
   * every thread takes packs until none is left, waits until all are done, then takes units. One
   * job instead of a packing job and a forward job: the threads are woken once a call (after an
   * idle spell each wake-up costs ~0.8 ms on a VM's halted vCPUs).
   */
  readonly pre?: Int32Array;
  /** Per-thread slots: scratch at the start, the thread's stack growing down from the end. */
  readonly slots: number;
  readonly slotBytes: number;
}

/** The small per-thread buffer a copy job writes into (it stays in L1/L2: csrc/copy.c). */
export const COPY_RING_BYTES = 64 * 1024;

/** The exports of a csrc/ binary. */
export interface Kernels {
  readonly fa_forward_scratch_bytes: (problem: number) => number;
  readonly fa_backward_scratch_bytes: (problem: number) => number;
  readonly fa_scale: (ptr: number, n: number, s: number) => void;
  readonly fa_encode16: (ptr: number, n: number, bf16: number) => void;
  readonly fa_pack_kv: (problem: number, b: number, kvh: number) => void;
  readonly fa_forward_unit: (problem: number, scratch: number, b: number, kvh: number, qt: number) => void;
  readonly fa_dvec: (problem: number, out: number) => void;
  readonly fa_backward_unit: (problem: number, scratch: number, b: number, kvh: number, ktStart: number, ktEnd: number, dqPrivate: number) => void;
  readonly fa_kv_scratch_bytes: (kv: number) => number;
  readonly fa_kv_unit: (kv: number, scratch: number, b: number, kvh0: number, kvh1: number, t: number, c: number, slot0: number) => void;
  readonly fa_kv_combine: (kv: number, scratch: number, b: number, kvh: number, t: number, slot0: number, chunks: number) => void;
  readonly fa_copy_range: (src: number, n: number, dst: number, ring: number, method: number) => void;
  readonly fa_set_stack: (top: number) => void;
  readonly fa_gemm_ws_bytes: (transA: number, transB: number, m: number, n: number, k: number) => number;
  readonly fa_gemm_f32: (transA: number, transB: number, m: number, n: number, k: number, a: number, b: number, c: number, accumulate: number, ws: number) => void;
  readonly fa_gemm_f32_ld: (transA: number, transB: number, m: number, n: number, k: number, a: number, lda: number, b: number, ldb: number, c: number, ldc: number, accumulate: number, ws: number) => void;
  // the element-wise and per-row model ops (csrc/layer_ops.c, model-ops.ts)
  readonly fa_add_bias_f32: (c: number, bias: number, m: number, n: number) => void;
  readonly fa_gelu_f32: (x: number, y: number, n: number, tanh: number) => void;
  readonly fa_gelu_backward_f32: (x: number, dy: number, dx: number, n: number, tanh: number, accumulate: number) => void;
  readonly fa_layer_norm_f32: (x: number, w: number, b: number, y: number, mean: number, rstd: number, rows: number, cols: number, eps: number) => void;
  readonly fa_layer_norm_backward_f32: (x: number, mean: number, rstd: number, w: number, dy: number, dx: number, dw: number, db: number, rows: number, cols: number, ws: number) => void;
  readonly fa_cross_entropy_f32: (logits: number, targets: number, lse: number, rows: number, classes: number, ignore: number) => number;
  readonly fa_cross_entropy_backward_f32: (logits: number, lse: number, targets: number, dlogits: number, rows: number, classes: number, ignore: number, scale: number) => void;
  readonly fa_adamw_f32: (p: number, g: number, m: number, v: number, n: number, b1: number, b2: number, eps: number, decay: number, stepSize: number, invSqrtBc2: number) => void;
  readonly fa_sum_rows_f32: (x: number, out: number, rows: number, cols: number, accumulate: number, ws: number) => void;
  readonly fa_rms_norm_f32: (x: number, w: number, y: number, rstd: number, rows: number, cols: number, eps: number) => void;
  readonly fa_rms_norm_backward_f32: (x: number, rstd: number, w: number, dy: number, dx: number, dw: number, rows: number, cols: number, ws: number) => void;
  readonly fa_silu_f32: (x: number, gate: number, y: number, n: number) => void;
  readonly fa_silu_backward_f32: (x: number, gate: number, dy: number, dx: number, dgate: number, n: number, accumulate: number) => void;
  readonly fa_rotary_f32: (x: number, y: number, cos: number, sin: number, batch: number, seq: number, heads: number, dim: number, rotaryDim: number, offset: number, interleaved: number, inverse: number) => void;
  readonly fa_dropout_f32: (x: number, y: number, n: number, threshold: number, k0: number, k1: number, offset: number, scale: number, accumulate: number) => void;
  /** The native addon's direct model-op entries (native only; model-ops.ts). */
  readonly direct?: import('./native.js').DirectOps;
  readonly __heap_base: WebAssembly.Global;
}

/**
 * Runs units of the job until the counter runs out. A worker moves its stack into its slot;
 * the calling thread (the inline path) keeps its own stack (`ownStack` false).
 */
export function runJob(job: WasmJob, k: Kernels, ownStack: boolean): void {
  const slot = Atomics.add(job.counter, 1, 1);
  const scratch = job.slots + slot * job.slotBytes;
  if (ownStack) k.fa_set_stack(scratch + job.slotBytes);
  if (job.pre) packFirst(job, k);
  const U = job.units;
  const n = U.length / job.unitSize;
  for (;;) {
    const u = Atomics.add(job.counter, 0, 1);
    if (u >= n) return;
    const o = u * job.unitSize;
    switch (job.kind) {
      case 'forward':
        k.fa_forward_unit(job.problem, scratch, U[o], U[o + 1], U[o + 2]);
        break;
      case 'backward': {
        const priv = U[o + 4];
        k.fa_backward_unit(job.problem, scratch, U[o], U[o + 1], U[o + 2], U[o + 3], priv < 0 ? 0 : job.privates[priv]);
        break;
      }
      case 'kvcache':
        k.fa_kv_unit(job.problem, scratch, U[o], U[o + 1], U[o + 2], U[o + 3], U[o + 4], U[o + 5]);
        break;
      case 'copy':
        k.fa_copy_range(U[o] >>> 0, U[o + 1], scratch, COPY_RING_BYTES, job.problem);
        break;
      case 'gemm':
        k.fa_gemm_f32_ld(U[o], U[o + 1], U[o + 2], U[o + 3], U[o + 4], U[o + 5], U[o + 6], U[o + 7], U[o + 8], U[o + 9], U[o + 10], U[o + 11], U[o + 12]);
        if (U[o + 13]) k.fa_add_bias_f32(U[o + 9], U[o + 13], U[o + 2], U[o + 3]);
        Atomics.add(job.counter, 2, 1);
        Atomics.notify(job.counter, 2);
        break;
    }
  }
}

/**
 * The pack phase of a forward job (WasmJob.pre): packs taken from counter[2], counted done in
 * counter[3]; then a spin until every pack is done (packing is short, and every thread of the job
 * is in it). A thread that fails still counts its packs done, so the others never wait forever.
 */
function packFirst(job: WasmJob, k: Kernels): void {
  const pre = job.pre!;
  const n = pre.length / 2;
  let mine = 0;
  try {
    for (;;) {
      const u = Atomics.add(job.counter, 2, 1);
      if (u >= n) break;
      mine++;
      k.fa_pack_kv(job.problem, pre[2 * u], pre[2 * u + 1]);
    }
  } catch (e) {
    Atomics.add(job.counter, 3, n); // (the call fails with this error; nobody waits for the rest)
    throw e;
  }
  Atomics.add(job.counter, 3, mine);
  while (Atomics.load(job.counter, 3) < n) {
    /* spin: the other threads are packing their last pairs */
  }
}
