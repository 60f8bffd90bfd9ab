/**
 * The KV-cache decode kernel (flash-decoding): few query rows per kv head (a decode step's GQA
 * group, or a few speculative queries), a key range split over many workgroups, every K/V row
 * read once, coalesced, for all of those rows. The combine pass of kvcache.ts merges the splits.
 *
 * Workgroup (split s, group (b, kv head, row tile)), KVD_THREADS threads in teams of L lanes.
 * A team reads one key row at a time, lane ℓ the chunks at columns (ℓ + c·L)·E (E = 4 f32 in 16
 * bytes; 8 packed 16-bit elements in 16 bytes, or 4 in 8 bytes): a warp's load covers whole rows
 * at consecutive addresses.
 *   q rows (R of them, the team's columns) → registers (or workgroup memory, shared by the teams)
 *   for each step of NT·KB keys of the split (NT teams, KB keys per team in flight):
 *     every lane: its chunks of KB K rows and KB V rows (2·KB·C chunk loads issued together)
 *     partial dots of the R rows × KB keys over the lane's columns, summed over the team
 *       (subgroupShuffleXor butterfly; or through workgroup memory without subgroups)
 *     per row: scale/softcap/ALiBi/mask, online-softmax update (core's softmaxTileUpdate),
 *       acc = α·acc + Σ P·V on the lane's columns — all lanes of a team agree bit for bit
 *   the NT teams' states merged in workgroup memory (core's mergeStates) → the partial buffer
 * No barrier in the key loop (with subgroups): teams stream independently.
 *
 * Specialised (real GPUs): R, chunks, KB, L and the load width compiled in, loops over them
 * unrolled so the rows' q, acc, m, l live in registers. Generic (CPU adapters, whose compilers
 * take seconds per big body): the same code with loops, L from the uniform, R = 8.
 */
import { CACHE_ROW, FIRST_KEY, KV_WORKGROUP, KVP_WGSL, SCORE, type KVEncoding, elemType, load, unpackFn } from './kvcache.js';

/** Threads per workgroup by default (kvThreads: 64 or 256 instead). */
export const KVD_THREADS = 128;
/** Most rows (queries × query heads of one kv head) per workgroup. */
export const KVD_MAX_ROWS = 8;
/** Most rows · keys per step: the team sums' registers (and, without subgroups, KB·R·threads floats of scratch). */
export const KVD_MAX_ROW_KEYS = 32;

export interface KVDecodeSpec {
  readonly enc: KVEncoding;
  /** Query rows per workgroup, in registers (1, 2, 4, 8). */
  readonly rows: number;
  /** Elements per chunk: 4 (f32 in 16 bytes, or 16-bit in 8 bytes) or 8 (16-bit in 16 bytes). */
  readonly elems: number;
  /** Chunks of a row per lane (2 only for 4-element chunks and rows longer than 128). */
  readonly chunks: number;
  /** Keys in flight per team per step (rows · keys ≤ KVD_MAX_ROW_KEYS). */
  readonly keys: number;
  /** Lanes per key row (a power of 2, 4–32); 0: read from the uniform (generic). */
  readonly lanes: number;
  /** Team sums with subgroupShuffleXor (needs subgroups of at least L lanes). */
  readonly subgroups: boolean;
  /** K/V rows read a chunk at a time (rows chunk-aligned); else element by element. */
  readonly vec: boolean;
  /** Loops instead of unrolled code. */
  readonly generic: boolean;
  /** Threads per workgroup (64, 128 or 256): NT = threads / L teams. */
  readonly threads: number;
  /** Issue the next step's loads before computing this one (twice the load registers). */
  readonly prefetch: boolean;
  /**
   * Row offsets (the block-table lookups) one step ahead of the loads that use them: the K/V
   * loads of a step never wait on a table load (with prefetch: offsets two steps ahead, rows one).
   */
  readonly rowsAhead: boolean;
  /** q in workgroup memory (written once, read by every team) instead of each lane's registers. */
  readonly qShared: boolean;
  /**
   * Rescale a row's acc and l only when its maximum changed this step: one exp per key per row
   * instead of one more per step. Exact: the skipped factor is exp(0) = 1.
   */
  readonly lazyRescale: boolean;
  /**
   * Team sums of the R·KB partial dots (specialised, subgroups): 'xor' — every value over log2 L
   * xor steps (R·KB·log2 L shuffles); 'transpose' — halve the values per step (each lane keeps
   * the sums of half), then one shuffle per value from the lane that holds it (about 2·R·KB).
   */
  readonly teamSum: 'xor' | 'transpose';
  /**
   * Specialised with subgroups, R·KB ≤ L: the team's softmax work spread over its lanes. The sums
   * end reduce-scattered (lane ℓ holds the dot of one (key, row) pair), each lane scores, masks
   * and exponentiates that one pair (row max and row sum over the KB lanes of its row by xor
   * shuffles), then every lane fetches the R·KB probabilities and R rescale factors it needs for
   * its acc columns. Instead of every lane doing all R·KB pairs' softmax work (the bulk of a
   * step's instructions at R = 4, KB = 4). Rescales acc only where the factor is not 1 (exact).
   */
  readonly spread: boolean;
}

export const KV_DECODE = { params: 0, q: 1, k: 2, v: 3, lens: 4, table: 5, slopes: 6, part: 7 } as const;

/** Elements of one chunk of a cache row: 4 for f32 (16 bytes); 8 (16 bytes) or 4 (8 bytes) for 16-bit. */
export function kvdChunkElems(enc: KVEncoding, chunkBytes: 8 | 16 = 16): number {
  return enc === 'f32' ? 4 : chunkBytes / 2;
}

export function kvDecodeKey(s: KVDecodeSpec): string {
  return ['kv-decode', s.enc, `r${s.rows}`, `e${s.elems}`, `c${s.chunks}`, `k${s.keys}`, `l${s.lanes}`, `t${s.threads}`, s.subgroups ? 'sg' : 'wg', s.vec ? 'vec' : 'el', s.prefetch ? 'pf' : 'nopf', s.rowsAhead ? 'ra' : 'rn', s.qShared ? 'qw' : 'qr', s.lazyRescale ? 'lazy' : 'eager', s.teamSum, s.spread ? 'spread' : 'all', s.generic ? 'dyn' : 'spec'].join(':');
}

/** The WGSL type of one raw chunk: vec4<f32> (f32), vec4<u32> or vec2<u32> (packed 16-bit). */
function chunkType(s: KVDecodeSpec): string {
  return s.enc === 'f32' ? 'vec4<f32>' : `vec${s.elems / 2}<u32>`;
}

/**
 * The loader of one chunk (columns col … col + E − 1, zero past D) of buffer `buf`, raw (chunkType),
 * unpacked only where used.
 */
function chunkLoader(name: string, buf: string, s: KVDecodeSpec): string {
  const f32 = s.enc === 'f32';
  const E = s.elems;
  const t = chunkType(s);
  if (s.vec) {
    // rows chunk-aligned, D a multiple of E: a chunk is whole or past the row
    return `fn ${name}(ro: u32, col: u32) -> ${t} {\n  return select(${t}(0), ${buf}[(ro + min(col, P.d - ${E}u)) >> ${Math.log2(E)}u], col < P.d);\n}`;
  }
  const el = `${name}_el`;
  if (f32) {
    return `fn ${el}(ro: u32, c: u32) -> f32 { return select(0.0, ${buf}[ro + min(c, P.d - 1u)], c < P.d); }
fn ${name}(ro: u32, col: u32) -> vec4<f32> {\n  return vec4<f32>(${[0, 1, 2, 3].map((i) => `${el}(ro, col + ${i}u)`).join(', ')});\n}`;
  }
  // half-word e of the row, wherever it sits in its u32 word (odd D: rows start mid-word)
  return `fn ${el}(ro: u32, c: u32) -> u32 {
  let e = ro + min(c, P.d - 1u);
  return select(0u, (${buf}[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu, c < P.d);
}
fn ${name}(ro: u32, col: u32) -> ${t} {
  return ${t}(${Array.from({ length: E / 2 }, (_, w) => `${el}(ro, col + ${2 * w}u) | (${el}(ro, col + ${2 * w + 1}u) << 16u)`).join(',\n    ')});
}`;
}

/**
 * Team sums of pd[0 … V − 1] over L lanes (V, L powers of 2), every lane ending with all V sums,
 * bit-identical across the team: a reduce-scatter (each step a lane keeps half of its values, adds
 * its partner's copy of that half: V/2 + V/4 + … shuffles), xor steps for the lane bits left,
 * then each sum fetched from the lane holding it (V shuffles). Lane bits are the subgroup
 * invocation id's low bits, the lanes of a team (as the xor butterfly assumes).
 */
function transposeSum(V: number, L: number, broadcast = true): string {
  const stages = Math.min(Math.log2(V), Math.log2(L));
  const lines = [`let sl = sgid & ${L - 1}u;`, `var t: array<f32, ${V}>;`];
  for (let i = 0; i < V; i++) lines.push(`t[${i}] = pd[${i}];`);
  let n = V;
  for (let k = 0; k < stages; k++) {
    const m = L >> (k + 1);
    n /= 2;
    lines.push(`{
  let up = (sl & ${m}u) != 0u;`);
    for (let i = 0; i < n; i++) lines.push(`  t[${i}] = select(t[${i}], t[${i + n}], up) + subgroupShuffleXor(select(t[${i + n}], t[${i}], up), ${m}u);`);
    lines.push('}');
  }
  for (let m = L >> (stages + 1); m >= 1; m >>= 1) for (let i = 0; i < n; i++) lines.push(`t[${i}] = t[${i}] + subgroupShuffleXor(t[${i}], ${m}u);`);
  if (!broadcast) return lines.join('\n'); // V ≤ L: lane sl holds sum sl / (L / V) in t[0]
  // sum j sits (as t[j % n]) on the lane whose stage bits spell j / n
  const base = `(sgid & ~${L - 1}u)`;
  for (let j = 0; j < V; j++) lines.push(`pd[${j}] = subgroupShuffle(t[${j % n}], ${base} | ${Math.floor(j / n) * (L >> stages)}u);`);
  return lines.join('\n');
}

/**
 * One step's softmax with the work spread over the team (KVDecodeSpec.spread): pd holds the lane's
 * partial dots; kf/vf, jcur the step's keys. Lane state: sm, sls, smneg (its row's m, l, "no key").
 */
function spreadStep(R: number, KB: number, L: number, S: number): string {
  const V = R * KB;
  const G = L / V; // lanes per pair
  const keyBits = Array.from({ length: Math.log2(KB) }, (_, i) => G * R * (1 << i));
  const from = (j: number) => `(sgid & ~${L - 1}u) | ${j * G}u`;
  const lines = [
    `var aa: array<f32, ${R}>;\n{\n${transposeSum(V, L, false)}`,
    '// this lane\'s pair: key skb, row sr (fixed per lane)',
    'let jl = jcur[0] + i32(skb * NT);',
    'var x = NEG;',
    'if (srok && jl < c1 && visible(siq, jl, tq, tk)) { x = score(t[0], siq, jl, off, sslope); }',
    'var mt = x;',
    ...keyBits.map((m) => `mt = nmax(mt, subgroupShuffleXor(mt, ${m}u));`),
    'let any = mt > NEG || mt != mt;',
    'let mnew = select(sm, select(nmax(sm, mt), mt, smneg), any);',
    'let a = select(1.0, select(exp(sm - mnew), 0.0, smneg), any);',
    'let p = select(0.0, exp(x - mnew), x > NEG || x != x);',
    'var ps = p;',
    ...keyBits.map((m) => `ps = ps + subgroupShuffleXor(ps, ${m}u);`),
    'sls = sls * a + ps;',
    'sm = mnew;',
    'smneg = smneg && !any;',
    '// every pair\'s p and every row\'s factor, from the lanes that hold them',
    ...Array.from({ length: V }, (_, j) => `pd[${j}] = subgroupShuffle(p, ${from(j)});`),
    ...Array.from({ length: R }, (_, r) => `aa[${r}] = subgroupShuffle(a, ${from(r)});`),
    '}',
  ];
  for (let r = 0; r < R; r++) {
    const acc = (x: number) => `acc[${r * S + x}u]`;
    lines.push(`if (aa[${r}] != 1.0) {\n${Array.from({ length: S }, (_, x) => `  ${acc(x)} = ${acc(x)} * aa[${r}];`).join('\n')}\n}`);
    for (let kb = 0; kb < KB; kb++) {
      lines.push(`if (pd[${kb * R + r}] != 0.0) {\n${Array.from({ length: S }, (_, x) => `  ${acc(x)} = ${acc(x)} + pd[${kb * R + r}] * vf[${kb * S + x}u];`).join('\n')}\n}`);
    }
  }
  return lines.join('\n');
}

/** Workgroup scratch in floats: the merge (R rows of 256) and the team sums without subgroups (KB·R·threads). */
function scratchFloats(s: KVDecodeSpec): number {
  return Math.max(s.rows * 256, s.subgroups ? 0 : s.keys * s.rows * s.threads);
}
/** Lanes a row of q takes in workgroup memory (qShared): the lane count, or the most (32). */
function sharedQLanes(s: KVDecodeSpec): number {
  return s.lanes > 0 ? s.lanes : 32;
}
/** Bytes of workgroup memory the decode kernel of `s` declares (wbuf, wq, wm, wl). */
export function kvDecodeWorkgroupBytes(s: KVDecodeSpec): number {
  const slots = (s.chunks * s.elems) / 4;
  return 4 * scratchFloats(s) + (s.qShared ? 16 * s.rows * slots * sharedQLanes(s) : 0) + 2 * 4 * (s.threads / 4) * s.rows;
}

/** The decode kernel for one specialisation. */
export function kvDecodeWGSL(s: KVDecodeSpec): string {
  const R = s.rows;
  const C = s.chunks;
  const KB = s.keys;
  const E = s.elems;
  const NV = E / 4; // vec4<f32> slots per chunk
  const S = C * NV; // slots per lane per row
  const T = s.threads;
  if (R * KB > KVD_MAX_ROW_KEYS) throw new Error(`kv decode: rows·keys = ${R * KB} > ${KVD_MAX_ROW_KEYS}`);
  if (s.spread && (s.generic || !s.subgroups || R * KB > s.lanes)) throw new Error(`kv decode: a spread softmax needs specialised code, subgroup sums and rows·keys ≤ lanes (${R * KB} > ${s.lanes})`);
  const scratch = scratchFloats(s);
  // q in workgroup memory: slot x of row r for lane ℓ at (r·S + x)·LQ + ℓ (LQ: the most lanes)
  const LQ = sharedQLanes(s);
  const qAt = (r: string, x: number) => (s.qShared ? `wq[(${r} * ${S}u + ${x}u) * ${LQ}u + ln]` : `qr[${r} * ${S}u + ${x}u]`);
  // `n` copies of body(i) (constant i), or a loop over i (generic); each copy in its own block
  let depth = 0;
  const rep = (n: number, body: (i: string) => string): string => {
    const v = `i${depth++}`;
    try {
      if (s.generic) return `for (var ${v} = 0u; ${v} < ${n}u; ${v} = ${v} + 1u) {\n${body(v)}\n}`;
      return Array.from({ length: n }, (_, i) => `{\n${body(`${i}u`)}\n}`).join('\n');
    } finally {
      depth--;
    }
  };
  const RT = chunkType(s);
  const cacheT = s.vec ? `array<${RT}>` : `array<${elemType(s.enc)}>`;
  // slot x of a lane's row: chunk x / NV, elements 4·(x % NV) … of it
  const slotCol = (x: number) => `(ln + ${Math.floor(x / NV)}u * L) * ${E}u + ${4 * (x % NV)}u`;
  // the team's KB keys from j (past c1: the split's last key, masked later), raw chunks → kr, vr
  const chunkLoads = (kb: string) => Array.from({ length: C }, (_, c) => `kr[${kb} * ${C}u + ${c}u] = ld_k(ro, (ln + ${c}u * L) * ${E}u);\nvr[${kb} * ${C}u + ${c}u] = ld_v(ro, (ln + ${c}u * L) * ${E}u);`).join('\n');
  // rowsAhead: the keys from j and their row offsets → jo, rof; then the rows at rof → kr, vr (jo → jk)
  const offsets = (j: string) => rep(KB, (kb) => `let j = ${j} + i32(${kb} * NT + team);\njo[${kb}] = j;\nrof[${kb}] = cache_row(b, u32(min(j, c1 - 1)) + lp) * w + kvo;`);
  const loadAt = () => `jk = jo;\n${rep(KB, (kb) => `let ro = rof[${kb}];\n${chunkLoads(kb)}`)}`;
  const issue = (j: string) =>
    rep(
      KB,
      (kb) => `let j = ${j} + i32(${kb} * NT + team);
jk[${kb}] = j;
let ro = cache_row(b, u32(min(j, c1 - 1)) + lp) * w + kvo;
${chunkLoads(kb)}`,
    );
  // before the key loop: what the first step's loads need (prefetch: the first step's rows too)
  const prologue = () => {
    if (s.rowsAhead) return `if (c0 < c1) {\n${offsets('c0')}\n${s.prefetch ? `${loadAt()}\n${offsets('c0 + stepk')}` : ''}\n}`;
    return s.prefetch ? `if (c0 < c1) {\n${issue('c0')}\n}` : '';
  };
  // the top of a step: kcur, vcur, jcur = this step's rows; what later steps need is in flight
  const stepLoads = () => {
    const cur = 'let kcur = kr;\n    let vcur = vr;\n    let jcur = jk;';
    if (s.rowsAhead && s.prefetch) return `${cur}\n    // the next step's rows (offsets found last step; clamped, so no branch), then the offsets two steps on\n${loadAt()}\n${offsets('j0 + 2 * stepk')}`;
    if (s.rowsAhead) return `${loadAt()}\n    ${cur}\n    // the next step's offsets (table loads), in flight while this step's rows arrive\n${offsets('j0 + stepk')}`;
    if (s.prefetch) return `${cur}\n    // the next step's loads, in flight while this step computes\n    if (j0 + stepk < c1) {\n${issue('j0 + stepk')}\n    }`;
    return `${issue('j0')}\n    ${cur}`;
  };
  // every lane: the online-softmax update of all R rows over the step's KB keys (sums in pd on every lane)
  const rowSteps = () =>
    rep(R, (r) => `var sc: array<f32, ${KB}>;
var mt = NEG;
${rep(KB, (kb) => `let j = jcur[${kb}];
var x = NEG;
if (rok[${r}] && j < c1 && visible(iq[${r}], j, tq, tk)) { x = score(pd[${kb} * ${R}u + ${r}], iq[${r}], j, off, slope[${r}]); }
sc[${kb}] = x;
mt = nmax(mt, x);`)}
let any = mt > NEG || mt != mt;
let mnew = select(m[${r}], select(nmax(m[${r}], mt), mt, mneg[${r}]), any);
${
  s.lazyRescale
    ? `// the max unchanged (most steps): the factor would be exp(0) = 1
var a = 1.0;
if (mnew != m[${r}]) {
  a = select(exp(m[${r}] - mnew), 0.0, mneg[${r}]);
${slots((x) => `  acc[${r} * ${S}u + ${x}u] = acc[${r} * ${S}u + ${x}u] * a;`)}
}`
    : `let a = select(1.0, select(exp(m[${r}] - mnew), 0.0, mneg[${r}]), any);
${slots((x) => `acc[${r} * ${S}u + ${x}u] = acc[${r} * ${S}u + ${x}u] * a;`)}`
}
var ps = 0.0;
${rep(KB, (kb) => `let x = sc[${kb}];
let p = select(0.0, exp(x - mnew), x > NEG || x != x);
ps = ps + p;
if (p != 0.0) {
${slots((x) => `  acc[${r} * ${S}u + ${x}u] = acc[${r} * ${S}u + ${x}u] + p * vf[${kb} * ${S}u + ${x}u];`)}
}`)}
l[${r}] = l[${r}] * a + ps;
m[${r}] = mnew;
mneg[${r}] = mneg[${r}] && !any;`);
  // spread: the team's row states (each row's on the lanes of its pairs) → every lane's m, l, mneg
  const spreadFrom = (j: number) => `(sgid & ~${s.lanes - 1}u) | ${j * (s.lanes / (R * KB))}u`;
  const spreadEnd = () =>
    Array.from({ length: R }, (_, r) => `m[${r}] = subgroupShuffle(sm, ${spreadFrom(r)});
l[${r}] = subgroupShuffle(sls, ${spreadFrom(r)});
mneg[${r}] = subgroupShuffle(select(0u, 1u, smneg), ${spreadFrom(r)}) != 0u;`).join('\n');
  // spread: this lane's (key, row) pair, fixed for the kernel, and its row's running state
  const spreadStart = () => `let sp = (sgid & ${s.lanes - 1}u) >> ${Math.log2(s.lanes / (R * KB))}u;
  let skb = sp / ${R}u;
  let sr = sp % ${R}u;
  let sgr = r0 + min(sr, nrows - 1u);
  let siq = i32(sgr % P.tq);
  let srok = sr < nrows;
  var sslope = 0.0;
  if (P.alibi_on != 0u) { sslope = slopes[b * P.h + kvh * g + sgr / P.tq]; }
  var sm = NEG;
  var sls = 0.0;
  var smneg = true;`;
  // raw chunks → f32 slots
  const unpackAll = (dst: string, src: string) =>
    s.enc === 'f32'
      ? `let ${dst} = ${src};`
      : E === 4
        ? `var ${dst}: array<vec4<f32>, ${KB * S}>;\n${rep(KB * C, (x) => `let wd = ${src}[${x}];\n${dst}[${x}] = vec4<f32>(unpack2(wd.x), unpack2(wd.y));`)}`
        : `var ${dst}: array<vec4<f32>, ${KB * S}>;\n${rep(KB * C, (x) => `let wd = ${src}[${x}];\n${dst}[2u * ${x}] = vec4<f32>(unpack2(wd.x), unpack2(wd.y));\n${dst}[2u * ${x} + 1u] = vec4<f32>(unpack2(wd.z), unpack2(wd.w));`)}`;
  const dotExpr = (kb: string, r: string) => Array.from({ length: S }, (_, x) => `dot(${qAt(r, x)}, kf[${kb} * ${S}u + ${x}u])`).join(' + ');
  const slots = (f: (x: number) => string) => Array.from({ length: S }, (_, x) => f(x)).join('\n');
  const teamSum = s.subgroups
    ? !s.generic && s.teamSum === 'transpose'
      ? transposeSum(KB * R, s.lanes)
      : s.generic
      ? `for (var o = L / 2u; o > 0u; o = o >> 1u) {\n${rep(KB * R, (x) => `pd[${x}] = pd[${x}] + subgroupShuffleXor(pd[${x}], o);`)}\n}`
      : Array.from({ length: Math.log2(s.lanes) }, (_, k) => rep(KB * R, (x) => `pd[${x}] = pd[${x}] + subgroupShuffleXor(pd[${x}], ${s.lanes >> (k + 1)}u);`)).join('\n')
    : `${rep(KB * R, (x) => `wbuf[${x} * ${T}u + lid] = pd[${x}];`)}
workgroupBarrier();
${rep(KB * R, (x) => `var t = 0.0;\nfor (var y = 0u; y < L; y = y + 1u) { t = t + wbuf[${x} * ${T}u + team * L + y]; }\npd[${x}] = t;`)}
workgroupBarrier();`;
  return /* wgsl */ `
${s.subgroups ? 'enable subgroups;' : ''}
${KVP_WGSL}
@group(0) @binding(1) var<storage, read> q: array<${elemType(s.enc)}>;
@group(0) @binding(2) var<storage, read> kc: ${cacheT};
@group(0) @binding(3) var<storage, read> vc: ${cacheT};
@group(0) @binding(4) var<storage, read> lens: array<i32>;
@group(0) @binding(5) var<storage, read> table: array<i32>;
@group(0) @binding(6) var<storage, read> slopes: array<f32>;
// per (group, split, row): m, l, acc[d]
@group(0) @binding(7) var<storage, read_write> part: array<f32>;
// the team reduction without subgroups (KB·R·threads), then the teams' merged acc (R × 256)
var<workgroup> wbuf: array<f32, ${scratch}>;
${s.qShared ? `// the rows' q, each lane's slots side by side (written by team 0)
var<workgroup> wq: array<vec4<f32>, ${R * S * LQ}>;` : ''}
// each team's row maxima and row sums (at most T / 4 teams)
var<workgroup> wm: array<f32, ${(T / 4) * R}>;
var<workgroup> wl: array<f32, ${(T / 4) * R}>;
${unpackFn(s.enc)}
${CACHE_ROW}
${FIRST_KEY}
${SCORE}
// −3e38 marks "no key"; max that keeps NaN (WGSL's max may drop it)
const NEG = -3.0e38;
fn nmax(a: f32, b: f32) -> f32 {
  if (a != a || b != b) { return a + b; }
  return max(a, b);
}
fn qv(o: u32, col: u32) -> vec4<f32> {
  return vec4<f32>(${[0, 1, 2, 3].map((i) => `select(0.0, ${load('q', s.enc, `o + min(col + ${i}u, P.d - 1u)`)}, col + ${i}u < P.d)`).join(',\n    ')});
}
${chunkLoader('ld_k', 'kc', s)}
${chunkLoader('ld_v', 'vc', s)}

@compute @workgroup_size(${T})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32${s.subgroups && !s.generic && (s.teamSum === 'transpose' || s.spread) ? ', @builtin(subgroup_invocation_id) sgid: u32' : ''}) {
  let L = ${s.lanes > 0 ? `${s.lanes}u` : 'P.lanes'};
  let NT = ${T}u / L;
  let ln = lid % L;
  let team = lid / L;${KV_WORKGROUP}
  let r0 = rtile * ${R}u;
  let nrows = min(${R}u, g * P.tq - r0);
  let lp = first_key(b);
  let tk = i32(u32(lens[b]) + P.tnew - lp);
  let tq = i32(P.tq);
  let off = tk - tq;
  let w = P.hkv * d;
  // row r: query (r0 + r) % Tq of head kvh·g + (r0 + r) / Tq; rows past nrows see no key
  ${s.qShared ? '' : `var qr: array<vec4<f32>, ${R * S}>;`}
  var iq: array<i32, ${R}>;
  var slope: array<f32, ${R}>;
  var rok: array<bool, ${R}>;
  ${rep(R, (r) => `let gr = r0 + min(${r}, nrows - 1u);
let qo = ((b * P.tq + gr % P.tq) * P.h + kvh * g + gr / P.tq) * d;
iq[${r}] = i32(gr % P.tq);
rok[${r}] = ${r} < nrows;
slope[${r}] = 0.0;
if (P.alibi_on != 0u) { slope[${r}] = slopes[b * P.h + kvh * g + gr / P.tq]; }
${s.qShared ? `if (team == 0u) {\n${slots((x) => `  ${qAt(r, x)} = qv(qo, ${slotCol(x)});`)}\n}` : slots((x) => `qr[${r} * ${S}u + ${x}u] = qv(qo, ${slotCol(x)});`)}`)}
  ${s.qShared ? 'workgroupBarrier();' : ''}
  // the keys some row sees, this split's part of them
  let span = split_keys(r0, nrows, s, tq, tk);
  let c0 = span.x;
  let c1 = span.y;
  var m: array<f32, ${R}>;
  var l: array<f32, ${R}>;
  var mneg: array<bool, ${R}>;
  var acc: array<vec4<f32>, ${R * S}>;
  ${rep(R, (r) => `m[${r}] = NEG;\nl[${r}] = 0.0;\nmneg[${r}] = true;\n${slots((x) => `acc[${r} * ${S}u + ${x}u] = vec4<f32>(0.0);`)}`)}
  ${s.spread ? spreadStart() : ''}
  let kvo = kvh * d;
  let stepk = i32(NT * ${KB}u);
  var kr: array<${RT}, ${KB * C}>;
  var vr: array<${RT}, ${KB * C}>;
  var jk: array<i32, ${KB}>;
  ${s.rowsAhead ? `var jo: array<i32, ${KB}>;\n  var rof: array<u32, ${KB}>;` : ''}
  ${prologue()}
  for (var j0 = c0; j0 < c1; j0 = j0 + stepk) {
    ${stepLoads()}
    ${unpackAll('kf', 'kcur')}
    ${unpackAll('vf', 'vcur')}
    var pd: array<f32, ${KB * R}>;
    ${rep(KB, (kb) => rep(R, (r) => `pd[${kb} * ${R}u + ${r}] = ${dotExpr(kb, r)};`))}
    ${s.spread ? spreadStep(R, KB, s.lanes, S) : `${teamSum}
    ${rowSteps()}`}
  }
  ${s.spread ? spreadEnd() : ''}
  // merge the teams: the workgroup's row maxima, each team's state rescaled to them, summed
  workgroupBarrier();
  if (ln == 0u) {
    ${rep(R, (r) => `wm[team * ${R}u + ${r}] = select(m[${r}], NEG, mneg[${r}]);`)}
  }
  workgroupBarrier();
  var mw: array<f32, ${R}>;
  ${rep(R, (r) => `var mx = NEG;
for (var t = 0u; t < NT; t = t + 1u) { mx = nmax(mx, wm[t * ${R}u + ${r}]); }
mw[${r}] = mx;
let f = select(exp(m[${r}] - mx), 0.0, mneg[${r}]);
l[${r}] = l[${r}] * f;
${slots((x) => `acc[${r} * ${S}u + ${x}u] = acc[${r} * ${S}u + ${x}u] * f;`)}`)}
  if (ln == 0u) {
    ${rep(R, (r) => `wl[team * ${R}u + ${r}] = l[${r}];`)}
  }
  for (var t = 0u; t < NT; t = t + 1u) {
    if (team == t) {
      ${rep(R, (r) =>
        slots(
          (x) => `{
  let col = ${slotCol(x)};
  if (col < d) {
    let o = ${r} * 256u + col;
    let y = acc[${r} * ${S}u + ${x}u];
    wbuf[o] = select(wbuf[o], 0.0, t == 0u) + y.x;
    wbuf[o + 1u] = select(wbuf[o + 1u], 0.0, t == 0u) + y.y;
    wbuf[o + 2u] = select(wbuf[o + 2u], 0.0, t == 0u) + y.z;
    wbuf[o + 3u] = select(wbuf[o + 3u], 0.0, t == 0u) + y.w;
  }
}`,
        ),
      )}
    }
    workgroupBarrier();
  }
  // partial state of every row: m (−∞ as −3e38 with l = 0), l, acc
  let stride = d + 2u;
  let pbase = (gi * P.splits + s) * ${R}u * stride;
  for (var e = lid; e < ${R}u * d; e = e + ${T}u) {
    let r = e / d;
    let c = e % d;
    part[pbase + r * stride + 2u + c] = wbuf[r * 256u + c];
  }
  if (lid == 0u) {
    ${rep(R, (r) => `var lt = 0.0;
for (var t = 0u; t < NT; t = t + 1u) { lt = lt + wl[t * ${R}u + ${r}]; }
part[pbase + ${r} * stride] = mw[${r}];
part[pbase + ${r} * stride + 1u] = lt;`)}
  }
}`;
}
