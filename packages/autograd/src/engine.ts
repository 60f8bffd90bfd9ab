/**
 * Which engine computes the model's ops (DESIGN.md, "Model ops"). Attention goes to the backend
 * its options name; the other ops go to the model engine set here, so far its matrix products
 * (linear, matmul, forward and backward). The default is the cpu engine's TypeScript kernel;
 * `setModelEngine(await createNativeBackend())` (from @fa/wasm) runs them on the SIMD
 * micro-kernels. An engine that has no model ops is refused with the reason, never replaced by a
 * host fallback behind the caller's back.
 */
import { cpuModelOps, FAError, type AttentionBackend, type HostModelOps } from '@fa/core';

let current: HostModelOps = cpuModelOps;

const isOps = (x: unknown): x is HostModelOps => typeof x === 'object' && x !== null && typeof (x as HostModelOps).gemm === 'function' && typeof (x as HostModelOps).engine === 'string';

/**
 * Sets the engine the model ops run on: an engine (its `modelOps`), a HostModelOps, or
 * null/undefined for the default (cpu). Returns the ops now in use.
 */
export function setModelEngine(engine?: AttentionBackend | HostModelOps | null): HostModelOps {
  if (engine == null) {
    current = cpuModelOps;
    return current;
  }
  if (isOps(engine)) {
    current = engine;
    return current;
  }
  if (typeof engine !== 'object' || typeof (engine as AttentionBackend).name !== 'string') {
    throw new FAError('E_ARG', 'setModelEngine takes an engine (an AttentionBackend), its modelOps, or null for the cpu default');
  }
  const ops = engine.modelOps;
  if (!isOps(ops)) {
    throw new FAError('E_UNSUPPORTED', `the ${engine.name} engine runs attention only, no model ops yet (issue 25); model ops run on cpu, native or wasm, and attention on ${engine.name} through the attention op's backend option`);
  }
  current = ops;
  return current;
}

/** The model ops in use. */
export function modelEngine(): HostModelOps {
  return current;
}
