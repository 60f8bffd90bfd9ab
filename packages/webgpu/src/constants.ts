/// <reference types="@webgpu/types" />
/**
 * Buffers a call only reads and that repeat from call to call: the Params uniforms and the
 * cu_seqlens metadata of a shape (what a decode loop or a training step sends again and again).
 * Creating and filling them was a fifth of a small call's host time (bench/per-call.mjs); here
 * they are cached by content (up to 4 KiB each; usage and bytes are the key), at most 64, the
 * least recently used evicted: a call reuses the buffer an earlier call filled with the same
 * bytes. They are counted apart from the call and tensor buffers (memoryStats().constants), so
 * memoryStats().current still returns to its level after a call.
 *
 * A destroyed buffer stays alive for work already submitted (WebGPU's rule), so eviction is safe
 * while calls are in flight. The cache belongs to one device: it forgets its buffers when the
 * device changes (a lost device re-acquired).
 */
import { createBuffer } from './buffers.js';
import { BufferUsage } from './gpu.js';
import { Ledger, Scope } from './memory.js';

const MAX_CONSTANTS = 64;
const MAX_CONSTANT_BYTES = 4096;

export class DeviceConstants {
  private dev: GPUDevice | undefined;
  private readonly constants = new Map<string, GPUBuffer>();
  /** The cache's own buffers (not the backend's ledger: see above). */
  readonly ledger = new Ledger();

  private on(dev: GPUDevice): void {
    if (this.dev === dev) return;
    this.clear();
    this.dev = dev;
  }

  /**
   * A buffer holding `data` with `usage` (COPY_DST is added), from the cache or filled now (via
   * the queue: ordered before the work submitted next). `scope` owns it instead when the data is
   * too large to cache.
   */
  constant(dev: GPUDevice, scope: Scope, data: Uint8Array, usage: number, label: string): GPUBuffer {
    this.on(dev);
    if (data.byteLength > MAX_CONSTANT_BYTES) {
      const b = createBuffer(dev, scope, data.byteLength, usage | BufferUsage.COPY_DST, label);
      dev.queue.writeBuffer(b, 0, data.buffer, data.byteOffset, data.byteLength);
      return b;
    }
    const key = `${usage}:${data.byteLength}:${keyOf(data)}`;
    const hit = this.constants.get(key);
    if (hit) {
      // most recently used last
      this.constants.delete(key);
      this.constants.set(key, hit);
      return hit;
    }
    const own = new Scope(this.ledger);
    const b = createBuffer(dev, own, data.byteLength, usage | BufferUsage.COPY_DST, label);
    dev.queue.writeBuffer(b, 0, data.buffer, data.byteOffset, data.byteLength);
    this.constants.set(key, b);
    if (this.constants.size > MAX_CONSTANTS) {
      const [oldest, ob] = this.constants.entries().next().value as [string, GPUBuffer];
      this.constants.delete(oldest);
      this.ledger.destroy(ob);
    }
    return b;
  }

  clear(): void {
    for (const b of this.constants.values()) this.ledger.destroy(b);
    this.constants.clear();
    this.dev = undefined;
  }
}

/** The bytes as a string key: two bytes a UTF-16 code unit (an odd last byte on its own). */
function keyOf(d: Uint8Array): string {
  const even = d.byteLength & ~1;
  const u16 = (d.byteOffset & 1) === 0 ? new Uint16Array(d.buffer, d.byteOffset, even / 2) : new Uint16Array(d.slice(0, even).buffer);
  const s = String.fromCharCode.apply(null, u16 as unknown as number[]);
  return even === d.byteLength ? s : s + String.fromCharCode(d[even]);
}
