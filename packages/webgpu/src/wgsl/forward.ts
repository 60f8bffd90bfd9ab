/**
 * Forward kernel: one workgroup per (query tile of NR rows, head, sequence). It walks the key
 * tiles that the mask leaves visible, keeps a running row max m and row sum l (the online
 * softmax of packages/core/src/online-softmax.ts) and the unnormalised output O in registers,
 * and writes O / l and LSE = m + log l at the end. The T×T score matrix never exists.
 */
import { acc, declAcc, declOut, scaleOut, storeRows, zeroAcc } from './accumulators.js';
import { header } from './header.js';
import { rowReduce } from './row-reduce.js';
import { slopeLine } from './scores.js';
import { dropoutMultipliers } from './dropout.js';
import { type KernelSpec, dims, encoding, isPipelined, isSw, isVec, scoreCol } from './spec.js';
import { Src } from './src-builder.js';
import { dynLoaders, tensorDecl } from './storage.js';
import { pmul, productVars, rowdot, spStore, spStoreQuad } from './products.js';

// Roles (bindings) of the forward kernel.
export const FWD = { params: 0, meta: 1, q: 2, k: 3, v: 4, out: 5, lse: 6 } as const;

export function forwardWGSL(s: KernelSpec): string {
  const t = s.tile;
  const { NT, RM, CN, DN } = dims(s);
  const NR = t.nr, NC = t.nc, TC = t.tc;
  const src = new Src();
  src.line(header(s));
  const enc = encoding(s);
  src.line(tensorDecl(FWD.q, 'q', enc, 'read', false, s.dynamic, isSw(s)));
  src.line(tensorDecl(FWD.k, 'k', enc, 'read', false, s.dynamic, isSw(s)));
  src.line(tensorDecl(FWD.v, 'v', enc, 'read', false, s.dynamic, isSw(s)));
  src.line(tensorDecl(FWD.out, 'o', enc, 'read_write', s.outF32, s.dynamic));
  src.line(`@group(0) @binding(${FWD.lse}) var<storage, read_write> lse: array<f32>;`);
  src.line(dynLoaders(s, ['q', 'k', 'v']));
  src.line('');
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
  src.line(`let neg_inf = P.neg_inf;`);
  if (s.dropout) src.line(`let bh = b * P.h + h; // dropout's Philox stream`);
  src.line(productVars(s));
  src.line('// Keys visible from any row of this tile (the bounds are monotone in the row).');
  src.line(`var lo = 0; var hi = i32(tk) - 1;`);
  src.line(`if (P.wl >= 0) { lo = max(0, i32(i0) + off - P.wl); }`);
  src.line(`if (P.wr >= 0) { hi = min(hi, i32(i0 + nrows - 1u) + off + P.wr); }`);
  declOut(src, s, 'o');
  declAcc(src, 's', RM, CN);
  for (let i = 0; i < RM; i++) src.line(`var m${i} = neg_inf; var l${i} = 0.0;`);
  src.line('// Sinks (online-softmax.ts seedSinkTile): each row starts as if a key with logit s_h and a zero');
  src.line('// value row had been read: m = s_h, l = 1 (on one thread of the row: l is summed over them).');
  src.open('if (P.sinks_off != 0u) {');
  src.line('let sk = bitcast<f32>(mt[P.sinks_off + h]); let lsk = select(0.0, 1.0, tc == 0u);');
  for (let i = 0; i < RM; i++) src.line(`m${i} = sk; l${i} = lsk;`);
  src.close();
  src.open(`if (lo <= hi) {`);
  src.open(`for (var kt = u32(lo) / ${NC}u; kt <= u32(hi) / ${NC}u; kt = kt + 1u) {`);
  src.line(`let j0 = kt * ${NC}u; let ncols = min(${NC}u, tk - j0);`);
  zeroAcc(src, 's', RM, CN);
  rowdot(src, s, { buf: 'q', tok0: '(q0 + i0)', n: 'nrows', head: 'h', heads: 'P.h' }, { buf: 'k', tok0: '(k0 + j0)', n: 'ncols', head: 'hk', heads: 'P.hkv' }, 's');
  src.line('// Scores: scale, softcap, ALiBi, then the mask (masked → -inf).');
  for (let i = 0; i < RM; i++) {
    for (let j = 0; j < CN; j++) {
      src.line(`{ let i = i32(i0 + tr * ${RM}u + ${i}u); let j = i32(j0 + ${scoreCol(s, j)}); ${acc('s', i, j)} = select(neg_inf, score(${acc('s', i, j)}, i, j, off, slope).x, visible(i, j, i32(tq), i32(tk))); }`);
    }
  }
  src.line('// Online softmax update (packages/core/src/online-softmax.ts):');
  src.line('//   m′ = max(m, rowmax s);  α = e^(m − m′);  p = e^(s − m′);  l′ = α·l + Σp;  O′ = α·O + p·V');
  src.line('// A row that has seen only masked keys keeps m = −inf; it uses 0 as the shift so p = 0, α = 0.');
  src.line('// Each thread keeps l over its own columns; the sum over the row happens once, at the end.');
  const drop = s.dropout
    ? dropoutMultipliers(RM, CN, (i) => `i32(i0 + tr * ${RM}u + ${i}u)`, (_, j) => `i32(j0 + ${scoreCol(s, j)})`, isVec(s) ? 'cols' : undefined, (_, j) => `(j0 + ${scoreCol(s, j)}) >> 2u`)
    : undefined;
  const mx: string[] = [];
  for (let i = 0; i < RM; i++) {
    let e = acc('s', i, 0);
    for (let j = 1; j < CN; j++) e = `max(${e}, ${acc('s', i, j)})`;
    mx.push(e);
  }
  rowReduce(src, s, mx.map((_, i) => `mx${i}`), mx, 'max');
  for (let i = 0; i < RM; i++) {
    src.line(`{ let mn = max(m${i}, mx${i}); let mu = select(mn, 0.0, mn == neg_inf); let alpha = exp(m${i} - mu); m${i} = mn;`);
    const sum: string[] = [];
    for (let j = 0; j < CN; j++) {
      src.line(`  ${acc('s', i, j)} = exp(${acc('s', i, j)} - mu);`);
      sum.push(acc('s', i, j));
    }
    src.line(`  l${i} = l${i} * alpha + ${sum.join(' + ')};`);
    if (drop) {
      // dropout after l took the undropped weights: only P·V sees the mask (dropout.ts)
      for (const x of drop.byRow[i]) src.line('  ' + x);
      for (let j = 0; j < CN; j++) src.line(`  ${acc('s', i, j)} = ${acc('s', i, j)} * ${drop.mult(i, j)};`);
    }
    if (!isSw(s)) src.line('  ' + Array.from({ length: CN }, (_, j) => spStore(s, scoreCol(s, j), i, acc('s', i, j))).join(' '));
    scaleOut(src, s, 'o', i, 'alpha');
    src.line('}');
  }
  if (isSw(s)) {
    src.line('// P to workgroup memory, one vec4 (four rows of a column) per store.');
    for (let j = 0; j < CN; j++) {
      for (let u = 0; u < RM / 4; u++) {
        const quad = [0, 1, 2, 3].map((e) => acc('s', 4 * u + e, j)).join(', ');
        src.line(spStoreQuad(s, scoreCol(s, j), u, `vec4<f32>(${quad})`));
      }
    }
  }
  src.line('workgroupBarrier();');
  // The next writer of sp (the next key tile's P) comes after rowdot's barriers: no trailing one.
  pmul(src, s, { buf: 'v', tok0: '(k0 + j0)', n: 'ncols', head: 'hk', heads: 'P.hkv' }, 'o', !isPipelined(s));
  src.close();
  src.close();
  src.line('// Row sums over the TC threads of a row; empty rows (l = 0) give out 0 and LSE −inf (with a');
  src.line('// sink l ≥ 1: out 0, LSE s_h).');
  rowReduce(src, s, Array.from({ length: RM }, (_, i) => `ls${i}`), Array.from({ length: RM }, (_, i) => `l${i}`), '+');
  src.line('// l is at most the key count unless a NaN reached the row; some drivers turn exp(NaN) into');
  src.line('// inf, so the row is made NaN explicitly (DESIGN.md: NaN propagates).');
  for (let i = 0; i < RM; i++) src.line(`let bad${i} = (bitcast<u32>(ls${i}) & 0x7fffffffu) >= 0x7f800000u;`);
  storeRows(src, s, 'o', '(q0 + i0)', 'nrows', 'h', 'P.h', 'o', (i) => `select(select(1.0 / ls${i}, 0.0, ls${i} == 0.0), P.nan, bad${i})`);
  src.open(`if (tc == 0u) {`);
  for (let i = 0; i < RM; i++) {
    src.line(`if (tr * ${RM}u + ${i}u < nrows) { lse[P.lse_sh * h + P.lse_sb * b + P.lse_scu * q0 + i0 + tr * ${RM}u + ${i}u] = select(select(m${i} + log(ls${i}), neg_inf, ls${i} == 0.0), P.nan, bad${i}); }`);
  }
  src.close();
  src.close();
  return src.toString();
}
