/**
 * FLOPs and memory traffic of attention: the standard ("naive") schedule that materialises the
 * score matrix in slow memory (HBM), against the tiled FlashAttention schedule, for a given size
 * M of fast on-chip memory (SRAM / shared memory) — the model of Dao et al., "FlashAttention:
 * Fast and Memory-Efficient Exact Attention with IO-Awareness" (2022), Algorithms 0–4 and
 * Theorems 2 and 5: Θ(N·d + N²) against Θ(N²·d²/M) accesses.
 *
 * The exact model (every count is per (batch, head) pair, then multiplied by B·H):
 *
 *   N_q = tq queries, N_k = tk keys, d = head dim. Counts are in elements; tensor elements
 *   (Q, K, V, O, dO, dQ, dK, dV, and the naive S, P, dP, dS) take `elementBytes` each, the
 *   per-row statistics (ℓ, m, LSE) are float32 (4 bytes) in every engine.
 *
 *   FLOPs (DESIGN.md): forward 4·N_q·N_k·d (two matmuls of 2·N_q·N_k·d), half when causal;
 *   backward 2.5× forward (five matmuls).
 *
 *   Minimum (each input read once, each output written once):
 *     forward:  read Q, K, V; write O, LSE          → (N_q·d + 2·N_k·d) + N_q·d,   N_q stats
 *     backward: read Q, K, V, O, dO, LSE; write dQ, dK, dV
 *                                                   → (3·N_q·d + 2·N_k·d) + (N_q·d + 2·N_k·d), N_q stats
 *
 *   Naive forward (paper Algorithm 0): read Q, K, write S = QKᵀ; read S, write P = softmax(S);
 *   read P, V, write O = PV.
 *     reads  N_q·d + 2·N_k·d + 2·N_q·N_k,  writes N_q·d + 2·N_q·N_k  (= 2N_q·d + 2N_k·d + 4N_q·N_k)
 *
 *   Naive backward (paper Algorithm 3; P kept from the forward):
 *     1. read P, dO, write dV = Pᵀ·dO        2. read dO, V, write dP = dO·Vᵀ
 *     3. read P, dP, write dS = P∘(dP − rowsum(P∘dP))
 *     4. read dS, K, write dQ = dS·K          5. read dS, Q, write dK = dSᵀ·Q
 *     reads  5·N_q·N_k + 3·N_q·d + 2·N_k·d,  writes 2·N_q·N_k + N_q·d + 2·N_k·d
 *     (= 7·N_q·N_k + 4·N_q·d + 4·N_k·d)
 *
 *   Two tiled schedules, chosen by `schedule` (default 'fa2'):
 *
 *   'fa2' — FlashAttention-2's loop order (Dao, "FlashAttention-2: Faster Attention with Better
 *   Parallelism and Work Partitioning", 2023, Algorithms 1 and 2), which every @fa engine runs.
 *     Tiles: Br = Bc = B = max(1, floor(M / (3d))) rows, M = floor(sramBytes / elementBytes)
 *     elements: a Q tile, a K tile and a V tile (B·d elements each) fit M. NOT counted against M:
 *     the B × B score tile, the float32 O (or dK, dV) accumulators and the row statistics
 *     (registers in the GPU engines). Tr = ceil(N_q / B) query tiles, Tc = ceil(N_k / B) key tiles.
 *     forward (outer loop over query tiles, held on chip with their m, ℓ and O accumulators; the
 *     K/V tiles streamed through):
 *       reads  N_q·d (Q once) + Tr·2·N_k·d (K and V once per query tile),
 *       writes N_q·d (O once); stats: reads 0, writes N_q (LSE once).
 *       With Tr = 1 this is exactly the minimum.
 *     backward (a pre-pass reads O and dO once and writes δ = rowsum(dO∘O); then the outer loop
 *     runs over K/V tiles, held on chip with their dK, dV accumulators; the query tiles streamed):
 *       reads  2·N_k·d (K, V once) + 2·N_q·d (pre-pass: O, dO) + Tc·2·N_q·d (Q, dO per K/V tile),
 *       writes 2·N_k·d (dK, dV once);
 *       stats: reads Tc·2·N_q (LSE, δ per K/V tile), writes N_q (δ);
 *       dQ is accumulated in HBM in float32 (4 bytes, `accumRead` / `accumWritten`, whatever the
 *       dtype): written Tc·N_q·d, read back (Tc−1)·N_q·d (its initial zeros are not counted, as
 *       in 'fa1'); the final cast of dQ to the dtype is not counted.
 *     Since Tr ≈ 3·N_q·d/M, the traffic is again Θ(N_q·N_k·d²/M), with a constant of 6 against
 *     'fa1''s 12 (forward: K, V per query tile, against Q read and O read and written per key block).
 *
 *   'fa1' — the original paper's loop order (Algorithms 1 and 4). M = floor(sramBytes / elementBytes) elements;
 *     Bc = ceil(M / (4d)) key rows per block, Br = min(Bc, d) query rows per block,
 *     Tc = ceil(N_k / Bc) key blocks (outer loop), Tr = ceil(N_q / Br) query blocks (inner loop).
 *   Each outer iteration loads one K/V block once and sweeps all query blocks. Only traffic
 *   that carries information is counted: the initial O = 0, ℓ = 0, m = −∞ (dQ = 0) are not
 *   written to HBM and the first outer iteration reads nothing of them back; so with Tc = 1 the
 *   tiled schedule meets the minimum (up to the two statistics ℓ, m in place of one LSE).
 *     forward:  reads  2·N_k·d (K, V once) + Tc·N_q·d (Q) + (Tc−1)·N_q·d (O read back),
 *               writes Tc·N_q·d (O);
 *               stats: reads (Tc−1)·2·N_q (ℓ, m read back), writes Tc·2·N_q.
 *     backward: reads  2·N_k·d (K, V once) + Tc·3·N_q·d (Q, O, dO) + (Tc−1)·N_q·d (dQ read back),
 *               writes Tc·N_q·d (dQ) + 2·N_k·d (dK, dV once);
 *               stats: reads Tc·2·N_q (ℓ, m), writes 0.
 *   Since Tc ≈ 4·N_k·d/M, the tiled traffic is Θ(N_q·N_k·d²/M) (the paper's Θ(N²d²M⁻¹)).
 *
 * The model is dense: masks (causal, window, varlen) are not modelled and do not change its
 * traffic (a causal FA2 forward would skip about half the K/V tiles), and with MQA/GQA K and V
 * are counted once per query head. Intensities therefore use dense FLOPs.
 */
import { check } from './errors.js';
import { bytesPerElement, type DType } from './dtype.js';

export interface AttentionSize {
  readonly batch: number;
  /** Query heads H. */
  readonly heads: number;
  /** Queries per sequence. */
  readonly tq: number;
  /** Keys per sequence; defaults to tq. */
  readonly tk?: number;
  /** Head dim. */
  readonly d: number;
}

export interface IOModelOptions {
  /** Element size from the dtype (f32: 4, f16/bf16: 2); default f32. */
  readonly dtype?: DType;
  /** Overrides `dtype`'s element size. */
  readonly elementBytes?: number;
  /** On-chip memory M in bytes; default DEFAULT_SRAM_BYTES (the paper's A100: 192 KiB per SM). */
  readonly sramBytes?: number;
  /** Loop order of the tiled schedule (see the model above); default 'fa2', what the engines run. */
  readonly schedule?: FlashSchedule;
}

/** 'fa2': outer loop over query tiles (FlashAttention-2); 'fa1': outer loop over K/V blocks (FlashAttention-1). */
export type FlashSchedule = 'fa2' | 'fa1';

/** Bytes of one per-row statistic (ℓ, m, LSE): float32. */
export const STAT_BYTES = 4;
/** The paper's A100 figure: 192 KB of on-chip SRAM per streaming multiprocessor. */
export const DEFAULT_SRAM_BYTES = 192 * 1024;

/** Slow-memory traffic of one pass. Elements and statistics are counted separately. */
export interface Traffic {
  readonly elementsRead: number;
  readonly elementsWritten: number;
  readonly statsRead: number;
  readonly statsWritten: number;
  /** float32 accumulator elements (the 'fa2' backward's dQ), 4 bytes each whatever the dtype. */
  readonly accumRead: number;
  readonly accumWritten: number;
  readonly bytesRead: number;
  readonly bytesWritten: number;
  /** bytesRead + bytesWritten. */
  readonly bytes: number;
}

export interface ScheduleCost {
  readonly traffic: Traffic;
  /** FLOPs per byte moved (dense FLOPs of the pass / traffic.bytes). */
  readonly intensity: number;
}

export interface FlashBlocks {
  /** On-chip memory in elements: floor(sramBytes / elementBytes). */
  readonly m: number;
  /** Key rows per block: 'fa2' max(1, floor(M / (3d))); 'fa1' ceil(M / (4d)). */
  readonly bc: number;
  /** Query rows per block: 'fa2' Bc; 'fa1' min(Bc, d). */
  readonly br: number;
  /** Key blocks: ceil(tk / Bc) — in 'fa1' the number of passes over Q (and O or dQ). */
  readonly tc: number;
  /** Query blocks: ceil(tq / Br). */
  readonly tr: number;
}

export interface PassModel {
  /** Dense FLOPs of the pass. */
  readonly flops: number;
  readonly minimum: ScheduleCost;
  readonly naive: ScheduleCost;
  readonly flash: ScheduleCost;
}

export interface IOModel {
  readonly size: Required<AttentionSize>;
  readonly elementBytes: number;
  readonly sramBytes: number;
  readonly schedule: FlashSchedule;
  readonly blocks: FlashBlocks;
  readonly forward: PassModel;
  readonly backward: PassModel;
}

export type AttentionPass = 'forward' | 'backward';

function sizeOf(s: AttentionSize): Required<AttentionSize> {
  check(typeof s === 'object' && s !== null, 'E_ARG', 'attention size must be an object { batch, heads, tq, tk?, d }');
  const r = { batch: s.batch, heads: s.heads, tq: s.tq, tk: s.tk ?? s.tq, d: s.d };
  for (const [k, v] of Object.entries(r)) {
    check(Number.isSafeInteger(v) && v >= 1, 'E_ARG', `attention size: ${k} must be a positive integer, got ${String(v)}`);
  }
  return r;
}

function elementBytesOf(o: IOModelOptions): number {
  const e = o.elementBytes ?? bytesPerElement(o.dtype ?? 'f32');
  check(Number.isFinite(e) && e > 0, 'E_ARG', `elementBytes must be a positive number, got ${String(e)}`);
  return e;
}

function sramBytesOf(o: IOModelOptions): number {
  const m = o.sramBytes ?? DEFAULT_SRAM_BYTES;
  check(Number.isFinite(m) && m > 0, 'E_ARG', `sramBytes must be a positive number, got ${String(m)}`);
  return m;
}

/** Forward FLOPs: 4·B·H·Tq·Tk·D, half when causal. */
export function forwardFlops(size: AttentionSize, causal = false): number {
  const s = sizeOf(size);
  return (4 * s.batch * s.heads * s.tq * s.tk * s.d) / (causal ? 2 : 1);
}

/** Backward FLOPs: 2.5× the forward's. */
export function backwardFlops(size: AttentionSize, causal = false): number {
  return 2.5 * forwardFlops(size, causal);
}

export function attentionFlops(size: AttentionSize, pass: AttentionPass = 'forward', causal = false): number {
  return pass === 'forward' ? forwardFlops(size, causal) : backwardFlops(size, causal);
}

function scheduleOf(o: IOModelOptions): FlashSchedule {
  const s = o.schedule ?? 'fa2';
  check(s === 'fa2' || s === 'fa1', 'E_ARG', `schedule must be 'fa2' or 'fa1', got ${String(s)}`);
  return s;
}

function traffic(bh: number, elemBytes: number, er: number, ew: number, sr: number, sw: number, ar = 0, aw = 0): Traffic {
  const elementsRead = bh * er;
  const elementsWritten = bh * ew;
  const statsRead = bh * sr;
  const statsWritten = bh * sw;
  const accumRead = bh * ar;
  const accumWritten = bh * aw;
  const bytesRead = elementsRead * elemBytes + (statsRead + accumRead) * STAT_BYTES;
  const bytesWritten = elementsWritten * elemBytes + (statsWritten + accumWritten) * STAT_BYTES;
  return { elementsRead, elementsWritten, statsRead, statsWritten, accumRead, accumWritten, bytesRead, bytesWritten, bytes: bytesRead + bytesWritten };
}

/** Block sizes of the tiled schedule ('fa2': Q + K + V tiles fit M; 'fa1': paper Algorithm 1, line 1). */
export function flashBlocks(size: AttentionSize, opts: IOModelOptions = {}): FlashBlocks {
  const s = sizeOf(size);
  const m = Math.floor(sramBytesOf(opts) / elementBytesOf(opts));
  check(m >= 1, 'E_ARG', `sramBytes must hold at least one element`);
  const fa2 = scheduleOf(opts) === 'fa2';
  const bc = fa2 ? Math.max(1, Math.floor(m / (3 * s.d))) : Math.ceil(m / (4 * s.d));
  const br = fa2 ? bc : Math.min(bc, s.d);
  return { m, bc, br, tc: Math.ceil(s.tk / bc), tr: Math.ceil(s.tq / br) };
}

/** Each input read once, each output written once (LSE as one float32 per row). */
export function minimumTraffic(size: AttentionSize, pass: AttentionPass, opts: IOModelOptions = {}): Traffic {
  const { batch, heads, tq, tk, d } = sizeOf(size);
  const e = elementBytesOf(opts);
  const bh = batch * heads;
  if (pass === 'forward') return traffic(bh, e, tq * d + 2 * tk * d, tq * d, 0, tq);
  return traffic(bh, e, 3 * tq * d + 2 * tk * d, tq * d + 2 * tk * d, tq, 0);
}

/** The standard schedule that writes S and P (and dP, dS) to slow memory. */
export function naiveTraffic(size: AttentionSize, pass: AttentionPass, opts: IOModelOptions = {}): Traffic {
  const { batch, heads, tq, tk, d } = sizeOf(size);
  const e = elementBytesOf(opts);
  const bh = batch * heads;
  const nn = tq * tk;
  if (pass === 'forward') return traffic(bh, e, tq * d + 2 * tk * d + 2 * nn, tq * d + 2 * nn, 0, 0);
  return traffic(bh, e, 5 * nn + 3 * tq * d + 2 * tk * d, 2 * nn + tq * d + 2 * tk * d, 0, 0);
}

/** The tiled FlashAttention schedule with on-chip memory `sramBytes` (see the model above). */
export function flashTraffic(size: AttentionSize, pass: AttentionPass, opts: IOModelOptions = {}): Traffic {
  const { batch, heads, tq, tk, d } = sizeOf(size);
  const e = elementBytesOf(opts);
  const { tc, tr } = flashBlocks(size, opts);
  const bh = batch * heads;
  if (scheduleOf(opts) === 'fa2') {
    if (pass === 'forward') return traffic(bh, e, tq * d + tr * 2 * tk * d, tq * d, 0, tq);
    return traffic(bh, e, 2 * tk * d + 2 * tq * d + tc * 2 * tq * d, 2 * tk * d, tc * 2 * tq, tq, (tc - 1) * tq * d, tc * tq * d);
  }
  if (pass === 'forward') {
    return traffic(bh, e, 2 * tk * d + tc * tq * d + (tc - 1) * tq * d, tc * tq * d, (tc - 1) * 2 * tq, tc * 2 * tq);
  }
  return traffic(bh, e, 2 * tk * d + tc * 3 * tq * d + (tc - 1) * tq * d, tc * tq * d + 2 * tk * d, tc * 2 * tq, 0);
}

function cost(flops: number, t: Traffic): ScheduleCost {
  return { traffic: t, intensity: flops / t.bytes };
}

/** FLOPs, traffic and arithmetic intensity of both schedules, forward and backward. */
export function ioModel(size: AttentionSize, opts: IOModelOptions = {}): IOModel {
  const s = sizeOf(size);
  const passModel = (pass: AttentionPass): PassModel => {
    const flops = attentionFlops(s, pass);
    return {
      flops,
      minimum: cost(flops, minimumTraffic(s, pass, opts)),
      naive: cost(flops, naiveTraffic(s, pass, opts)),
      flash: cost(flops, flashTraffic(s, pass, opts)),
    };
  };
  return {
    size: s,
    elementBytes: elementBytesOf(opts),
    sramBytes: sramBytesOf(opts),
    schedule: scheduleOf(opts),
    blocks: flashBlocks(s, opts),
    forward: passModel('forward'),
    backward: passModel('backward'),
  };
}
