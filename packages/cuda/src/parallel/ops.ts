/**
 * core's ShardOps on CUDA device tensors of one CudaBackend: the ring's accumulators, merges
 * and conversions run as kernels (csrc/cp_kernels.cu) on the backend's own stream, ordered
 * after the attention calls issued before them. Views share the buffer of the tensor they view
 * (the ring never disposes a view of a caller's tensor).
 */
import { bytesPerElement, FAError, numel, type DType, type ShardOps, type Tensor } from '@fa/core';
import { CudaTensor, toFAError, type CudaBackend } from '../backend.js';
import { loadNative, type NativeShardOps } from '../native.js';

const shapeStr = (s: readonly number[]) => `[${s.join(', ')}]`;

/** The native shard ops, or FAError E_UNSUPPORTED saying why they are missing. */
export function nativeShardOps(): NativeShardOps {
  const n = loadNative();
  if (!n.ok) throw new FAError('E_UNSUPPORTED', `context parallelism on CUDA: ${n.reason.replace(/^unavailable:\s*/, '')}`);
  if (!n.binding.shardOps) throw new FAError('E_UNSUPPORTED', 'context parallelism on CUDA: the CUDA addon predates it; rebuild it (npm run build:native)');
  return n.binding.shardOps;
}

/** ShardOps for the device tensors of `backend`. */
export function cudaShardOps(backend: CudaBackend, native: NativeShardOps = nativeShardOps()): ShardOps {
  const own = (t: Tensor, what: string): CudaTensor => {
    if (!(t instanceof CudaTensor) || t.owner !== backend) throw new FAError('E_ARG', `${what} must be a device tensor of this CUDA backend (upload it first)`);
    if (t.disposed) throw new FAError('E_ARG', `${what} is a device tensor that was already disposed`);
    return t;
  };
  const run = async (p: () => Promise<void>) => {
    try {
      await p();
    } catch (e) {
      throw toFAError(e);
    }
  };
  const alloc = (dtype: DType, shape: readonly number[]): CudaTensor => {
    try {
      return new CudaTensor(dtype, shape, backend.context.alloc(numel(shape) * bytesPerElement(dtype)), backend);
    } catch (e) {
      throw toFAError(e);
    }
  };
  const lseDims = (t: Tensor, batch: number, to: 'packed' | 'batched'): [number, number] => {
    if (to === 'packed') {
      if (t.shape.length !== 3 || t.shape[0] !== batch) throw new FAError('E_SHAPE', `transposeLse: [B, H, T] with B = ${batch} expected, got ${shapeStr(t.shape)}`);
      return [t.shape[1], t.shape[2]];
    }
    if (t.shape.length !== 2 || batch < 1 || t.shape[1] % batch !== 0) throw new FAError('E_SHAPE', `transposeLse: [H, B·T] with B = ${batch} expected, got ${shapeStr(t.shape)}`);
    return [t.shape[0], t.shape[1] / batch];
  };
  return {
    view(t, shape) {
      const c = own(t, 'view');
      if (numel(shape) !== numel(c.shape)) throw new FAError('E_SHAPE', `view: ${shapeStr(c.shape)} cannot be viewed as ${shapeStr(shape)}`);
      return new CudaTensor(c.dtype, shape, c.handle, backend);
    },
    async alloc(dtype, shape, fill) {
      if (fill !== undefined && dtype !== 'f32') throw new FAError('E_ARG', `alloc: only f32 tensors are filled on CUDA, asked for ${dtype}`);
      const t = alloc(dtype, shape);
      if (fill !== undefined) {
        try {
          await run(() => native.fill(t.handle, numel(shape), fill));
        } catch (e) {
          t.handle.dispose();
          throw e;
        }
      }
      return t;
    },
    async copy(dst, src) {
      const d = own(dst, 'copy destination');
      const s = own(src, 'copy source');
      if (d.dtype !== s.dtype || numel(d.shape) !== numel(s.shape)) throw new FAError('E_SHAPE', `copy: ${s.dtype}${shapeStr(s.shape)} into ${d.dtype}${shapeStr(d.shape)}`);
      await run(() => native.copy(d.handle, 0, s.handle, 0, d.handle.bytes));
    },
    async accumulate(acc, x) {
      const a = own(acc, 'accumulator');
      const b = own(x, 'accumulate input');
      if (a.dtype !== 'f32' || numel(a.shape) !== numel(b.shape)) throw new FAError('E_SHAPE', `accumulate: ${b.dtype}${shapeStr(b.shape)} into ${a.dtype}${shapeStr(a.shape)} (the accumulator must be f32)`);
      await run(() => native.accumulate(a.handle, b.handle, b.dtype, numel(a.shape)));
    },
    async mergeForward(out, lse, partOut, partLse) {
      const o = own(out, 'out');
      const l = own(lse, 'lse');
      const po = own(partOut, 'partOut');
      const pl = own(partLse, 'partLse');
      if (o.shape.length !== 3 || shapeStr(o.shape) !== shapeStr(po.shape)) throw new FAError('E_SHAPE', `mergeForward: out ${shapeStr(o.shape)} and partOut ${shapeStr(po.shape)} must both be [rows, H, D]`);
      const [rows, H, D] = o.shape;
      await run(() => native.merge(o.handle, l.handle, po.handle, po.dtype, pl.handle, rows, H, D));
    },
    async convert(t, dtype) {
      const s = own(t, 'convert input');
      if (s.dtype !== 'f32') throw new FAError('E_DTYPE', `convert: the input must be f32, got ${s.dtype}`);
      const dst = alloc(dtype, s.shape);
      try {
        await run(() => native.convert(dst.handle, dtype, s.handle, numel(s.shape)));
      } catch (e) {
        dst.handle.dispose();
        throw e;
      }
      return dst;
    },
    async transposeLse(t, batch, to) {
      const s = own(t, 'lse');
      const [H, T] = lseDims(s, batch, to);
      const dst = alloc('f32', to === 'packed' ? [H, batch * T] : [batch, H, T]);
      try {
        await run(() => native.transposeLse(dst.handle, s.handle, batch, H, T, to === 'packed'));
      } catch (e) {
        dst.handle.dispose();
        throw e;
      }
      return dst;
    },
    dispose(t) {
      backend.disposeTensor(t);
    },
  };
}
