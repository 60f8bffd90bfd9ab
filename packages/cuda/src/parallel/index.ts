/**
 * Context parallelism on CUDA: core's ring attention (ringForward/ringBackward) with device
 * shard ops and an NCCL communicator, one process per GPU, started by launchLocal (or any
 * launcher that sets the rendezvous variables of rendezvous.ts).
 */
export { cudaShardOps, nativeShardOps } from './ops.js';
export { createNcclCommunicator, ncclCandidates, ncclStatus, NcclCommunicator, type NcclCommunicatorOptions, type NcclStatus } from './nccl.js';
export { decodeNcclId, encodeNcclId, NCCL_ID_BYTES, rankFromEnv, removeNcclIdFile, shareNcclId, type RankInfo, type ShareIdOptions } from './rendezvous.js';
export { launchLocal, type LaunchOptions, type LaunchResult } from './launch.js';
