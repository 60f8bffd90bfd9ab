/**
 * matmul(a, b): [..., M, K] × [..., K, N] → [..., M, N]. The batch dims must match, or either
 * side may be a plain matrix shared by every batch entry (x @ W).
 */
import { Tensor, alloc, sizeOf, type Data, type Precision } from '../tensor.js';
import { record1, type BackwardFn, type Saved } from '../node.js';
import { gemm } from './gemm.js';
import { checkTensors, dataAs, promote, sameShape, shapeError, shapeStr } from './util.js';

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
