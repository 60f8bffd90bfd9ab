// The KV-cache part of the conformance kit on the specialised decode kernel (what real GPUs run)
// once per decode-kernel variant, forced through every case — a local check (lavapipe compiles
// one pipeline per variant and shape, so expect minutes), not part of CI.
//   source /opt/fa-vulkan/env.sh && node packages/webgpu/bench/kv-variants-kit.mjs [quick]
import { formatSummary, runConformance } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';
import { KV_VARIANTS } from './kv-variants.mjs';

const quick = process.argv[2] === 'quick';
let failed = 0;
for (const [name, opts] of Object.entries(KV_VARIANTS)) {
  const be = await createWebGPUBackend({ codegen: 'specialised', kvKernel: 'decode', ...opts });
  const t0 = performance.now();
  const s = await runConformance(be, { cases: [], kvCache: true, upload: true, quick });
  console.log(`${name}: ${formatSummary(s)} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  for (const f of s.failures.slice(0, 5)) console.log('  ' + f.message.split('\n').slice(0, 3).join(' | '));
  failed += s.failures.length;
  await be.dispose();
}
process.exit(failed ? 1 : 0);
