/// <reference types="@webgpu/types" />
/**
 * What a steady loop of calls would otherwise create every call (bench/per-call.mjs measured
 * createBindGroup at ~50 µs and createBuffer at ~12–15 µs each through Dawn's Node binding):
 *
 * - buffers: a buffer the engine frees (a call's temporaries, a disposed tensor's) goes to a
 *   free list by usage and size instead of being destroyed, and the next request of that usage
 *   and size takes it. The queue runs calls in order and WebGPU orders their passes, so a later
 *   call's writes never race an earlier call's reads of the same buffer. Only buffers up to
 *   16 MiB, at most 64 MiB held free (the oldest destroyed first), never mappable ones;
 * - bind groups by pipeline and bound buffers (ranges included), at most 1024: a decode loop
 *   binds the same recycled buffers step after step. A buffer really destroyed drops the groups
 *   that bind it;
 * - each pipeline's bind group layout (getBindGroupLayout made a new object every call).
 *
 * Free buffers are counted apart from memoryStats().current (as `pooled`). One device: the
 * backend clears it when it re-acquires a lost device.
 */
const MAX_POOLED_BUFFER = 16 << 20;
const MAX_POOLED_BYTES = 64 << 20;
const MAX_GROUPS = 1024;
const MAPPABLE = 0x0001 | 0x0002;

export class Recycler {
  private readonly free = new Map<string, GPUBuffer[]>();
  /** Free buffers, oldest first (for eviction). */
  private readonly order: { b: GPUBuffer; key: string; size: number }[] = [];
  /** Bytes held free. */
  pooled = 0;
  private readonly ids = new WeakMap<object, number>();
  private nextId = 1;
  private readonly groups = new Map<string, GPUBindGroup>();
  private readonly byBuffer = new Map<number, Set<string>>();
  private readonly layouts = new WeakMap<GPUComputePipeline, GPUBindGroupLayout>();

  private id(o: object): number {
    let i = this.ids.get(o);
    if (i === undefined) this.ids.set(o, (i = this.nextId++));
    return i;
  }

  /** A free buffer of exactly this size and usage, or undefined. */
  take(size: number, usage: number): GPUBuffer | undefined {
    const list = this.free.get(`${usage}:${size}`);
    const b = list?.pop();
    if (!b) return undefined;
    const i = this.order.findIndex((e) => e.b === b);
    if (i >= 0) this.order.splice(i, 1);
    this.pooled -= size;
    return b;
  }

  /** Keeps `b` for reuse, or destroys it (too large, mappable, or the pool is full). */
  release(b: GPUBuffer, size: number, usage: number): void {
    if (size > MAX_POOLED_BUFFER || usage & MAPPABLE) return this.destroy(b);
    const key = `${usage}:${size}`;
    let list = this.free.get(key);
    if (!list) this.free.set(key, (list = []));
    list.push(b);
    this.order.push({ b, key, size });
    this.pooled += size;
    while (this.pooled > MAX_POOLED_BYTES && this.order.length > 0) {
      const old = this.order.shift()!;
      const l = this.free.get(old.key)!;
      l.splice(l.indexOf(old.b), 1);
      this.pooled -= old.size;
      this.destroy(old.b);
    }
  }

  /** Destroys `b` and forgets the bind groups that bind it. */
  destroy(b: GPUBuffer): void {
    this.forget(b);
    b.destroy();
  }

  /** Forgets the bind groups that bind `b` (it is destroyed, or no longer the engine's). */
  forget(b: GPUBuffer): void {
    const id = this.ids.get(b);
    if (id !== undefined) {
      for (const k of this.byBuffer.get(id) ?? []) this.groups.delete(k);
      this.byBuffer.delete(id);
    }
  }

  /** A bind group of `pipe` binding buffers[i] at binding i (undefined entries left out), cached. */
  bind(dev: GPUDevice, pipe: GPUComputePipeline, buffers: (GPUBuffer | GPUBufferBinding | undefined)[]): GPUBindGroup {
    let key = `${this.id(pipe)}`;
    const bound: number[] = [];
    for (let i = 0; i < buffers.length; i++) {
      const b = buffers[i];
      if (!b) continue;
      if (isRange(b)) {
        const id = this.id(b.buffer);
        bound.push(id);
        key += `|${i}:${id}:${b.offset ?? 0}:${b.size ?? -1}`;
      } else {
        const id = this.id(b);
        bound.push(id);
        key += `|${i}:${id}`;
      }
    }
    const hit = this.groups.get(key);
    if (hit) return hit;
    let layout = this.layouts.get(pipe);
    if (!layout) this.layouts.set(pipe, (layout = pipe.getBindGroupLayout(0)));
    const entries: GPUBindGroupEntry[] = [];
    buffers.forEach((b, i) => {
      if (b) entries.push({ binding: i, resource: isRange(b) ? b : { buffer: b } });
    });
    const g = dev.createBindGroup({ layout, entries });
    this.groups.set(key, g);
    for (const id of bound) {
      let s = this.byBuffer.get(id);
      if (!s) this.byBuffer.set(id, (s = new Set()));
      s.add(key);
    }
    if (this.groups.size > MAX_GROUPS) {
      const oldest = this.groups.keys().next().value as string;
      this.groups.delete(oldest);
    }
    return g;
  }

  /** Forgets everything (a lost device's buffers are gone with it); destroys the free ones when asked. */
  clear(destroy: boolean): void {
    if (destroy) for (const e of this.order) e.b.destroy();
    this.free.clear();
    this.order.length = 0;
    this.pooled = 0;
    this.groups.clear();
    this.byBuffer.clear();
  }
}

function isRange(b: GPUBuffer | GPUBufferBinding): b is GPUBufferBinding {
  return typeof (b as GPUBufferBinding).buffer === 'object';
}
