#!/usr/bin/env node
/**
 * One thread, in one process: the KV-cache decode products of the cpu engine (dist/cpu/kvcache-kernels.js,
 * after a build) against the variants they replaced and a JavaScript copy loop over the same rows,
 * alternating, best of FA_DEV_REPS (7). R = 4 rows (GQA 4, Tq 1), D = 128, Hkv = FA_DEV_HKV (8) kv heads
 * interleaved per token as in a cache, FA_DEV_T (8192) keys: 2·T·Hkv·D elements of K and V
 * (FA_DEV_T=1024: in cache). No softmax (P fixed): the products and the reads only. KERNEL_NOTES.md
 * ("KV-cache decode") quotes it as "microbench".
 *   current       scoresRows4 (4×2) + pvRows4 (4×4) over f32 rows; scoresRows4T + pvRows4T (table) over 16-bit,
 *                 their table, Q and P in one Float64Array as the engine's WideBuffer has them
 *   strided       P·V through pvRows4S / pvRows4TS (rows a constant stride apart: the running-index form)
 *   old           variant #2: 4×4 q·k; 16-bit rows decoded into a float32 tile first
 */
import { pvRows4, pvRows4S, pvRows4T, pvRows4TS, scoresRows4, scoresRows4T } from '../dist/cpu/kvcache-kernels.js';
import { bf16ToF32, f16ToF32 } from '../dist/cpu/tileio.js';

const env = process.env;
const T = Number(env.FA_DEV_T ?? 8192), D = 128, HKV = Number(env.FA_DEV_HKV ?? 8), W = HKV * D, R = 4, TILE = 64;
const REPS = Number(env.FA_DEV_REPS ?? 7);
const f32k = new Float32Array(T * W), f32v = new Float32Array(T * W);
for (let i = 0; i < f32k.length; i++) { f32k[i] = Math.sin(i * 0.37); f32v[i] = Math.cos(i * 0.11); }
const u16k = new Uint16Array(T * W), u16v = new Uint16Array(T * W);
for (let i = 0; i < u16k.length; i++) { u16k[i] = 0x3f00 + (i % 128); u16v[i] = 0x3f00 + ((i * 7) % 128); } // bf16 0.5 … 0.75
const tab = env.FA_DEV_F16 === '1' ? f16ToF32() : bf16ToF32();
const Q = Float64Array.from({ length: R * D }, (_, i) => Math.sin(i));
const P = new Float64Array(R * TILE).fill(1e-3);
const S = new Float64Array(R * TILE), acc = new Float64Array(R * D), off = new Int32Array(TILE);
const k32 = new Float32Array(TILE * D), v32 = new Float32Array(TILE * D);
// the 16-bit kernels' one array (kvcache.ts WideBuffer): table at [0, 65536), Q rows from QB, scores / P from SB
const QB = 65536, SB = QB + R * D;
const wbuf = new Float64Array(SB + R * TILE);
wbuf.set(tab);
wbuf.set(Q, QB);

function scores4x4(Q, d4, src, off, nc, d, S, ld) {
  const a1 = d4, a2 = 2 * d4, a3 = 3 * d4;
  for (let c = 0; c < nc; c += 4) {
    const b0 = off[c], b1 = off[c + 1], b2 = off[c + 2], b3 = off[c + 3];
    let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0, s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
    for (let k = 0; k < d; k++) {
      const x0 = Q[k], x1 = Q[a1 + k], x2 = Q[a2 + k], x3 = Q[a3 + k];
      const y0 = src[b0 + k], y1 = src[b1 + k], y2 = src[b2 + k], y3 = src[b3 + k];
      s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3; s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
      s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3; s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
    }
    S[c] = s00; S[c + 1] = s01; S[c + 2] = s02; S[c + 3] = s03; S[ld + c] = s10; S[ld + c + 1] = s11; S[ld + c + 2] = s12; S[ld + c + 3] = s13;
    S[2 * ld + c] = s20; S[2 * ld + c + 1] = s21; S[2 * ld + c + 2] = s22; S[2 * ld + c + 3] = s23; S[3 * ld + c] = s30; S[3 * ld + c + 1] = s31; S[3 * ld + c + 2] = s32; S[3 * ld + c + 3] = s33;
  }
}
function decodeTile(a, tab, off, nc, d, f32) {
  for (let r = 0; r < nc; r++) { const s = off[r], o = r * d; for (let c = 0; c < d; c++) f32[o + c] = tab[a[s + c]]; }
}

const variants = {
  'f32 current': (j0, kvh) => { scoresRows4(Q, D, 0, f32k, off, TILE, D, S, TILE); pvRows4(P, TILE, 0, f32v, off, TILE, D, acc); },
  'f32 old (4×4 q·k)': () => { scores4x4(Q, D, f32k, off, TILE, D, S, TILE); pvRows4(P, TILE, 0, f32v, off, TILE, D, acc); },
  'f32 strided P·V': () => { scoresRows4(Q, D, 0, f32k, off, TILE, D, S, TILE); pvRows4S(P, TILE, 0, f32v, off[0], W, TILE, D, acc); },
  '16-bit current (table)': () => {
    scoresRows4T(wbuf, QB, D, 0, u16k, off, TILE, D, SB, TILE);
    wbuf.set(P, SB);
    pvRows4T(wbuf, SB, TILE, 0, u16v, off, TILE, D, D, acc);
  },
  '16-bit strided P·V': () => {
    scoresRows4T(wbuf, QB, D, 0, u16k, off, TILE, D, SB, TILE);
    wbuf.set(P, SB);
    pvRows4TS(wbuf, SB, TILE, 0, u16v, off[0], W, TILE, D, D, acc);
  },
  '16-bit old (decode tile)': () => {
    decodeTile(u16k, tab, off, TILE, D, k32);
    decodeTile(u16v, tab, off, TILE, D, v32);
    for (let r = 0; r < TILE; r++) off[r] = r * D;
    scores4x4(Q, D, k32, off, TILE, D, S, TILE);
    pvRows4(P, TILE, 0, v32, off, TILE, D, acc);
  },
};
function run(f) {
  acc.fill(0);
  for (let kvh = 0; kvh < HKV; kvh++) {
    for (let j0 = 0; j0 < T; j0 += TILE) {
      for (let r = 0; r < TILE; r++) off[r] = (j0 + r) * W + kvh * D;
      f(j0, kvh);
    }
  }
  return acc[0];
}
// one copy function per array type, as the bench's worker sees one type per row
function copy32(src) { const dst = new Float32Array(16384); let o = 0; for (let t = 0; t < T; t++) { const s = t * W; if (o + W > dst.length) o = 0; for (let i = 0; i < W; i++) dst[o + i] = src[s + i]; o += W; } return dst[0]; }
function copy16(src) { const dst = new Uint16Array(16384); let o = 0; for (let t = 0; t < T; t++) { const s = t * W; if (o + W > dst.length) o = 0; for (let i = 0; i < W; i++) dst[o + i] = src[s + i]; o += W; } return dst[0]; }
const all = { ...Object.fromEntries(Object.entries(variants).map(([n, f]) => [n, () => run(f)])), 'copy loop f32': () => copy32(f32k) + copy32(f32v), 'copy loop 16-bit': () => copy16(u16k) + copy16(u16v) };
const best = {};
for (let rep = 0; rep < REPS + 1; rep++) {
  for (const [n, f] of Object.entries(all)) {
    const t0 = performance.now();
    f();
    const t = performance.now() - t0;
    if (rep > 0) best[n] = Math.min(best[n] ?? Infinity, t);
  }
}
const el = 2 * T * W;
for (const n of Object.keys(all)) {
  const peer = n.startsWith('f32') ? best['copy loop f32'] : best['copy loop 16-bit'];
  console.log(`${n.padEnd(26)} ${((best[n] * 1e6) / el).toFixed(3)} ns an element${n.startsWith('copy') ? '' : `  ${Math.round((100 * peer) / best[n])} % of its copy loop`}`);
}
