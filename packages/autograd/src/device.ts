/**
 * Tensors on an engine's device (issue 25: "tensors live on the engine"): a Tensor whose values
 * are a device tensor of an engine with device model ops (@fa/webgpu's `deviceOps` today), not a
 * host array. Ops with a device path (linear, gelu, crossEntropy; backward's gradient sums; AdamW)
 * issue their work on the engine without awaiting — the engine orders it, as in PyTorch's eager
 * mode — and nothing comes back to the host until the caller reads (`await t.toHost()`,
 * `await loss.value()`). An op without a device path refuses a device tensor with a clear error
 * (reading `.data` of one throws); it never copies to the host behind the caller's back.
 *
 * A device op's failure (the engine's checks run when the call is issued, asynchronously) is
 * kept and thrown by the next read, backward or optimizer step on that engine.
 */
import { FAError, type AttentionOptions, type BackwardResult, type DeviceIndexTensor, type ForwardResult, type HostTensor, type Tensor as CoreTensor } from '@fa/core';

/** What the autograd needs of an engine to keep tensors on it. */
export interface DeviceEngine {
  readonly name: string;
  allocTensor(dtype: 'f32', shape: readonly number[], opts?: { uninitialized?: boolean }): CoreTensor;
  upload(t: HostTensor): Promise<CoreTensor>;
  uploadIndexNow(data: Int32Array): DeviceIndexTensor;
  uploadNow(t: HostTensor): CoreTensor;
  viewTensor(t: CoreTensor, shape: readonly number[]): CoreTensor;
  forward(q: CoreTensor, k: CoreTensor, v: CoreTensor, opts?: AttentionOptions): Promise<ForwardResult>;
  backward(q: CoreTensor, k: CoreTensor, v: CoreTensor, out: CoreTensor, dOut: CoreTensor, lse: CoreTensor, opts?: AttentionOptions): Promise<BackwardResult>;
  read(t: CoreTensor): Promise<HostTensor>;
  disposeTensor(t: CoreTensor | DeviceIndexTensor): void;
  readonly deviceOps: DeviceOps;
}

type Op = (call: never) => Promise<void>;
/** The device model ops the autograd calls (names as core's model ops, plus axpy). */
export interface DeviceOps {
  gemm: Op;
  gelu: Op;
  geluBackward: Op;
  crossEntropy: Op;
  crossEntropyBackward: Op;
  adamw: Op;
  sumRows: Op;
  axpy: Op;
  layerNorm: Op;
  layerNormBackward: Op;
  rmsNorm: Op;
  rmsNormBackward: Op;
  silu: Op;
  siluBackward: Op;
  rotary: Op;
  embedding: Op;
  embeddingBackward: Op;
  copy2d: Op;
  mul: Op;
  softmax: Op;
  softmaxBackward: Op;
  permute: Op;
  sumAll: Op;
  scaleByNorm: Op;
  broadcast: Op;
  reduceTo: Op;
  dropout: Op;
}

/** A shape padded with leading 1s to `rank` axes (NumPy broadcasting's alignment). */
export function padShape(s: readonly number[], rank: number): number[] {
  return [...new Array<number>(rank - s.length).fill(1), ...s];
}

/** Is `e` an engine the autograd can keep tensors on? */
export function isDeviceEngine(e: unknown): e is DeviceEngine {
  const x = e as Partial<DeviceEngine> | null;
  return typeof x === 'object' && x !== null && typeof x.allocTensor === 'function' && typeof x.uploadIndexNow === 'function' && typeof x.deviceOps === 'object' && x.deviceOps !== null;
}

const freeing = new FinalizationRegistry<{ engine: DeviceEngine; t: CoreTensor }>(({ engine, t }) => {
  try {
    engine.disposeTensor(t);
  } catch {
    // (the engine is gone)
  }
});

/** The values of a device-resident Tensor: `length` f32 values in one engine tensor. */
export class DeviceArray {
  readonly buffer: object = {};
  readonly byteOffset = 0;
  constructor(
    readonly engine: DeviceEngine,
    readonly t: CoreTensor,
    readonly length: number,
  ) {
    // (the GPU memory goes back to the engine when the array is unreachable)
    freeing.register(this, { engine, t });
  }
  get byteLength(): number {
    return 4 * this.length;
  }
}

/** The device array of host values (uploaded now, without an await). */
export function deviceFrom(engine: DeviceEngine, x: Float32Array | Float64Array): DeviceArray {
  const d = x instanceof Float32Array ? x : Float32Array.from(x); // (uploadNow copies the values)
  return new DeviceArray(engine, engine.uploadNow({ kind: 'host', dtype: 'f32', shape: [d.length], data: d }), d.length);
}

/** A value on `engine`'s device: a device array as it is, host values (a backward's seed) uploaded. */
export function onEngine(engine: DeviceEngine, x: unknown): DeviceArray {
  if (x instanceof DeviceArray) return x;
  return deviceFrom(engine, x as Float32Array);
}

/** Issues a device op whose call holds device arrays (replaced by their engine tensors). */
export function runOnDevice(engine: DeviceEngine, op: keyof DeviceOps, call: Record<string, unknown>): void {
  const d: Record<string, unknown> = {};
  const keep: DeviceArray[] = [];
  for (const [k, v] of Object.entries(call)) {
    if (v instanceof DeviceArray) keep.push(v);
    d[k] = v instanceof DeviceArray ? v.t : v;
  }
  issue(engine, (engine.deviceOps[op] as (c: unknown) => Promise<void>).call(engine.deviceOps, d), keep);
}

/** A new device array of n f32 values, zero-filled unless `uninitialized`. */
export function deviceZeros(engine: DeviceEngine, n: number, uninitialized = false): DeviceArray {
  return new DeviceArray(engine, engine.allocTensor('f32', [n], { uninitialized }), n);
}

const failures = new WeakMap<DeviceEngine, unknown>();

/**
 * Issues a device op's promise: its failure is kept for the next settle() on that engine. The op
 * reads engine tensors, not the DeviceArrays around them: `keep` holds those arrays until the op
 * is encoded, so that the collector cannot free a tensor a queued op still has to bind.
 */
export function issue(engine: DeviceEngine, p: Promise<void>, ...keep: unknown[]): void {
  p.then(
    () => void keep,
    (e: unknown) => {
      void keep;
      if (!failures.has(engine)) failures.set(engine, e);
    },
  );
}

/** Throws (once) the first failure of a device op issued on `engine` since the last settle. */
export function settle(engine: DeviceEngine): void {
  if (!failures.has(engine)) return;
  const e = failures.get(engine);
  failures.delete(engine);
  if (e instanceof FAError) throw new FAError(e.code, `a device op on ${engine.name} failed: ${e.message}`, { cause: e });
  throw new FAError('E_DEVICE', `a device op on ${engine.name} failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
}

/** The one engine of the device arrays among `xs` (null when all are host arrays); mixing is refused. */
export function engineOf(op: string, ...xs: readonly unknown[]): DeviceEngine | null {
  let e: DeviceEngine | null = null;
  let host = false;
  for (const x of xs) {
    if (x == null) continue;
    if (x instanceof DeviceArray) {
      if (e && e !== x.engine) throw new FAError('E_ARG', `${op}: its tensors live on two engines (${e.name} and ${x.engine.name})`);
      e = x.engine;
    } else host = true;
  }
  if (e && host) throw new FAError('E_ARG', `${op}: some tensors live on ${e.name}, others on the host; move them with .to(engine) or await .toHost() first`);
  return e;
}
