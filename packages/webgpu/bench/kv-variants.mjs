// The decode kernel's variants (backend options) that h200-kv.mjs --variants times side by side
// and kv-variants-kit.mjs forces through the KV kit. 'base' is the package's default.
export const KV_VARIANTS = {
  base: {},
  lazy: { kvLazyRescale: true },
  qw: { kvQShared: true },
  'qw+lazy': { kvQShared: true, kvLazyRescale: true },
  kb8: { kvKeysPerStep: 8 },
  'kb8+lazy': { kvKeysPerStep: 8, kvLazyRescale: true },
  'qw+lazy+kb8': { kvQShared: true, kvLazyRescale: true, kvKeysPerStep: 8 },
  // 16-bit caches only (f32 rows are 16-byte chunks over 32 lanes at D = 128 already)
  c8: { kvChunkBytes: 8 },
  'c8+lazy': { kvChunkBytes: 8, kvLazyRescale: true },
  'c8+kb8': { kvChunkBytes: 8, kvKeysPerStep: 8 },
  'c8+kb8+lazy': { kvChunkBytes: 8, kvKeysPerStep: 8, kvLazyRescale: true },
  'c8+qw+lazy': { kvChunkBytes: 8, kvQShared: true, kvLazyRescale: true },
  'c8+kb2+lazy': { kvChunkBytes: 8, kvKeysPerStep: 2, kvLazyRescale: true },
};
