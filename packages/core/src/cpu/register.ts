/**
 * Registers the CPU engine as backend "cpu" (priority CPU_PRIORITY, 0: every other engine is preferred when
 * it is available, and "cpu" is always there to fall back on), and exports its public API.
 */
import { registerBackend } from '../registry.js';
import { createCpuBackend } from './engine.js';

export { CpuBackend, createCpuBackend, DEFAULT_INLINE_BELOW_FLOPS, type CpuEngineOptions } from './engine.js';
export { chooseTiles, DEFAULT_CPU_CACHE, paddedD, workingSetBytes, type CacheModel, type TileSizes } from './tiles.js';
// The engine's work units, its thread pool and its deterministic dQ reduction, for engines that
// bring only their own kernels (@fa/wasm): the dense plans and the KV-cache plan (units, key
// chunks, partial-state slots).
export { planForward } from './forward.js';
export { planBackward, reducePrivate, type BackwardPlan } from './backward.js';
export { planKVCache, splitGroups, KV_CHUNK, type KVCachePlan, type SplitGroup } from './kvcache.js';
export { FWD_UNIT, BWD_UNIT, KV_UNIT } from './job.js';
export { WorkerPool, workerExecArgv } from './pool.js';

/** Below every other engine: the one that is always there to fall back on. */
export const CPU_PRIORITY = 0;

registerBackend('cpu', () => createCpuBackend(), CPU_PRIORITY);
