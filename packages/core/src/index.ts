/**
 * @fa/core — exact FlashAttention for TypeScript: the shared types, validation, reference,
 * online softmax, the CPU engine (registered as backend "cpu" on import), the IO model and .npy I/O.
 */
export * from './errors.js';
export * from './dtype.js';
export * from './tensor.js';
export * from './problem.js';
export * from './kvcache.js';
export * from './kvcache-host.js';
export * from './mask.js';
export * from './backend.js';
export * from './stream.js';
export * from './registry.js';
export * from './choose.js';
export * from './auto-backend.js';
export * from './reference.js';
export * from './naive.js';
export * from './online-softmax.js';
export * from './sinks.js';
export * from './philox.js';
export * from './option-support.js';
export * from './iomodel.js';
export * from './npy.js';
export * from './parallel/index.js';
export * from './cpu/register.js';
export * from './ops/index.js';
