/**
 * The matrix product on the shader cores (issue 25, model ops): C (M×N) = op(A)·op(B) [+ bias]
 * [+ C], row-major f32, op(A) stored K×M when transposed, op(B) stored N×K when transposed (core's
 * GemmCall). One workgroup of 16×16 threads computes a 64×64 tile of C, each thread a 4×4 block
 * (rows 4·ty …, columns 4·tx …) held as four vec4 accumulators: a step of k is one vec4 of B and
 * four broadcasts of A, four vector FMAs. A and B are staged 16 keys at a time through workgroup
 * memory (B as vec4s of columns), loaded along whichever dimension is contiguous in the stored
 * layout.
 * Products are summed in k order, one FMA at a time (f32 rounding, like the host engines').
 * Batched products run one batch per z of the grid, each at its offsets plus z batch strides.
 */
export const GEMM_TILE = 64;

/** Flags in Params.flags. */
export const GEMM_FLAGS = { transA: 1, transB: 2, accumulate: 4, bias: 8 } as const;

export function gemmWGSL(): string {
  return `struct Params { m: u32, n: u32, k: u32, flags: u32, aOff: u32, bOff: u32, cOff: u32, sa: u32, sb: u32, sc: u32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

var<workgroup> As: array<f32, 1024>;       // [16 keys][64 rows]
var<workgroup> Bs: array<vec4<f32>, 256>;  // [16 keys][64 columns as 16 vec4]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let row0 = wg.y * 64u;
  let col0 = wg.x * 64u;
  // batch wg.z: its operands start at the offsets plus z batch strides (elements)
  let ao = p.aOff + wg.z * p.sa;
  let bo = p.bOff + wg.z * p.sb;
  let co = p.cOff + wg.z * p.sc;
  let tid = lid.y * 16u + lid.x;
  let transA = (p.flags & 1u) != 0u;
  let transB = (p.flags & 2u) != 0u;
  // this thread's 4×4 of C: rows 4·ty …, columns 4·tx … (a vec4 of columns a row)
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < p.k; k0 += 16u) {
    for (var r = 0u; r < 4u; r++) {
      let idx = tid + r * 256u;
      // A: coalesced along k when stored M×K, along m when stored K×M
      var m = idx / 16u;
      var k = idx % 16u;
      if (transA) { k = idx / 64u; m = idx % 64u; }
      let gm = row0 + m;
      let gk = k0 + k;
      var va = 0.0;
      if (gm < p.m && gk < p.k) {
        if (transA) { va = A[ao + gk * p.m + gm]; } else { va = A[ao + gm * p.k + gk]; }
      }
      As[k * 64u + m] = va;
      // B: coalesced along n when stored K×N, along k when stored N×K
      var n = idx % 64u;
      var kb = idx / 64u;
      if (transB) { n = idx / 16u; kb = idx % 16u; }
      let gn = col0 + n;
      let gkb = k0 + kb;
      var vb = 0.0;
      if (gn < p.n && gkb < p.k) {
        if (transB) { vb = B[bo + gn * p.k + gkb]; } else { vb = B[bo + gkb * p.n + gn]; }
      }
      Bs[kb * 16u + n / 4u][n % 4u] = vb;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      let b = Bs[kk * 16u + lid.x];
      let a = kk * 64u + lid.y * 4u;
      acc[0] = fma(vec4<f32>(As[a]), b, acc[0]);
      acc[1] = fma(vec4<f32>(As[a + 1u]), b, acc[1]);
      acc[2] = fma(vec4<f32>(As[a + 2u]), b, acc[2]);
      acc[3] = fma(vec4<f32>(As[a + 3u]), b, acc[3]);
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let gm = row0 + lid.y * 4u + i;
    if (gm >= p.m) { continue; }
    for (var j = 0u; j < 4u; j++) {
      let gn = col0 + lid.x * 4u + j;
      if (gn >= p.n) { continue; }
      var v = acc[i][j];
      if ((p.flags & 8u) != 0u) { v += bias[gn]; }
      if ((p.flags & 4u) != 0u) { v += C[co + gm * p.n + gn]; }
      C[co + gm * p.n + gn] = v;
    }
  }
}`;
}
