/**
 * Inference with a KV cache: the keys and values of every token processed so far, one cache per
 * attention layer, kept on the attention engine between steps, so that generating a token
 * costs one pass over the cache (backend.forwardWithKVCache: the new token's key and value are
 * appended in place, then its query attends) instead of attention over the whole sequence.
 *
 * Inference only: nothing is recorded for backward (call it under noGrad). Every sequence of
 * the batch has the same length (prompts of equal length, one token a step), so one length
 * array serves every layer; it lives on the engine as an index tensor, advanced with writeIndex.
 */
import {
  AutoBackend,
  bytesPerElement,
  FAError,
  decode,
  describeKVCacheProblemShapes,
  encode,
  zeros as coreZeros,
  type AttentionBackend,
  type AttentionOptions,
  type DType,
  type DeviceIndexTensor,
  type HostTensor,
  type Tensor as CoreTensor,
} from '@fa/core';
import { Tensor } from '../tensor.js';
import { DeviceArray, engineOf } from '../device.js';
import { pickBackend, type BackendChoice } from '../ops/attention.js';

export interface KVCacheConfig {
  readonly layers: number;
  readonly batch: number;
  /** Tokens each sequence can hold. */
  readonly capacity: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /**
   * The engine (default: the attention op's default backend). An auto backend ('auto', a list)
   * puts the caches on the first engine that takes this KV-cache call (supportsKVCache()).
   */
  readonly backend?: BackendChoice;
  /** The dtype the cache and attention use (default 'f32'). */
  readonly dtype?: DType;
}

export class KVCache {
  /** Tokens cached per sequence. */
  length = 0;

  private constructor(
    readonly backend: AttentionBackend,
    readonly config: Required<Omit<KVCacheConfig, 'backend'>>,
    private readonly k: CoreTensor[],
    private readonly v: CoreTensor[],
    private readonly lens: DeviceIndexTensor,
  ) {}

  /** Allocates empty caches [batch, capacity, kvHeads, headDim] for every layer on the engine. */
  static async create(c: KVCacheConfig): Promise<KVCache> {
    const chosen = await pickBackend(c.backend);
    const dtype = c.dtype ?? 'f32';
    const shape = [c.batch, c.capacity, c.kvHeads, c.headDim];
    // Device caches stay with their engine, so an auto backend must choose it now, for a decode
    // step of this cache (the query heads are not known yet: asked with as many as kv heads).
    const step = [c.batch, 1, c.kvHeads, c.headDim];
    const be = chosen instanceof AutoBackend ? chosen.engineFor(describeKVCacheProblemShapes(step, shape, dtype, { cacheSeqlens: new Int32Array(c.batch), newShape: step })) : chosen;
    const k: CoreTensor[] = [];
    const v: CoreTensor[] = [];
    let lens: DeviceIndexTensor;
    try {
      for (let l = 0; l < c.layers; l++) {
        k.push(await be.upload(coreZeros(shape, dtype)));
        v.push(await be.upload(coreZeros(shape, dtype)));
      }
      lens = await be.uploadIndex(new Int32Array(c.batch));
    } catch (e) {
      // an upload that fails (E_OOM on the engine, say) leaves nothing of this cache behind
      for (const t of [...k, ...v]) be.disposeTensor(t);
      throw e;
    }
    return new KVCache(be, { layers: c.layers, batch: c.batch, capacity: c.capacity, kvHeads: c.kvHeads, headDim: c.headDim, dtype }, k, v, lens);
  }

  /**
   * Attention of layer `layer` for new tokens: q [B, Tnew, H, D], k and v [B, Tnew, Hkv, D] of
   * those tokens (autograd tensors, float32). Appends k and v to the layer's cache at the
   * current length and attends over everything cached; returns [B, Tnew, H, D].
   */
  async attend(layer: number, q: Tensor, k: Tensor, v: Tensor, opts: Omit<AttentionOptions, 'cuSeqlensQ' | 'cuSeqlensK'> = {}): Promise<Tensor> {
    if (!(layer >= 0 && layer < this.config.layers)) throw new FAError('E_ARG', `KVCache.attend: layer ${layer} is not in [0, ${this.config.layers})`);
    const dt = this.config.dtype;
    const host = (t: Tensor): HostTensor => {
      const f = t.data instanceof Float32Array ? t.data : Float32Array.from(t.data);
      return { kind: 'host', dtype: dt, shape: t.shape, data: dt === 'f32' ? f : encode(dt, f) };
    };
    const be = this.backend;
    if (q.onDevice || k.onDevice || v.onDevice) return this.attendOnDevice(layer, q, k, v, opts);
    const r = await be.forwardWithKVCache(host(q), this.k[layer], this.v[layer], { ...opts, cacheSeqlens: this.lens, kNew: host(k), vNew: host(v) });
    const out = await be.read(r.out);
    be.disposeTensor(r.out);
    be.disposeTensor(r.lse);
    const data = out.data instanceof Float32Array ? out.data : decode(dt as 'f16' | 'bf16', out.data);
    return new Tensor(data, out.shape);
  }

  /** attend() for tensors on the cache's engine's device: views of their buffers in, the output stays there. */
  private async attendOnDevice(layer: number, q: Tensor, k: Tensor, v: Tensor, opts: Omit<AttentionOptions, 'cuSeqlensQ' | 'cuSeqlensK'>): Promise<Tensor> {
    const e = engineOf('KVCache.attend', q.storage, k.storage, v.storage)!;
    if ((e as unknown) !== this.backend) throw new FAError('E_ARG', `KVCache.attend: q, k, v live on ${e.name}, the cache on ${this.backend.name}; create the cache on the tensors' engine`);
    if (this.config.dtype !== 'f32') throw new FAError('E_UNSUPPORTED', `KVCache.attend: a ${this.config.dtype} cache takes host tensors; device tensors are f32`);
    const view = (t: Tensor) => e.viewTensor((t.storage as DeviceArray).t, t.shape);
    const r = await this.backend.forwardWithKVCache(view(q), this.k[layer], this.v[layer], { ...opts, cacheSeqlens: this.lens, kNew: view(k), vNew: view(v) });
    this.backend.disposeTensor(r.lse);
    return new Tensor(new DeviceArray(e, r.out, q.size), q.shape);
  }

  /** Counts `n` more tokens as cached (after every layer appended them). */
  async advance(n: number): Promise<void> {
    if (!(Number.isSafeInteger(n) && n >= 0 && this.length + n <= this.config.capacity)) {
      throw new FAError('E_ARG', `KVCache.advance: ${n} more tokens do not fit (length ${this.length}, capacity ${this.config.capacity})`);
    }
    this.length += n;
    await this.backend.writeIndex(this.lens, new Int32Array(this.config.batch).fill(this.length));
  }

  /** Bytes the caches hold (K and V, every layer). */
  get bytes(): number {
    const c = this.config;
    return 2 * c.layers * c.batch * c.capacity * c.kvHeads * c.headDim * bytesPerElement(c.dtype);
  }

  dispose(): void {
    for (const t of [...this.k, ...this.v, this.lens]) this.backend.disposeTensor(t);
  }
}
