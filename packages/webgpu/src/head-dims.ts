/**
 * A head dim of V's own (Dv ≠ Dqk) on the WebGPU kernels, by zero padding to one head dim.
 *
 * The kernels are generated for one head dim D shared by q, k, v and out. With Dm = max(D, Dv),
 * padding the narrower side with zero columns changes nothing of the mathematics: q·k over Dm
 * columns equals q·k over D when the extra columns of q or k are zero, and zero columns of V give
 * zero columns of out, dV, dO·Vᵀ and rowsum(dO∘O) — while `scale` stays the caller's 1/sqrt(D)
 * (it is in the problem, never re-derived from the padded width). So a call runs the Dm kernels
 * on padded copies and keeps the first D or Dv columns of what they write:
 *
 *   forward:   q, k → Dm (Dv > D) or v → Dm (Dv < D); out (Dm) → Dv
 *   backward:  q, k, v, out, dOut → Dm as needed; dq, dk → D, dv → Dv
 *
 * The cost is the padding copies and (2·Dm)/(D + Dv) of the arithmetic (1.2× for MLA's 192/128).
 * resizeRowsWGSL is the one copy: rows of Ds elements into rows of Dd, zero past Ds.
 */
import type { AttentionProblem, DType } from '@fa/core';
import { grid1d } from './dispatch.js';

/** The problem the kernels run: p itself, or p with both head dims max(D, Dv). */
export function kernelProblem(p: AttentionProblem): AttentionProblem {
  if (p.vDim === p.d) return p;
  const m = Math.max(p.d, p.vDim);
  const at = (s: readonly number[]) => [...s.slice(0, -1), m];
  return { ...p, d: m, vDim: m, qShape: at(p.qShape), kShape: at(p.kShape), vShape: at(p.vShape), outShape: at(p.outShape) };
}

/**
 * dst[r·dd + c] = c < ds ? src[r·ds + c] : 0 for r < rows, c < dd. 32-bit elements (f32), or
 * 16-bit ones (f16, bf16) two to a word: one invocation writes one whole word of dst, so a row
 * that starts mid-word needs no atomics. u = (rows·dd, ds, dd, 0).
 */
export function resizeRowsWGSL(bits: 16 | 32): string {
  const elem = bits === 32 ? 'f32' : 'u32';
  const body =
    bits === 32
      ? `  if (w >= u.x) { return; }
  dst[w] = at(w);`
      : `  if (2u * w >= u.x) { return; }
  var hi = 0u;
  if (2u * w + 1u < u.x) { hi = at(2u * w + 1u); }
  dst[w] = at(2u * w) | (hi << 16u);`;
  const at =
    bits === 32
      ? `fn at(e: u32) -> f32 { let r = e / u.z; let c = e % u.z; if (c >= u.y) { return 0.0; } return src[r * u.y + c]; }`
      : `fn at(e: u32) -> u32 { let r = e / u.z; let c = e % u.z; if (c >= u.y) { return 0u; } let s = r * u.y + c; return (src[s >> 1u] >> (16u * (s & 1u))) & 0xffffu; }`;
  return `@group(0) @binding(0) var<storage, read> src: array<${elem}>;
@group(0) @binding(1) var<storage, read_write> dst: array<${elem}>;
@group(0) @binding(2) var<uniform> u: vec4<u32>;
${at}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let w = (wid.y * nw.x + wid.x) * 64u + lid;
${body}
}`;
}

/** What the backend lends the resize passes: pipelines, buffers, bind groups on its device. */
export interface ResizeEnv {
  readonly device: GPUDevice;
  pipeline(key: string, code: () => string): Promise<GPUComputePipeline>;
  uniform(values: Uint32Array<ArrayBuffer>): GPUBuffer;
  bind(pipe: GPUComputePipeline, buffers: (GPUBuffer | GPUBufferBinding | undefined)[]): GPUBindGroup;
}

/** Encodes dst = src with rows of ds elements resized to dd (a pass of its own; nothing when rows = 0). */
export async function encodeResize(
  env: ResizeEnv, enc: GPUCommandEncoder, dtype: DType, src: GPUBuffer | GPUBufferBinding, dst: GPUBuffer, rows: number, ds: number, dd: number,
): Promise<void> {
  const n = rows * dd;
  if (n === 0) return;
  const bits = dtype === 'f32' ? 32 : 16;
  const pipe = await env.pipeline(`resize-rows:${bits}`, () => resizeRowsWGSL(bits));
  const ub = env.uniform(new Uint32Array([n, ds, dd, 0]));
  const words = bits === 32 ? n : Math.ceil(n / 2);
  const pass = enc.beginComputePass();
  pass.setPipeline(pipe);
  pass.setBindGroup(0, env.bind(pipe, [src, dst, ub]));
  const [x, y] = grid1d(Math.ceil(words / 64), env.device.limits.maxComputeWorkgroupsPerDimension);
  pass.dispatchWorkgroups(x, y);
  pass.end();
}
