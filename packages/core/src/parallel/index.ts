/**
 * Context parallelism (ring attention): the sequence is sharded over ranks, K/V shards travel
 * around a ring, and every rank merges the partial results with the online-softmax merge.
 * The algorithm (ring.ts) is independent of the engine: it runs over an AttentionBackend, its
 * ShardOps and a Communicator. README.md, "Context parallelism", shows how to use it.
 */
export * from './communicator.js';
export * from './layout.js';
export * from './shard.js';
export * from './plan.js';
export * from './ops.js';
export * from './host-ops.js';
export * from './ring.js';
export * from './local-ring.js';
export * from './port-communicator.js';
export * from './ring-backend.js';
export * from './inprocess.js';
