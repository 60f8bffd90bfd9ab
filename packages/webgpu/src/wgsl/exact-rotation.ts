import { MULHI32_WGSL } from './dropout.js';

/**
 * The rotation of a rotary pair exactly as the float64 reference rounds it, in 32-bit WGSL
 * integers: x′ = RN32(RN64(a·b − c·d)) for float32 a, b, c, d (core's rotateKVInputs computes
 * the products and their difference in doubles, then stores to float32).
 *
 * Why not f32 arithmetic: a GPU compiler may fuse a·b − c·d into a multiply-add (WGSL leaves
 * contraction to the implementation), and even unfused, RN32(RN32(a·b) − RN32(c·d)) is not the
 * reference's rounding. The new keys a KV-cache call rotates are written into the cache, which
 * the kit compares bit for bit with the reference's append, so the rotation must round the same
 * on every GPU. Integers have no such freedom:
 *
 *   1. each product exactly: 24-bit significands → a 48-bit integer (hi, lo) and an exponent,
 *      normalised so that its top bit is bit 47;
 *   2. their difference exactly in a 128-bit integer (exponents up to 55 apart; farther, the
 *      smaller is below a quarter of the larger's float64 ulp and the difference rounds to it);
 *   3. rounded to 53 bits (ties to even), then to float32's 24 bits or its subnormal step
 *      (ties to even: the reference's double rounding), with overflow to ±∞.
 *
 * Non-finite inputs give the reference's ±∞ or NaN (xr_nonfinite: by classes, since a float32
 * product could overflow where the float64 one does not).
 */
export const EXACT_ROTATION_WGSL = /* wgsl */ `${MULHI32_WGSL}
// significand and exponent of finite float32 bits: |x| = m · 2^e
fn xr_sig(b: u32) -> u32 {
  let f = b & 0x7fffffu;
  if ((b & 0x7f800000u) == 0u) { return f; }
  return f | 0x800000u;
}
fn xr_exp(b: u32) -> i32 {
  let e = i32((b >> 23u) & 0xffu);
  return select(e - 150, -149, e == 0);
}
// x (128 bits, w.x lowest) shifted left by k < 128
fn xr_shl(x: vec4<u32>, k: u32) -> vec4<u32> {
  var y = x;
  var s = k;
  if (s >= 64u) { y = vec4<u32>(0u, 0u, y.x, y.y); s = s - 64u; }
  if (s >= 32u) { y = vec4<u32>(0u, y.x, y.y, y.z); s = s - 32u; }
  if (s > 0u) {
    let r = 32u - s;
    y = vec4<u32>(y.x << s, (y.y << s) | (y.x >> r), (y.z << s) | (y.y >> r), (y.w << s) | (y.z >> r));
  }
  return y;
}
fn xr_msb(x: vec4<u32>) -> i32 {
  if (x.w != 0u) { return 96 + i32(firstLeadingBit(x.w)); }
  if (x.z != 0u) { return 64 + i32(firstLeadingBit(x.z)); }
  if (x.y != 0u) { return 32 + i32(firstLeadingBit(x.y)); }
  if (x.x != 0u) { return i32(firstLeadingBit(x.x)); }
  return -1;
}
fn xr_less(a: vec4<u32>, b: vec4<u32>) -> bool {
  if (a.w != b.w) { return a.w < b.w; }
  if (a.z != b.z) { return a.z < b.z; }
  if (a.y != b.y) { return a.y < b.y; }
  return a.x < b.x;
}
fn xr_add(a: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
  let x = a.x + b.x; let c0 = select(0u, 1u, x < a.x);
  let y1 = a.y + b.y; let y = y1 + c0; let c1 = select(0u, 1u, y1 < a.y || y < y1);
  let z1 = a.z + b.z; let z = z1 + c1; let c2 = select(0u, 1u, z1 < a.z || z < z1);
  return vec4<u32>(x, y, z, a.w + b.w + c2);
}
// a − b for a ≥ b
fn xr_sub(a: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
  let x = a.x - b.x; let c0 = select(0u, 1u, a.x < b.x);
  let y1 = a.y - b.y; let y = y1 - c0; let c1 = select(0u, 1u, a.y < b.y || y1 < c0);
  let z1 = a.z - b.z; let z = z1 - c1; let c2 = select(0u, 1u, a.z < b.z || z1 < c1);
  return vec4<u32>(x, y, z, a.w - b.w - c2);
}
// bit i of x (i < 128)
fn xr_bit(x: vec4<u32>, i: u32) -> u32 {
  return (x[i >> 5u] >> (i & 31u)) & 1u;
}
// whether any of bits 0 .. i − 1 of x is set (i ≤ 128)
fn xr_any_below(x: vec4<u32>, i: u32) -> bool {
  for (var w = 0u; w < 4u; w = w + 1u) {
    let lo = w * 32u;
    if (i <= lo) { break; }
    let n = min(32u, i - lo);
    let mask = select((1u << n) - 1u, 0xffffffffu, n == 32u);
    if ((x[w] & mask) != 0u) { return true; }
  }
  return false;
}
// x >> k (k < 128), the result's low 64 bits
fn xr_shr64(x: vec4<u32>, k: u32) -> vec2<u32> {
  var y = x;
  var s = k;
  if (s >= 64u) { y = vec4<u32>(y.z, y.w, 0u, 0u); s = s - 64u; }
  if (s >= 32u) { y = vec4<u32>(y.y, y.z, y.w, 0u); s = s - 32u; }
  if (s > 0u) {
    let r = 32u - s;
    y = vec4<u32>((y.x >> s) | (y.y << r), (y.y >> s) | (y.z << r), 0u, 0u);
  }
  return y.xy;
}
// RN of x / 2^k to an integer (ties to even), x < 2^128, k ≤ 127: the low 64 bits
fn xr_round_shr(x: vec4<u32>, k: u32) -> vec2<u32> {
  if (k == 0u) { return x.xy; }
  var q = xr_shr64(x, k);
  let guard = xr_bit(x, k - 1u);
  if (guard == 1u && (xr_any_below(x, k - 1u) || (q.x & 1u) == 1u)) {
    q.x = q.x + 1u;
    if (q.x == 0u) { q.y = q.y + 1u; }
  }
  return q;
}
// a·b − c·d when an input is ±∞ or NaN: ±∞ or NaN (0x7fc00000, JavaScript's NaN in a
// Float32Array), as in doubles — where a finite product cannot overflow, unlike in float32
fn xr_nonfinite(a: u32, b: u32, c: u32, d: u32) -> u32 {
  // each product: 0 finite, 1 infinite, 2 NaN
  let mag = vec4<u32>(a, b, c, d) & vec4<u32>(0x7fffffffu);
  let inf = mag == vec4<u32>(0x7f800000u);
  let nan = mag > vec4<u32>(0x7f800000u);
  let zero = mag == vec4<u32>(0u);
  let n1 = nan.x || nan.y || ((inf.x || inf.y) && (zero.x || zero.y));
  let n2 = nan.z || nan.w || ((inf.z || inf.w) && (zero.z || zero.w));
  let i1 = inf.x || inf.y;
  let i2 = inf.z || inf.w;
  let s1 = ((a ^ b) >> 31u) != 0u;
  let s2 = ((c ^ d) >> 31u) == 0u; // (− c·d)
  if (n1 || n2 || (i1 && i2 && s1 != s2)) { return 0x7fc00000u; }
  if (i1) { return select(0x7f800000u, 0xff800000u, s1); }
  return select(0x7f800000u, 0xff800000u, s2);
}
// RN32(RN64(a·b − c·d)) as float32 bits, for float32 bits a, b, c, d
fn exact_rot(a: u32, b: u32, c: u32, d: u32) -> u32 {
  let big = vec4<u32>(a, b, c, d) & vec4<u32>(0x7f800000u);
  let nonfinite = any(big == vec4<u32>(0x7f800000u));
  if (nonfinite) { return xr_nonfinite(a, b, c, d); }
  // the two terms: sign, 48-bit significand (normalised to bit 47), exponent
  var s1 = ((a ^ b) >> 31u) != 0u;
  var s2 = ((c ^ d) >> 31u) == 0u; // (− c·d)
  let ma = xr_sig(a); let mb = xr_sig(b); let mc = xr_sig(c); let md = xr_sig(d);
  var m1 = vec4<u32>(ma * mb, mulhi32(ma, mb), 0u, 0u);
  var m2 = vec4<u32>(mc * md, mulhi32(mc, md), 0u, 0u);
  var e1 = xr_exp(a) + xr_exp(b);
  var e2 = xr_exp(c) + xr_exp(d);
  let z1 = m1.x == 0u && m1.y == 0u;
  let z2 = m2.x == 0u && m2.y == 0u;
  if (z1 && z2) { return select(0u, 0x80000000u, s1 && s2); }
  if (!z1) { let k = 47 - xr_msb(m1); m1 = xr_shl(m1, u32(k)); e1 = e1 - k; }
  if (!z2) { let k = 47 - xr_msb(m2); m2 = xr_shl(m2, u32(k)); e2 = e2 - k; }
  // R · 2^e, exactly (or the larger term alone, when the other is far below its float64 ulp)
  var r: vec4<u32>;
  var e: i32;
  var neg: bool;
  if (z2 || (!z1 && e1 - e2 >= 56)) { r = m1; e = e1; neg = s1; }
  else if (z1 || e2 - e1 >= 56) { r = m2; e = e2; neg = s2; }
  else {
    e = min(e1, e2);
    let x1 = xr_shl(m1, u32(e1 - e));
    let x2 = xr_shl(m2, u32(e2 - e));
    if (s1 == s2) { r = xr_add(x1, x2); neg = s1; }
    else if (xr_less(x1, x2)) { r = xr_sub(x2, x1); neg = s2; }
    else { r = xr_sub(x1, x2); neg = s1; }
    if (r.x == 0u && r.y == 0u && r.z == 0u && r.w == 0u) { return 0u; } // x − x = +0
  }
  let sign = select(0u, 0x80000000u, neg);
  // to float64: 53 bits, ties to even
  let p = xr_msb(r);
  var q: vec2<u32>;
  var e64 = e;
  if (p > 52) {
    let k = u32(p - 52);
    q = xr_round_shr(r, k);
    e64 = e + i32(k);
    if (q.y == 0x200000u) { q = vec2<u32>(0u, 0x100000u); e64 = e64 + 1; } // (2^53: carried into bit 53)
  } else {
    q = r.xy;
  }
  // to float32: 24 bits, or float32's subnormal step 2^-149; ties to even
  let p53 = xr_msb(vec4<u32>(q, 0u, 0u));
  let s = max(p53 - 23, -149 - e64);
  var n: u32;
  if (s >= 55) { n = 0u; } // below a quarter of the subnormal step: ±0
  else if (s > 0) { n = xr_round_shr(vec4<u32>(q, 0u, 0u), u32(s)).x; }
  else { n = q.x << u32(-s); }
  // (n's bit 23 is the implicit one: adding n to the exponent field carries a rounding overflow)
  let field = e64 + s + 149;
  if (field + i32(n >> 23u) >= 255) { return sign | 0x7f800000u; }
  return sign | ((u32(field) << 23u) + n);
}
// float32 bits → f16 bits, ties to even (core's toF16Bits: NaN → 0x7e00)
fn xr_f16(b: u32) -> u32 {
  let sign = (b >> 16u) & 0x8000u;
  let ex = (b >> 23u) & 0xffu;
  let f = b & 0x7fffffu;
  if (ex == 255u) { return select(sign | 0x7c00u, 0x7e00u, f != 0u); }
  if (ex >= 143u) { return sign | 0x7c00u; } // 2^16 and above
  if (ex == 0u) { return sign; } // float32 subnormals lie below half of f16's smallest step
  let m = f | 0x800000u;
  let t = max(i32(ex) - 137, -24); // the exponent of the f16 step at this magnitude
  let sh = u32(t - (i32(ex) - 150)); // at least 13
  if (sh >= 25u) { return sign; } // below half a step
  let q = m >> sh;
  let rem = m & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  var n = q;
  if (rem > half || (rem == half && (q & 1u) == 1u)) { n = n + 1u; }
  // (as in exact_rot, n's implicit bit carries into the exponent field)
  return sign | min((u32(t + 24) << 10u) + n, 0x7c00u);
}`;
