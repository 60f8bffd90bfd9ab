// The KV-cache part of the conformance kit on a real GPU with the package's default
// (specialised) kernels, host caches and device caches: every template in every dtype (the
// options since FlashAttention-2 among them: leftpad, batch index, rotary, sinks, Dv, MLA's
// latent cache, head dims to 576). Prints the summary and the failures; writes $OUT/kv-kit.json.
import { writeFileSync } from 'node:fs';
import { checkKVCacheCase, kvCacheCases } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';

const OUT = process.env.OUT ?? '/tmp';
const be = await createWebGPUBackend({});
const out = {};
for (const upload of [false, true]) {
  let passed = 0, failed = 0, skipped = 0;
  const failures = [];
  for (const c of kvCacheCases({ seed: 1 })) {
    const r = await checkKVCacheCase(be, c, { upload });
    if (r.skipped) skipped++;
    else if (r.pass) passed++;
    else {
      failed++;
      failures.push(`${c.name}: ${r.message.split('\n').slice(0, 3).join(' | ')}`);
    }
  }
  const what = upload ? 'device caches' : 'host caches';
  out[what] = { passed, failed, skipped, failures };
  console.log(`kv kit on ${be.device} (${what}): ${passed} passed, ${skipped} skipped, ${failed} failed`);
  for (const f of failures.slice(0, 10)) console.log(`  FAIL ${f}`);
}
writeFileSync(`${OUT}/kv-kit.json`, JSON.stringify(out, null, 1));
await be.dispose();
