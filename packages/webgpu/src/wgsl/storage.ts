/**
 * Access to tensor elements in storage buffers: binding declarations and load expressions for
 * f32, packed f16/bf16 (two per u32) and native f16, and the run-time-dtype loaders of the
 * generic kernels.
 */
import type { Encoding, KernelSpec } from './spec.js';

/**
 * WGSL storage declaration of a tensor binding. `quads`: an input of the swizzled products, read
 * four elements at a time (vec4<f32>, two packed words, or vec4<f16>).
 */
export function tensorDecl(binding: number, name: string, enc: Encoding, access: 'read' | 'read_write', asF32 = false, dynamic = false, quads = false): string {
  let elem: string;
  if (enc === 'f16-native') elem = quads ? 'vec4<f16>' : 'f16';
  else if (dynamic) elem = 'u32';
  else if (quads) elem = enc === 'f32' ? 'vec4<f32>' : 'vec2<u32>';
  else elem = enc === 'f32' || asF32 ? 'f32' : 'u32';
  return `@group(0) @binding(${binding}) var<storage, ${access}> ${name}: array<${elem}>;`;
}

/** Unpacking helpers for the storage type. */
export function storageFns(enc: Encoding, dynamic = false): string {
  if (enc === 'f16-native') return '';
  if (dynamic) return DYNAMIC_FNS;
  const storage = enc;
  if (storage === 'f32') return '';
  const un =
    storage === 'f16'
      ? 'fn unpack2(w: u32) -> vec2<f32> { return unpack2x16float(w); }'
      : 'fn unpack2(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }';
  const pk =
    storage === 'f16'
      ? 'fn pack2(v: vec2<f32>) -> u32 { return pack2x16float(v); }'
      : /* wgsl */ `fn bf16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u) { return 0x7fc0u; } // NaN stays NaN
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u; // round to nearest, ties to even
}
fn pack2(v: vec2<f32>) -> u32 { return bf16_bits(v.x) | (bf16_bits(v.y) << 16u); }`;
  const quad = 'fn unpack4(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2(w.x), unpack2(w.y)); }';
  return `${un}\n${pk}\n${quad}`;
}

const DYNAMIC_FNS = /* wgsl */ `
fn bf16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u) { return 0x7fc0u; } // NaN stays NaN
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u; // round to nearest, ties to even
}
// P.dtype: 0 f32 (one per u32), 1 f16, 2 bf16 (two per u32, element 2i in the low half).
fn unpack_any(w: u32) -> vec2<f32> {
  if (P.dtype == 1u) { return unpack2x16float(w); }
  return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}
fn pack_any(v: vec2<f32>) -> u32 {
  if (P.dtype == 1u) { return pack2x16float(v); }
  return bf16_bits(v.x) | (bf16_bits(v.y) << 16u);
}`;

/** A loader of element e of buffer `name` for the generic kernel. */
export function dynLoader(name: string, native = false): string {
  if (native) return `fn ld1_${name}(e: u32) -> f32 { return f32(${name}[e]); }`;
  return `fn ld1_${name}(e: u32) -> f32 {
  if (P.dtype == 0u) { return bitcast<f32>(${name}[e]); }
  return unpack_any(${name}[e >> 1u])[e & 1u];
}`;
}

/** Expression loading element pair (e, e+1) of `name` as vec2<f32>; e is even. */
export function ld2(name: string, enc: Encoding, e: string): string {
  if (enc === 'f16-native') return `vec2<f32>(f32(${name}[${e}]), f32(${name}[${e} + 1u]))`;
  return enc === 'f32' ? `vec2<f32>(${name}[${e}], ${name}[${e} + 1u])` : `unpack2(${name}[(${e}) >> 1u])`;
}

/** Expression loading element e of `name` as f32. */
export function ld1(name: string, enc: Encoding, e: string, dynamic = false): string {
  if (dynamic) return `ld1_${name}(${e})`;
  if (enc === 'f16-native') return `f32(${name}[${e}])`;
  return enc === 'f32' ? `${name}[${e}]` : `unpack2(${name}[(${e}) >> 1u])[(${e}) & 1u]`;
}

/** Loaders for the generic kernel's tensor bindings. */
export function dynLoaders(s: KernelSpec, names: string[]): string {
  return s.dynamic ? names.map((n) => dynLoader(n, s.f16)).join('\n') : '';
}
