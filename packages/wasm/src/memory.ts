/**
 * The engine's linear memory: one WebAssembly.Memory (shared when threads are used), laid out as
 *
 *   [ module data and stacks | heap: device tensors (upload, outputs of device calls) | arena ]
 *   0                        floor                                              heap.top
 *
 * The heap holds what outlives a call (a KV cache uploaded once and appended to by every decode
 * step, say): first fit between live blocks, freed by disposeTensor. The arena is a bump
 * allocator that each call starts at the heap's top and releases as a whole when it ends:
 * inputs converted to float32, outputs, per-thread scratch and stacks. Calls and heap changes
 * are serialised by the engine, so the two never meet.
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

/** Grows `memory` so that [0, end) is addressable, or throws E_TOO_LARGE / E_OOM naming `what`. */
function ensure(memory: WebAssembly.Memory, end: number, maxBytes: number, what: string, scope: string): void {
  if (end > maxBytes) {
    throw new FAError('E_TOO_LARGE', `wasm backend: ${what} does not fit: ${scope} needs more than ${fmt(maxBytes)} of WebAssembly memory (wasm32 addresses 4 GiB at most)`);
  }
  const have = memory.buffer.byteLength;
  if (end <= have) return;
  try {
    memory.grow(Math.ceil((end - have) / PAGE));
  } catch (e) {
    throw new FAError('E_OOM', `wasm backend: could not grow WebAssembly memory to ${fmt(end)} for ${what}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}

/** Blocks that outlive a call: device tensors. */
export class Heap {
  /** Live blocks, sorted by address: [ptr, end) each. */
  private readonly blocks: { ptr: number; end: number }[] = [];

  constructor(
    readonly memory: WebAssembly.Memory,
    readonly floor: number,
    readonly maxBytes: number,
  ) {}

  /** The end of the highest live block (the arena starts here). */
  get top(): number {
    return this.blocks.length ? this.blocks[this.blocks.length - 1].end : this.floor;
  }

  /** Bytes held by live blocks. */
  get bytes(): number {
    let n = 0;
    for (const b of this.blocks) n += b.end - b.ptr;
    return n;
  }

  /** A 16-byte aligned block of `bytes` (plus SLACK readable bytes): the first gap it fits, else the top. */
  alloc(bytes: number, what: string): number {
    const size = align(bytes + SLACK, 16);
    let at = this.floor;
    let i = 0;
    for (; i < this.blocks.length; i++) {
      if (this.blocks[i].ptr - at >= size) break;
      at = this.blocks[i].end;
    }
    ensure(this.memory, at + size, this.maxBytes, what, 'the tensors the engine holds');
    this.blocks.splice(i, 0, { ptr: at, end: at + size });
    return at;
  }

  free(ptr: number): void {
    const i = this.blocks.findIndex((b) => b.ptr === ptr);
    if (i >= 0) this.blocks.splice(i, 1);
  }
}

/** A call's bump allocator, from the heap's top. */
export class Arena {
  private start: number;
  private top: number;
  /** The most bytes allocated above the call's start since resetPeak(). */
  peak = 0;

  constructor(
    readonly memory: WebAssembly.Memory,
    private readonly heap: Heap,
    readonly maxBytes: number,
  ) {
    this.start = this.top = align(heap.top, 16);
  }

  /** Where this call's allocations start: the heap's top when the call began. */
  get base(): number {
    return this.start;
  }

  /** Frees everything the call allocated and starts the next call at the heap's current top. */
  reset(): void {
    this.start = this.top = align(this.heap.top, 16);
  }

  resetPeak(): void {
    this.peak = 0;
  }

  get used(): number {
    return this.top - this.start;
  }

  get bytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** A 16-byte aligned block of `bytes` (plus SLACK readable bytes), growing the memory if needed. */
  alloc(bytes: number, what: string): number {
    const p = align(this.top, 16);
    const end = p + bytes + SLACK;
    ensure(this.memory, end, this.maxBytes, what, 'the call');
    this.top = end;
    if (end - this.start > this.peak) this.peak = end - this.start;
    return p;
  }

  /**
   * A region of `bytes` above everything allocated (the call's blocks and the heap's), growing the
   * memory if needed, for synchronous work that allocates nothing else while it uses it: the model
   * ops' matrix product (gemm.ts), which may run between the steps of a call that waits on its
   * workers. Valid until the next alloc; not counted in `peak`.
   */
  scratch(bytes: number, what: string): number {
    const p = align(Math.max(this.top, this.heap.top), 16);
    ensure(this.memory, p + bytes + SLACK, this.maxBytes, what, 'the matrix product');
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
