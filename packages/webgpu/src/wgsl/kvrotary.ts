/**
 * Rotary embedding inside the KV-cache call (DESIGN.md: rotaryCos/rotarySin [maxPos, rd/2],
 * GPT-NeoX halves or GPT-J pairs): q, or the new keys, into a rotated copy before the call reads
 * them — the new keys are written to the cache rotated. Row r of a [B, T, heads, D] tensor is
 * token t = (r / heads) % T of sequence b = r / (heads·T), at position base[b] (+ t when
 * `per_token`: the new keys always, q in causal or windowed calls); base[b] = len[b] − leftpad[b].
 *
 * Each element is rounded as core's rotateKVInputs rounds it — exact_rot (exact-rotation.ts):
 * float64 products and difference, then float32 — and 16-bit tensors are decoded exactly and
 * encoded with ties to even, NaN as core's encode writes it, so the cache holds the reference's
 * bits. One thread per element (f32) or per word of two (f16, bf16); dims past rd are copied
 * through the same decode and encode.
 */
import { EXACT_ROTATION_WGSL } from './exact-rotation.js';
import type { KVEncoding } from './kvcache.js';

export const KV_ROTARY = { params: 0, x: 1, y: 2, base: 3, tables: 4 } as const;
export const KV_ROTARY_PARAMS_BYTES = 32;

/** n (elements), D, heads, T, half (rd / 2), interleaved, per_token, where sin starts in `tables`. */
export function packRotaryParams(v: { n: number; d: number; heads: number; t: number; half: number; interleaved: boolean; perToken: boolean; sinAt: number }): Uint32Array<ArrayBuffer> {
  return new Uint32Array([v.n, v.d, v.heads, v.t, v.half, +v.interleaved, +v.perToken, v.sinAt]);
}

export function kvRotaryWGSL(enc: KVEncoding): string {
  const wide = enc === 'f32';
  const load = wide
    ? 'fn elem(e: u32) -> u32 { return x[e]; }'
    : enc === 'f16'
      ? 'fn elem(e: u32) -> u32 { return bitcast<u32>(unpack2x16float(x[e >> 1u])[e & 1u]); }'
      : 'fn elem(e: u32) -> u32 { return ((x[e >> 1u] >> (16u * (e & 1u))) & 0xffffu) << 16u; }';
  const store = wide
    ? ''
    : enc === 'f16'
      ? 'fn enc16(b: u32) -> u32 { return xr_f16(b); }'
      : `fn enc16(b: u32) -> u32 {
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u) { return 0x7fc0u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}`;
  const body = wide
    ? `  if (w >= U.n) { return; }
  y[w] = rotated(w);`
    : `  if (2u * w >= U.n) { return; }
  var hi = 0u;
  if (2u * w + 1u < U.n) { hi = enc16(rotated(2u * w + 1u)); }
  y[w] = enc16(rotated(2u * w)) | (hi << 16u);`;
  return /* wgsl */ `
struct RotP { n: u32, d: u32, heads: u32, t: u32, half: u32, interleaved: u32, per_token: u32, sin_at: u32 }
@group(0) @binding(0) var<uniform> U: RotP;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@group(0) @binding(3) var<storage, read> base: array<i32>;
@group(0) @binding(4) var<storage, read> tables: array<u32>;
${EXACT_ROTATION_WGSL}
${load}
${store}
// element e as float32 bits, rotated when its column is one of the first rd
fn rotated(e: u32) -> u32 {
  let row = e / U.d;
  let col = e % U.d;
  let v = elem(e);
  if (col >= 2u * U.half) { return v; }
  let tok = row / U.heads;
  let pos = u32(base[tok / U.t]) + select(0u, tok % U.t, U.per_token != 0u);
  var m: u32; var first: bool; var partner: u32;
  if (U.interleaved != 0u) { m = col / 2u; first = (col & 1u) == 0u; partner = select(e - 1u, e + 1u, first); }
  else { m = col % U.half; first = col < U.half; partner = select(e - U.half, e + U.half, first); }
  let cs = tables[pos * U.half + m];
  let sn = tables[U.sin_at + pos * U.half + m];
  let o = elem(partner);
  // x_a' = x_a·cos − x_b·sin;  x_b' = x_b·cos − (−x_a)·sin
  return select(exact_rot(v, cs, o ^ 0x80000000u, sn), exact_rot(v, cs, o, sn), first);
}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let w = (wid.y * nw.x + wid.x) * 64u + lid;
${body}
}`;
}
