/// <reference types="@webgpu/types" />
/**
 * Whether an adapter can run a problem: a tile fits every kernel, each tensor fits one storage
 * binding and one buffer, and the workgroup grid fits the per-dimension limit.
 */
import { type AttentionProblem, type Support, FAError, bytesPerElement } from '@fa/core';
import type { Choice, KernelKind } from './tiles.js';

/**
 * `l`: the device's limits; `specFor` picks the kernel's specialisation for this problem (or says why none fits);
 * `outF32`: whether the outputs are staged as f32 and packed afterwards.
 */
export function supportOf(p: AttentionProblem, l: GPUSupportedLimits, specFor: (kind: KernelKind) => Choice | { reason: string }, outF32: boolean): Support {
  for (const kind of ['fwd', 'dkdv', 'dq'] as const) {
    const c = specFor(kind);
    if ('reason' in c) return { ok: false, reason: c.reason };
  }
  const bpe = bytesPerElement(p.dtype);
  const checks: [string, number][] = [
    ['q', p.totalQ * p.h * p.d * bpe],
    ['k', p.totalK * p.hkv * p.d * bpe],
    ['lse and delta', 8 * p.totalQ * p.h],
  ];
  if (outF32) checks.push(['the f32 staging of out', p.totalQ * p.h * p.d * 4]);
  for (const [what, bytes] of checks) {
    if (bytes > l.maxStorageBufferBindingSize) {
      return { ok: false, reason: `${what} needs ${bytes} bytes in one storage binding; this adapter's maxStorageBufferBindingSize is ${l.maxStorageBufferBindingSize}` };
    }
    if (bytes > l.maxBufferSize) return { ok: false, reason: `${what} needs a ${bytes}-byte buffer; this adapter's maxBufferSize is ${l.maxBufferSize}` };
  }
  const cfg = specFor('fwd') as Choice;
  const dims: [string, number][] = [
    ['query tiles', Math.ceil(p.tq / cfg.spec.tile.nr)],
    ['key tiles', Math.ceil(p.tk / cfg.spec.tile.nr)],
    ['heads', p.h],
    ['batch', p.batch],
  ];
  for (const [what, n] of dims) {
    if (n > l.maxComputeWorkgroupsPerDimension) return { ok: false, reason: `${what} (${n}) exceed this adapter's maxComputeWorkgroupsPerDimension (${l.maxComputeWorkgroupsPerDimension})` };
  }
  return { ok: true };
}

/** The FAError for an unsupported problem: E_TOO_LARGE for a size limit, else E_UNSUPPORTED. */
export function unsupportedError(s: { reason: string }): FAError {
  return new FAError(s.reason.includes('maxStorageBufferBindingSize') || s.reason.includes('maxBufferSize') || s.reason.includes('maxComputeWorkgroupsPerDimension') ? 'E_TOO_LARGE' : 'E_UNSUPPORTED', `webgpu: ${s.reason}`);
}
