export * from './model-ops.js';
export * from './layer-ops.js';
export { gemmCpu, type GemmCallAnyFloat } from './gemm-cpu.js';
export { cpuModelOps, addBiasRows } from './cpu-ops.js';
export { erfcPos, normalCdf32, crossEntropyCpu, crossEntropyBackwardCpu, layerNormCpu, layerNormBackwardCpu, rmsNormCpu, rmsNormBackwardCpu, siluCpu, siluBackwardCpu, rotaryCpu } from './layer-ops-cpu.js';
export { erf, normalCdf } from './erf.js';
