/**
 * The KV-cache kernels (FlashAttention's flash_attn_with_kvcache in WGSL; core's kvcache.ts is
 * the contract): an in-place append, a split-KV attention pass over the cache read through the
 * block table (flash-decoding), and a combine pass that merges the splits with the online-softmax
 * merge (core's online-softmax.ts, mergeStates) and writes out and LSE.
 *
 * One pipeline per kernel and storage encoding: head dim, GQA group, block size, the score
 * options and the split are read from the KVP uniform at run time, so a decode loop of any
 * shape compiles three pipelines once. 16-bit tensors are read as packed u32 words (two
 * elements each) whatever the adapter's shader-f16; the caches' bytes are the same either way.
 *
 * attend: workgroup (split s, group (b, kv head, row tile)), KV_THREADS threads. The rows of a
 * kv head are its query heads × the queries (head-major: row hh·Tq + i), up to P.rows of them
 * per workgroup, so each cached K and V row is read once for the whole GQA group of a decode step:
 *   q rows → workgroup memory (qs)
 *   for each tile of KV_TILE keys of the split:
 *     thread t: key t of the tile, its cache row through the table → roff[t];
 *               scores of every row (q from qs, a broadcast), scale/softcap/ALiBi/mask → ss
 *     thread r < R: the row's online-softmax update over the tile (ss becomes P, alpha[r])
 *     thread t: output columns t, t + KV_THREADS, … (kvAttendCols of them) of every row:
 *               acc = alpha·acc + Σ P·V (consecutive threads read consecutive V elements)
 *   (m, l, acc) of every row → the partial buffer
 */

/** Threads per attend workgroup, keys per tile (one key per thread in the score phase). */
export const KV_THREADS = 128;
export const KV_TILE = 128;
/**
 * Head dims up to this are supported: the tiled kernel gives each thread ceil(D / KV_THREADS)
 * output columns (a pipeline per count; 2 up to D = 256), the decode kernel takes D ≤ KV_DECODE_MAX_D.
 * 640 covers MLA decode's 576-wide latent rows.
 */
export const KV_MAX_D = 5 * KV_THREADS;
/** The decode kernel's head dims (its merge holds rows of 256 columns). */
export const KV_DECODE_MAX_D = 2 * KV_THREADS;
/** Output columns per thread of the tiled kernel at head dim d. */
export function kvAttendCols(d: number): number {
  return Math.max(2, Math.ceil(d / KV_THREADS));
}
/** Most rows (queries × heads) one attend workgroup holds. */
export const KV_MAX_ROWS = 16;
/**
 * Workgroup memory for the q rows, in floats: with the score tile (KV_MAX_ROWS × KV_TILE), the
 * row offsets and alpha it stays within 16 KiB, WebGPU's guaranteed minimum.
 */
export const KV_Q_FLOATS = 1792;

/** Rows per attend workgroup for head dim d: as many q rows as fit in KV_Q_FLOATS. */
export function kvRowsFor(d: number): number {
  return Math.max(1, Math.min(KV_MAX_ROWS, Math.floor(KV_Q_FLOATS / d)));
}

export type KVEncoding = 'f32' | 'f16' | 'bf16';

export const KVP_WGSL = /* wgsl */ `
struct KVP {
  batch: u32, tq: u32, h: u32, hkv: u32,
  d: u32, tnew: u32, bs: u32, max_blocks: u32,
  scale: f32, softcap: f32, wl: i32, wr: i32,
  alibi_on: u32, nan: f32, rows: u32, chunk: u32,
  splits: u32, q_tiles: u32, n: u32, neg_inf: f32,
  vec: u32, lanes: u32, paged: u32, sinks_on: u32,
  lp_on: u32, lp_off: u32, dv: u32, v_row: u32,
  v_head: u32, latent: u32, pad0: u32, pad1: u32,
}
@group(0) @binding(0) var<uniform> P: KVP;`;

export const KVP_BYTES = 128;

export interface KVParamValues {
  batch: number; tq: number; h: number; hkv: number; d: number; tnew: number; bs: number; maxBlocks: number;
  scale: number; softcap: number; wl: number; wr: number; alibi: boolean;
  /** Rows per attend workgroup; keys per split; splits; row tiles per kv head. */
  rows: number; chunk: number; splits: number; rowTiles: number;
  /** Threads' work items (append: elements; combine: elements or words). */
  n: number;
  /** attend: read K 16 bytes at a time (rows 16-byte aligned). */
  vec?: boolean;
  /** decode (generic kernels): lanes that share one key row. */
  lanes?: number;
  /** Rows through the block table; else contiguous: row b·bs + t (no table read). */
  paged: boolean;
  /** combine: the sinks binding holds one logit per query head. */
  sinks?: boolean;
  /** cacheLeftpad: the attend kernels read it from the slopes binding, from word `leftpadAt` (as i32 bits). */
  leftpad?: boolean;
  leftpadAt?: number;
  /**
   * V's head dim (out, the partial states), the elements between V rows (hkv·Dv; a latent
   * cache: K's hkv·D) and between a row's heads (Dv; latent: D); d, hkv·d, d when absent.
   */
  dv?: number;
  vRow?: number;
  vHead?: number;
  /** A latent cache (vFromK): the append writes the one tensor, kNew's rows. */
  latent?: boolean;
}

export function packKVParams(p: KVParamValues): ArrayBuffer {
  const buf = new ArrayBuffer(KVP_BYTES);
  const u = new Uint32Array(buf);
  const f = new Float32Array(buf);
  const i = new Int32Array(buf);
  u[0] = p.batch; u[1] = p.tq; u[2] = p.h; u[3] = p.hkv;
  u[4] = p.d; u[5] = p.tnew; u[6] = p.bs; u[7] = p.maxBlocks;
  f[8] = p.scale; f[9] = p.softcap; i[10] = p.wl; i[11] = p.wr;
  // NaN and −∞ come from the host: WGSL constants cannot hold them
  u[12] = +p.alibi; f[13] = NaN; u[14] = p.rows; u[15] = p.chunk;
  u[16] = p.splits; u[17] = p.rowTiles; u[18] = p.n; f[19] = -Infinity;
  u[20] = p.vec ? 1 : 0;
  u[21] = p.lanes ?? 0;
  u[22] = p.paged ? 1 : 0;
  u[23] = p.sinks ? 1 : 0;
  u[24] = p.leftpad ? 1 : 0;
  u[25] = p.leftpadAt ?? 0;
  u[26] = p.dv ?? p.d;
  u[27] = p.vRow ?? p.hkv * p.d;
  u[28] = p.vHead ?? p.d;
  u[29] = p.latent ? 1 : 0;
  return buf;
}

/** Binding slots. */
export const KV_ATTEND = { params: 0, q: 1, k: 2, v: 3, lens: 4, table: 5, slopes: 6, part: 7, k4: 8 } as const;
export const KV_COMBINE = { params: 0, part: 1, out: 2, lse: 3, sinks: 4 } as const;
export const KV_APPEND = { params: 0, kn: 1, vn: 2, k: 3, v: 4, lens: 5, table: 6 } as const;

/** Element type of a tensor binding, and the load of element e as f32. */
export function elemType(enc: KVEncoding): string {
  return enc === 'f32' ? 'f32' : 'u32';
}
export function unpackFn(enc: KVEncoding): string {
  if (enc === 'f32') return '';
  const un = enc === 'f16' ? 'unpack2x16float(w)' : 'vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u))';
  return `fn unpack2(w: u32) -> vec2<f32> { return ${un}; }`;
}
export function load(name: string, enc: KVEncoding, e: string): string {
  return enc === 'f32' ? `${name}[${e}]` : `unpack2(${name}[(${e}) >> 1u])[(${e}) & 1u]`;
}

/**
 * The cache row of sequence b's token t: the one address rule (core's kvCacheRow; a contiguous
 * cache's table is the identity with blocks of its capacity, so it is not read).
 */
export const CACHE_ROW = /* wgsl */ `
fn cache_row(b: u32, t: u32) -> u32 {
  if (P.paged == 0u) { return b * P.bs + t; }
  let blk = t / P.bs;
  return u32(table[b * P.max_blocks + blk]) * P.bs + (t - blk * P.bs);
}`;

/**
 * cacheLeftpad (DESIGN.md): sequence b attends rows leftpad[b] … len[b] + Tnew − 1, and its
 * positions count from leftpad[b]: key j of the attention is token j + first_key(b). The values
 * ride after the ALiBi slopes in the slopes binding (an attend kernel has no binding to spare).
 */
export const FIRST_KEY = /* wgsl */ `
fn first_key(b: u32) -> u32 {
  if (P.lp_on == 0u) { return 0u; }
  return bitcast<u32>(slopes[P.lp_off + b]);
}`;

/** Mask and score, the WGSL copy of core's mask.ts (as in scores.ts): scale, softcap, ALiBi, then the window. */
export const SCORE = /* wgsl */ `
fn visible(i: i32, j: i32, tq: i32, tk: i32) -> bool {
  let pos = i + tk - tq;
  return j < tk && (P.wl < 0 || j >= pos - P.wl) && (P.wr < 0 || j <= pos + P.wr);
}
fn key_lo(i: i32, tq: i32, tk: i32) -> i32 {
  if (P.wl < 0) { return 0; }
  return max(0, i + tk - tq - P.wl);
}
fn key_hi(i: i32, tq: i32, tk: i32) -> i32 {
  if (P.wr < 0) { return tk - 1; }
  return min(tk - 1, i + tk - tq + P.wr);
}
// split s's keys [x, y) of the keys some row r0 .. r0 + n − 1 sees (the union of the rows' ranges)
fn split_keys(r0: u32, n: u32, s: u32, tq: i32, tk: i32) -> vec2<i32> {
  var lo = tk;
  var hi = -1;
  for (var r = 0u; r < n; r = r + 1u) {
    let i = i32((r0 + r) % P.tq);
    let a = key_lo(i, tq, tk);
    let z = key_hi(i, tq, tk);
    if (a <= z) { lo = min(lo, a); hi = max(hi, z); }
  }
  let c0 = lo + i32(s * P.chunk);
  return vec2<i32>(c0, min(hi + 1, c0 + i32(P.chunk)));
}
fn score(dot: f32, i: i32, j: i32, off: i32, slope: f32) -> f32 {
  var x = dot * P.scale;
  if (P.softcap > 0.0) { x = P.softcap * tanh(clamp(x / P.softcap, -15.0, 15.0)); }
  if (P.alibi_on != 0u) { x = x - slope * abs(f32(i + off - j)); }
  return x;
}`;

/** The split-KV attention pass. */
// Which (split, sequence, kv head, row tile) a workgroup of the attend passes owns: splits along x,
// the (b, kv head, row tile) index along y and z (65535 per dimension). Both attend kernels (this
// one and kvdecode.ts) open with it; it returns early past the batch.
export const KV_WORKGROUP = /* wgsl */ `
  let s = wid.x;
  let gi = wid.y + wid.z * 65535u;
  let g = P.h / P.hkv;
  let rtile = gi % P.q_tiles;
  let bk = gi / P.q_tiles;
  let b = bk / P.hkv;
  let kvh = bk % P.hkv;
  if (b >= P.batch) { return; }
  let d = P.d;`;

export function kvAttendWGSL(enc: KVEncoding, cols = 2): string {
  const rmax = KV_MAX_ROWS;
  return /* wgsl */ `
${KVP_WGSL}
@group(0) @binding(1) var<storage, read> q: array<${elemType(enc)}>;
@group(0) @binding(2) var<storage, read> kc: array<${elemType(enc)}>;
@group(0) @binding(3) var<storage, read> vc: array<${elemType(enc)}>;
@group(0) @binding(4) var<storage, read> lens: array<i32>;
@group(0) @binding(5) var<storage, read> table: array<i32>;
@group(0) @binding(6) var<storage, read> slopes: array<f32>;
// per (group, split, row): m, l, acc[d]
@group(0) @binding(7) var<storage, read_write> part: array<f32>;
// the K cache again, 16 bytes at a time (bound when rows are 16-byte aligned: P.vec != 0)
@group(0) @binding(8) var<storage, read> kc4: array<vec4<${elemType(enc)}>>;
var<workgroup> qs: array<f32, ${KV_Q_FLOATS}>;
var<workgroup> ss: array<f32, ${rmax * KV_TILE}>;
var<workgroup> roff: array<u32, ${KV_TILE}>;
var<workgroup> alpha: array<f32, ${rmax}>;
${unpackFn(enc)}
${CACHE_ROW}
${FIRST_KEY}
${SCORE}

@compute @workgroup_size(${KV_THREADS})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {${KV_WORKGROUP}
  let r0 = rtile * P.rows;
  let R = min(P.rows, g * P.tq - r0);
  let lp = first_key(b);
  let tk = i32(u32(lens[b]) + P.tnew - lp);
  let tq = i32(P.tq);
  let off = tk - tq;
  // q rows: row r is query (r0 + r) % Tq of head kvh·g + (r0 + r) / Tq
  for (var e = lid; e < R * d; e = e + ${KV_THREADS}u) {
    let gr = r0 + e / d;
    let c = e % d;
    qs[e] = ${load('q', enc, '((b * P.tq + gr % P.tq) * P.h + kvh * g + gr / P.tq) * d + c')};
  }
  // the keys some row sees, this split's part of them
  let span = split_keys(r0, R, s, tq, tk);
  let c0 = span.x;
  let c1 = span.y;
  var m = -3.0e38;
  var mneg = true; // m is −∞ (no visible key yet)
  var l = 0.0;
  var acc: array<f32, ${cols * rmax}>;
  for (var x = 0u; x < ${cols * rmax}u; x = x + 1u) { acc[x] = 0.0; }
  let w = P.hkv * d;
  workgroupBarrier();
  for (var j0 = c0; j0 < c1; j0 = j0 + ${KV_TILE}) {
    let nc = min(${KV_TILE}, c1 - j0);
    // scores: thread lid is key j0 + lid
    if (i32(lid) < nc) {
      let j = j0 + i32(lid);
      let crow = cache_row(b, u32(j) + lp);
      let ro = crow * w + kvh * d;
      roff[lid] = crow; // (V's offset is the row's in V's layout: P.v_row, P.v_head)
      var dots: array<f32, ${rmax}>;
      for (var r = 0u; r < R; r = r + 1u) { dots[r] = 0.0; }
      if (P.vec != 0u) {
        // 16-byte loads: ${enc === 'f32' ? '4 elements' : '8 elements (4 packed words)'} per load
        let per = ${enc === 'f32' ? 4 : 8}u;
        for (var c4 = 0u; c4 < d / per; c4 = c4 + 1u) {
          let raw = kc4[ro / per + c4];
          ${enc === 'f32' ? `let a = raw;
          for (var r = 0u; r < R; r = r + 1u) {
            let o = r * d + c4 * 4u;
            dots[r] = dots[r] + qs[o] * a.x + qs[o + 1u] * a.y + qs[o + 2u] * a.z + qs[o + 3u] * a.w;
          }` : `let a = unpack2(raw.x);
          let bq = unpack2(raw.y);
          let cq = unpack2(raw.z);
          let dq = unpack2(raw.w);
          for (var r = 0u; r < R; r = r + 1u) {
            let o = r * d + c4 * 8u;
            dots[r] = dots[r] + qs[o] * a.x + qs[o + 1u] * a.y + qs[o + 2u] * bq.x + qs[o + 3u] * bq.y
              + qs[o + 4u] * cq.x + qs[o + 5u] * cq.y + qs[o + 6u] * dq.x + qs[o + 7u] * dq.y;
          }`}
        }
      } else {
        for (var c = 0u; c < d; c = c + 1u) {
          let kv = ${load('kc', enc, 'ro + c')};
          for (var r = 0u; r < R; r = r + 1u) { dots[r] = dots[r] + qs[r * d + c] * kv; }
        }
      }
      for (var r = 0u; r < R; r = r + 1u) {
        let i = i32((r0 + r) % P.tq);
        var slope = 0.0;
        if (P.alibi_on != 0u) { slope = slopes[b * P.h + kvh * g + (r0 + r) / P.tq]; }
        // −3e38 marks a masked key (below any score a float32 dot product can reach here)
        var sc = -3.0e38;
        if (visible(i, j, tq, tk)) { sc = score(dots[r], i, j, off, slope); }
        ss[r * ${KV_TILE}u + lid] = sc;
      }
    }
    workgroupBarrier();
    // the online-softmax update of each row over this tile (core's softmaxTileUpdate)
    if (lid < R) {
      let base = lid * ${KV_TILE}u;
      var mt = -3.0e38;
      var any = false;
      for (var jj = 0; jj < nc; jj = jj + 1) {
        let x = ss[base + u32(jj)];
        if (x > -3.0e38 || x != x) { any = true; mt = max(mt, x); if (x != x) { mt = x; } }
      }
      var a = 1.0;
      var mnew = m;
      if (any) {
        if (mneg) { mnew = mt; a = 0.0; } else { mnew = max(m, mt); if (mt != mt) { mnew = mt; } a = exp(m - mnew); }
        var sum = 0.0;
        for (var jj = 0; jj < nc; jj = jj + 1) {
          let x = ss[base + u32(jj)];
          var p = 0.0;
          if (x > -3.0e38 || x != x) { p = exp(x - mnew); }
          ss[base + u32(jj)] = p;
          sum = sum + p;
        }
        l = l * a + sum;
        m = mnew;
        mneg = false;
      } else {
        for (var jj = 0; jj < nc; jj = jj + 1) { ss[base + u32(jj)] = 0.0; }
      }
      alpha[lid] = a;
    }
    workgroupBarrier();
    // acc = alpha·acc + P·V on this thread's columns
    for (var k = 0u; k < ${cols}u; k = k + 1u) {
      let c = lid + k * ${KV_THREADS}u;
      if (c < P.dv) {
        for (var r = 0u; r < R; r = r + 1u) { acc[r * ${cols}u + k] = acc[r * ${cols}u + k] * alpha[r]; }
        for (var jj = 0; jj < nc; jj = jj + 1) {
          let vv = ${load('vc', enc, 'roff[jj] * P.v_row + kvh * P.v_head + c')};
          for (var r = 0u; r < R; r = r + 1u) {
            let p = ss[r * ${KV_TILE}u + u32(jj)];
            if (p != 0.0) { acc[r * ${cols}u + k] = acc[r * ${cols}u + k] + p * vv; }
          }
        }
      }
    }
    workgroupBarrier();
  }
  // partial state of every row: m (−∞ as −3e38 with l = 0), l, acc (V's Dv columns)
  let stride = P.dv + 2u;
  let pbase = ((gi * P.splits + s) * P.rows) * stride;
  if (lid < R) {
    part[pbase + lid * stride] = select(m, -3.0e38, mneg);
    part[pbase + lid * stride + 1u] = l;
  }
  for (var k = 0u; k < ${cols}u; k = k + 1u) {
    let c = lid + k * ${KV_THREADS}u;
    if (c < P.dv) {
      for (var r = 0u; r < R; r = r + 1u) { part[pbase + r * stride + 2u + c] = acc[r * ${cols}u + k]; }
    }
  }
}`;
}

/** Splits the combine pass reads per loop step. */
const COMBINE_UNROLL = 8;

/**
 * The combine pass: thread e writes output element e (f32) or word e (two 16-bit elements),
 * merging the splits of its row in order (core's mergeStates) and normalising; the thread of
 * column 0 also writes the row's LSE (−∞ when it saw no key).
 */
export function kvCombineWGSL(enc: KVEncoding): string {
  const rep = (f: (k: number) => string) => Array.from({ length: COMBINE_UNROLL }, (_, k) => f(k)).join('\n');
  const pack =
    enc === 'f32'
      ? ''
      : enc === 'f16'
        ? 'fn pack2(v: vec2<f32>) -> u32 { return pack2x16float(v); }'
        : /* wgsl */ `fn bf16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u) { return 0x7fc0u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
fn pack2(v: vec2<f32>) -> u32 { return bf16_bits(v.x) | (bf16_bits(v.y) << 16u); }`;
  const perThread = enc === 'f32' ? 1 : 2;
  return /* wgsl */ `
${KVP_WGSL}
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> outp: array<${elemType(enc)}>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<storage, read> sinks: array<f32>;
${pack}

// element e of out [B, Tq, H, Dv]: merged value, and the row's lse when asked
fn merged(e: u32, want_lse: bool) -> f32 {
  let d = P.dv;
  let c = e % d;
  let h = (e / d) % P.h;
  let bi = e / (d * P.h);
  let i = bi % P.tq;
  let b = bi / P.tq;
  let g = P.h / P.hkv;
  let kvh = h / g;
  let hh = h % g;
  let gr = hh * P.tq + i;
  let r = gr % P.rows;
  let gi = (b * P.hkv + kvh) * P.q_tiles + gr / P.rows;
  let stride = d + 2u;
  var mx = -3.0e38;
  var nan = false;
  // ${COMBINE_UNROLL} splits at a time: their loads in flight together (one at a time, the
  // loop waited out a memory latency per split: 134 µs for 128 splits on the H200)
  for (var s0 = 0u; s0 < P.splits; s0 = s0 + ${COMBINE_UNROLL}u) {
    var mv: array<f32, ${COMBINE_UNROLL}>;
${rep((k) => `    mv[${k}] = part[((gi * P.splits + min(s0 + ${k}u, P.splits - 1u)) * P.rows + r) * stride];`)}
${rep((k) => `    if (s0 + ${k}u < P.splits) { let ms = mv[${k}]; if (ms != ms) { nan = true; } mx = max(mx, ms); }`)}
  }
  // a sink (core's sinks.ts) is one more term of the denominator, with no value: merged here once
  var sk = 0.0;
  if (P.sinks_on != 0u) { sk = sinks[h]; mx = max(mx, sk); }
  var l = 0.0;
  var a = 0.0;
  for (var s0 = 0u; s0 < P.splits; s0 = s0 + ${COMBINE_UNROLL}u) {
    var mv: array<f32, ${COMBINE_UNROLL}>;
    var lv: array<f32, ${COMBINE_UNROLL}>;
    var av: array<f32, ${COMBINE_UNROLL}>;
${rep((k) => `    { let o = ((gi * P.splits + min(s0 + ${k}u, P.splits - 1u)) * P.rows + r) * stride; mv[${k}] = part[o]; lv[${k}] = part[o + 1u]; av[${k}] = part[o + 2u + c]; }`)}
${rep((k) => `    if (s0 + ${k}u < P.splits && (mv[${k}] > -3.0e38 || mv[${k}] != mv[${k}])) { let f = exp(mv[${k}] - mx); l = l + lv[${k}] * f; a = a + av[${k}] * f; }`)}
  }
  if (P.sinks_on != 0u) { l = l + exp(sk - mx); }
  if (nan) { l = P.nan; a = l; mx = l; }
  if (want_lse && c == 0u) {
    let li = (b * P.h + h) * P.tq + i;
    if (mx > -3.0e38 || mx != mx) { lse[li] = mx + log(l); } else { lse[li] = P.neg_inf; }
  }
  if (!(mx > -3.0e38 || mx != mx)) { return 0.0; }
  return a / l;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let t = gid.x + gid.y * nw.x * 64u;
  if (t >= P.n) { return; }
  ${
    perThread === 1
      ? 'outp[t] = merged(t, true);'
      : `let total = P.batch * P.tq * P.h * P.dv;
  let e0 = 2u * t;
  let x0 = merged(e0, true);
  var x1 = 0.0;
  if (e0 + 1u < total) { x1 = merged(e0 + 1u, true); }
  outp[t] = pack2(vec2<f32>(x0, x1));`
  }
}`;
}

/**
 * The append: thread e copies element e of kNew and vNew [B, Tnew, Hkv, D] to its cache row.
 * 16-bit caches are written half-word by half-word with atomics on their u32 words, so rows of
 * odd width (whose words straddle two rows, maybe of two sequences) stay race-free.
 */
export function kvAppendWGSL(enc: KVEncoding): string {
  const cacheDecl = enc === 'f32' ? 'array<f32>' : 'array<atomic<u32>>';
  // (a 16-bit element written into its word with atomics: its neighbour may be another thread's)
  const put = (cache: string, src: string, de: string, e: string) =>
    enc === 'f32'
      ? `${cache}[${de}] = ${src}[${e}];`
      : `{ let sh = (${de} & 1u) * 16u;
    let bits = (${src}[${e} >> 1u] >> ((${e} & 1u) * 16u)) & 0xffffu;
    atomicAnd(&${cache}[${de} >> 1u], ~(0xffffu << sh));
    atomicOr(&${cache}[${de} >> 1u], bits << sh); }`;
  return /* wgsl */ `
${KVP_WGSL}
@group(0) @binding(1) var<storage, read> kn: array<${elemType(enc)}>;
@group(0) @binding(2) var<storage, read> vn: array<${elemType(enc)}>;
@group(0) @binding(3) var<storage, read_write> kc: ${cacheDecl};
@group(0) @binding(4) var<storage, read_write> vc: ${cacheDecl};
@group(0) @binding(5) var<storage, read> lens: array<i32>;
@group(0) @binding(6) var<storage, read> table: array<i32>;
${CACHE_ROW}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
  let e = gid.x + gid.y * nw.x * 64u;
  if (e >= P.n) { return; }
  // K: kNew [B, Tnew, Hkv, D]; V: vNew [B, Tnew, Hkv, Dv] (not with a latent cache: kNew's rows are V's)
  let w = P.hkv * P.d;
  let nk = P.batch * P.tnew * w;
  if (e < nk) {
    let bt = e / w;
    let de = cache_row(bt / P.tnew, u32(lens[bt / P.tnew]) + bt % P.tnew) * w + e % w;
    ${put('kc', 'kn', 'de', 'e')}
  }
  let wv = P.hkv * P.dv;
  if (P.latent == 0u && e < P.batch * P.tnew * wv) {
    let bt = e / wv;
    let dv = cache_row(bt / P.tnew, u32(lens[bt / P.tnew]) + bt % P.tnew) * wv + e % wv;
    ${put('vc', 'vn', 'dv', 'e')}
  }
}`;
}
