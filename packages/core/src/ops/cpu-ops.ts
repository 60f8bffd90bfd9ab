/** The cpu engine's model ops: every op checked, then run by the TypeScript kernels. */
import { gemmCpu } from './gemm-cpu.js';
import { checkGemm, type GemmCall, type HostModelOps } from './model-ops.js';
import { checkAdamW, checkCrossEntropy, checkCrossEntropyBackward, checkGelu, checkGeluBackward, checkLayerNorm, checkLayerNormBackward, checkRmsNorm, checkRmsNormBackward, checkRotary, checkSilu, checkSiluBackward, checkSumRows, checkDropout } from './layer-ops.js';
import { adamwCpu, crossEntropyBackwardCpu, crossEntropyCpu, geluBackwardCpu, geluCpu, layerNormBackwardCpu, layerNormCpu, rmsNormBackwardCpu, rmsNormCpu, rotaryCpu, siluBackwardCpu, siluCpu, sumRowsCpu, dropoutCpu } from './layer-ops-cpu.js';

/** Adds bias [N] to every row of c (M×N): the product's epilogue. */
export function addBiasRows(c: Float32Array | Float64Array, bias: Float32Array | Float64Array, M: number, N: number): void {
  for (let m = 0; m < M; m++) {
    const o = m * N;
    for (let n = 0; n < N; n++) c[o + n] += bias[n];
  }
}

export const cpuModelOps: HostModelOps = {
  engine: 'cpu',
  kernel: 'TypeScript, float64 sums, 4×4 blocks',
  gemm(g: GemmCall): void {
    checkGemm(g);
    gemmCpu(g);
    if (g.bias) addBiasRows(g.c, g.bias, g.M, g.N);
  },
  gelu: (c) => (checkGelu(c), geluCpu(c)),
  geluBackward: (c) => (checkGeluBackward(c), geluBackwardCpu(c)),
  layerNorm: (c) => (checkLayerNorm(c), layerNormCpu(c)),
  layerNormBackward: (c) => (checkLayerNormBackward(c), layerNormBackwardCpu(c)),
  crossEntropy: (c) => (checkCrossEntropy(c), crossEntropyCpu(c)),
  crossEntropyBackward: (c) => (checkCrossEntropyBackward(c), crossEntropyBackwardCpu(c)),
  adamw: (c) => (checkAdamW(c), adamwCpu(c)),
  sumRows: (c) => (checkSumRows(c), sumRowsCpu(c)),
  rmsNorm: (c) => (checkRmsNorm(c), rmsNormCpu(c)),
  rmsNormBackward: (c) => (checkRmsNormBackward(c), rmsNormBackwardCpu(c)),
  silu: (c) => (checkSilu(c), siluCpu(c)),
  siluBackward: (c) => (checkSiluBackward(c), siluBackwardCpu(c)),
  rotary: (c) => (checkRotary(c), rotaryCpu(c)),
  dropout: (c) => (checkDropout(c), dropoutCpu(c)),
};
