/**
 * The engine's copy bandwidth, measured in the same run as part 7's generation, as the yardstick
 * for its bytes per token: a decode step reads the cache once and does little arithmetic, so a
 * plain copy of the same bytes is the speed to compare with. Runs in Node and in browsers.
 *
 * - cpu (host tensors): TypedArray.prototype.set of the cache into a fresh array (memcpy) on the
 *   calling thread — the engine spreads a step over its worker threads, so it can exceed it;
 * - webgpu: copyBufferToBuffer of the cache's GPU buffer, counting bytes read + written;
 * - wasm (its device tensors): the engine's copyLoop(), a WebAssembly SIMD load/store loop over the
 *   cache's bytes on the engine's worker threads (the same threads the decode step runs on);
 * - other engines: not measured (null).
 */
import type { Tensor } from '@fa/core';
import type { CopyBandwidth } from './generate.js';

interface CopyLoopLike {
  copyLoop?(tensors: readonly Tensor[], method?: 'simd' | 'memcpy'): Promise<{ seconds: number; bytes: number }>;
  readonly threads?: number;
}

interface GpuLike {
  gpuDevice?: { createBuffer(d: { size: number; usage: number }): { destroy(): void }; createCommandEncoder(): { copyBufferToBuffer(a: unknown, ao: number, b: unknown, bo: number, n: number): void; finish(): unknown }; queue: { submit(c: unknown[]): void; onSubmittedWorkDone(): Promise<void> } };
}

export async function copyBandwidth(engine: unknown, cache: Tensor, bytes: number): Promise<CopyBandwidth | null> {
  if (cache.kind === 'host') {
    const src = cache.data;
    const dst = src instanceof Float32Array ? new Float32Array(src.length) : new Uint16Array(src.length);
    let best = Infinity;
    for (let r = 0; r < 5; r++) {
      const t0 = performance.now();
      dst.set(src as never);
      best = Math.min(best, (performance.now() - t0) / 1e3);
    }
    return { bytesPerSecond: src.byteLength / best, method: 'memcpy on 1 thread, bytes read' };
  }
  const loop = engine as CopyLoopLike;
  if (typeof loop.copyLoop === 'function' && cache.kind === 'device' && (cache.backend === 'wasm' || cache.backend === 'native')) {
    await loop.copyLoop([cache]); // warm-up: tiered-up code on every thread
    let best = Infinity;
    let bytes = 0;
    for (let r = 0; r < 5; r++) {
      const c = await loop.copyLoop([cache]);
      best = Math.min(best, c.seconds);
      bytes = c.bytes;
    }
    const threads = Math.max(1, loop.threads ?? 1);
    return { bytesPerSecond: bytes / best, method: `${cache.backend === 'native' ? 'native (x86-64)' : 'wasm SIMD'} copy loop, ${threads} thread${threads > 1 ? 's' : ''}` };
  }
  const dev = (engine as GpuLike).gpuDevice;
  const buf = (cache.handle as { buffer?: unknown } | null)?.buffer;
  if (!dev || !buf) return null;
  const size = Math.floor(bytes / 4) * 4;
  const dst = dev.createBuffer({ size, usage: 0x08 /* COPY_DST */ });
  try {
    const run = async (k: number) => {
      const enc = dev.createCommandEncoder();
      for (let i = 0; i < k; i++) enc.copyBufferToBuffer(buf, 0, dst, 0, size);
      dev.queue.submit([enc.finish()]);
      await dev.queue.onSubmittedWorkDone();
    };
    await run(1);
    let best = Infinity;
    for (let r = 0; r < 3; r++) {
      const t0 = performance.now();
      await run(5);
      best = Math.min(best, (performance.now() - t0) / 1e3 / 5);
    }
    return { bytesPerSecond: (2 * size) / best, method: 'GPU buffer copy, read + write' };
  } finally {
    dst.destroy();
  }
}
