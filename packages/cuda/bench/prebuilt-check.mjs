// Device script: the committed prebuilt addon on a real GPU. Loads only the prebuilt addon
// (PREBUILDS_ONLY=1, as node-gyp-build's switch), says which file loaded and what it holds, runs
// the conformance kit on it (host and device tensors), then the root README's "Use it" example
// with `import '@fa/cuda'` added: plain resolveBackend(), forward and backward in f32, which runs
// on the best engine that accepts it (a note says when cuda declined). Writes prebuilt-check.json
// under $OUT. See KERNEL_NOTES.md, "Checking the prebuilt addon on the H200".
process.env.PREBUILDS_ONLY = '1';
const { formatSummary, runConformance } = await import('@fa/core/testing');
const { describeProblem, resolveBackend, tensor } = await import('@fa/core');
const { createCudaBackend, loadNative } = await import('@fa/cuda');
const { readFileSync, writeFileSync } = await import('node:fs');
const { dirname, join } = await import('node:path');

const n = loadNative();
if (!n.ok) throw new Error(`the prebuilt addon did not load: ${n.reason}`);
const manifest = JSON.parse(readFileSync(join(dirname(n.path), 'manifest.json'), 'utf8'));
console.log(`addon: ${n.source} ${n.path}`);
console.log(`built ${manifest.builtAt} from sources ${manifest.sourceHash.slice(0, 12)}: ${JSON.stringify(manifest.gpuCode)}, needs ${JSON.stringify(manifest.needs)}`);
const out = { source: n.source, path: n.path, manifest };

const b = await createCudaBackend();
console.log(`cuda backend on ${b.device}`);
for (const [label, opts] of [['host tensors', {}], ['device tensors', { upload: true }]]) {
  const s = await runConformance(b, { ...opts, onResult: (r) => r.pass || console.log(`FAIL ${r.name}: ${r.message}`) });
  console.log(`kit, ${label}: ${formatSummary(s)}`);
  out[label] = { passed: s.passed, failed: s.failed, skipped: s.skipped.length };
}

// The README example, unchanged but for the engine import (done above) and a note collector.
const notes = [];
const B = 1, T = 1024, H = 8, D = 64;
const rand = (n) => Float32Array.from({ length: n }, () => Math.random() - 0.5);
const q = tensor(rand(B * T * H * D), [B, T, H, D]);
const k = tensor(rand(B * T * H * D), [B, T, H, D]);
const v = tensor(rand(B * T * H * D), [B, T, H, D]);
const fa = await resolveBackend(undefined, { onFallback: (note) => notes.push(note) });
const t0 = performance.now();
const { out: o, lse } = await fa.forward(q, k, v, { causal: true });
const dOut = tensor(rand(B * T * H * D), [B, T, H, D]);
const { dq } = await fa.backward(q, k, v, o, dOut, lse, { causal: true });
const ran = fa.resolve(describeProblem(q, k, v, { causal: true })).backend.name;
console.log(`README example: ${fa.device}; f32 ran on ${ran} in ${(performance.now() - t0).toFixed(0)} ms; out ${o.shape}, dq ${dq.shape}${notes.length ? `; note: ${notes.join(' | ')}` : ''}`);
out.readme = { engines: fa.device, ranOn: ran, notes };
if (process.env.OUT) writeFileSync(`${process.env.OUT}/prebuilt-check.json`, JSON.stringify(out, null, 1));
await fa.dispose();
await b.dispose();
