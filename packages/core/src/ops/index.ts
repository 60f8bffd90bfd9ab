export * from './model-ops.js';
export { cpuModelOps, gemmCpu, type GemmCallAnyFloat } from './gemm-cpu.js';
