/**
 * @fa/core/testing — the conformance kit every engine runs: seeded inputs, the case generator,
 * the tolerance policy, checkCase/runConformance, the generic extra checks, the reference as a
 * backend, defineConformanceSuite for vitest, a declining engine for testing engine choice, and
 * the memory measurement of the memory tests (measurePeakExtra).
 * See README.md, "Conformance kit".
 */
export * from './random.js';
export * from './cases.js';
export * from './tolerance.js';
export * from './check.js';
export * from './kvcache-cases.js';
export * from './kvcache-check.js';
export * from './reference-backend.js';
export * from './suite.js';
export * from './declining-backend.js';
export * from './memory.js';
export * from './op-kit.js';
export * from './layer-op-kit.js';
export * from './device-op-kit.js';
