/**
 * A communicator over message ports (Node worker threads, or browser workers): rank r posts a
 * copy of its host tensors to r+1 and copies what r−1 posted into its receive tensors. The
 * copy on the sending side makes the send complete at once, so `send` may be changed as soon
 * as the exchange resolves, as the contract requires.
 */
import { check, FAError } from '../errors.js';
import { isHostTensor, type HostData, type Tensor } from '../tensor.js';
import type { Communicator } from './communicator.js';

/** The part of a MessagePort this needs (Node's and the browser's both fit). */
export interface PortLike {
  postMessage(message: unknown, transfer?: readonly ArrayBuffer[]): void;
  on?(event: 'message', listener: (value: unknown) => void): unknown;
  addEventListener?(event: 'message', listener: (e: { data: unknown }) => void): unknown;
}

interface Packet {
  readonly seq: number;
  readonly parts: readonly { readonly dtype: string; readonly data: HostData }[];
  /** Set instead of parts when the previous rank aborted the ring. */
  readonly abort?: string;
}

function listen(port: PortLike, fn: (m: Packet) => void): void {
  if (typeof port.on === 'function') port.on('message', (m) => fn(m as Packet));
  else if (typeof port.addEventListener === 'function') port.addEventListener('message', (e) => fn(e.data as Packet));
  else throw new FAError('E_ARG', 'a port must have on("message") or addEventListener("message")');
}

export class PortCommunicator implements Communicator {
  private seq = 0;
  private readonly inbox = new Map<number, Packet>();
  private readonly waiting = new Map<number, { resolve: (p: Packet) => void; reject: (e: unknown) => void }>();
  private failure?: FAError;

  constructor(
    readonly rank: number,
    readonly size: number,
    private readonly toNext: PortLike,
    fromPrev: PortLike,
  ) {
    check(Number.isSafeInteger(size) && size >= 1 && Number.isSafeInteger(rank) && rank >= 0 && rank < size, 'E_ARG', `rank ${rank} of ${size} is not a valid ring position`);
    listen(fromPrev, (m) => {
      if (m.abort !== undefined) {
        this.abort(new FAError('E_DEVICE', `ring rank ${(rank - 1 + size) % size} failed: ${m.abort}`));
        return;
      }
      const w = this.waiting.get(m.seq);
      if (w) {
        this.waiting.delete(m.seq);
        w.resolve(m);
      } else this.inbox.set(m.seq, m);
    });
  }

  abort(reason: unknown): void {
    if (this.failure) return;
    const msg = reason instanceof Error ? reason.message : String(reason);
    this.failure = reason instanceof FAError ? reason : new FAError('E_DEVICE', `the ring was aborted: ${msg}`);
    for (const w of this.waiting.values()) w.reject(this.failure);
    this.waiting.clear();
    if (this.size > 1) this.toNext.postMessage({ seq: -1, parts: [], abort: msg } satisfies Packet);
  }

  async exchange(send: readonly Tensor[], recv: readonly Tensor[]): Promise<void> {
    const k = this.seq++;
    if (this.failure) throw this.failure;
    const parts = send.map((t, i) => {
      if (!isHostTensor(t)) throw new FAError('E_ARG', `send[${i}] is a device tensor; a port communicator moves host tensors`);
      return { dtype: t.dtype, data: t.data.slice() as HostData };
    });
    this.toNext.postMessage({ seq: k, parts } satisfies Packet, parts.map((p) => p.data.buffer as ArrayBuffer));
    const got = this.inbox.get(k) ?? (await new Promise<Packet>((resolve, reject) => this.waiting.set(k, { resolve, reject })));
    this.inbox.delete(k);
    check(got.parts.length === recv.length, 'E_SHAPE', `ring exchange ${k}: rank ${(this.rank - 1 + this.size) % this.size} sent ${got.parts.length} tensors, rank ${this.rank} expects ${recv.length}`);
    recv.forEach((t, i) => {
      if (!isHostTensor(t)) throw new FAError('E_ARG', `recv[${i}] is a device tensor; a port communicator moves host tensors`);
      const part = got.parts[i];
      check(part.dtype === t.dtype && part.data.length === t.data.length, 'E_SHAPE', `ring exchange ${k}: received ${part.dtype} × ${part.data.length} for a ${t.dtype} tensor of ${t.data.length} elements`);
      t.data.set(part.data);
    });
  }
}
