/**
 * Memory probes for GPU engines, from what the engine exposes (duck-typed, no engine imports):
 * - CUDA: the backend's memInfo() ({ free, total } from cudaMemGetInfo): device memory in use,
 *   sampled every few milliseconds while a pass runs;
 * - WebGPU: the backend's gpuDevice; every GPUBuffer created through it is counted until it is
 *   destroyed (the engine allocates all its memory as buffers), so the peak is exact.
 */
import type { AttentionBackend } from '@fa/core';
import type { MemoryProbe } from './run.js';

interface BufferLike {
  destroy(): void;
}
interface DeviceLike {
  createBuffer(desc: { size: number }): BufferLike;
}

interface Tracker {
  live: number;
  peak: number;
}

const trackers = new WeakMap<object, Tracker>();

/** Counts live bytes of the GPUBuffers created through `device` (patched once). */
export function trackBuffers(device: DeviceLike): Tracker {
  let t = trackers.get(device);
  if (t) return t;
  const tr: Tracker = { live: 0, peak: 0 };
  t = tr;
  const create = device.createBuffer.bind(device);
  device.createBuffer = (desc: { size: number }) => {
    const buf = create(desc);
    const size = Number(desc.size) || 0;
    tr.live += size;
    if (tr.live > tr.peak) tr.peak = tr.live;
    const destroy = buf.destroy.bind(buf);
    let gone = false;
    buf.destroy = () => {
      if (!gone) {
        gone = true;
        tr.live -= size;
      }
      destroy();
    };
    return buf;
  };
  trackers.set(device, tr);
  return tr;
}

/** A memory probe for a GPU engine, or undefined when the engine exposes nothing to measure. */
export function gpuMemoryProbe(backend: AttentionBackend): MemoryProbe | undefined {
  const b = backend as unknown as { memInfo?: () => { free: number; total: number }; gpuDevice?: DeviceLike };
  if (typeof b.memInfo === 'function') {
    const used = () => {
      const m = b.memInfo!.call(backend);
      return m.total - m.free;
    };
    let base = 0;
    let peak = 0;
    let id: ReturnType<typeof setInterval> | undefined;
    const probe: MemoryProbe = {
      method: 'device memory in use (cudaMemGetInfo), sampled',
      begin() {
        base = used();
        peak = base;
        id = setInterval(() => probe.sample(), 2);
      },
      sample() {
        try {
          peak = Math.max(peak, used());
        } catch {
          /* sampling is best effort */
        }
      },
      end() {
        if (id !== undefined) clearInterval(id);
        probe.sample();
        return Math.max(0, peak - base);
      },
    };
    return probe;
  }
  let device: DeviceLike | undefined;
  try {
    device = b.gpuDevice;
  } catch {
    device = undefined;
  }
  if (device && typeof device.createBuffer === 'function') {
    let tr: Tracker;
    try {
      tr = trackBuffers(device);
    } catch {
      return undefined;
    }
    let base = 0;
    return {
      method: 'GPU buffers allocated by the engine (counted)',
      begin() {
        base = tr.live;
        tr.peak = tr.live;
      },
      sample() {
        /* exact: every allocation updates the peak */
      },
      end() {
        return Math.max(0, tr.peak - base);
      },
    };
  }
  return undefined;
}
