/**
 * Which engine computes the model's ops (DESIGN.md, "Model ops"). Attention goes to the backend
 * its options name; the float32 work of the other ops goes to the model engine set here: the
 * products of linear and matmul (with linear's bias in the epilogue and its gradient as a row
 * sum), gelu, layerNorm, crossEntropy and AdamW, forward and backward. The default is the cpu
 * engine's TypeScript kernels; `setModelEngine(await createNativeBackend())` (from @fa/wasm) runs
 * them on the SIMD kernels, in place, the products on every thread. An engine that has no model ops is refused with the reason, never replaced by a
 * host fallback behind the caller's back.
 */
import { cpuModelOps, FAError, MODEL_OP_NAMES, type AttentionBackend, type HostModelOps } from '@fa/core';

let current: HostModelOps = cpuModelOps;

const looksLikeOps = (x: unknown): x is HostModelOps => typeof x === 'object' && x !== null && typeof (x as HostModelOps).gemm === 'function' && typeof (x as HostModelOps).engine === 'string';

/** The model ops an object lacks (none for a complete HostModelOps). */
function missing(ops: HostModelOps): string[] {
  return MODEL_OP_NAMES.filter((n) => typeof (ops as unknown as Record<string, unknown>)[n] !== 'function');
}

function complete(ops: HostModelOps, who: string): HostModelOps {
  const lack = missing(ops);
  if (lack.length > 0) throw new FAError('E_UNSUPPORTED', `${who} lacks model ops ${lack.join(', ')}; a model engine must offer all of ${MODEL_OP_NAMES.join(', ')}`);
  return ops;
}

/**
 * Sets the engine the model ops run on: an engine (its `modelOps`), a HostModelOps, or
 * null/undefined for the default (cpu). Returns the ops now in use.
 */
export function setModelEngine(engine?: AttentionBackend | HostModelOps | null): HostModelOps {
  if (engine == null) {
    current = cpuModelOps;
    return current;
  }
  if (looksLikeOps(engine)) {
    current = complete(engine, `the model ops of ${engine.engine}`);
    return current;
  }
  if (typeof engine !== 'object' || typeof (engine as AttentionBackend).name !== 'string') {
    throw new FAError('E_ARG', 'setModelEngine takes an engine (an AttentionBackend), its modelOps, or null for the cpu default');
  }
  const ops = engine.modelOps;
  if (!looksLikeOps(ops)) {
    throw new FAError('E_UNSUPPORTED', `the ${engine.name} engine runs attention only, no model ops yet (issue 25); model ops run on cpu, native or wasm, and attention on ${engine.name} through the attention op's backend option`);
  }
  current = complete(ops, `the ${engine.name} engine`);
  return current;
}

/** The model ops in use. */
export function modelEngine(): HostModelOps {
  return current;
}
