import '@fa/webgpu';
import { resolveBackend } from '@fa/core';
import { AttentionRun, makeInputs } from './dist/story/run.js';
const b = await resolveBackend(process.argv[2] ?? 'cpu');
console.log(b.name, b.device);
for (const T of (process.argv[3] ?? '256,512,1024,1024,1024').split(',').map(Number)) {
  const r = new AttentionRun(b, makeInputs(T, 64, 'f32', 1, b.name === 'cpu'), false);
  try {
  const f = await r.forward({ single: true });
  const g = await r.backward({ single: true });
  console.log(T, f.seconds.toFixed(3), (f.flops / f.seconds / 1e6).toFixed(0), g.seconds.toFixed(3), (g.flops / g.seconds / 1e6).toFixed(0));
  } catch (e) { console.log('ERR', e.message); }
  r.dispose();
}
await b.dispose();
