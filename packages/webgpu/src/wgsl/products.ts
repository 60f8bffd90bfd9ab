/**
 * The two tile products every kernel is built from, in one of two workgroup-memory layouts:
 *
 *   linear     (linear-products.ts: rowdotLinear, pmulLinear) — any tile, the generic kernels too.
 *   swizzled   (here; tile.sw = 1, with the vec4 layout, D % 4 == 0) — for real GPUs.
 *
 * Why the swizzled layout (NVIDIA: 32 banks of 4 bytes, one "wavefront" per 128 bytes):
 *  - rowdot stages A and B transposed (sbuf[dd][row]) so that the multiply reads four rows as one
 *    vec4. The linear layout's transposing stores put the 8 lanes that share a row's dd on one
 *    bank (8-way conflicts). Here each thread loads four consecutive head-dim elements (one
 *    16-byte global load) and the row quad is XOR-ed with the head-dim quad, so a warp's stores
 *    hit 32 distinct banks while the reads stay aligned vec4s.
 *  - The P (or dS) tile is sp[c][row]; a thread owns RM rows of CN columns. The linear layout's
 *    stores of one column from 16 lanes hit one bank (16-way). Here the row quad is XOR-ed with
 *    the column's owner (c / CN), and the forward writes whole vec4s.
 *  - tile.pf = 1 adds a second staging buffer and a register prefetch: chunk n+1's global loads
 *    are issued before chunk n is multiplied, and each chunk needs one barrier instead of two.
 *
 * The arithmetic is the same as the linear layout's: each accumulator sums the same f32
 * products in the same order (d ascending in rowdot, c ascending in pmul).
 */
import { acc } from './accumulators.js';
import { type TileRef, pmulLinear, rowdotLinear } from './linear-products.js';
import { type KernelSpec, dims, encoding, isPipelined, isSw, isVec } from './spec.js';
import type { Src } from './src-builder.js';
import { stageElems, stageLoad4, stageType } from './workgroup.js';

/** rowdot: acc[r][c] += Σ_d A[r][d]·B[c][d] (see linear-products.ts), in the kernel's layout. */
export function rowdot(src: Src, s: KernelSpec, a: TileRef, b: TileRef, out: string): void {
  if (isSw(s)) rowdotSw(src, s, a, b, out);
  else rowdotLinear(src, s, a, b, out);
}

/**
 * pmul: acc[r][d] += Σ_c P[r][c]·Y[c][d] (see linear-products.ts), in the kernel's layout. The linear
 * layout always ends with a barrier; the prefetching one only when `trailingBarrier` (the caller
 * must then put a barrier before it next writes sp).
 */
export function pmul(src: Src, s: KernelSpec, y: TileRef, out: string, trailingBarrier = true): void {
  if (isSw(s)) pmulSw(src, s, y, out, trailingBarrier);
  else pmulLinear(src, s, y, out);
}

/** Kernel-scope declarations the products need (the staging-buffer parity of the prefetch). */
export function productVars(s: KernelSpec): string {
  return isPipelined(s) ? 'var stg = 0u; // which of the two staging buffers the next chunk uses' : '';
}

const log2 = (x: number) => Math.round(Math.log2(x));

/** Expression: the quad of elements e … e+3 of input `name` (e % 4 == 0), as a stage vec4. */
function quadLoad(s: KernelSpec, name: string, e: string): string {
  const enc = encoding(s);
  if (enc === 'f32' || enc === 'f16-native') return `${name}[(${e}) >> 2u]`;
  return `unpack4(${name}[(${e}) >> 2u])`;
}

function stageVec(s: KernelSpec): string {
  return `vec4<${stageType(s)}>`;
}

/** The sp element holding P[row][c]: the row quad XOR-ed with the column's owner. */
function spQuad(s: KernelSpec, c: string, rowQuad: string): string {
  const t = s.tile;
  const { CN } = dims(s);
  return `${c} * ${t.nr / 4}u + ((${rowQuad}) ^ ((${c} >> ${log2(CN)}u) & ${t.nr / 4 - 1}u))`;
}

/** Stores one f32 of P (or dS) at (row tr·RM + i, column c) of sp (kernels that write scalars). */
export function spStore(s: KernelSpec, c: string, i: number, val: string): string {
  const { RM } = dims(s);
  if (!isSw(s)) {
    const idx = `${c} * ${s.tile.nr}u + tr * ${RM}u + ${i}u`;
    return isVec(s) ? `sp[(${idx}) >> 2u][(${idx}) & 3u] = ${val};` : `sp[${idx}] = ${val};`;
  }
  return `sp[${spQuad(s, c, `tr * ${RM / 4}u + ${Math.floor(i / 4)}u`)}][${i % 4}u] = ${val};`;
}

/** Stores rows tr·RM + 4u … +3 of column c of sp as one vec4 (swizzled layout only). */
export function spStoreQuad(s: KernelSpec, c: string, u: number, val: string): string {
  const { RM } = dims(s);
  return `sp[${spQuad(s, c, `tr * ${RM / 4}u + ${u}u`)}] = ${val};`;
}

/**
 * Emits a chunk loop: `load(first)` fills the staging registers, `store(base)` writes them to
 * sbuf at quad offset `base`, `compute(base)` multiplies from there. Without prefetch: load,
 * store, barrier, compute, barrier. With prefetch: the loads of chunk ch+1 are issued before
 * chunk ch is multiplied, into registers; the two staging buffers alternate (`stg`), so one
 * barrier per chunk suffices: a thread that stores chunk ch+2 into a buffer has passed the
 * barrier of chunk ch+1, which every thread reaches only after it has multiplied chunk ch.
 */
function chunkLoop(src: Src, s: KernelSpec, n: number, load: (ch: string) => void, store: (base: string) => void, compute: (base: string) => void): void {
  const pf = isPipelined(s);
  const bufQuads = stageElems(s) / 4;
  if (pf) load('0u');
  src.open(`for (var ch = 0u; ch < ${n}u; ch = ch + 1u) {`);
  if (pf) {
    src.line(`let sb = stg * ${bufQuads}u; stg = stg ^ 1u;`);
  } else {
    load('ch');
    src.line('let sb = 0u;');
  }
  store('sb');
  src.line('workgroupBarrier();');
  if (pf) {
    src.open(`if (ch + 1u < ${n}u) {`);
    load('(ch + 1u)');
    src.close();
  }
  compute('sb');
  if (!pf) src.line('workgroupBarrier();');
  src.close();
}

/**
 * Swizzled rowdot. Staging: thread lid takes quads e = lid + it·NT of each tile (row e / DK4,
 * head-dim quad e % DK4) and stores its four elements transposed: element dd of row r goes to
 * quad dd·(rows/4) + ((r/4) ^ swz(dd)), component r % 4, with swz(dd) = (dd/4)·QW mod rows/4.
 * QW = 32/DK (at least 1) is the number of row quads one warp's stores cover, so the XOR spreads
 * the warp's four head-dim quads over distinct banks.
 */
function rowdotSw(src: Src, s: KernelSpec, a: TileRef, b: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, CN, DP1 } = dims(s);
  const DK4 = t.dk / 4;
  const QW = Math.max(1, 32 / t.dk);
  const D = `${s.d}u`;
  const SV = stageVec(s);
  const tiles = [
    { ref: a, rows: t.nr, off: 0, x: 'a' },
    { ref: b, rows: t.nc, off: (t.dk * t.nr) / 4, x: 'b' },
  ];
  src.open('{');
  src.line(`// ${out} += A·Bᵀ over the head dim, ${t.dk} at a time (swizzled${isPipelined(s) ? ', prefetched' : ''}).`);
  const jobs: { x: string; it: number; rows: number; guard: boolean; ref: TileRef }[] = [];
  for (const { ref, rows, off, x } of tiles) {
    const quads = rows * DK4;
    for (let it = 0; it < Math.ceil(quads / NT); it++) {
      const e = `(lid + ${it * NT}u)`;
      const guard = (it + 1) * NT > quads;
      const v = `${x}${it}`;
      src.line(`let r_${v} = ${e} / ${DK4}u; let q_${v} = ${e} % ${DK4}u;${guard ? ` let in_${v} = ${e} < ${quads}u;` : ''}`);
      src.line(`let ok_${v} = ${guard ? `in_${v} && ` : ''}r_${v} < ${ref.n}; let g_${v} = ((${ref.tok0} + r_${v}) * ${ref.heads} + ${ref.head}) * ${D} + 4u * q_${v};`);
      src.line(`let s_${v} = ${off}u + q_${v} * ${rows}u + ((r_${v} >> 2u) ^ ((q_${v} * ${QW}u) & ${rows / 4 - 1}u)); let c_${v} = r_${v} & 3u;`);
      src.line(`var v_${v} = ${SV}();`);
      jobs.push({ x, it, rows, guard, ref });
    }
  }
  for (let u = 0; u < RM / 4; u++) src.line(`let ta${u} = tr * ${RM / 4}u + ${u}u;`);
  for (let u = 0; u < CN / 4; u++) src.line(`let tb${u} = tc * ${CN / 4}u + ${u}u;`);
  chunkLoop(
    src,
    s,
    DP1 / t.dk,
    (ch) => {
      for (const j of jobs) {
        const v = `${j.x}${j.it}`;
        src.line(`v_${v} = ${SV}(); if (ok_${v} && ${ch} * ${t.dk}u + 4u * q_${v} < ${D}) { v_${v} = ${quadLoad(s, j.ref.buf, `g_${v} + ${ch} * ${t.dk}u`)}; }`);
      }
    },
    (sb) => {
      for (const j of jobs) {
        const v = `${j.x}${j.it}`;
        const st = [0, 1, 2, 3].map((k) => `sbuf[${sb} + s_${v} + ${(k * j.rows) / 4}u][c_${v}] = v_${v}[${k}];`).join(' ');
        src.line(j.guard ? `if (in_${v}) { ${st} }` : st);
      }
    },
    (sb) => {
      for (let kk = 0; kk < t.dk; kk++) {
        const swA = (Math.floor(kk / 4) * QW) & (t.nr / 4 - 1);
        const swB = (Math.floor(kk / 4) * QW) & (t.nc / 4 - 1);
        const loads: string[] = [];
        for (let u = 0; u < RM / 4; u++) loads.push(`let a4_${u} = ${stageLoad4(s, `${sb} + ${(kk * t.nr) / 4}u + (ta${u} ^ ${swA}u)`)};`);
        for (let u = 0; u < CN / 4; u++) loads.push(`let b4_${u} = ${stageLoad4(s, `${sb} + ${(t.dk * t.nr + kk * t.nc) / 4}u + (tb${u} ^ ${swB}u)`)};`);
        src.open('{');
        src.line(loads.join(' '));
        for (let i = 0; i < RM; i++) {
          const st: string[] = [];
          for (let j = 0; j < CN; j++) st.push(`${acc(out, i, j)} = fma(a4_${i >> 2}[${i & 3}], b4_${j >> 2}[${j & 3}], ${acc(out, i, j)});`);
          src.line(st.join(' '));
        }
        src.close();
      }
    },
  );
  src.close();
}

/**
 * Swizzled pmul. Y is staged row-major in quads (sbuf[r·DP2/4 + q], no transposition: a warp's
 * 16-byte stores are contiguous); P quads are read from the swizzled sp; output quads are the
 * vec4 layout's (4·(tc + jj·TC) + e).
 */
function pmulSw(src: Src, s: KernelSpec, y: TileRef, out: string, trailingBarrier: boolean): void {
  const t = s.tile;
  const { NT, RM, DP2, DN } = dims(s);
  const Q4 = DP2 / 4;
  const quads = t.kc * Q4;
  const D = `${s.d}u`;
  const SV = stageVec(s);
  src.open('{');
  src.line(`// ${out} += P·Y, ${t.kc} rows of Y at a time (swizzled${isPipelined(s) ? ', prefetched' : ''}).`);
  const jobs: { it: number; guard: boolean }[] = [];
  for (let it = 0; it < Math.ceil(quads / NT); it++) {
    const e = `(lid + ${it * NT}u)`;
    const guard = (it + 1) * NT > quads;
    src.line(`let r_y${it} = ${e} / ${Q4}u; let q_y${it} = ${e} % ${Q4}u;${guard ? ` let in_y${it} = ${e} < ${quads}u;` : ''}`);
    src.line(`let g_y${it} = ((${y.tok0} + r_y${it}) * ${y.heads} + ${y.head}) * ${D} + 4u * q_y${it}; let s_y${it} = r_y${it} * ${Q4}u + q_y${it};`);
    src.line(`var v_y${it} = ${SV}();`);
    jobs.push({ it, guard });
  }
  for (let u = 0; u < RM / 4; u++) src.line(`let ta${u} = tr * ${RM / 4}u + ${u}u;`);
  chunkLoop(
    src,
    s,
    t.nc / t.kc,
    (ch) => {
      for (const j of jobs) {
        const v = `y${j.it}`;
        const row = `${ch} * ${t.kc}u + r_${v}`;
        src.line(`v_${v} = ${SV}(); if (${j.guard ? `in_${v} && ` : ''}${row} < ${y.n} && 4u * q_${v} < ${D}) { v_${v} = ${quadLoad(s, y.buf, `g_${v} + ${ch} * ${t.kc}u * ${y.heads} * ${D}`)}; }`);
      }
    },
    (sb) => {
      for (const j of jobs) {
        const st = `sbuf[${sb} + s_y${j.it}] = v_y${j.it};`;
        src.line(j.guard ? `if (in_y${j.it}) { ${st} }` : st);
      }
    },
    (sb) => {
      for (let kc = 0; kc < t.kc; kc++) {
        src.open('{');
        src.line(`let c = ch * ${t.kc}u + ${kc}u;`);
        const loads: string[] = [];
        for (let u = 0; u < RM / 4; u++) loads.push(`let p4_${u} = sp[${spQuad(s, 'c', `ta${u}`)}];`);
        for (let jj = 0; jj < DN / 4; jj++) loads.push(`let y4_${jj} = ${stageLoad4(s, `${sb} + ${kc * Q4}u + tc + ${jj * t.tc}u`)};`);
        src.line(loads.join(' '));
        for (let i = 0; i < RM; i++) {
          const st: string[] = [];
          for (let jj = 0; jj < DN / 4; jj++) {
            for (let e = 0; e < 4; e++) st.push(`${acc(out, i, 4 * jj + e)} = fma(p4_${i >> 2}[${i & 3}], y4_${jj}[${e}], ${acc(out, i, 4 * jj + e)});`);
          }
          src.line(st.join(' '));
        }
        src.close();
      }
    },
  );
  if (isPipelined(s) && trailingBarrier) src.line('workgroupBarrier();');
  src.close();
}
