/**
 * Backward kernels, by recomputation from q, k, v, dOut and the forward's LSE (no atomics, so
 * deterministic by construction):
 *
 *   delta  Di = Σ_d dO[i][d]·O[i][d]                          one thread per (row, head)
 *   dkdv   one workgroup per (key tile, kv head, sequence): for every query head of its GQA group
 *          and every visible query tile, recompute P = exp(S − LSE) and
 *          dS = P ∘ (dP − Di), then dV += Pᵀ·dO and dK += dSᵀ·Q
 *   dq     one workgroup per (query tile, head, sequence): dQ += dS·K over the visible key tiles
 *
 * With softcap, S = c·tanh(S₀/c) and dS₀ = dS·(1 − tanh²); the scale is applied on store.
 */
import { acc, declAcc, declOut, storeRows, zeroAcc } from './accumulators.js';
import { header } from './header.js';
import { PARAMS_WGSL } from './params.js';
import { slopeLine } from './scores.js';
import { dropoutMultipliers } from './dropout.js';
import { type Encoding, type KernelSpec, dims, encoding, isSw, isVec, scoreCol } from './spec.js';
import { Src } from './src-builder.js';
import { dynLoader, dynLoaders, ld1, ld2, storageFns, tensorDecl } from './storage.js';
import { pmul, productVars, rowdot, spStore } from './products.js';

// Roles (bindings) of the backward kernels.
// `ld` holds the forward's LSE (copied in) followed by Di, so a kernel needs 8 storage bindings.
export const BWD = { params: 0, meta: 1, q: 2, k: 3, v: 4, dout: 5, ld: 6, dk: 7, dv: 8, dq: 7 } as const;
export const DELTA = { params: 0, out: 1, dout: 2, ld: 3 } as const;
export const SINKS = { params: 0, meta: 1, ld: 2, dsinks: 3 } as const;

/**
 * dsinks (core's sinks.ts): dsink_h = −Σ_rows e^(s_h − LSE)·Di, one workgroup per head, its 64
 * threads over the rows of each sequence in turn, then a tree sum in a fixed order (deterministic).
 */
export function sinkGradWGSL(): string {
  return [
    PARAMS_WGSL,
    '@group(0) @binding(0) var<uniform> P: Params;',
    `@group(0) @binding(${SINKS.meta}) var<storage, read> mt: array<u32>;`,
    `@group(0) @binding(${SINKS.ld}) var<storage, read_write> ld: array<f32>;`,
    `@group(0) @binding(${SINKS.dsinks}) var<storage, read_write> dsinks: array<f32>;`,
    'var<workgroup> red: array<f32, 64>;',
    `@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let h = wid.x;
  let s = bitcast<f32>(mt[P.sinks_off + h]);
  var acc = 0.0;
  for (var b = 0u; b < P.batch; b = b + 1u) {
    let q0 = mt[b]; let tq = mt[b + 1u] - q0;
    for (var i = lid; i < tq; i = i + 64u) {
      let di = ld[P.di_off + h * P.total_q + q0 + i];
      // (a row that saw no key has out 0, so Di = 0: skip it, whatever its LSE)
      if (di != 0.0) { acc = acc + exp(s - ld[P.lse_sh * h + P.lse_sb * b + P.lse_scu * q0 + i]) * di; }
    }
  }
  red[lid] = acc;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w = w >> 1u) {
    if (lid < w) { red[lid] = red[lid] + red[lid + w]; }
    workgroupBarrier();
  }
  if (lid == 0u) { dsinks[h] = -red[0]; }
}`,
  ].join('\n');
}

/**
 * Di = rowsum(dO ∘ O) in f32, laid out [H, totalQ] after the LSE in `ld`. 64 threads per
 * workgroup, 2-D grid. `dynamic`: dtype and D from Params (the generic kernels' companion).
 */
export function deltaWGSL(enc: Encoding, d: number, dynamic = false): string {
  const pairs = !dynamic && d % 2 === 0;
  const D = dynamic ? 'P.d' : `${d}u`;
  const native = enc === 'f16-native';
  const body = pairs
    ? `for (var x = 0u; x < ${D}; x = x + 2u) { acc = acc + dot(${ld2('o', enc, 'base + x')}, ${ld2('dout', enc, 'base + x')}); }`
    : `for (var x = 0u; x < ${D}; x = x + 1u) { acc = acc + ${ld1('o', enc, 'base + x', dynamic)} * ${ld1('dout', enc, 'base + x', dynamic)}; }`;
  return [
    native ? 'enable f16;' : '',
    PARAMS_WGSL,
    '@group(0) @binding(0) var<uniform> P: Params;',
    tensorDecl(DELTA.out, 'o', enc, 'read', false, dynamic),
    tensorDecl(DELTA.dout, 'dout', enc, 'read', false, dynamic),
    `@group(0) @binding(${DELTA.ld}) var<storage, read_write> ld: array<f32>;`,
    storageFns(enc, dynamic),
    dynamic ? dynLoader('o', native) + '\n' + dynLoader('dout', native) : '',
    `@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let idx = (wid.y * nw.x + wid.x) * 64u + lid; // = row * H + h
  if (idx >= P.total_q * P.h) { return; }
  let row = idx / P.h; let h = idx % P.h;
  let base = idx * ${D};
  var acc = 0.0;
  ${body}
  ld[P.di_off + h * P.total_q + row] = acc;
}`,
  ].join('\n');
}

function bwdDecls(s: KernelSpec, kind: 'dkdv' | 'dq'): string {
  const enc = encoding(s);
  const lines = [
    tensorDecl(BWD.q, 'q', enc, 'read', false, s.dynamic, isSw(s)),
    tensorDecl(BWD.k, 'k', enc, 'read', false, s.dynamic, isSw(s)),
    tensorDecl(BWD.v, 'v', enc, 'read', false, s.dynamic, isSw(s)),
    tensorDecl(BWD.dout, 'dout', enc, 'read', false, s.dynamic, isSw(s)),
    `@group(0) @binding(${BWD.ld}) var<storage, read> ld: array<f32>;`,
  ];
  if (kind === 'dkdv') {
    lines.push(tensorDecl(BWD.dk, 'dk', enc, 'read_write', s.outF32, s.dynamic));
    lines.push(tensorDecl(BWD.dv, 'dv', enc, 'read_write', s.outF32, s.dynamic));
  } else {
    lines.push(tensorDecl(BWD.dq, 'dq', enc, 'read_write', s.outF32, s.dynamic));
  }
  lines.push(dynLoaders(s, ['q', 'k', 'v', 'dout']));
  return lines.join('\n');
}

/** dS from the recomputed score: p·(dp − Di), times (1 − t²) under softcap. */
function dsExpr(s: KernelSpec, p: string, dp: string, di: string, t: string): string {
  return s.softcap || s.dynamic ? `${p} * (${dp} - ${di}) * (1.0 - ${t} * ${t})` : `${p} * (${dp} - ${di})`;
}

export function dkdvWGSL(s: KernelSpec): string {
  const t = s.tile;
  const { NT, RM, CN, DN } = dims(s);
  const NR = t.nr, NC = t.nc, TC = t.tc;
  const src = new Src();
  src.line(header(s, `var<workgroup> scol: array<f32, ${2 * NC}>; // LSE and Di of the query tile`));
  src.line(bwdDecls(s, 'dkdv'));
  src.open(`@compute @workgroup_size(${NT})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {`);
  src.line(`let hk = wid.y; let b = wid.z;`);
  src.line(`let q0 = mt[b]; let tq = mt[b + 1u] - q0;`);
  src.line(`let k0 = mt[P.batch + 1u + b]; let tk = mt[P.batch + 2u + b] - k0;`);
  src.line(`let j0 = wid.x * ${NR}u;`);
  src.line(`if (j0 >= tk) { return; }`);
  src.line(`let nrows = min(${NR}u, tk - j0);`);
  src.line(`let group = P.h / P.hkv;`);
  src.line(`let off = i32(tk) - i32(tq);`);
  src.line(`let tr = lid / ${TC}u; let tc = lid % ${TC}u;`);
  src.line(productVars(s));
  src.line('// Queries that see any key of this tile (mask.ts queryRange, monotone in the key).');
  src.line(`var lo = 0; var hi = i32(tq) - 1;`);
  src.line(`if (P.wr >= 0) { lo = max(0, i32(j0) - off - P.wr); }`);
  src.line(`if (P.wl >= 0) { hi = min(hi, i32(j0 + nrows - 1u) - off + P.wl); }`);
  declOut(src, s, 'dk');
  declOut(src, s, 'dv');
  declAcc(src, 's', RM, CN);
  declAcc(src, 'dp', RM, CN);
  src.open(`for (var hh = 0u; hh < group; hh = hh + 1u) {`);
  src.line(`let h = hk * group + hh;`);
  if (s.dropout) src.line(`let bh = b * P.h + h; // dropout's Philox stream`);
  src.line(slopeLine(s));
  src.line(`if (lo > hi) { break; }`);
  src.open(`for (var qt = u32(lo) / ${NC}u; qt <= u32(hi) / ${NC}u; qt = qt + 1u) {`);
  src.line(`let i0 = qt * ${NC}u; let ncols = min(${NC}u, tq - i0);`);
  src.open(`for (var e = lid; e < ${NC}u; e = e + ${NT}u) {`);
  src.line(`var lv = 0.0; var dlt = 0.0;`);
  src.line(`if (e < ncols) { lv = ld[P.lse_sh * h + P.lse_sb * b + P.lse_scu * q0 + i0 + e]; dlt = ld[P.di_off + h * P.total_q + q0 + i0 + e]; }`);
  src.line(`scol[e] = lv; scol[${NC}u + e] = dlt;`);
  src.close();
  zeroAcc(src, 's', RM, CN);
  zeroAcc(src, 'dp', RM, CN);
  src.line('// Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for this (key tile, query tile).');
  rowdot(src, s, { buf: 'k', tok0: '(k0 + j0)', n: 'nrows', head: 'hk', heads: 'P.hkv' }, { buf: 'q', tok0: '(q0 + i0)', n: 'ncols', head: 'h', heads: 'P.h' }, 's');
  rowdot(src, s, { buf: 'v', tok0: '(k0 + j0)', n: 'nrows', head: 'hk', heads: 'P.hkv' }, { buf: 'dout', tok0: '(q0 + i0)', n: 'ncols', head: 'h', heads: 'P.h' }, 'dp');
  src.line('// P = exp(S − LSE) on visible pairs; dS into the s registers, P to sp for dV += Pᵀ·dO.');
  // dropout (dropout.ts): P∘M/(1 − p) for dV, and dS = P∘(M∘dP/(1 − p) − Di)
  const drop = s.dropout
    ? dropoutMultipliers(RM, CN, (_, j) => `i32(i0 + ${scoreCol(s, j)})`, (i) => `i32(j0 + tr * ${RM}u + ${i}u)`, isVec(s) ? 'rows' : undefined, (i) => `(j0 + tr * ${RM}u + ${i}u) >> 2u`)
    : undefined;
  if (drop) for (const x of drop.lines) src.line(x);
  for (let i = 0; i < RM; i++) {
    for (let j = 0; j < CN; j++) {
      const mk = drop ? drop.mult(i, j) : '';
      src.line(
        `{ let c = ${scoreCol(s, j)}; let qi = i32(i0 + c); let kj = i32(j0 + tr * ${RM}u + ${i}u); let sc = score(${acc('s', i, j)}, qi, kj, off, slope); ` +
          `let p = select(0.0, exp(sc.x - scol[c]), visible(qi, kj, i32(tq), i32(tk))); ${drop ? `let mk = ${mk}; ` : ''}${spStore(s, 'c', i, drop ? 'p * mk' : 'p')} ` +
          `${acc('s', i, j)} = ${dsExpr(s, 'p', drop ? `(${acc('dp', i, j)} * mk)` : acc('dp', i, j), `scol[${NC}u + c]`, 'sc.y')}; }`,
      );
    }
  }
  src.line('workgroupBarrier();');
  pmul(src, s, { buf: 'dout', tok0: '(q0 + i0)', n: 'ncols', head: 'h', heads: 'P.h' }, 'dv');
  for (let i = 0; i < RM; i++) {
    const st: string[] = [];
    for (let j = 0; j < CN; j++) st.push(spStore(s, scoreCol(s, j), i, acc('s', i, j)));
    src.line(st.join(' '));
  }
  src.line('workgroupBarrier();');
  pmul(src, s, { buf: 'q', tok0: '(q0 + i0)', n: 'ncols', head: 'h', heads: 'P.h' }, 'dk');
  src.close();
  src.close();
  storeRows(src, s, 'dk', '(k0 + j0)', 'nrows', 'hk', 'P.hkv', 'dk', () => 'P.scale');
  storeRows(src, s, 'dv', '(k0 + j0)', 'nrows', 'hk', 'P.hkv', 'dv', () => '1.0');
  src.close();
  return src.toString();
}

export function dqWGSL(s: KernelSpec): string {
  const t = s.tile;
  const { NT, RM, CN, DN } = dims(s);
  const NR = t.nr, NC = t.nc, TC = t.tc;
  const src = new Src();
  src.line(header(s));
  src.line(bwdDecls(s, 'dq'));
  src.open(`@compute @workgroup_size(${NT})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {`);
  src.line(`let h = wid.y; let b = wid.z;`);
  src.line(`let q0 = mt[b]; let tq = mt[b + 1u] - q0;`);
  src.line(`let k0 = mt[P.batch + 1u + b]; let tk = mt[P.batch + 2u + b] - k0;`);
  src.line(`let i0 = wid.x * ${NR}u;`);
  src.line(`if (i0 >= tq) { return; }`);
  src.line(`let nrows = min(${NR}u, tq - i0);`);
  src.line(`let hk = h / (P.h / P.hkv);`);
  src.line(`let off = i32(tk) - i32(tq);`);
  src.line(slopeLine(s));
  src.line(`let tr = lid / ${TC}u; let tc = lid % ${TC}u;`);
  src.line(productVars(s));
  if (s.dropout) src.line(`let bh = b * P.h + h; // dropout's Philox stream`);
  for (let i = 0; i < RM; i++) {
    src.line(`var lse${i} = 0.0; var di${i} = 0.0;`);
    src.line(`if (tr * ${RM}u + ${i}u < nrows) { let r = i0 + tr * ${RM}u + ${i}u; lse${i} = ld[P.lse_sh * h + P.lse_sb * b + P.lse_scu * q0 + r]; di${i} = ld[P.di_off + h * P.total_q + q0 + r]; }`);
  }
  src.line(`var lo = 0; var hi = i32(tk) - 1;`);
  src.line(`if (P.wl >= 0) { lo = max(0, i32(i0) + off - P.wl); }`);
  src.line(`if (P.wr >= 0) { hi = min(hi, i32(i0 + nrows - 1u) + off + P.wr); }`);
  declOut(src, s, 'dq');
  declAcc(src, 's', RM, CN);
  declAcc(src, 'dp', RM, CN);
  src.open(`if (lo <= hi) {`);
  src.open(`for (var kt = u32(lo) / ${NC}u; kt <= u32(hi) / ${NC}u; kt = kt + 1u) {`);
  src.line(`let j0 = kt * ${NC}u; let ncols = min(${NC}u, tk - j0);`);
  zeroAcc(src, 's', RM, CN);
  zeroAcc(src, 'dp', RM, CN);
  rowdot(src, s, { buf: 'q', tok0: '(q0 + i0)', n: 'nrows', head: 'h', heads: 'P.h' }, { buf: 'k', tok0: '(k0 + j0)', n: 'ncols', head: 'hk', heads: 'P.hkv' }, 's');
  rowdot(src, s, { buf: 'dout', tok0: '(q0 + i0)', n: 'nrows', head: 'h', heads: 'P.h' }, { buf: 'v', tok0: '(k0 + j0)', n: 'ncols', head: 'hk', heads: 'P.hkv' }, 'dp');
  // dropout (dropout.ts): dS = P∘(M∘dP/(1 − p) − Di)
  const drop = s.dropout
    ? dropoutMultipliers(RM, CN, (i) => `i32(i0 + tr * ${RM}u + ${i}u)`, (_, j) => `i32(j0 + ${scoreCol(s, j)})`, isVec(s) ? 'cols' : undefined, (_, j) => `(j0 + ${scoreCol(s, j)}) >> 2u`)
    : undefined;
  if (drop) for (const x of drop.lines) src.line(x);
  for (let i = 0; i < RM; i++) {
    for (let j = 0; j < CN; j++) {
      const dp = drop ? `(${acc('dp', i, j)} * ${drop.mult(i, j)})` : acc('dp', i, j);
      src.line(
        `{ let c = ${scoreCol(s, j)}; let qi = i32(i0 + tr * ${RM}u + ${i}u); let kj = i32(j0 + c); let sc = score(${acc('s', i, j)}, qi, kj, off, slope); ` +
          `let p = select(0.0, exp(sc.x - lse${i}), visible(qi, kj, i32(tq), i32(tk))); ` +
          `${spStore(s, 'c', i, dsExpr(s, 'p', dp, `di${i}`, 'sc.y'))} }`,
      );
    }
  }
  src.line('workgroupBarrier();');
  pmul(src, s, { buf: 'k', tok0: '(k0 + j0)', n: 'ncols', head: 'hk', heads: 'P.hkv' }, 'dq');
  src.close();
  src.close();
  storeRows(src, s, 'dq', '(q0 + i0)', 'nrows', 'h', 'P.h', 'dq', () => 'P.scale');
  src.close();
  return src.toString();
}

/** Packs an f32 buffer into f16/bf16 pairs (the odd-D path), one thread per output word. */
export function packWGSL(storage: 'f16' | 'bf16'): string {
  return [
    '@group(0) @binding(0) var<storage, read> src: array<f32>;',
    '@group(0) @binding(1) var<storage, read_write> dst: array<u32>;',
    '@group(0) @binding(2) var<uniform> n: vec4<u32>;',
    storageFns(storage),
    `@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let w = (wid.y * nw.x + wid.x) * 64u + lid;
  if (2u * w >= n.x) { return; }
  var hi = 0.0;
  if (2u * w + 1u < n.x) { hi = src[2u * w + 1u]; }
  dst[w] = pack2(vec2<f32>(src[2u * w], hi));
}`,
  ].join('\n');
}
