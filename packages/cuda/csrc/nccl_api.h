// The part of NCCL's C API that nccl_comm.cc calls, declared here because NCCL is loaded at run
// time (dlopen of libnccl.so.2) and its header is not needed to build. NCCL's C ABI is stable
// across 2.x: these prototypes, enum values and the 128-byte unique id are those of nccl.h
// since 2.7 (the release that added ncclSend/ncclRecv).
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>

namespace fa_nccl {

typedef struct ncclComm* ncclComm_t;

constexpr int kUniqueIdBytes = 128;
typedef struct {
  char internal[kUniqueIdBytes];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclUint8 = 1 } ncclDataType_t;

// NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on.
constexpr int kMinVersion = 2700;  // 2.7.0: ncclSend / ncclRecv

struct Api {
  ncclResult_t (*GetVersion)(int* version);
  ncclResult_t (*GetUniqueId)(ncclUniqueId* id);
  ncclResult_t (*CommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
  ncclResult_t (*CommDestroy)(ncclComm_t comm);
  ncclResult_t (*CommAbort)(ncclComm_t comm);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t* asyncError);
  ncclResult_t (*Send)(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*Recv)(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  const char* (*GetErrorString)(ncclResult_t result);
  const char* (*GetLastError)(ncclComm_t comm);  // 2.13+; may be null
};

}  // namespace fa_nccl
