/// <reference types="@webgpu/types" />
/**
 * Other programs' GPU memory without a copy (issue 24, DESIGN.md "The one interface"): a
 * caller's GPUBuffer, at an offset, becomes a webgpu tensor of a dtype and shape that every call
 * takes as an input (and a KV-cache call writes in place); an engine tensor's buffer is handed
 * out the other way, borrowed or transferred. The caller keeps ownership of what it wrapped:
 * disposing the tensor forgets the buffer, never destroys it.
 *
 * What a wrong buffer would otherwise do at the GPU (a validation error at the next sync, or
 * silently reading past the tensor) is refused here, before anything is enqueued: too small for
 * the shape, an offset off the adapter's storage alignment, usage without STORAGE | COPY_SRC (the
 * flags tfjs-backend-webgpu also asks of a buffer it is given), mapped, or on another device.
 */
import { type DType, FAError, bytesPerElement, numel } from '@fa/core';
import { BufferUsage } from './gpu.js';
import { align4 } from './buffers.js';

/** Where a wrapped tensor's bytes are: a whole buffer from 0, or a range of a caller's buffer. */
export type Bound = GPUBuffer | GPUBufferBinding;

export interface WrapOptions {
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Byte offset of the tensor in the buffer (default 0): a multiple of the adapter's minStorageBufferOffsetAlignment. */
  readonly offset?: number;
}

/** A buffer handed out by exportBuffer: the tensor's bytes are buffer[offset, offset + bytes). */
export interface ExportedBuffer {
  readonly buffer: GPUBuffer;
  readonly offset: number;
  readonly bytes: number;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** True when the caller now owns (and must destroy) the buffer. */
  readonly transferred: boolean;
}

export const REQUIRED_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC;

const usageNames = (u: number): string =>
  Object.entries(BufferUsage)
    .filter(([, bit]) => (u & bit) !== 0)
    .map(([n]) => n)
    .join(' | ') || 'none';

/** The tensor's byte count, and the checks of a caller's buffer that need no device round trip. */
export function checkWrap(buffer: unknown, o: WrapOptions, limits: GPUSupportedLimits, dtypes: readonly DType[]): { bytes: number; offset: number } {
  const b = buffer as Partial<GPUBuffer> | null;
  if (typeof b !== 'object' || b === null || typeof b.size !== 'number' || typeof b.usage !== 'number' || typeof b.destroy !== 'function') {
    throw new FAError('E_ARG', 'wrapBuffer: the first argument must be a GPUBuffer');
  }
  if (typeof o !== 'object' || o === null) throw new FAError('E_ARG', 'wrapBuffer: options { dtype, shape, offset? } are required');
  if (!dtypes.includes(o.dtype)) throw new FAError('E_DTYPE', `wrapBuffer: dtype must be one of ${dtypes.join(', ')}, got ${String(o.dtype)}`);
  if (!Array.isArray(o.shape) || !o.shape.every((s) => Number.isSafeInteger(s) && s >= 0)) {
    throw new FAError('E_SHAPE', `wrapBuffer: shape must be an array of non-negative integers, got ${JSON.stringify(o.shape)}`);
  }
  const offset = o.offset ?? 0;
  const align = limits.minStorageBufferOffsetAlignment;
  if (!Number.isSafeInteger(offset) || offset < 0 || offset % align !== 0) {
    throw new FAError('E_ARG', `wrapBuffer: offset ${String(offset)} must be a non-negative multiple of this adapter's minStorageBufferOffsetAlignment (${align})`);
  }
  const bytes = numel(o.shape) * bytesPerElement(o.dtype);
  // copies (read(), a backward's LSE) move whole 4-byte words
  if (offset + align4(bytes) > b.size) {
    throw new FAError('E_SHAPE', `wrapBuffer: a ${o.dtype} tensor of shape [${o.shape.join(', ')}] at offset ${offset} needs ${offset + align4(bytes)} bytes; the buffer has ${b.size}`);
  }
  if ((b.usage & REQUIRED_USAGE) !== REQUIRED_USAGE) {
    throw new FAError('E_ARG', `wrapBuffer: the buffer's usage is ${usageNames(b.usage)}; a tensor's buffer needs STORAGE | COPY_SRC (create it with those flags)`);
  }
  if (b.mapState !== undefined && b.mapState !== 'unmapped') throw new FAError('E_ARG', `wrapBuffer: the buffer is ${b.mapState}; unmap it first`);
  return { bytes, offset };
}

const layouts = new WeakMap<GPUDevice, GPUBindGroupLayout>();

/**
 * Whether `device` can bind `buffer` (WebGPU gives a buffer no link to its device: a bind group
 * made inside an error scope is the check). Resolves to the validation message, or null.
 */
export async function bindError(device: GPUDevice, buffer: GPUBuffer, offset: number): Promise<string | null> {
  let layout = layouts.get(device);
  if (!layout) {
    layout = device.createBindGroupLayout({ entries: [{ binding: 0, visibility: 4 /* COMPUTE */, buffer: { type: 'read-only-storage' } }] });
    layouts.set(device, layout);
  }
  device.pushErrorScope('validation');
  try {
    device.createBindGroup({ layout, entries: [{ binding: 0, resource: { buffer, offset } }] });
  } catch (e) {
    await device.popErrorScope().catch(() => null);
    return e instanceof Error ? e.message : String(e);
  }
  const err = await device.popErrorScope().catch(() => null);
  return err ? err.message : null;
}

/** The buffer and byte offset of a bound range. */
export function bufferOf(b: Bound): GPUBuffer {
  return (b as GPUBufferBinding).buffer !== undefined && typeof (b as GPUBufferBinding).buffer === 'object' ? (b as GPUBufferBinding).buffer : (b as GPUBuffer);
}

export function offsetOf(b: Bound): number {
  return (b as GPUBufferBinding).buffer !== undefined && typeof (b as GPUBufferBinding).buffer === 'object' ? ((b as GPUBufferBinding).offset ?? 0) : 0;
}

/**
 * An open recording into a caller's GPUCommandEncoder (backend.recordInto): the engine's calls
 * encode their passes into `encoder` instead of submitting their own. The caller finishes and
 * submits the encoder, then calls `submitted()`: only then does the engine free (or reuse) the
 * buffers those calls used, and take calls of its own again.
 */
export class Recording {
  #open = true;
  constructor(
    readonly encoder: GPUCommandEncoder,
    private readonly onSubmitted: () => void,
    /** The engine's own batch (options.batchCalls), not a caller's encoder. */
    readonly internal = false,
  ) {}
  /** True until submitted(). */
  get open(): boolean {
    return this.#open;
  }
  /** Call once the encoder was submitted (or dropped): the recording ends. */
  submitted(): void {
    if (!this.#open) return;
    this.#open = false;
    this.onSubmitted();
  }
}
