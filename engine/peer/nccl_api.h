// nccl_api.h — NCCL's functions, loaded from libnccl.so.2 when a pair first needs them.
// sparkd does not link NCCL: a box without it runs everything but peer.transport = "nccl",
// and that setting then fails with a message that says what to install.
#pragma once
#if SPARKD_CUDA
#include <nccl.h>

namespace spark {

struct NcclApi {
  ncclResult_t (*GetUniqueId)(ncclUniqueId* id);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t* state);
  ncclResult_t (*CommDestroy)(ncclComm_t comm);
  ncclResult_t (*CommAbort)(ncclComm_t comm);
  ncclResult_t (*Send)(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                       cudaStream_t stream);
  ncclResult_t (*Recv)(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
  const char* (*GetErrorString)(ncclResult_t result);
};

// The library's functions, loaded once per process; InputError (the same one every time)
// when libnccl.so.2 cannot be loaded or lacks one of them.
const NcclApi& nccl();

}  // namespace spark
#endif
