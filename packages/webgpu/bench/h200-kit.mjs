// The conformance kit on the GPU machine with the package's default tiles, as one shard of
// several processes (pipeline compilation dominates the kit's time and runs on the CPU, so
// shards in parallel finish it in a fraction of the time; the GPU work is tiny):
//   for k in 0 1 2 3; do FA_KIT_SHARD=$k/4 node h200-kit.mjs > $OUT/kit-$k.log & done; wait
// Shard k runs the kit cases i ≡ k (mod n) of the full list (320 cases, seed 1, forward and
// backward, every dtype and option); shard 0 also runs the extra checks (NaN, repeatability, bad
// inputs), shard 1 the 24-case device-tensor suite. Each prints its summary, its failures and
// which tiles its cases used; writes $OUT/kit-<k>.json.
import { writeFileSync } from 'node:fs';
import { checkCase, conformanceCases, EXTRA_CHECKS, formatSummary, runConformance, summarize } from '@fa/core/testing';
import { createWebGPUBackend } from '@fa/webgpu';

const [k, n] = (process.env.FA_KIT_SHARD ?? '0/1').split('/').map(Number);
const OUT = process.env.OUT ?? '/tmp';
const count = Number(process.env.FA_KIT_CASES ?? 320);
const t0 = performance.now();
const be = await createWebGPUBackend({});
const cases = conformanceCases({ count, seed: 1 }).filter((_, i) => i % n === k);
const results = [];
const tiles = new Map();
for (const c of cases) {
  const r = await checkCase(be, c);
  results.push(r);
  for (const s of be.lastSpecs) {
    const key = JSON.stringify(s.tile);
    tiles.set(key, (tiles.get(key) ?? 0) + 1);
  }
  if (!r.pass) console.log(r.message.split('\n').slice(0, 4).join(' | '));
}
if (k === 0) {
  for (const x of EXTRA_CHECKS) {
    const r = await x.run(be);
    results.push(r);
    if (!r.pass) console.log(r.message.split('\n').slice(0, 4).join(' | '));
  }
}
const s = summarize(be, results, performance.now() - t0);
const out = { shard: `${k}/${n}`, summary: formatSummary(s), passed: s.passed, failed: s.failed, skipped: s.skipped, failures: s.failures, tiles: Object.fromEntries(tiles) };
console.log(`shard ${k}/${n}: ${out.summary}`);
if (k === 1 || n === 1) {
  const u = await runConformance(be, { count: 24, quick: true, seed: 7, upload: true, extras: false });
  out.deviceTensors = formatSummary(u);
  console.log(`shard ${k}/${n} device tensors: ${out.deviceTensors}`);
}
console.log(`shard ${k}/${n} tiles used (kernel launches per tile): ${JSON.stringify(out.tiles)}`);
writeFileSync(`${OUT}/kit-${k}.json`, JSON.stringify(out, null, 1));
await be.dispose();
process.exit(s.failed ? 1 : 0);
