/**
 * The score transform and mask in WGSL (scale, softcap, ALiBi, visibility), and the ALiBi
 * slope of a workgroup's (sequence, head).
 */
import type { KernelSpec } from './spec.js';

/**
 * The score of one (query i, key j) pair, and whether j is visible from i. The single WGSL copy
 * of packages/core/src/mask.ts (logit, keyRange): scale, then softcap, then ALiBi, then the mask.
 * `off` = tk − tq (bottom-right alignment). With softcap the tanh is returned too (backward).
 */
export function scoreFns(s: KernelSpec): string {
  const cap = s.dynamic
    ? `var t = 0.0;
  if (P.softcap > 0.0) { t = tanh(clamp(x / P.softcap, -15.0, 15.0)); x = P.softcap * t; }`
    : s.softcap
    ? // tanh saturates to ±1 in f32 beyond |u| = 9.1; clamping keeps drivers whose tanh is
      // (e^2u − 1)/(e^2u + 1) away from inf/inf.
      `let t = tanh(clamp(x / P.softcap, -15.0, 15.0));
  x = P.softcap * t;`
    : 'let t = 0.0;';
  const ali = s.alibi || s.dynamic ? 'x = x - slope * abs(f32(i + off - j));' : '';
  return /* wgsl */ `
// (score, tanh) of raw dot product q·k; i, j positions within the sequence.
fn score(dot: f32, i: i32, j: i32, off: i32, slope: f32) -> vec2<f32> {
  var x = dot * P.scale;
  ${cap}
  ${ali}
  return vec2<f32>(x, t);
}
// Query i (of tq) sees key j (of tk)?  window [wl, wr], -1 = unbounded; causal is [wl, 0].
fn visible(i: i32, j: i32, tq: i32, tk: i32) -> bool {
  let pos = i + tk - tq;
  return i < tq && j < tk && (P.wl < 0 || j >= pos - P.wl) && (P.wr < 0 || j <= pos + P.wr);
}`;
}

/** `let slope = …;` — the ALiBi slope of (b, h), 0 without ALiBi. */
export function slopeLine(s: KernelSpec): string {
  if (s.dynamic) return 'var slope = 0.0; if (P.alibi_on != 0u) { slope = bitcast<f32>(mt[P.alibi_off + b * P.h + h]); }';
  return s.alibi ? 'let slope = bitcast<f32>(mt[P.alibi_off + b * P.h + h]);' : 'let slope = 0.0;';
}
