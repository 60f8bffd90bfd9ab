/**
 * Building blocks shared by the WGSL kernels: the specialisation, the parameter block, storage
 * access for f32, packed f16/bf16 (two per u32) and native f16, the score transform and mask,
 * and the linear-layout versions of the two tile products every FlashAttention kernel is made of
 * (products.ts dispatches between these and the swizzled layout):
 *
 *   rowdot   acc[r][c] += Σ_d A[r][d]·B[c][d]   (S = Q·Kᵀ, dPᵀ = V·dOᵀ, …)   A, B staged from global
 *   pmul     acc[r][d] += Σ_c P[r][c]·Y[c][d]   (O += P·V, dV += Pᵀ·dO, …)   P in workgroup memory
 *
 * Threads form a TR × TC grid. Thread (tr, tc) owns rows tr·RM … tr·RM+RM−1 of the tile, score
 * columns tc + j·TC (j < CN) and output columns 2·(tc + j·TC) + {0,1} (j < DN/2): the columns
 * are interleaved so that neighbouring threads read neighbouring words of workgroup memory.
 */

export type Storage = 'f32' | 'f16' | 'bf16';

/** Tile shape: NR rows owned by a workgroup, NC columns per inner tile, a TR×TC thread grid. */
export interface Tile {
  readonly nr: number;
  readonly nc: number;
  readonly tr: number;
  readonly tc: number;
  /** Head-dim chunk staged per step of rowdot. */
  readonly dk: number;
  /** Rows of Y staged per step of pmul. */
  readonly kc: number;
  /**
   * 1: vec4 workgroup-memory loads, each thread owning contiguous score columns (tc·CN + j) and
   * output quads (4·(tc + j·TC) + e). Needs RM, CN multiples of 4; specialised kernels only.
   */
  readonly vec?: number;
  /**
   * 1 (with vec): the swizzled products of products.ts — inputs read four elements at a time,
   * bank-conflict-free transposed staging and P tiles. Needs D % 4 == 0; chooseSpec drops it
   * for other head dims.
   */
  readonly sw?: number;
  /** 1 (with sw): two staging buffers and a register prefetch of the next chunk. */
  readonly pf?: number;
}

export interface KernelSpec {
  readonly storage: Storage;
  readonly d: number;
  readonly tile: Tile;
  readonly softcap: boolean;
  readonly alibi: boolean;
  /** Row reductions with subgroupShuffleXor (needs subgroup size >= TC). */
  readonly subgroups: boolean;
  /** Outputs written as f32 even for packed storage (odd D: a pass packs them afterwards). */
  readonly outF32: boolean;
  /**
   * Generic kernel: dtype, D (≤ d, which is then a bucket), softcap, ALiBi and outF32 are read
   * from Params at run time, so one pipeline serves many problems. Used on CPU adapters, where
   * compiling a pipeline costs seconds and running one is cheap for the sizes they get.
   */
  readonly dynamic?: boolean;
  /**
   * Native f16 (storage 'f16' on an adapter with `shader-f16`): `enable f16;`, tensors bound as
   * array<f16>, inputs staged in workgroup memory as f16 (half the bytes). Arithmetic stays f32:
   * f16 → f32 is exact, and scores, max, exp, sums and accumulators are f32 as everywhere else.
   */
  readonly f16?: boolean;
}

/** How a kernel reads and writes tensor elements: f32, packed pairs in u32, or native f16. */
export type Encoding = 'f32' | 'f16' | 'bf16' | 'f16-native';

export function encoding(s: KernelSpec): Encoding {
  return s.f16 ? 'f16-native' : s.storage;
}

export function specKey(kind: string, s: KernelSpec): string {
  const t = s.tile;
  // The f16 path is part of the key: native kernels (f16n) bind array<f16>, packed ones u32.
  if (s.dynamic) return [kind, 'dyn', s.f16 ? 'f16n' : 'u32', s.d, t.nr, t.nc, t.tr, t.tc, t.dk, t.kc, +s.subgroups].join(':');
  const enc = s.f16 ? 'f16n' : s.storage;
  const layout = isPipelined(s) ? 'vsp' : isSw(s) ? 'vs' : t.vec ? 'v' : 's';
  return [kind, enc, s.d, t.nr, t.nc, t.tr, t.tc, t.dk, t.kc, layout, +s.softcap, +s.alibi, +s.subgroups, +s.outF32].join(':');
}

/** Derived sizes of a specialisation. */
export interface Dims {
  readonly NT: number;
  readonly RM: number; // rows per thread
  readonly CN: number; // score columns per thread
  readonly DP1: number; // head dim padded for rowdot (multiple of dk)
  readonly DP2: number; // head dim padded for pmul (multiple of 2·TC)
  readonly DN: number; // output columns per thread (even)
  readonly pairs: boolean; // storage read and written two elements at a time (D even)
}

export function dims(s: KernelSpec): Dims {
  const t = s.tile;
  const DP1 = Math.ceil(s.d / t.dk) * t.dk;
  const q = isVec(s) ? 4 : 2;
  const DP2 = Math.ceil(s.d / (q * t.tc)) * q * t.tc;
  return { NT: t.tr * t.tc, RM: t.nr / t.tr, CN: t.nc / t.tc, DP1, DP2, DN: DP2 / t.tc, pairs: !s.dynamic && s.d % 2 === 0 };
}

/** Whether this specialisation uses the vec4 layout. */
export function isVec(s: KernelSpec): boolean {
  return !s.dynamic && s.tile.vec === 1;
}

/** Whether it uses the swizzled products (products.ts); chooseSpec only sets sw where allowed. */
export function isSw(s: KernelSpec): boolean {
  return isVec(s) && s.tile.sw === 1 && s.d % 4 === 0;
}

/** Whether the swizzled products double-buffer their staging (register prefetch). */
export function isPipelined(s: KernelSpec): boolean {
  return isSw(s) && s.tile.pf === 1;
}

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

/** Column (within the NC-wide score tile) of a thread's score j. */
export function scoreCol(s: KernelSpec, j: number): string {
  const { CN } = dims(s);
  return isVec(s) ? `(tc * ${CN}u + ${j}u)` : `(tc + ${j * s.tile.tc}u)`;
}

/** Head-dim column of a thread's output accumulator j (pairs j, j+1 are adjacent columns). */
export function outCol(s: KernelSpec, j: number): string {
  const tc = s.tile.tc;
  return isVec(s) ? `4u * tc + ${4 * tc * Math.floor(j / 4) + (j % 4)}u` : `2u * tc + ${2 * tc * Math.floor(j / 2) + (j % 2)}u`;
}

/** The head dim as a WGSL u32 expression. */
export function dExpr(s: KernelSpec): string {
  return s.dynamic ? 'P.d' : `${s.d}u`;
}

/** Workgroup memory of a kernel in bytes (must fit maxComputeWorkgroupStorageSize). */
export function sharedBytes(s: KernelSpec, extraFloats = 0): number {
  const t = s.tile;
  const stage = stageElems(s) * (isPipelined(s) ? 2 : 1) * (s.f16 ? 2 : 4);
  const red = s.subgroups ? 0 : t.nr * t.tc;
  return stage + 4 * (t.nc * t.nr + red + extraFloats);
}

/**
 * Parameters of one dispatch (a uniform block). Rows are addressed through the offsets in
 * `mt` (cu_seqlens), so dense and varlen inputs share every kernel.
 */
export const PARAMS_WGSL = /* wgsl */ `
struct Params {
  h: u32, hkv: u32, batch: u32, total_q: u32,
  total_k: u32, lse_sh: u32, lse_sb: u32, lse_scu: u32,
  scale: f32, softcap: f32, wl: i32, wr: i32,
  neg_inf: f32, alibi_off: u32, di_off: u32, d: u32,
  dtype: u32, out_f32: u32, alibi_on: u32, zero: u32,
  dp1: u32, dp2: u32, nan: f32, pad1: u32,
}`;

/** Byte size of Params. */
export const PARAMS_BYTES = 96;

export interface ParamValues {
  h: number; hkv: number; batch: number; totalQ: number; totalK: number;
  lseSh: number; lseSb: number; lseScu: number;
  scale: number; softcap: number; wl: number; wr: number;
  diOff?: number;
  d: number;
  dtype: Storage;
  outF32: boolean;
  alibi: boolean;
  /** The generic kernels' run-time padded head dims (rowdot: multiple of dk; pmul: of 2·tc). */
  dp1?: number;
  dp2?: number;
}

export function packParams(p: ParamValues): ArrayBuffer {
  const buf = new ArrayBuffer(PARAMS_BYTES);
  const u = new Uint32Array(buf);
  const f = new Float32Array(buf);
  const i = new Int32Array(buf);
  u[0] = p.h; u[1] = p.hkv; u[2] = p.batch; u[3] = p.totalQ;
  u[4] = p.totalK; u[5] = p.lseSh; u[6] = p.lseSb; u[7] = p.lseScu;
  f[8] = p.scale; f[9] = p.softcap; i[10] = p.wl; i[11] = p.wr;
  f[12] = -Infinity; u[13] = 2 * (p.batch + 1); u[14] = p.diOff ?? 0; u[15] = p.d;
  u[16] = p.dtype === 'f32' ? 0 : p.dtype === 'f16' ? 1 : 2; u[17] = +p.outF32; u[18] = +p.alibi; u[19] = 0;
  u[20] = p.dp1 ?? 0; u[21] = p.dp2 ?? 0; f[22] = NaN; u[23] = 0;
  return buf;
}

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

/** Loaders for the generic kernel's tensor bindings. */
export function dynLoaders(s: KernelSpec, names: string[]): string {
  return s.dynamic ? names.map((n) => dynLoader(n, s.f16)).join('\n') : '';
}

/** Names of a thread's accumulators. */
export const acc = (name: string, i: number, j: number) => `${name}_${i}_${j}`;

export class Src {
  private lines: string[] = [];
  private ind = 0;
  line(s = ''): this {
    for (const l of s.split('\n')) this.lines.push(l.length ? '  '.repeat(this.ind) + l : '');
    return this;
  }
  open(s: string): this {
    this.line(s);
    this.ind++;
    return this;
  }
  close(s = '}'): this {
    this.ind--;
    this.line(s);
    return this;
  }
  toString(): string {
    return this.lines.join('\n');
  }
}

/**
 * Declares a thread's output accumulators (RM × DN). The generic kernels keep them in an
 * array walked by loops whose trip count the compiler cannot see (so it does not unroll them).
 */
export function declOut(src: Src, s: KernelSpec, name: string): void {
  const { RM, DN } = dims(s);
  if (s.dynamic) src.line(`var ${name}_acc: array<f32, ${RM * DN}>;`);
  else declAcc(src, name, RM, DN);
}

/** Multiplies row i of the output accumulators by `f`. */
export function scaleOut(src: Src, s: KernelSpec, name: string, i: number, f: string): void {
  const { DN } = dims(s);
  if (s.dynamic) {
    src.line(`for (var x = 0u; x < P.dp2 / ${s.tile.tc}u; x = x + 1u) { ${name}_acc[${i * DN}u + x] = ${name}_acc[${i * DN}u + x] * ${f}; }`);
    return;
  }
  const sc: string[] = [];
  for (let d = 0; d < DN; d++) sc.push(`${acc(name, i, d)} = ${acc(name, i, d)} * ${f};`);
  src.line(sc.join(' '));
}

/** Declares RM×CN (or RM×DN) f32 accumulators set to zero. */
export function declAcc(src: Src, name: string, rows: number, cols: number): void {
  for (let i = 0; i < rows; i++) {
    const names: string[] = [];
    for (let j = 0; j < cols; j++) names.push(`${acc(name, i, j)} = 0.0`);
    src.line(`var ${names.join('; var ')};`);
  }
}

export function zeroAcc(src: Src, name: string, rows: number, cols: number): void {
  for (let i = 0; i < rows; i++) {
    const names: string[] = [];
    for (let j = 0; j < cols; j++) names.push(`${acc(name, i, j)} = 0.0;`);
    src.line(names.join(' '));
  }
}

/** A tile of a [tokens, heads, D] tensor: rows tok0 … tok0+n−1 of head `head` (WGSL exprs). */
export interface TileRef {
  readonly buf: string;
  readonly tok0: string;
  readonly n: string;
  readonly head: string;
  readonly heads: string;
}

/**
 * rowdot: acc[r][c] += Σ_d A[r][d]·B[c][d] over the head dim, staging DK-wide chunks of both
 * tiles transposed in workgroup memory (sbuf[dd·NR + r], sbuf[NR·DK + dd·NC + c]).
 * Ends with a barrier, so sbuf may be reused right after.
 */
export function rowdotLinear(src: Src, s: KernelSpec, a: TileRef, b: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, CN, DP1, pairs } = dims(s);
  const D = dExpr(s);
  const offB = t.nr * t.dk;
  src.open(s.dynamic ? `for (var d0 = 0u; d0 < P.dp1; d0 = d0 + ${t.dk}u) {` : `for (var d0 = 0u; d0 < ${DP1}u; d0 = d0 + ${t.dk}u) {`);
  for (const [ref, rows, off] of [[a, t.nr, 0], [b, t.nc, offB]] as const) {
    if (pairs) {
      const half = t.dk / 2;
      src.open(`for (var e = lid; e < ${(rows * t.dk) / 2}u; e = e + ${NT}u) {`);
      src.line(`let r = e / ${half}u; let dd = (e % ${half}u) * 2u; let d = d0 + dd;`);
      src.line(`var xv = vec2<f32>(0.0);`);
      src.line(`if (r < ${ref.n} && d < ${D}) { xv = ${ld2(ref.buf, encoding(s), `((${ref.tok0} + r) * ${ref.heads} + ${ref.head}) * ${D} + d`)}; }`);
      src.line(stageStore(s, `${off}u + dd * ${rows}u + r`, 'xv.x') + ' ' + stageStore(s, `${off}u + (dd + 1u) * ${rows}u + r`, 'xv.y'));
      src.close();
    } else {
      src.open(`for (var e = lid; e < ${rows * t.dk}u; e = e + ${NT}u) {`);
      src.line(`let r = e / ${t.dk}u; let dd = e % ${t.dk}u; let d = d0 + dd;`);
      src.line(`var xv = 0.0;`);
      src.line(`if (r < ${ref.n} && d < ${D}) { xv = ${ld1(ref.buf, encoding(s), `((${ref.tok0} + r) * ${ref.heads} + ${ref.head}) * ${D} + d`, s.dynamic)}; }`);
      src.line(stageStore(s, `${off}u + dd * ${rows}u + r`, 'xv'));
      src.close();
    }
  }
  src.line('workgroupBarrier();');
  src.open(`for (var kk = 0u; kk < ${t.dk}u${s.dynamic ? ' + P.zero' : ''}; kk = kk + 1u) {`);
  if (isVec(s)) {
    src.line(`let ab = (kk * ${t.nr}u + tr * ${RM}u) >> 2u; let bb = (${offB}u + kk * ${t.nc}u + tc * ${CN}u) >> 2u;`);
    for (let i = 0; i < RM / 4; i++) src.line(`let a4_${i} = ${stageLoad4(s, `ab + ${i}u`)};`);
    for (let j = 0; j < CN / 4; j++) src.line(`let b4_${j} = ${stageLoad4(s, `bb + ${j}u`)};`);
    for (let i = 0; i < RM; i++) src.line(`let a${i} = a4_${Math.floor(i / 4)}[${i % 4}];`);
    for (let j = 0; j < CN; j++) src.line(`let b${j} = b4_${Math.floor(j / 4)}[${j % 4}];`);
  } else {
    src.line(`let ab = kk * ${t.nr}u + tr * ${RM}u; let bb = ${offB}u + kk * ${t.nc}u + tc;`);
    for (let i = 0; i < RM; i++) src.line(`let a${i} = ${stageLoad(s, `ab + ${i}u`)};`);
    for (let j = 0; j < CN; j++) src.line(`let b${j} = ${stageLoad(s, `bb + ${j * t.tc}u`)};`);
  }
  for (let i = 0; i < RM; i++) {
    const st: string[] = [];
    for (let j = 0; j < CN; j++) st.push(`${acc(out, i, j)} = fma(a${i}, b${j}, ${acc(out, i, j)});`);
    src.line(st.join(' '));
  }
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}

/**
 * pmul: acc[r][d] += Σ_c sp[c·NR + r] · Y[c][d], staging KC rows of the Y tile at a time
 * (sbuf[kc·DP2 + d]). sp holds the NC × NR probabilities (or dS) written by the caller, who
 * must have put a barrier between writing sp and calling this. Ends with a barrier.
 */
export function pmulLinear(src: Src, s: KernelSpec, y: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, DP2, DN, pairs } = dims(s);
  const D = dExpr(s);
  if (s.dynamic) {
    pmulDynamic(src, s, y, out);
    return;
  }
  src.open(`for (var c0 = 0u; c0 < ${t.nc}u; c0 = c0 + ${t.kc}u) {`);
  if (pairs) {
    src.open(`for (var e = lid; e < ${(t.kc * DP2) / 2}u; e = e + ${NT}u) {`);
    src.line(`let r = e / ${DP2 / 2}u; let d = (e % ${DP2 / 2}u) * 2u;`);
    src.line(`var xv = vec2<f32>(0.0);`);
    src.line(`if (c0 + r < ${y.n} && d < ${D}) { xv = ${ld2(y.buf, encoding(s), `((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * ${D} + d`)}; }`);
    src.line(stageStore(s, `r * ${DP2}u + d`, 'xv.x') + ' ' + stageStore(s, `r * ${DP2}u + d + 1u`, 'xv.y'));
    src.close();
  } else {
    src.open(`for (var e = lid; e < ${t.kc * DP2}u; e = e + ${NT}u) {`);
    src.line(`let r = e / ${DP2}u; let d = e % ${DP2}u;`);
    src.line(`var xv = 0.0;`);
    src.line(`if (c0 + r < ${y.n} && d < ${D}) { xv = ${ld1(y.buf, encoding(s), `((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * ${D} + d`, s.dynamic)}; }`);
    src.line(stageStore(s, `r * ${DP2}u + d`, 'xv'));
    src.close();
  }
  src.line('workgroupBarrier();');
  src.open(`for (var kc = 0u; kc < ${t.kc}u; kc = kc + 1u) {`);
  if (isVec(s)) {
    src.line(`let pb = ((c0 + kc) * ${t.nr}u + tr * ${RM}u) >> 2u; let yb = (kc * ${DP2}u + 4u * tc) >> 2u;`);
    for (let i = 0; i < RM / 4; i++) src.line(`let p4_${i} = sp[pb + ${i}u];`);
    for (let i = 0; i < RM; i++) src.line(`let p${i} = p4_${Math.floor(i / 4)}[${i % 4}];`);
    for (let jj = 0; jj < DN / 4; jj++) src.line(`let y${jj} = ${stageLoad4(s, `yb + ${jj * t.tc}u`)};`);
    for (let i = 0; i < RM; i++) {
      const st: string[] = [];
      for (let jj = 0; jj < DN / 4; jj++) {
        for (let e = 0; e < 4; e++) st.push(`${acc(out, i, 4 * jj + e)} = fma(p${i}, y${jj}[${e}], ${acc(out, i, 4 * jj + e)});`);
      }
      src.line(st.join(' '));
    }
    src.close();
    src.line('workgroupBarrier();');
    src.close();
    return;
  }
  src.line(`let pb = (c0 + kc) * ${t.nr}u + tr * ${RM}u; let yb = kc * ${DP2}u + 2u * tc;`);
  for (let i = 0; i < RM; i++) src.line(`let p${i} = sp[pb + ${i}u];`);
  for (let jj = 0; jj < DN / 2; jj++) src.line(`let y${jj} = vec2<f32>(${stageLoad(s, `yb + ${2 * jj * t.tc}u`)}, ${stageLoad(s, `yb + ${2 * jj * t.tc + 1}u`)});`);
  for (let i = 0; i < RM; i++) {
    const st: string[] = [];
    for (let jj = 0; jj < DN / 2; jj++) {
      st.push(`${acc(out, i, 2 * jj)} = fma(p${i}, y${jj}.x, ${acc(out, i, 2 * jj)});`);
      st.push(`${acc(out, i, 2 * jj + 1)} = fma(p${i}, y${jj}.y, ${acc(out, i, 2 * jj + 1)});`);
    }
    src.line(st.join(' '));
  }
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}

/** pmul of the generic kernels: run-time head dim, loops the compiler does not unroll. */
function pmulDynamic(src: Src, s: KernelSpec, y: TileRef, out: string): void {
  const t = s.tile;
  const { NT, RM, DN } = dims(s);
  src.open(`for (var c0 = 0u; c0 < ${t.nc}u + P.zero; c0 = c0 + ${t.kc}u) {`);
  src.open(`for (var e = lid; e < ${t.kc}u * P.dp2; e = e + ${NT}u) {`);
  src.line(`let r = e / P.dp2; let d = e % P.dp2;`);
  src.line(`var xv = 0.0;`);
  src.line(`if (c0 + r < ${y.n} && d < P.d) { xv = ld1_${y.buf}(((${y.tok0} + c0 + r) * ${y.heads} + ${y.head}) * P.d + d); }`);
  src.line(stageStore(s, 'r * P.dp2 + d', 'xv'));
  src.close();
  src.line('workgroupBarrier();');
  src.open(`for (var kc = 0u; kc < ${t.kc}u + P.zero; kc = kc + 1u) {`);
  src.line(`let pb = (c0 + kc) * ${t.nr}u + tr * ${RM}u; let yb = kc * P.dp2 + 2u * tc;`);
  for (let i = 0; i < RM; i++) src.line(`let p${i} = sp[pb + ${i}u];`);
  src.open(`for (var jj = 0u; jj < P.dp2 / ${2 * t.tc}u; jj = jj + 1u) {`);
  src.line(`let y0 = ${stageLoad(s, `yb + jj * ${2 * t.tc}u`)}; let y1 = ${stageLoad(s, `yb + jj * ${2 * t.tc}u + 1u`)};`);
  for (let i = 0; i < RM; i++) {
    src.line(`${out}_acc[${i * DN}u + 2u * jj] = fma(p${i}, y0, ${out}_acc[${i * DN}u + 2u * jj]); ${out}_acc[${i * DN}u + 2u * jj + 1u] = fma(p${i}, y1, ${out}_acc[${i * DN}u + 2u * jj + 1u]);`);
  }
  src.close();
  src.close();
  src.line('workgroupBarrier();');
  src.close();
}

/**
 * Stores a thread's RM×DN output accumulators (times `mul`, a WGSL f32 expression per row i)
 * into rows tok0 + r (r < n) of head `head` of `buf`.
 */
export function storeRows(src: Src, s: KernelSpec, buf: string, tok0: string, n: string, head: string, heads: string, name: string, mul: (i: number) => string): void {
  const t = s.tile;
  const { RM, DN, pairs } = dims(s);
  const D = dExpr(s);
  const packed = s.storage !== 'f32' && !s.outF32 && !s.f16;
  if (s.dynamic) {
    for (let i = 0; i < RM; i++) {
      src.open(`if (tr * ${RM}u + ${i}u < ${n}) {`);
      src.line(`let base = ((${tok0} + tr * ${RM}u + ${i}u) * ${heads} + ${head}) * P.d;`);
      src.line(`let m = ${mul(i)};`);
      src.open(`for (var jj = 0u; jj < P.dp2 / ${2 * t.tc}u; jj = jj + 1u) {`);
      src.line(`let d = 2u * tc + jj * ${2 * t.tc}u;`);
      src.line(`let x0 = ${name}_acc[${i * DN}u + 2u * jj] * m; let x1 = ${name}_acc[${i * DN}u + 2u * jj + 1u] * m;`);
      if (s.f16) {
        src.line(`if (d < P.d) { ${buf}[base + d] = f16(x0); }`);
        src.line(`if (d + 1u < P.d) { ${buf}[base + d + 1u] = f16(x1); }`);
        src.close();
        src.close();
        continue;
      }
      // f32 (or the f32 staging of an odd D): one word per element; else a packed pair.
      src.open(`if (P.dtype == 0u || P.out_f32 != 0u) {`);
      src.line(`if (d < P.d) { ${buf}[base + d] = bitcast<u32>(x0); }`);
      src.line(`if (d + 1u < P.d) { ${buf}[base + d + 1u] = bitcast<u32>(x1); }`);
      src.close(`} else if (d < P.d) { ${buf}[(base + d) >> 1u] = pack_any(vec2<f32>(x0, x1)); }`);
      src.close();
      src.close();
    }
    return;
  }
  for (let i = 0; i < RM; i++) {
    src.open(`if (tr * ${RM}u + ${i}u < ${n}) {`);
    src.line(`let base = ((${tok0} + tr * ${RM}u + ${i}u) * ${heads} + ${head}) * ${D};`);
    src.line(`let m = ${mul(i)};`);
    for (let jj = 0; jj < DN / 2; jj++) {
      const col = outCol(s, 2 * jj);
      const x0 = `${acc(name, i, 2 * jj)} * m`;
      const x1 = `${acc(name, i, 2 * jj + 1)} * m`;
      src.open(`{ let d = ${col};`);
      if (packed && pairs) {
        src.line(`if (d < ${D}) { ${buf}[(base + d) >> 1u] = pack2(vec2<f32>(${x0}, ${x1})); }`);
      } else if (s.f16) {
        src.line(`if (d < ${D}) { ${buf}[base + d] = f16(${x0}); }`);
        src.line(`if (d + 1u < ${D}) { ${buf}[base + d + 1u] = f16(${x1}); }`);
      } else {
        src.line(`if (d < ${D}) { ${buf}[base + d] = ${x0}; }`);
        src.line(`if (d + 1u < ${D}) { ${buf}[base + d + 1u] = ${x1}; }`);
      }
      src.close();
    }
    src.close();
  }
}

/**
 * Reduces v (a WGSL f32 expression) over the TC threads that share a row; `op` is 'max' or
 * '+'. With subgroups: a butterfly of subgroupShuffleXor. Without: through `sred` (NR·TC
 * floats), bracketed by barriers. Emits `let ${dst} = …;`.
 */
export function rowReduce(src: Src, s: KernelSpec, dsts: string[], vals: string[], op: 'max' | '+'): void {
  const t = s.tile;
  const comb = (a: string, b: string) => (op === 'max' ? `max(${a}, ${b})` : `(${a} + ${b})`);
  if (s.subgroups) {
    for (let i = 0; i < dsts.length; i++) {
      src.line(`var ${dsts[i]} = ${vals[i]};`);
      for (let o = t.tc / 2; o >= 1; o /= 2) src.line(`${dsts[i]} = ${comb(dsts[i], `subgroupShuffleXor(${dsts[i]}, ${o}u)`)};`);
    }
    return;
  }
  const { RM } = dims(s);
  for (let i = 0; i < dsts.length; i++) src.line(`sred[(tr * ${RM}u + ${i}u) * ${t.tc}u + tc] = ${vals[i]};`);
  src.line('workgroupBarrier();');
  for (let i = 0; i < dsts.length; i++) {
    src.line(`var ${dsts[i]} = sred[(tr * ${RM}u + ${i}u) * ${t.tc}u];`);
    src.line(`for (var x = 1u; x < ${t.tc}u; x = x + 1u) { ${dsts[i]} = ${comb(dsts[i], `sred[(tr * ${RM}u + ${i}u) * ${t.tc}u + x]`)}; }`);
  }
  src.line('workgroupBarrier();');
}

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
  ].join('\n');
}
