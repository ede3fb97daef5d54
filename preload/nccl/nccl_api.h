/* SPDX-License-Identifier: MIT */
/*
 * The NCCL functions the stand-in implements (nccl.c), declared with our ABI
 * types (runtime/libs/nccl_abi.h): ncclResult_t, ncclDataType_t and ncclRedOp_t are
 * int, ncclComm_t is phos_nccl_comm_t, cudaStream_t is CUDA's. Each also has
 * its pnccl* name (PHOS_ALIAS).
 */
#pragma once

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "nccl_abi.h"

typedef int nccl_result;

nccl_result ncclGetVersion(int *version);
nccl_result ncclGetUniqueId(phos_nccl_unique_id *uniqueId);
const char *ncclGetErrorString(nccl_result result);
const char *ncclGetLastError(phos_nccl_comm_t comm);
nccl_result ncclMemAlloc(void **ptr, size_t size);
nccl_result ncclMemFree(void *ptr);
nccl_result ncclCommInitRank(phos_nccl_comm_t *comm, int nranks, phos_nccl_unique_id commId, int rank);
nccl_result ncclCommInitRankConfig(phos_nccl_comm_t *comm, int nranks, phos_nccl_unique_id commId, int rank, struct phos_nccl_config *config);
nccl_result ncclCommInitAll(phos_nccl_comm_t *comms, int ndev, const int *devlist);
nccl_result ncclCommSplit(phos_nccl_comm_t comm, int color, int key, phos_nccl_comm_t *newcomm, struct phos_nccl_config *config);
nccl_result ncclCommFinalize(phos_nccl_comm_t comm);
nccl_result ncclCommDestroy(phos_nccl_comm_t comm);
nccl_result ncclCommAbort(phos_nccl_comm_t comm);
nccl_result ncclCommCount(const phos_nccl_comm_t comm, int *count);
nccl_result ncclCommCuDevice(const phos_nccl_comm_t comm, int *device);
nccl_result ncclCommUserRank(const phos_nccl_comm_t comm, int *rank);
nccl_result ncclCommGetAsyncError(phos_nccl_comm_t comm, nccl_result *asyncError);
nccl_result ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclBcast(void *buff, size_t count, int datatype, int root, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype, int op, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclSend(const void *sendbuff, size_t count, int datatype, int peer, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclRecv(void *recvbuff, size_t count, int datatype, int peer, phos_nccl_comm_t comm, cudaStream_t stream);
nccl_result ncclGroupStart(void);
nccl_result ncclGroupEnd(void);
