import { create } from 'webgpu';
const gpu = create([]);
const a = await gpu.requestAdapter();
const dev = await a.requestDevice({requiredLimits:{maxComputeWorkgroupStorageSize: 32768}});
const variants = {
 plain: `@group(0) @binding(0) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) l: u32) { var a = 0.0; for (var i = 0u; i < 100u; i++) { a = a + exp(f32(i) * o[i]); } o[l] = a; }`,
 barrier: `@group(0) @binding(0) var<storage, read_write> o: array<f32>;
var<workgroup> s: array<f32, 64>;
@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) l: u32) { var a = 0.0; for (var i = 0u; i < 100u; i++) { s[l] = exp(f32(i) * o[i]); workgroupBarrier(); a = a + s[(l + 1u) % 64u]; workgroupBarrier(); } o[l] = a; }`,
 barrier16live: `@group(0) @binding(0) var<storage, read_write> o: array<f32>;
var<workgroup> s: array<f32, 64>;
@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) l: u32) { var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0; var a4 = 0.0; var a5 = 0.0; var a6 = 0.0; var a7 = 0.0;
for (var i = 0u; i < 100u; i++) { s[l] = exp(f32(i) * o[i]); workgroupBarrier(); let x = s[(l + 1u) % 64u]; a0 += x; a1 += x*x; a2 += x*a0; a3 += x*a1; a4+=a3*x; a5 += a4*x; a6 += a5*x; a7 += a6; workgroupBarrier(); } o[l] = a0+a1+a2+a3+a4+a5+a6+a7; }`,
};
for (const [name, code] of Object.entries(variants)) {
  const t0 = performance.now();
  const m = dev.createShaderModule({code});
  const p = await dev.createComputePipelineAsync({layout:'auto', compute:{module:m, entryPoint:'main'}});
  const t1 = performance.now();
  const b = dev.createBuffer({size: 4096, usage: 128});
  const bg = dev.createBindGroup({layout: p.getBindGroupLayout(0), entries:[{binding:0, resource:{buffer:b}}]});
  const e = dev.createCommandEncoder(); const ps = e.beginComputePass(); ps.setPipeline(p); ps.setBindGroup(0, bg); ps.dispatchWorkgroups(1); ps.end(); dev.queue.submit([e.finish()]);
  await dev.queue.onSubmittedWorkDone();
  console.log(name, 'create', (t1-t0).toFixed(0), 'first dispatch', (performance.now()-t1).toFixed(0));
}
dev.destroy();
