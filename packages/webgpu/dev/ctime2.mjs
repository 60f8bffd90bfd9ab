import { create } from 'webgpu';
import { forwardWGSL, dkdvWGSL, dqWGSL } from '../dist/index.js';
const gpu = create(process.env.DAWN_FLAGS ? process.env.DAWN_FLAGS.split(' ') : []);
const a = await gpu.requestAdapter();
const dev = await a.requestDevice({requiredLimits:{maxComputeWorkgroupStorageSize: 32768}});
const tile = JSON.parse(process.argv[2]);
const D = +process.argv[3];
const kind = process.argv[4] || 'fwd';
const spec = {storage: process.argv[5] || 'f32', d: D, tile, softcap:false, alibi:false, subgroups: !!process.env.SG, outF32:false, dynamic: !!process.env.DYN};
let code = ({fwd: forwardWGSL, dkdv: dkdvWGSL, dq: dqWGSL})[kind](spec);
for (const r of process.argv.slice(6)) { const [x, y] = r.split('=>'); code = code.split(x).join(y ?? ''); }
const t0 = performance.now();
const m = dev.createShaderModule({code});
const p = await dev.createComputePipelineAsync({layout:'auto', compute:{module:m, entryPoint:'main'}});
const t1 = performance.now();
const entries = []; const lay = p.getBindGroupLayout(0);
for (let i = 0; i < 10; i++) { if (code.includes(`@binding(${i})`)) entries.push({binding: i, resource: {buffer: dev.createBuffer({size: 65536, usage: i === 0 ? 64 : 128})}}); }
dev.pushErrorScope('validation');
const bg = dev.createBindGroup({layout: lay, entries});
const e = dev.createCommandEncoder(); const ps = e.beginComputePass(); ps.setPipeline(p); ps.setBindGroup(0, bg); ps.dispatchWorkgroups(1); ps.end(); dev.queue.submit([e.finish()]);
await dev.queue.onSubmittedWorkDone();
const err = await dev.popErrorScope();
console.log(kind, JSON.stringify(tile), D, code.length, 'create', (t1-t0).toFixed(0), 'first dispatch', (performance.now()-t1).toFixed(0), err ? err.message.slice(0,200) : '');
dev.destroy();
