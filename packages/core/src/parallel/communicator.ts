/**
 * The communicator contract of context parallelism: the only thing the ring algorithm asks of
 * the transport between ranks. Engines provide communicators (worker threads for the CPU
 * engine, one GPU for tests, NCCL for CUDA); the algorithm (ring.ts) never knows which.
 *
 * - `rank` in [0, size); the ring sends to (rank + 1) % size and receives from
 *   (rank − 1 + size) % size. size = 1 is a ring of one: a rank sends to itself.
 * - `exchange(send, recv)` is one step of the ring: it sends each tensor of `send` to the next
 *   rank and receives, into `recv`, the tensors the previous rank passes to its own matching
 *   call. The k-th call of every rank matches the k-th call of its neighbours (calls are
 *   matched by order, never by content), so every rank must make the same sequence of calls.
 *   recv[i] has the shape and dtype of the previous rank's send[i]; the sizes of send and recv
 *   may differ (uneven shards).
 * - It is asynchronous so that compute overlaps communication: the promise resolves when both
 *   directions are complete. Until then the caller must not write the `send` tensors nor read
 *   the `recv` tensors, and must keep all of them alive; reading `send` meanwhile (computing
 *   with the K/V being sent) is allowed. Several exchanges may be in flight; they complete in
 *   the order they were made.
 * - Tensors are those of the engine the ring runs on (host tensors for the CPU engine, device
 *   tensors of the same backend for GPU engines).
 * - A failure rejects with an FAError (E_DEVICE for a lost peer, E_SHAPE for sizes that do not
 *   match the peer's). A rank that fails would leave its peers waiting on their matching calls,
 *   so the ring calls `abort(reason)` on failure: the communicator then fails its pending and
 *   later exchanges and makes its peers' fail too (message rings pass the abort on, NCCL aborts
 *   the communicator, whose peers then fail or time out). An aborted communicator stays failed.
 *   A launcher ends the other processes when one exits with an error.
 */
import type { Tensor } from '../tensor.js';

export interface Communicator {
  readonly rank: number;
  readonly size: number;
  exchange(send: readonly Tensor[], recv: readonly Tensor[]): Promise<void>;
  /** Fails this rank's pending and later exchanges, and its peers'. */
  abort?(reason: unknown): void;
}

/** The ranks a rank sends to and receives from. */
export function ringNeighbours(rank: number, size: number): { next: number; prev: number } {
  return { next: (rank + 1) % size, prev: (rank - 1 + size) % size };
}

/** The rank whose K/V shard `rank` holds at ring step `step` (step 0: its own). */
export function ringSource(rank: number, size: number, step: number): number {
  return (((rank - step) % size) + size) % size;
}
