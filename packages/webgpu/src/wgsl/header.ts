/** The module-scope declarations every attention kernel starts with. */
import { PARAMS_WGSL } from './params.js';
import { dropoutFns } from './dropout.js';
import { scoreFns } from './scores.js';
import { type KernelSpec, encoding, isPipelined, isVec } from './spec.js';
import { storageFns } from './storage.js';
import { stageElems, stageType } from './workgroup.js';

/** Module-scope declarations shared by the attention kernels. */
export function header(s: KernelSpec, extraShared = ''): string {
  const t = s.tile;
  const stage = stageElems(s) * (isPipelined(s) ? 2 : 1);
  const st = stageType(s);
  return [
    s.f16 ? 'enable f16;' : '',
    s.subgroups ? 'enable subgroups;' : '',
    PARAMS_WGSL,
    '@group(0) @binding(0) var<uniform> P: Params;',
    '// cu_seqlens_q (batch+1), cu_seqlens_k (batch+1), then ALiBi slopes [batch·h] as f32 bits.',
    '@group(0) @binding(1) var<storage, read> mt: array<u32>;',
    '// Staged input chunks (in the input precision) and the NC × NR probability tile (f32).',
    isVec(s) ? `var<workgroup> sbuf: array<vec4<${st}>, ${stage / 4}>;` : `var<workgroup> sbuf: array<${st}, ${stage}>;`,
    isVec(s) ? `var<workgroup> sp: array<vec4<f32>, ${(t.nc * t.nr) / 4}>;` : `var<workgroup> sp: array<f32, ${t.nc * t.nr}>;`,
    s.subgroups ? '' : `var<workgroup> sred: array<f32, ${t.nr * t.tc}>;`,
    extraShared,
    storageFns(encoding(s), s.dynamic),
    scoreFns(s),
    dropoutFns(s),
  ].join('\n');
}
