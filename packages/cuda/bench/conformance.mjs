// Device script: the conformance kit on the CUDA backend (host tensors, then device tensors),
// the binding fuzz against a real context, and a summary. Writes conformance.json under $OUT.
import { formatSummary, runConformance } from '@fa/core/testing';
import { createCudaBackend, loadNative } from '@fa/cuda';
import { writeFileSync } from 'node:fs';
import { fuzzBinding } from './fuzz-lib.mjs';

const b = await createCudaBackend();
console.log(`cuda backend on ${b.device}`);
const out = {};
for (const [label, opts] of [['host tensors', {}], ['device tensors', { upload: true }]]) {
  const s = await runConformance(b, {
    ...opts,
    onResult: (r) => {
      if (!r.pass) console.log(`FAIL ${r.name}: ${r.message}`);
    },
  });
  console.log(`${label}: ${formatSummary(s)}`);
  out[label] = { passed: s.passed, failed: s.failed, skipped: s.skipped.length, failures: s.failures, skippedReasons: [...new Set(s.skipped.map((x) => x.reason))] };
}
const n = loadNative();
const ctx = new n.binding.Context();
const other = new n.binding.Context();
const f = await fuzzBinding(n.binding, ctx, other, 10000, 3);
console.log(`binding fuzz on the GPU: ${f.calls} calls, ${f.threw} JS errors, ${f.resolved} resolved, ${f.notErrors} non-Errors`);
out.fuzz = { calls: f.calls, threw: f.threw, resolved: f.resolved };
// still usable after the fuzz
const r = await b.forward(
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
);
console.log(`after fuzz: out[0] = 0x${r.out.data[0].toString(16)} (expect 0x3f80)`);
if (process.env.OUT) writeFileSync(`${process.env.OUT}/conformance.json`, JSON.stringify(out, null, 1));
await b.dispose();
