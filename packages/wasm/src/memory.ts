/**
 * The engine's linear memory: one WebAssembly.Memory (shared when threads are used) and a bump
 * allocator over it that each call resets. Below `base` lie the module's own stack and the main
 * thread's stack; everything a call needs (inputs converted to float32, outputs, per-thread
 * scratch and stacks) is allocated above it and released as a whole when the call ends.
 *
 * The memory grows on demand and never shrinks (WebAssembly memories cannot): after a large
 * call it keeps its size for the next one. wasm32 addresses 4 GiB at most.
 */
import { FAError } from '@fa/core';

export const PAGE = 65536;
/** Bytes left readable after every allocation: micro-kernels load 8 columns where D may end sooner. */
export const SLACK = 64;
export const WASM32_MAX_BYTES = 2 ** 32;

const align = (n: number, a: number): number => Math.ceil(n / a) * a;

export class Arena {
  private top: number;
  /** The most bytes allocated above `base` since resetPeak(). */
  peak = 0;

  constructor(
    readonly memory: WebAssembly.Memory,
    readonly base: number,
    readonly maxBytes: number,
  ) {
    this.top = base;
  }

  /** Frees everything allocated since construction (the start of a call). */
  reset(): void {
    this.top = this.base;
  }

  resetPeak(): void {
    this.peak = 0;
  }

  get used(): number {
    return this.top - this.base;
  }

  get bytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** A 16-byte aligned block of `bytes` (plus SLACK readable bytes), growing the memory if needed. */
  alloc(bytes: number, what: string): number {
    const p = align(this.top, 16);
    const end = p + bytes + SLACK;
    if (end > this.maxBytes) {
      throw new FAError('E_TOO_LARGE', `wasm backend: ${what} does not fit: the call needs more than ${fmt(this.maxBytes)} of WebAssembly memory (wasm32 addresses 4 GiB at most)`);
    }
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      try {
        this.memory.grow(Math.ceil((end - have) / PAGE));
      } catch (e) {
        throw new FAError('E_OOM', `wasm backend: could not grow WebAssembly memory to ${fmt(end)} for ${what}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
    }
    this.top = end;
    if (end - this.base > this.peak) this.peak = end - this.base;
    return p;
  }

  f32(ptr: number, n: number): Float32Array {
    return new Float32Array(this.memory.buffer, ptr, n);
  }

  i32(ptr: number, n: number): Int32Array {
    return new Int32Array(this.memory.buffer, ptr, n);
  }

  u32(ptr: number, n: number): Uint32Array {
    return new Uint32Array(this.memory.buffer, ptr, n);
  }
}

export function fmt(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}
