/**
 * @fa/autograd — a small reverse-mode tape over float32 tensors whose attention op runs any
 * registered @fa backend and recomputes in backward (saving only q, k, v, out and the LSE),
 * activation checkpointing, memory accounting and float64 gradcheck.
 */
export { Tensor, sizeOf, type Data, type Precision, type TensorOptions } from './tensor.js';
export { DeviceArray, isDeviceEngine, type DeviceEngine, type DeviceOps } from './device.js';
export { noGrad, enableGrad, isGradEnabled } from './grad-mode.js';
export { backward, type BackwardOptions } from './backward.js';
export type { Node as GradNode, Saved, Edge, BackwardFn } from './node.js';
export { memoryReport, savedBytes, formatMemoryReport, formatBytes, type MemoryReport, type OpMemory } from './memory.js';
export { checkpoint } from './checkpoint.js';
export { gradcheck, type GradcheckOptions, type GradcheckResult, type GradcheckInputResult } from './gradcheck.js';
export { Rng } from './rng.js';
export { tensor, zeros, ones, full, randn, rand, parameter, type FactoryOptions, type RandomOptions } from './init.js';
export { AdamW, SGD, Optimizer, clipGradNorm, clipGradNormAsync, type AdamWOptions } from './optim.js';

export { add, sub } from './ops/add.js';
export { mul, scale } from './ops/mul.js';
export { matmul } from './ops/matmul.js';
export { linear } from './ops/linear.js';
export { reshape, view } from './ops/reshape.js';
export { permute, transpose } from './ops/permute.js';
export { splitHeads, mergeHeads } from './ops/heads.js';
export { layerNorm } from './ops/layernorm.js';
export { rmsNorm } from './ops/rmsnorm.js';
export { silu, swiglu } from './ops/silu.js';
export { dropout, type DropoutOptions } from './ops/dropout.js';
export { rotary, rotaryTables, type RotaryTables, type RotaryOptions } from './ops/rotary.js';
export { gelu, type GeluApproximate } from './ops/gelu.js';
export { erf } from '@fa/core';
export { softmax } from './ops/softmax.js';
export { crossEntropy, type CrossEntropyOptions } from './ops/cross-entropy.js';
export { embedding } from './ops/embedding.js';
export { sum, mean } from './ops/reduce.js';
export { setModelEngine, modelEngine } from './engine.js';
export { attention, setDefaultBackend, getDefaultBackend, pickBackend, type AttentionCallOptions, type BackendChoice } from './ops/attention.js';

export { Module } from './nn/module.js';
export { Linear, LayerNorm, RMSNorm, Embedding, type InitOptions } from './nn/layers.js';
export { SelfAttention, TransformerBlock, type SelfAttentionOptions, type TransformerBlockOptions } from './nn/transformer.js';
export { KVCache, type KVCacheConfig } from './nn/kvcache.js';
export { GPT, type GPTConfig, type GPTForwardOptions, type GenerateOptions } from './nn/gpt.js';
export { makeCorpus, charVocab, type CharVocab } from './data/corpus.js';
