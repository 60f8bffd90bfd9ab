/// <reference types="@webgpu/types" />
/**
 * Creating GPU buffers, and moving data in and out of them: uploads of host tensors, readback,
 * and the small per-call buffers (cu_seqlens + ALiBi metadata, the Params block).
 */
import { type AttentionProblem, type DType, type HostTensor, FAError, bytesPerElement, numel } from '@fa/core';
import { errorText } from './errors.js';
import { BufferUsage, MapModeRead } from './gpu.js';
import type { Scope } from './memory.js';
import type { DeviceConstants } from './constants.js';
import { PARAMS_BYTES, packParams } from './wgsl/params.js';
import type { Tile } from './wgsl/spec.js';

export const align4 = (n: number) => Math.max(4, Math.ceil(n / 4) * 4);
/**
 * Smallest buffer: the swizzled kernels bind their inputs as arrays of vec4 (16 bytes), and a
 * binding must hold one element even when the tensor is empty (a varlen batch with no keys).
 */
const MIN_BUFFER_BYTES = 16;

/** A buffer of at least `bytes` (4-aligned), owned by `scope`; E_TOO_LARGE / E_OOM when it cannot be had. */
export function createBuffer(dev: GPUDevice, scope: Scope, bytes: number, usage: number, label: string): GPUBuffer {
  const size = Math.max(MIN_BUFFER_BYTES, align4(bytes));
  const l = dev.limits;
  if (size > l.maxBufferSize) throw new FAError('E_TOO_LARGE', `${label} needs a ${size}-byte buffer; this adapter's maxBufferSize is ${l.maxBufferSize}`);
  const reused = scope.reuse(size, usage);
  if (reused) return scope.add(reused, size, usage);
  let b: GPUBuffer;
  try {
    b = dev.createBuffer({ size, usage, label });
  } catch (e) {
    throw new FAError('E_OOM', `could not allocate ${size} bytes for ${label}: ${errorText(e)}`, { cause: e });
  }
  return scope.add(b, size, usage);
}

/**
 * The bytes of a view in memory queue.writeBuffer accepts: Dawn's Node binding refuses
 * SharedArrayBuffer (what core's allocHost/zeros return), so shared bytes are copied first.
 */
export function writableBytes(v: ArrayBufferView): { buffer: ArrayBuffer; offset: number; size: number } {
  if (typeof SharedArrayBuffer !== 'undefined' && v.buffer instanceof SharedArrayBuffer) {
    const c = new Uint8Array(v.byteLength);
    c.set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    return { buffer: c.buffer, offset: 0, size: v.byteLength };
  }
  return { buffer: v.buffer as ArrayBuffer, offset: v.byteOffset, size: v.byteLength };
}

/** A storage buffer holding a copy of the host tensor's data (zero-padded to 4 bytes). */
export function uploadInto(dev: GPUDevice, scope: Scope, t: HostTensor, label: string): GPUBuffer {
  const bytes = t.data.byteLength;
  const buf = createBuffer(dev, scope, bytes, BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST, label);
  if (bytes > 0) {
    if (bytes % 4 === 0) {
      const w = writableBytes(t.data);
      dev.queue.writeBuffer(buf, 0, w.buffer, w.offset, w.size);
    } else {
      const pad = new Uint8Array(align4(bytes));
      pad.set(new Uint8Array(t.data.buffer, t.data.byteOffset, bytes));
      dev.queue.writeBuffer(buf, 0, pad.buffer, 0, pad.byteLength);
    }
  }
  return buf;
}

/**
 * Copies a buffer back to a host tensor. `lostInfo` is read if the mapping fails, to say
 * whether the device was lost meanwhile.
 */
export async function readBuffer(dev: GPUDevice, scope: Scope, buf: GPUBuffer, dtype: DType, shape: readonly number[], lostInfo: () => string | undefined, offset = 0): Promise<HostTensor> {
  const n = numel(shape);
  const bytes = n * bytesPerElement(dtype);
  const data = dtype === 'f32' ? new Float32Array(n) : new Uint16Array(n);
  if (bytes > 0) {
    const staging = createBuffer(dev, scope, bytes, BufferUsage.MAP_READ | BufferUsage.COPY_DST, 'readback');
    const enc = dev.createCommandEncoder();
    enc.copyBufferToBuffer(buf, offset, staging, 0, align4(bytes));
    dev.queue.submit([enc.finish()]);
    try {
      await staging.mapAsync(MapModeRead);
    } catch (e) {
      const lost = lostInfo();
      throw new FAError('E_DEVICE', `reading back from the GPU failed: ${lost ? `device lost (${lost})` : errorText(e)}`, { cause: e });
    }
    const src = new Uint8Array(staging.getMappedRange(0, align4(bytes)), 0, bytes);
    new Uint8Array(data.buffer).set(src);
    staging.unmap();
  }
  return { kind: 'host', dtype, shape: [...shape], data };
}

/** Where the sinks start in `mt` (after the ALiBi slopes), or 0 without sinks. */
function sinksOffset(p: AttentionProblem): number {
  return p.sinks ? 2 * (p.batch + 1) + (p.alibi ? p.alibi.length : 0) : 0;
}

/** The `mt` binding: cu_seqlens_q, cu_seqlens_k, then the ALiBi slopes and the sinks as f32 bits. */
export function metaBuffer(dev: GPUDevice, scope: Scope, p: AttentionProblem, consts: DeviceConstants): GPUBuffer {
  const n = 2 * (p.batch + 1) + (p.alibi ? p.alibi.length : 0) + (p.sinks ? p.h : 0);
  const u = new Uint32Array(n);
  u.set(p.cuSeqlensQ, 0);
  u.set(p.cuSeqlensK, p.batch + 1);
  if (p.alibi) new Float32Array(u.buffer, 4 * 2 * (p.batch + 1)).set(p.alibi);
  if (p.sinks) new Float32Array(u.buffer, 4 * sinksOffset(p)).set(p.sinks);
  return consts.constant(dev, scope, new Uint8Array(u.buffer), BufferUsage.STORAGE, 'meta');
}

/** The Params uniform of a dispatch of a kernel with this tile; `diOff`: where Di starts in `ld`. */
export function paramsBuffer(dev: GPUDevice, scope: Scope, p: AttentionProblem, tile: Tile, outF32: boolean, consts: DeviceConstants, diOff = 0): GPUBuffer {
  const lse = p.varlen ? { lseSh: p.totalQ, lseSb: 0, lseScu: 1 } : { lseSh: p.tq, lseSb: p.h * p.tq, lseScu: 0 };
  const data = packParams({
    h: p.h, hkv: p.hkv, batch: p.batch, totalQ: p.totalQ, totalK: p.totalK, ...lse,
    scale: p.scale, softcap: p.softcap, wl: p.windowLeft, wr: p.windowRight, diOff,
    d: p.d, dtype: p.dtype, outF32, alibi: p.alibi !== undefined, sinksOff: sinksOffset(p), dropout: p.dropout,
    dp1: Math.ceil(p.d / tile.dk) * tile.dk, dp2: Math.ceil(p.d / (2 * tile.tc)) * 2 * tile.tc,
  });
  return consts.constant(dev, scope, new Uint8Array(data), BufferUsage.UNIFORM, 'params');
}
