/**
 * ShardOps for host tensors: what the ring needs around the CPU engine (or any engine that is
 * given host tensors). The merge is online-softmax.ts's mergeTileStates/finalizeTile applied
 * to (out, lse) pairs read as states m = lse, l = 1 (0 when empty), acc = out, in float64.
 */
import { encode, fromBF16Bits, fromF16Bits, toBF16Bits, toF16Bits } from '../dtype.js';
import { check, FAError } from '../errors.js';
import { finalizeTile, mergeTileStates } from '../online-softmax.js';
import { allocHost, isHostTensor, numel, type HostTensor, type Tensor } from '../tensor.js';
import type { ShardOps } from './ops.js';

function host(t: Tensor, what: string): HostTensor {
  if (isHostTensor(t)) return t;
  throw new FAError('E_ARG', `${what} is a device tensor of backend "${t.backend}"; host shard ops take host tensors (use the engine's own shard ops)`);
}

/** Element reader of a host tensor's data as exact float values. */
function reader(t: HostTensor): (i: number) => number {
  if (t.dtype === 'f32') {
    const a = t.data as Float32Array;
    return (i) => a[i];
  }
  const a = t.data as Uint16Array;
  return t.dtype === 'bf16' ? (i) => fromBF16Bits(a[i]) : (i) => fromF16Bits(a[i]);
}

function f32(t: HostTensor, what: string): Float32Array {
  check(t.dtype === 'f32', 'E_DTYPE', `${what} must be f32, got ${t.dtype}`);
  return t.data as Float32Array;
}

const shapeStr = (s: readonly number[]) => `[${s.join(', ')}]`;

/** Rows merged per batch of mergeTileStates calls. */
const TILE = 64;

export const hostShardOps: ShardOps = {
  view(t, shape) {
    const h = host(t, 'view');
    check(numel(shape) === numel(h.shape), 'E_SHAPE', `view: ${shapeStr(h.shape)} cannot be viewed as ${shapeStr(shape)}`);
    return { kind: 'host', dtype: h.dtype, shape: [...shape], data: h.data };
  },

  async alloc(dtype, shape, fill) {
    const data = allocHost(dtype, numel(shape));
    if (fill !== undefined && fill !== 0) {
      if (dtype === 'f32') (data as Float32Array).fill(fill);
      else (data as Uint16Array).fill(dtype === 'bf16' ? toBF16Bits(fill) : toF16Bits(fill));
    }
    return { kind: 'host', dtype, shape: [...shape], data };
  },

  async copy(dst, src) {
    const d = host(dst, 'copy destination');
    const s = host(src, 'copy source');
    check(d.dtype === s.dtype && d.data.length === s.data.length, 'E_SHAPE', `copy: ${s.dtype}${shapeStr(s.shape)} into ${d.dtype}${shapeStr(d.shape)}`);
    d.data.set(s.data);
  },

  async accumulate(acc, x) {
    const a = f32(host(acc, 'accumulator'), 'accumulator');
    const h = host(x, 'accumulate input');
    check(h.data.length === a.length, 'E_SHAPE', `accumulate: ${shapeStr(h.shape)} into ${shapeStr(acc.shape)}`);
    const rd = reader(h);
    for (let i = 0; i < a.length; i++) a[i] += rd(i);
  },

  async mergeForward(out, lse, partOut, partLse) {
    const o = f32(host(out, 'out'), 'the running out');
    const l = f32(host(lse, 'lse'), 'the running lse');
    const po = host(partOut, 'partOut');
    const pl = f32(host(partLse, 'partLse'), 'partLse');
    check(out.shape.length === 3 && shapeStr(po.shape) === shapeStr(out.shape), 'E_SHAPE', `mergeForward: out ${shapeStr(out.shape)} and partOut ${shapeStr(po.shape)} must both be [rows, H, D]`);
    const [rows, H, D] = out.shape;
    check(l.length === rows * H && pl.length === rows * H, 'E_SHAPE', `mergeForward: lse tensors must be [H, rows] = [${H}, ${rows}]`);
    const rd = reader(po);
    const mA = new Float64Array(TILE);
    const lA = new Float64Array(TILE);
    const mB = new Float64Array(TILE);
    const lB = new Float64Array(TILE);
    const accA = new Float64Array(TILE * D);
    const accB = new Float64Array(TILE * D);
    const lseOut = new Float64Array(TILE);
    for (let h = 0; h < H; h++) {
      for (let r0 = 0; r0 < rows; r0 += TILE) {
        const n = Math.min(TILE, rows - r0);
        for (let r = 0; r < n; r++) {
          const li = h * rows + r0 + r;
          mA[r] = l[li];
          lA[r] = l[li] === -Infinity ? 0 : 1;
          mB[r] = pl[li];
          lB[r] = pl[li] === -Infinity ? 0 : 1;
          const base = ((r0 + r) * H + h) * D;
          for (let c = 0; c < D; c++) {
            accA[r * D + c] = o[base + c];
            accB[r * D + c] = rd(base + c);
          }
        }
        mergeTileStates(mA, lA, accA, mB, lB, accB, n, D);
        finalizeTile(mA, lA, accA, n, D, lseOut);
        for (let r = 0; r < n; r++) {
          l[h * rows + r0 + r] = lseOut[r];
          const base = ((r0 + r) * H + h) * D;
          for (let c = 0; c < D; c++) o[base + c] = accA[r * D + c];
        }
      }
    }
  },

  async convert(t, dtype) {
    const src = f32(host(t, 'convert input'), 'convert input');
    const data = allocHost(dtype, src.length);
    if (dtype === 'f32') (data as Float32Array).set(src);
    else encode(dtype, src, data as Uint16Array);
    return { kind: 'host', dtype, shape: [...t.shape], data };
  },

  async transposeLse(t, batch, to) {
    const src = f32(host(t, 'lse'), 'lse');
    let H: number;
    let T: number;
    if (to === 'packed') {
      check(t.shape.length === 3 && t.shape[0] === batch, 'E_SHAPE', `transposeLse: [B, H, T] with B = ${batch} expected, got ${shapeStr(t.shape)}`);
      [, H, T] = t.shape;
    } else {
      check(t.shape.length === 2 && t.shape[1] % Math.max(1, batch) === 0, 'E_SHAPE', `transposeLse: [H, B·T] with B = ${batch} expected, got ${shapeStr(t.shape)}`);
      H = t.shape[0];
      T = batch > 0 ? t.shape[1] / batch : 0;
    }
    const data = allocHost('f32', src.length) as Float32Array;
    for (let b = 0; b < batch; b++) {
      for (let h = 0; h < H; h++) {
        const batched = (b * H + h) * T;
        const packed = h * batch * T + b * T;
        if (to === 'packed') data.set(src.subarray(batched, batched + T), packed);
        else data.set(src.subarray(packed, packed + T), batched);
      }
    }
    return { kind: 'host', dtype: 'f32', shape: to === 'packed' ? [H, batch * T] : [batch, H, T], data };
  },

  dispose() {
    // host memory belongs to the garbage collector
  },
};

