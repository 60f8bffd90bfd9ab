/**
 * Workgroup memory: the staging buffer sbuf (inputs staged in their own precision, as scalars
 * or vec4 quads) and the byte budget of a kernel, which tile selection checks against the
 * adapter's maxComputeWorkgroupStorageSize.
 */
import { type KernelSpec, dims, isPipelined, isVec } from './spec.js';

/** Scalar type of the staging buffer sbuf: inputs are staged in their own precision. */
export function stageType(s: KernelSpec): 'f32' | 'f16' {
  return s.f16 ? 'f16' : 'f32';
}

/** Stores an f32 value (exactly representable in the stage type) into sbuf element idx. */
export function stageStore(s: KernelSpec, idx: string, val: string): string {
  const v = s.f16 ? `f16(${val})` : val;
  return isVec(s) ? `sbuf[(${idx}) >> 2u][(${idx}) & 3u] = ${v};` : `sbuf[${idx}] = ${v};`;
}

/** Reads sbuf element idx (linear layout) as f32. */
export function stageLoad(s: KernelSpec, idx: string): string {
  return s.f16 ? `f32(sbuf[${idx}])` : `sbuf[${idx}]`;
}

/** Reads sbuf quad idx (vec4 layouts) as vec4<f32>. */
export function stageLoad4(s: KernelSpec, idx: string): string {
  return s.f16 ? `vec4<f32>(sbuf[${idx}])` : `sbuf[${idx}]`;
}

/** Elements of one staging buffer (the larger of the rowdot and pmul chunks). */
export function stageElems(s: KernelSpec): number {
  const t = s.tile;
  const { DP2 } = dims(s);
  return Math.ceil(Math.max(t.dk * (t.nr + t.nc), t.kc * DP2) / 4) * 4;
}

/** Workgroup memory of a kernel in bytes (must fit maxComputeWorkgroupStorageSize). */
export function sharedBytes(s: KernelSpec, extraFloats = 0): number {
  const t = s.tile;
  const stage = stageElems(s) * (isPipelined(s) ? 2 : 1) * (s.f16 ? 2 : 4);
  const red = s.subgroups ? 0 : t.nr * t.tc;
  return stage + 4 * (t.nc * t.nr + red + extraFloats);
}
