import { check } from './errors.js';
import type { DType } from './dtype.js';

/** Float32Array for f32; raw 16-bit patterns for f16 and bf16. */
export type HostData = Float32Array | Uint16Array;

/** A tensor whose data lives in JavaScript memory. Layout is always row-major. */
export interface HostTensor {
  readonly kind: 'host';
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly data: HostData;
}

/**
 * A tensor owned by a backend (GPU memory, say). Only the backend that made it can read it.
 * `handle` is the backend's own object; user code treats it as opaque.
 */
export interface DeviceTensor {
  readonly kind: 'device';
  readonly backend: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly handle: unknown;
  /** True after the owning backend disposed it. */
  readonly disposed: boolean;
}

export type Tensor = HostTensor | DeviceTensor;

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const s of shape) n *= s;
  return n;
}

export function isHostTensor(t: unknown): t is HostTensor {
  return typeof t === 'object' && t !== null && (t as HostTensor).kind === 'host';
}

export function isDeviceTensor(t: unknown): t is DeviceTensor {
  return typeof t === 'object' && t !== null && (t as DeviceTensor).kind === 'device';
}

function checkShape(shape: readonly number[], what: string): void {
  check(Array.isArray(shape), 'E_SHAPE', () => `${what}: shape must be an array of non-negative integers`);
  for (const s of shape) {
    check(Number.isSafeInteger(s) && s >= 0, 'E_SHAPE', () => `${what}: shape [${shape.join(', ')}] has an extent that is not a non-negative integer`);
  }
}

/** The array type each dtype's host data must have. */
export function dataTypeFor(dtype: DType): 'Float32Array' | 'Uint16Array' {
  return dtype === 'f32' ? 'Float32Array' : 'Uint16Array';
}

/** Checks that `data` has the array type and length `dtype` and `shape` ask for. */
export function checkHostData(data: unknown, shape: readonly number[], dtype: DType, what: string): void {
  checkShape(shape, what);
  const want = dataTypeFor(dtype);
  const ok = want === 'Float32Array' ? data instanceof Float32Array : data instanceof Uint16Array;
  check(ok, 'E_DTYPE', () => `${what}: dtype ${dtype} needs data in a ${want}, got ${describeValue(data)}`);
  const n = numel(shape);
  check((data as HostData).length === n, 'E_SHAPE', () => `${what}: shape [${shape.join(', ')}] needs ${n} elements, the data has ${(data as HostData).length}`);
}

export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v !== 'object') return typeof v;
  const name = (v as object).constructor?.name ?? 'object';
  return ArrayBuffer.isView(v) ? `${name}(${(v as { length?: number }).length ?? (v as DataView).byteLength})` : name;
}

/** Makes a host tensor, checking that the data fits the shape and dtype. */
export function tensor(data: HostData, shape: readonly number[], dtype: DType = data instanceof Float32Array ? 'f32' : 'bf16'): HostTensor {
  checkHostData(data, shape, dtype, 'tensor');
  return { kind: 'host', dtype, shape: [...shape], data };
}

/**
 * Allocates host memory that worker threads can share without copying when the runtime has
 * SharedArrayBuffer (Node; browsers with cross-origin isolation), plain memory otherwise.
 */
export function allocFloat32(n: number): Float32Array {
  return typeof SharedArrayBuffer !== 'undefined' ? new Float32Array(new SharedArrayBuffer(n * 4)) : new Float32Array(n);
}

export function allocUint16(n: number): Uint16Array {
  return typeof SharedArrayBuffer !== 'undefined' ? new Uint16Array(new SharedArrayBuffer(n * 2)) : new Uint16Array(n);
}

export function allocHost(dtype: DType, n: number): HostData {
  return dtype === 'f32' ? allocFloat32(n) : allocUint16(n);
}

export function zeros(shape: readonly number[], dtype: DType = 'f32'): HostTensor {
  checkShape(shape, 'zeros');
  return { kind: 'host', dtype, shape: [...shape], data: allocHost(dtype, numel(shape)) };
}
