import { resolveBackend } from '@fa/core';
import { makeInputs, AttentionRun } from './dist/story/run.js';
import { bufferProbe, collectGarbage } from './dist/memory.js';
const b = await resolveBackend('cpu');
const T = 2048, D = 64;
for (const n of [1, 2, 3]) {
const run = new AttentionRun(b, makeInputs(T, D, 'f32', n), false);
const p = bufferProbe();
const orig = { begin: p.begin, sample: p.sample };
p.begin = () => { orig.begin(); console.log('begin', process.memoryUsage().arrayBuffers); };
p.sample = () => { orig.sample(); console.log('sample', process.memoryUsage().arrayBuffers); };
const f = await run.forward({ memory: p, predictedSeconds: 2.5 });
console.log('extra', f.peakExtra, f.chunks);
const g = await run.backward({ memory: bufferProbe(), predictedSeconds: 0.5 });
console.log('bextra', g.peakExtra, g.chunks);
}
await b.dispose();
