// ≥ 10,000 malformed calls straight into the binding: each must be a JS error, none may crash.
// Validation happens in C++ before any CUDA call, so a dry-run context exercises all of it here.
import { describe, expect, it } from 'vitest';
import { FUZZ_BASES, fuzzBinding, KV_FUZZ_BASES, validKvSpec, validSpec } from '../bench/fuzz-lib.mjs';
import { loadNative } from '../src/native.js';

const native = loadNative();

describe.skipIf(!native.ok)(`binding fuzz${native.ok ? '' : ` (skipped: ${native.reason})`}`, () => {
  it('the specs the fuzz mutates are valid (f32 and 16-bit, head dims 1, 13, 64, 200)', async () => {
    if (!native.ok) return;
    const ctx = new native.binding.Context({ dryRun: true });
    for (const base of FUZZ_BASES) {
      for (const backward of [false, true]) {
        const spec = validSpec(ctx, backward, base) as never;
        await expect(backward ? ctx.backward(spec) : ctx.forward(spec)).resolves.toBeDefined();
      }
    }
  });

  it('the KV-cache specs the fuzz mutates are valid (bf16 d 64, f32 d 13, f16 d 6)', async () => {
    if (!native.ok) return;
    const ctx = new native.binding.Context({ dryRun: true });
    for (const base of KV_FUZZ_BASES) await expect(ctx.kvForward(validKvSpec(ctx, base) as never)).resolves.toBeDefined();
  });

  it('12,000 malformed calls into the binding each throw a JS error with a code', async () => {
    if (!native.ok) return;
    for (const seed of [7, 3, 11]) {
      const ctx = new native.binding.Context({ dryRun: true });
      const other = new native.binding.Context({ dryRun: true });
      const s = await fuzzBinding(native.binding, ctx, other, 4000, seed);
      console.log(`binding fuzz (seed ${seed}): ${s.calls} calls, ${s.threw} JS errors (${[...s.samples].map(([k, n]) => `${k} ×${n}`).join(', ')}), ${s.resolved} resolved`);
      expect(s.calls).toBeGreaterThanOrEqual(4000);
      expect(s.resolvedCalls).toEqual([]);
      expect(s.resolved).toBe(0);
      expect(s.notErrors).toBe(0);
      expect(s.badCodes).toBe(0);
      expect(s.threw).toBe(s.calls);
    }
  });
});
