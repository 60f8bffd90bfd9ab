/**
 * The uniform parameter block of a dispatch: its WGSL struct and the host-side packing, which
 * must agree field by field.
 */
import type { Storage } from './spec.js';

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
  dp1: u32, dp2: u32, nan: f32, sinks_off: u32,
  drop_thr: u32, drop_k0: u32, drop_k1: u32, drop_off: u32,
  drop_scale: f32, pad0: u32, pad1: u32, pad2: u32,
}`;

/** Byte size of Params. */
export const PARAMS_BYTES = 128;

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
  /** Where the sinks' f32 bits start in `mt` (0: no sinks; cu_seqlens come first, so never 0 otherwise). */
  sinksOff?: number;
  /** Dropout (dropout.ts): threshold 0 = none. */
  dropout?: { readonly threshold: number; readonly k0: number; readonly k1: number; readonly offset: number; readonly keepScale: number };
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
  u[20] = p.dp1 ?? 0; u[21] = p.dp2 ?? 0; f[22] = NaN; u[23] = p.sinksOff ?? 0;
  const dr = p.dropout;
  if (dr) (u[24] = dr.threshold), (u[25] = dr.k0), (u[26] = dr.k1), (u[27] = dr.offset), (f[28] = dr.keepScale);
  return buf;
}
