// Device kernels of context parallelism (ring attention): what the ring does around the
// attention kernels — float32 accumulators, the online-softmax merge of partial (out, lse)
// results, rounding to the dtype, the LSE layout change — plus a seeded fill for benchmarks.
// All launches go on the stream given (the owning context's), grid-stride, any size.
// The TypeScript contract is core's ShardOps (packages/core/src/parallel/ops.ts).
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace fa_cp {

enum Dt : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// p[i] = value for i < n.
cudaError_t fill_f32(float* p, size_t n, float value, cudaStream_t s);
// acc[i] += x[i] (x of dtype xdt) for i < n.
cudaError_t accumulate(float* acc, const void* x, int xdt, size_t n, cudaStream_t s);
// dst[i] = src[i] rounded to dstdt (round to nearest even) for i < n.
cudaError_t convert(void* dst, int dstdt, const float* src, size_t n, cudaStream_t s);
// Running (out [rows, heads, d] f32, lse [heads, rows] f32) merged with a partial result
// (part_out of part_dt, part_lse f32), row by row: core's online-softmax mergeStates.
cudaError_t merge_forward(float* out, float* lse, const void* part_out, int part_dt, const float* part_lse, int64_t rows, int heads,
                          int d, cudaStream_t s);
// LSE [batch, heads, t] -> [heads, batch*t] (to_packed) or back.
cudaError_t transpose_lse(float* dst, const float* src, int64_t batch, int64_t heads, int64_t t, int to_packed, cudaStream_t s);
// dst[i] = scale * u(seed, i), u uniform in [-1, 1) from a counter-based hash, stored as dt.
cudaError_t random_fill(void* dst, int dt, size_t n, uint64_t seed, float scale, cudaStream_t s);

}  // namespace fa_cp
