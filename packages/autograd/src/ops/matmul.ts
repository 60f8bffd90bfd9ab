/**
 * matmul(a, b): [..., M, K] × [..., K, N] → [..., M, N]. The batch dims must match, or either
 * side may be a plain matrix shared by every batch entry (x @ W).
 */
import { Tensor, alloc, sizeOf, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn, type Saved } from '../node.js';
import { gemm } from './gemm.js';
import { checkTensors, dataAs, promote, sameShape, shapeError, shapeStr } from './util.js';
import { DeviceArray, deviceZeros, engineOf, onEngine, runOnDevice, type DeviceEngine } from '../device.js';

/** On the device: batched products (one dispatch, a batch per z); a shared operand has stride 0. */
function matmulDevice(a: Tensor, b: Tensor, batchShape: readonly number[], batch: number, M: number, K: number, N: number, aBatched: boolean, bBatched: boolean): Tensor {
  const e = engineOf('matmul', a.storage, b.storage)!;
  const x = a.storage as DeviceArray, y = b.storage as DeviceArray;
  const out = deviceZeros(e, batch * M * N, true);
  if (aBatched && !bBatched) runOnDevice(e, 'gemm', { transA: false, transB: false, M: batch * M, N, K, a: x, b: y, c: out });
  else runOnDevice(e, 'gemm', { transA: false, transB: false, M, N, K, a: x, b: y, c: out, batch, strideA: aBatched ? M * K : 0, strideB: bBatched ? K * N : 0, strideC: M * N });
  const saved: Saved[] = [{ what: 'a', data: x as unknown as ArrayBufferView, leaf: a.isLeaf }, { what: 'b', data: y as unknown as ArrayBufferView, leaf: b.isLeaf }];
  return record1('matmul', [a, b], out as unknown as Data, [...batchShape, M, N], saved, matmulBackwardDevice(e, x, y, batch, M, K, N, aBatched, bBatched));
}

function matmulBackwardDevice(e: DeviceEngine, x: DeviceArray, y: DeviceArray, batch: number, M: number, K: number, N: number, aBatched: boolean, bBatched: boolean): BackwardFn {
  return ([gh], needs) => {
    const g = onEngine(e, gh);
    let ga: DeviceArray | null = null, gb: DeviceArray | null = null;
    if (needs[0]) {
      // dA = dC · Bᵀ; a shared A sums over the batch: one product after another into it
      ga = deviceZeros(e, (aBatched ? batch : 1) * M * K, aBatched);
      if (aBatched) runOnDevice(e, 'gemm', { transA: false, transB: true, M, N: K, K: N, a: g, b: y, c: ga, batch, strideA: M * N, strideB: bBatched ? K * N : 0, strideC: M * K });
      else for (let i = 0; i < batch; i++) runOnDevice(e, 'gemm', { transA: false, transB: true, M, N: K, K: N, a: g, b: y, c: ga, batch: 1, aOffset: i * M * N, bOffset: bBatched ? i * K * N : 0, accumulate: true });
    }
    if (needs[1]) {
      // dB = Aᵀ · dC
      gb = deviceZeros(e, (bBatched ? batch : 1) * K * N, bBatched || aBatched ? bBatched : true);
      if (!bBatched && aBatched) runOnDevice(e, 'gemm', { transA: true, transB: false, M: K, N, K: batch * M, a: x, b: g, c: gb });
      else if (bBatched) runOnDevice(e, 'gemm', { transA: true, transB: false, M: K, N, K: M, a: x, b: g, c: gb, batch, strideA: aBatched ? M * K : 0, strideB: M * N, strideC: K * N });
      else runOnDevice(e, 'gemm', { transA: true, transB: false, M: K, N, K: M, a: x, b: g, c: gb });
    }
    return [ga, gb] as unknown as (Data | null)[];
  };
}

function matmulBackward(x: Data | null, y: Data | null, batch: number, M: number, K: number, N: number, aBatched: boolean, bBatched: boolean, p: Precision): BackwardFn {
  return ([g], needs) => {
    let ga: Data | null = null;
    let gb: Data | null = null;
    if (needs[0]) {
      // dA = dC · Bᵀ
      ga = alloc(p, (aBatched ? batch : 1) * M * K);
      for (let i = 0; i < batch; i++) {
        gemm({ transA: false, transB: true, M, N: K, K: N, A: g, aOff: i * M * N, B: y!, bOff: bBatched ? i * K * N : 0, C: ga, cOff: aBatched ? i * M * K : 0, accumulate: !aBatched });
      }
    }
    if (needs[1]) {
      // dB = Aᵀ · dC
      gb = alloc(p, (bBatched ? batch : 1) * K * N);
      if (!bBatched && aBatched) {
        gemm({ transA: true, transB: false, M: K, N, K: batch * M, A: x!, B: g, C: gb });
      } else {
        for (let i = 0; i < batch; i++) {
          gemm({ transA: true, transB: false, M: K, N, K: M, A: x!, aOff: aBatched ? i * M * K : 0, B: g, bOff: i * M * N, C: gb, cOff: bBatched ? i * K * N : 0, accumulate: !bBatched });
        }
      }
    }
    return [ga, gb];
  };
}

export function matmul(a: Tensor, b: Tensor): Tensor {
  checkTensors('matmul', ['a', a], ['b', b]);
  if (a.ndim < 2 || b.ndim < 2) throw shapeError('matmul', `both operands need rank >= 2, got ${shapeStr(a.shape)} and ${shapeStr(b.shape)}`);
  const [M, K] = a.shape.slice(-2);
  const [K2, N] = b.shape.slice(-2);
  if (K !== K2) throw shapeError('matmul', `inner dims differ: ${shapeStr(a.shape)} × ${shapeStr(b.shape)}`);
  const ba = a.shape.slice(0, -2);
  const bb = b.shape.slice(0, -2);
  const aBatched = ba.length > 0;
  const bBatched = bb.length > 0;
  if (aBatched && bBatched && !sameShape(ba, bb)) {
    throw shapeError('matmul', `batch dims must match (or one side be a matrix): ${shapeStr(a.shape)} × ${shapeStr(b.shape)}`);
  }
  const batchShape = aBatched ? ba : bb;
  const batch = sizeOf(batchShape);
  if (a.onDevice || b.onDevice) return matmulDevice(a, b, batchShape, batch, M, K, N, aBatched, bBatched);
  const p = promote(a, b);
  const x = dataAs(a, p);
  const y = dataAs(b, p);
  const out = alloc(p, batch * M * N);
  if (aBatched && !bBatched) gemm({ transA: false, transB: false, M: batch * M, N, K, A: x, B: y, C: out });
  else {
    for (let i = 0; i < batch; i++) {
      gemm({ transA: false, transB: false, M, N, K, A: x, aOff: aBatched ? i * M * K : 0, B: y, bOff: bBatched ? i * K * N : 0, C: out, cOff: i * M * N });
    }
  }
  const keepX = b.requiresGrad ? x : null;
  const keepY = a.requiresGrad ? y : null;
  const saved: Saved[] = [];
  if (keepX) saved.push({ what: 'a', data: keepX, leaf: a.isLeaf && keepX === a.data });
  if (keepY) saved.push({ what: 'b', data: keepY, leaf: b.isLeaf && keepY === b.data });
  return record1('matmul', [a, b], out, [...batchShape, M, N], saved, matmulBackward(keepX, keepY, batch, M, K, N, aBatched, bBatched, p));
}
