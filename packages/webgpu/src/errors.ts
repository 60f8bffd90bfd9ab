/// <reference types="@webgpu/types" />
/**
 * How a call's failures become FAError: the validation and out-of-memory error scopes around
 * each call, device loss during it, and freeing what the call allocated.
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

  constructor(private readonly target: GuardedDevice) {}

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
