/// <reference types="@webgpu/types" />
/** Dispatch plumbing: workgroup grids within the limits (bind groups: recycle.ts). */

/** Splits n workgroups over (x, y) so that x stays within the per-dimension limit. */
export function grid1d(n: number, max: number): [number, number] {
  if (n <= max) return [n, 1];
  const y = Math.ceil(n / max);
  return [Math.ceil(n / y), y];
}
