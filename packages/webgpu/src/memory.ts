/// <reference types="@webgpu/types" />
/** Bookkeeping of the engine's GPU buffers: the memory ledger and per-call allocation scopes. */

/** Bytes of GPU memory the backend holds now, and the most it held since the last reset. */
export interface MemoryStats {
  readonly current: number;
  readonly peak: number;
  /** Bytes of the cached per-shape constants (constants.ts), not part of current or peak. */
  readonly constants?: number;
}

/** Tracks the backend's buffers (for memoryStats) and destroys them. */
export class Ledger {
  private readonly sizes = new Map<GPUBuffer, number>();
  current = 0;
  peak = 0;
  add(b: GPUBuffer, size: number): void {
    this.sizes.set(b, size);
    this.current += size;
    if (this.current > this.peak) this.peak = this.current;
  }
  destroy(b: GPUBuffer): void {
    const n = this.sizes.get(b);
    if (n !== undefined) {
      this.current -= n;
      this.sizes.delete(b);
    }
    b.destroy();
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
  add(b: GPUBuffer, size: number): GPUBuffer {
    this.buffers.push(b);
    this.ledger.add(b, size);
    return b;
  }
  release(keep: ReadonlySet<GPUBuffer> = new Set()): void {
    for (const b of this.buffers) if (!keep.has(b)) this.ledger.destroy(b);
    this.buffers.length = 0;
  }
}
