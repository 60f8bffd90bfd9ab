import { create } from 'webgpu';
import { forwardWGSL, dkdvWGSL } from '/work/main/packages/webgpu/dist/index.js';
const gpu = create([]);
const a = await gpu.requestAdapter();
const dev = await a.requestDevice({requiredFeatures:['subgroups'], requiredLimits:{maxComputeWorkgroupStorageSize: 32768, maxStorageBuffersPerShaderStage: 10}});
const tiles = JSON.parse(process.argv[2]);
for (const [kind, tile, d] of tiles) {
  const spec = {storage:'f32', d, tile, softcap:false, alibi:false, subgroups:false, outF32:false};
  const code = (kind==='fwd'?forwardWGSL:dkdvWGSL)(spec);
  const t0 = performance.now();
  const m = dev.createShaderModule({code});
  await dev.createComputePipelineAsync({layout:'auto', compute:{module:m, entryPoint:'main'}});
  console.log(kind, JSON.stringify(tile), d, code.length, 'compile ms', (performance.now()-t0).toFixed(0));
}
dev.destroy();
