// One device call (issue 24): another addon's CUDA memory and stream, no copies
// (test/interop-checks.mjs with the peer addon test/peer/peer.cu, built beside this script as
// peer.node), then what the change must not break: the full kit with host and device tensors
// (KV cache included) and the 10,000-call binding fuzz on a real context. Writes $OUT/interop.md.
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { formatSummary, runConformance } from '@fa/core/testing';
import { createCudaBackend, loadNative } from '@fa/cuda';
import { interopChecks } from './interop-checks.mjs';
import { fuzzBinding } from './fuzz-lib.mjs';

const lines = [];
const log = (s) => { console.log(s); lines.push(s); };
const out = process.env.OUT ?? '.';
const save = () => writeFileSync(`${out}/interop.md`, lines.join('\n') + '\n');
const peer = createRequire(import.meta.url)(new URL('./peer.node', import.meta.url).pathname);
const b = await createCudaBackend();
log(`${b.device}, ${new Date().toISOString()}`);
await interopChecks(peer, createCudaBackend, (r) => { log(`${r.pass ? 'ok  ' : 'FAIL'} ${r.name}: ${r.message}`); save(); });
save();
log('kit starts'); save();
for (const upload of process.env.FA_SKIP_KIT ? [] : [false, true]) {
  const t0 = performance.now();
  const sum = await runConformance(b, { kvCache: true, upload });
  log(`kit: ${formatSummary(sum)} (${upload ? 'device' : 'host'} tensors, ${((performance.now() - t0) / 1000).toFixed(1)} s)`);
  for (const f of sum.failures ?? []) log(`  FAIL ${f.name}: ${f.message}`);
  save();
}
const native = loadNative();
const ctx = new native.binding.Context();
const other = new native.binding.Context();
const s = await fuzzBinding(native.binding, ctx, other, 10000, 5);
if (s.resolvedCalls.length) log(`fuzz resolved: ${s.resolvedCalls.join(' | ')}`);
log(`fuzz: ${s.calls} calls, ${s.threw} JS errors, ${s.resolved} resolved, caches changed by refused calls: ${s.kvCacheChanged} (${[...s.samples].map(([k, n]) => `${k} x${n}`).join(', ')})`);
const f = await b.forward(await b.upload({ kind: 'host', dtype: 'f32', shape: [1, 64, 2, 32], data: new Float32Array(4096).fill(0.25) }), await b.upload({ kind: 'host', dtype: 'f32', shape: [1, 64, 2, 32], data: new Float32Array(4096).fill(0.5) }), await b.upload({ kind: 'host', dtype: 'f32', shape: [1, 64, 2, 32], data: new Float32Array(4096).fill(1) }));
log(`after the fuzz the backend runs: out[0] = ${(await b.read(f.out)).data[0]} (expect 1)`);
save();
