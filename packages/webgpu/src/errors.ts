/// <reference types="@webgpu/types" />
/**
 * How a call's failures become FAError: the validation and out-of-memory error scopes around
 * each call, device loss during it, and freeing what the call allocated.
 *
 * A call on device tensors (nothing read back, nothing written to the host after it) is
 * stream-ordered (DESIGN.md): it pops its error scopes without waiting for their answer and
 * returns its output handles at once, so back-to-back calls do not wait on a device round trip
 * each. An error the device reports for it is kept, naming the call, and thrown by the next
 * read() or sync() (`settle`); the backend recovers after that.
 */
import { FAError, isFAError } from '@fa/core';
import type { Scope } from './memory.js';

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** What a CallGuard reads from its backend, at the moment it needs it (the device can change). */
export interface GuardedDevice {
  device(): GPUDevice;
  /** The adapter's name, for messages. */
  adapterName(): string;
  /** Why the device was lost, or undefined while it is not. */
  lostInfo(): string | undefined;
}

/** Runs a backend's calls one at a time, each inside its own error scopes. */
export class CallGuard {
  private lock: Promise<void> = Promise.resolve();
  /** Answers of stream-ordered calls' error scopes not yet awaited. */
  private inFlight: Promise<void>[] = [];
  /** The first device error of a stream-ordered call, until settle() throws it. */
  private deferred: FAError | undefined;

  constructor(private readonly target: GuardedDevice) {}

  /**
   * Waits for every stream-ordered call's error scopes, then throws the first error one of them
   * reported (once; the next settle() is clean). read() and sync() call it.
   */
  async settle(): Promise<void> {
    while (this.inFlight.length > 0) {
      const all = this.inFlight;
      this.inFlight = [];
      await Promise.all(all);
    }
    const e = this.deferred;
    this.deferred = undefined;
    if (e) throw e;
  }

  /**
   * A stream-ordered call: `body` encodes and submits; its scopes are popped without waiting and
   * a device error is kept for settle(). Argument errors (thrown by body) still throw here, and
   * the call's buffers are freed. On success the temporaries are released at once (WebGPU keeps
   * a buffer alive for work already submitted) and `keep()` stays the caller's.
   */
  async runDeferred<T>(what: string, scope: Scope, body: () => Promise<T>, keep: () => ReadonlySet<GPUBuffer>): Promise<T> {
    const prev = this.lock;
    let release!: () => void;
    this.lock = new Promise<void>((r) => (release = r));
    await prev;
    const dev = this.target.device();
    try {
      dev.pushErrorScope('validation');
      dev.pushErrorScope('out-of-memory');
      let result: T;
      try {
        result = await body();
      } catch (e) {
        const oom = dev.popErrorScope().catch(() => null);
        const val = dev.popErrorScope().catch(() => null);
        await Promise.all([oom, val]);
        scope.release();
        if (isFAError(e)) throw e;
        throw new FAError('E_DEVICE', `webgpu: ${errorText(e)}`, { cause: e });
      }
      this.popDeferred(what, dev);
      scope.release(keep());
      return result;
    } finally {
      release();
    }
  }

  /** Runs `fn` when every call issued before has run (the calls' lock), before any issued after. */
  async exclusive<T>(fn: () => T | Promise<T>): Promise<T> {
    const prev = this.lock;
    let release!: () => void;
    this.lock = new Promise<void>((r) => (release = r));
    await prev;
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /**
   * Submits `cmd` inside error scopes popped without waiting; a device error is kept for
   * settle(), as a stream-ordered call's is (`what` names the submission).
   */
  submitWatched(what: string, dev: GPUDevice, cmd: GPUCommandBuffer): void {
    dev.pushErrorScope('validation');
    dev.pushErrorScope('out-of-memory');
    dev.queue.submit([cmd]);
    this.popDeferred(what, dev);
  }

  /** Pops the two scopes without waiting; their answer, if an error, is kept for settle() naming `what`. */
  private popDeferred(what: string, dev: GPUDevice): void {
    const oom = dev.popErrorScope().catch(() => null);
    const val = dev.popErrorScope().catch(() => null);
    const adapter = this.target.adapterName();
    this.inFlight.push(
      Promise.all([oom, val]).then(([o, v]) => {
        if (this.deferred || (!o && !v)) return;
        this.deferred = o
          ? new FAError('E_OOM', `webgpu: ${what} ran out of GPU memory on ${adapter} (reported at sync): ${o.message}`)
          : new FAError('E_DEVICE', `webgpu: ${what} failed on the device (reported at sync): ${v!.message}`);
      }),
    );
  }

  /**
   * Runs `body` inside validation and out-of-memory error scopes. On failure, frees what the
   * call allocated and throws an FAError (E_OOM, E_DEVICE). On success runs `commit` (what the
   * call writes outside the GPU, such as a host cache's new rows, so a failed call writes
   * nothing), before the next call starts, and frees the temporaries unless `keepAll`.
   */
  async run<T>(scope: Scope, body: () => Promise<T>, keepAll: boolean, keep?: () => ReadonlySet<GPUBuffer>, commit?: () => void): Promise<T> {
    // Error scopes are a per-device stack: calls run one at a time so that each call pops its
    // own scopes (the GPU queue is serial anyway).
    const prev = this.lock;
    let release!: () => void;
    this.lock = new Promise<void>((r) => (release = r));
    await prev;
    try {
      return await this.guarded(scope, body, keepAll, keep, commit);
    } finally {
      release();
    }
  }

  private async guarded<T>(scope: Scope, body: () => Promise<T>, keepAll: boolean, keep?: () => ReadonlySet<GPUBuffer>, commit?: () => void): Promise<T> {
    const dev = this.target.device();
    dev.pushErrorScope('validation');
    dev.pushErrorScope('out-of-memory');
    let result: T;
    let thrown: unknown;
    try {
      result = await body();
    } catch (e) {
      thrown = e;
    }
    const oom = await dev.popErrorScope().catch(() => null);
    const val = await dev.popErrorScope().catch(() => null);
    if (thrown === undefined && (oom || val)) {
      thrown = oom
        ? new FAError('E_OOM', `webgpu: out of GPU memory on ${this.target.adapterName()}: ${oom.message}`)
        : new FAError('E_DEVICE', `webgpu: the device reported an error: ${val!.message}`);
    }
    if (thrown === undefined && this.target.lostInfo() !== undefined) thrown = new FAError('E_DEVICE', `webgpu: the device was lost during the call (${this.target.lostInfo()}); the next call re-acquires one`);
    if (thrown === undefined && commit) {
      try {
        commit();
      } catch (e) {
        thrown = e;
      }
    }
    if (thrown !== undefined) {
      scope.release();
      if (isFAError(thrown)) throw thrown;
      if (this.target.lostInfo() !== undefined) throw new FAError('E_DEVICE', `webgpu: the device was lost (${this.target.lostInfo()}): ${errorText(thrown)}`, { cause: thrown });
      throw new FAError('E_DEVICE', `webgpu: ${errorText(thrown)}`, { cause: thrown });
    }
    if (!keepAll) scope.release(keep ? keep() : undefined);
    return result!;
  }
}
