/**
 * A ring of N ranks inside one thread: N communicators whose exchanges copy tensors with the
 * engine's own ShardOps.copy. The ranks run as concurrent async tasks on one engine (one CPU,
 * one GPU), so the whole algorithm — every step, merge and accumulator — can be checked
 * against single-engine attention on one device. Not a transport between devices: real
 * multi-process rings use NCCL (@fa/cuda) or worker threads (inprocess.ts).
 */
import { check, FAError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { Communicator } from './communicator.js';
import type { ShardOps } from './ops.js';

interface Letter {
  readonly tensors: readonly Tensor[];
  /** Called by the receiver once it has copied (or failed to). */
  readonly ack: (err?: unknown) => void;
}

/** A communicator of a local ring; abort() fails every pending and later exchange of the ring. */
export interface LocalCommunicator extends Communicator {
  abort(reason: unknown): void;
}

/** N communicators (rank 0 … N−1) of one in-thread ring. */
export function createLocalRing(size: number, ops: ShardOps): LocalCommunicator[] {
  check(Number.isSafeInteger(size) && size >= 1, 'E_ARG', `a ring needs at least one rank, got ${String(size)}`);
  // box[r] holds, by sequence number, what rank r−1 sent to r
  const box = Array.from({ length: size }, () => new Map<number, Letter>());
  const waiting = Array.from({ length: size }, () => new Map<number, { resolve: (l: Letter) => void; reject: (e: unknown) => void }>());
  const pendingAcks = new Set<(e?: unknown) => void>();
  let failure: unknown;
  const abort = (reason: unknown) => {
    if (failure !== undefined) return;
    failure = reason instanceof Error ? reason : new FAError('E_DEVICE', `the local ring was aborted: ${String(reason)}`);
    for (const w of waiting) {
      for (const { reject } of w.values()) reject(failure);
      w.clear();
    }
    for (const ack of pendingAcks) ack(failure);
    pendingAcks.clear();
  };
  const deliver = (to: number, seq: number, letter: Letter) => {
    const w = waiting[to].get(seq);
    if (w) {
      waiting[to].delete(seq);
      w.resolve(letter);
    } else box[to].set(seq, letter);
  };
  const take = (rank: number, seq: number): Promise<Letter> => {
    const l = box[rank].get(seq);
    if (l) {
      box[rank].delete(seq);
      return Promise.resolve(l);
    }
    if (failure !== undefined) return Promise.reject(failure);
    return new Promise((resolve, reject) => waiting[rank].set(seq, { resolve, reject }));
  };
  return Array.from({ length: size }, (_, rank) => {
    let seq = 0;
    return {
      rank,
      size,
      abort,
      exchange(send: readonly Tensor[], recv: readonly Tensor[]): Promise<void> {
        const k = seq++;
        if (failure !== undefined) return Promise.reject(failure);
        const sent = new Promise<void>((resolve, reject) => {
          const ack = (e?: unknown) => {
            pendingAcks.delete(ack);
            if (e === undefined) resolve();
            else reject(e);
          };
          pendingAcks.add(ack);
          deliver((rank + 1) % size, k, { tensors: send, ack });
        });
        const received = take(rank, k).then(async (letter) => {
          try {
            if (letter.tensors.length !== recv.length) throw new FAError('E_SHAPE', `ring exchange ${k}: rank ${(rank - 1 + size) % size} sent ${letter.tensors.length} tensors, rank ${rank} expects ${recv.length}`);
            for (let i = 0; i < recv.length; i++) await ops.copy(recv[i], letter.tensors[i]);
            letter.ack();
          } catch (e) {
            letter.ack(e);
            throw e;
          }
        });
        return Promise.all([sent, received]).then(() => undefined);
      },
    };
  });
}
