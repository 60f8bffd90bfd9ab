/// <reference types="@webgpu/types" />
/** Bookkeeping of the engine's GPU buffers: the memory ledger and per-call allocation scopes. */
import type { Recycler } from './recycle.js';

/** Bytes of GPU memory the backend holds now, and the most it held since the last reset. */
export interface MemoryStats {
  readonly current: number;
  readonly peak: number;
  /** Bytes of the cached per-shape constants (constants.ts), not part of current or peak. */
  readonly constants?: number;
  /** Bytes of freed buffers kept for reuse (recycle.ts), not part of current or peak. */
  readonly pooled?: number;
}

/**
 * Tracks the backend's buffers (for memoryStats) and frees them: to the recycler when there is
 * one (recycle.ts: kept for reuse), destroyed otherwise.
 */
export class Ledger {
  private readonly sizes = new Map<GPUBuffer, { size: number; usage: number }>();
  current = 0;
  peak = 0;
  recycler: Recycler | undefined;
  add(b: GPUBuffer, size: number, usage = 0): void {
    this.sizes.set(b, { size, usage });
    this.current += size;
    if (this.current > this.peak) this.peak = this.current;
  }
  /**
   * While a recording into a caller's encoder is open (backend.recordInto), buffers freed are
   * kept here instead: commands already encoded but not yet submitted may use them, so they must
   * neither be destroyed nor handed to a later call. `releaseHeld` frees them once submitted.
   */
  held: GPUBuffer[] | undefined;
  releaseHeld(): void {
    const h = this.held ?? [];
    this.held = undefined;
    for (const b of h) this.destroy(b);
  }
  destroy(b: GPUBuffer): void {
    if (this.held) {
      this.held.push(b);
      return;
    }
    const n = this.sizes.get(b);
    if (n !== undefined) {
      this.current -= n.size;
      this.sizes.delete(b);
    }
    if (this.recycler && n !== undefined && n.usage !== 0) this.recycler.release(b, n.size, n.usage);
    else if (this.recycler) this.recycler.destroy(b);
    else b.destroy();
  }
  /** Stops tracking `b` without freeing it (a buffer handed to the caller). */
  forget(b: GPUBuffer): void {
    const n = this.sizes.get(b);
    if (n === undefined) return;
    this.current -= n.size;
    this.sizes.delete(b);
    this.recycler?.forget(b);
  }
  clear(): void {
    this.sizes.clear();
    this.current = 0;
  }
}

/** A call's allocations, freed together when the call fails (or when they were temporary). */
export class Scope {
  readonly buffers: GPUBuffer[] = [];
  constructor(private readonly ledger: Ledger) {}
  add(b: GPUBuffer, size: number, usage = 0): GPUBuffer {
    this.buffers.push(b);
    this.ledger.add(b, size, usage);
    return b;
  }
  /** A freed buffer of this size and usage to reuse, if the ledger's recycler has one. */
  reuse(size: number, usage: number): GPUBuffer | undefined {
    return this.ledger.recycler?.take(size, usage);
  }
  release(keep: ReadonlySet<GPUBuffer> = new Set()): void {
    for (const b of this.buffers) if (!keep.has(b)) this.ledger.destroy(b);
    this.buffers.length = 0;
  }
}
