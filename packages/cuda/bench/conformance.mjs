// Device script: the conformance kit on the CUDA backend (host tensors, device tensors, and the
// f32 cases again on the FFMA kernels), the binding fuzz against a real context, and a summary.
// Writes conformance.json under $LOGS (or $OUT).
import { formatSummary, runConformance } from '@fa/core/testing';
import { createCudaBackend, loadNative } from '@fa/cuda';
import { writeFileSync } from 'node:fs';
import { fuzzBinding } from './fuzz-lib.mjs';

const b = await createCudaBackend();
const ffma = await createCudaBackend({ f32: 'ffma' });
console.log(`cuda backend on ${b.device}`);
const out = {};
for (const [label, be, opts] of [
  ['host tensors', b, {}],
  ['device tensors', b, { upload: true }],
  ['f32 on FFMA (createCudaBackend({ f32: "ffma" }))', ffma, { dtypes: ['f32'] }],
]) {
  const s = await runConformance(be, {
    ...opts,
    onResult: (r) => {
      if (!r.pass) console.log(`FAIL ${label}: ${r.name}: ${r.message}`);
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
if (f.resolved) console.log(`FAIL fuzz: calls that resolved: ${f.resolvedCalls.join('; ')}`);
out.fuzz = { calls: f.calls, threw: f.threw, resolved: f.resolved, resolvedCalls: f.resolvedCalls };
// still usable after the fuzz
const r = await b.forward(
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
  { kind: 'host', dtype: 'bf16', shape: [1, 3, 1, 64], data: new Uint16Array(192).fill(0x3f80) },
);
console.log(`after fuzz: out[0] = 0x${r.out.data[0].toString(16)} (expect 0x3f80)`);
// ... and in f32 with an odd head dim (out of a row that sees identical keys = v)
for (const d of [1, 13]) {
  const x = { kind: 'host', dtype: 'f32', shape: [1, 3, 1, d], data: new Float32Array(3 * d).fill(0.75) };
  const r32 = await b.forward(x, x, x, { causal: true });
  console.log(`after fuzz: f32 d=${d} out[0] = ${r32.out.data[0]} (expect 0.75)`);
  out[`afterFuzzF32d${d}`] = r32.out.data[0];
}
const dir = process.env.LOGS ?? process.env.OUT;
if (dir) writeFileSync(`${dir}/conformance.json`, JSON.stringify(out, null, 1));
await ffma.dispose();
await b.dispose();
