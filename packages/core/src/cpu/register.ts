/**
 * Registers the CPU engine as backend "cpu" (priority 0: every other engine is preferred when
 * it is available, and "cpu" is always there to fall back on), and exports its public API.
 */
import { registerBackend } from '../registry.js';
import { createCpuBackend } from './engine.js';

export { CpuBackend, createCpuBackend, DEFAULT_INLINE_BELOW_FLOPS, type CpuEngineOptions } from './engine.js';
export { chooseTiles, DEFAULT_CPU_CACHE, paddedD, workingSetBytes, type CacheModel, type TileSizes } from './tiles.js';

registerBackend('cpu', () => createCpuBackend(), 0);
