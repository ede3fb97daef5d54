/* SPDX-License-Identifier: MIT */
/*
 * Internal to the cuda device backend (device_cuda.c and its sub-files).
 * device_cuda_core.c, below all of them, loads the symbols, converts and logs
 * failures and makes contexts current; the other files call down into it.
 *
 * The driver (libcuda.so.1) and cuBLAS (libcublas.so.13) are reached only
 * through dlopen, once per process, at the first open():
 *
 *   cuda_syms_load()  ── dlopen libcuda.so.1 ── cuGetProcAddress_v2(name, version)
 *    (pthread_once)   │                         for every CU_SYMS entry, else
 *                     │                         dlsym(export name) when the driver
 *                     │                         has no cuGetProcAddress_v2
 *                     └─ dlopen libcublas.so.13 ── dlsym for every BLAS_SYMS entry
 *
 * Each driver entry names the base symbol, the CUDA version whose ABI we call
 * (the version in its cudaTypedefs.h PFN type, so the compiler checks that the
 * field type matches), and the exported name that version corresponds to
 * (cuMemGetInfo at 3020 is cuMemGetInfo_v2). A missing symbol fails open()
 * with an error naming it. Libraries are never dlclose'd.
 *
 * Streams are CUstream, events CUevent, functions CUfunction and cuBLAS
 * handles cublasHandle_t, passed through device.h's opaque pointers as they are;
 * modules are a struct cuda_module (the driver module and our copy of the image).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cublas_api.h>

#include "device.h"

/*   field                   base name                            version  exported name (fallback)         PFN type */
#define CU_SYMS(X)                                                                                                                  \
	X(Init,                  "cuInit",                             2000,  "cuInit",                          PFN_cuInit_v2000)          \
	X(DriverGetVersion,      "cuDriverGetVersion",                 2020,  "cuDriverGetVersion",              PFN_cuDriverGetVersion_v2020) \
	X(GetErrorName,          "cuGetErrorName",                     6000,  "cuGetErrorName",                  PFN_cuGetErrorName_v6000)  \
	X(GetErrorString,        "cuGetErrorString",                   6000,  "cuGetErrorString",                PFN_cuGetErrorString_v6000) \
	X(DeviceGet,             "cuDeviceGet",                        2000,  "cuDeviceGet",                     PFN_cuDeviceGet_v2000)     \
	X(DeviceGetCount,        "cuDeviceGetCount",                   2000,  "cuDeviceGetCount",                PFN_cuDeviceGetCount_v2000) \
	X(DeviceCanAccessPeer,   "cuDeviceCanAccessPeer",              4000,  "cuDeviceCanAccessPeer",           PFN_cuDeviceCanAccessPeer_v4000) \
	X(DeviceGetName,         "cuDeviceGetName",                    2000,  "cuDeviceGetName",                 PFN_cuDeviceGetName_v2000) \
	X(DeviceGetUuid,         "cuDeviceGetUuid",                   11040,  "cuDeviceGetUuid_v2",              PFN_cuDeviceGetUuid_v11040) \
	X(DeviceTotalMem,        "cuDeviceTotalMem",                   3020,  "cuDeviceTotalMem_v2",             PFN_cuDeviceTotalMem_v3020) \
	X(DeviceGetAttribute,    "cuDeviceGetAttribute",               2000,  "cuDeviceGetAttribute",            PFN_cuDeviceGetAttribute_v2000) \
	X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",          7000,  "cuDevicePrimaryCtxRetain",        PFN_cuDevicePrimaryCtxRetain_v7000) \
	X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease",       11000,  "cuDevicePrimaryCtxRelease_v2",    PFN_cuDevicePrimaryCtxRelease_v11000) \
	X(CtxSetCurrent,         "cuCtxSetCurrent",                    4000,  "cuCtxSetCurrent",                 PFN_cuCtxSetCurrent_v4000) \
	X(CtxSynchronize,        "cuCtxSynchronize",                   2000,  "cuCtxSynchronize",                PFN_cuCtxSynchronize_v2000) \
	X(MemGetInfo,            "cuMemGetInfo",                       3020,  "cuMemGetInfo_v2",                 PFN_cuMemGetInfo_v3020)    \
	X(MemAlloc,              "cuMemAlloc",                         3020,  "cuMemAlloc_v2",                   PFN_cuMemAlloc_v3020)      \
	X(MemFree,               "cuMemFree",                          3020,  "cuMemFree_v2",                    PFN_cuMemFree_v3020)       \
	X(MemAddressReserve,     "cuMemAddressReserve",               10020,  "cuMemAddressReserve",             PFN_cuMemAddressReserve_v10020) \
	X(MemAddressFree,        "cuMemAddressFree",                  10020,  "cuMemAddressFree",                PFN_cuMemAddressFree_v10020) \
	X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", PFN_cuMemGetAllocationGranularity_v10020) \
	X(MemCreate,             "cuMemCreate",                       10020,  "cuMemCreate",                     PFN_cuMemCreate_v10020)    \
	X(MemRelease,            "cuMemRelease",                      10020,  "cuMemRelease",                    PFN_cuMemRelease_v10020)   \
	X(MemMap,                "cuMemMap",                          10020,  "cuMemMap",                        PFN_cuMemMap_v10020)       \
	X(MemUnmap,              "cuMemUnmap",                        10020,  "cuMemUnmap",                      PFN_cuMemUnmap_v10020)     \
	X(MemSetAccess,          "cuMemSetAccess",                    10020,  "cuMemSetAccess",                  PFN_cuMemSetAccess_v10020) \
	X(MemExportToShareableHandle, "cuMemExportToShareableHandle", 10020, "cuMemExportToShareableHandle", PFN_cuMemExportToShareableHandle_v10020) \
	X(MemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle", PFN_cuMemImportFromShareableHandle_v10020) \
	X(MemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", 10020, "cuMemGetAllocationPropertiesFromHandle", PFN_cuMemGetAllocationPropertiesFromHandle_v10020) \
	X(MemHostRegister,       "cuMemHostRegister",                  6050,  "cuMemHostRegister_v2",            PFN_cuMemHostRegister_v6050) \
	X(MemHostUnregister,     "cuMemHostUnregister",                4000,  "cuMemHostUnregister",             PFN_cuMemHostUnregister_v4000) \
	X(StreamCreateWithPriority, "cuStreamCreateWithPriority",      5050,  "cuStreamCreateWithPriority",      PFN_cuStreamCreateWithPriority_v5050) \
	X(StreamDestroy,         "cuStreamDestroy",                    4000,  "cuStreamDestroy_v2",              PFN_cuStreamDestroy_v4000) \
	X(StreamSynchronize,     "cuStreamSynchronize",                2000,  "cuStreamSynchronize",             PFN_cuStreamSynchronize_v2000) \
	X(StreamQuery,           "cuStreamQuery",                      2000,  "cuStreamQuery",                   PFN_cuStreamQuery_v2000)   \
	X(StreamWaitEvent,       "cuStreamWaitEvent",                  3020,  "cuStreamWaitEvent",               PFN_cuStreamWaitEvent_v3020) \
	X(StreamAddCallback,     "cuStreamAddCallback",                5000,  "cuStreamAddCallback",             PFN_cuStreamAddCallback_v5000) \
	X(EventCreate,           "cuEventCreate",                      2000,  "cuEventCreate",                   PFN_cuEventCreate_v2000)   \
	X(EventDestroy,          "cuEventDestroy",                     4000,  "cuEventDestroy_v2",               PFN_cuEventDestroy_v4000)  \
	X(EventRecord,           "cuEventRecord",                      2000,  "cuEventRecord",                   PFN_cuEventRecord_v2000)   \
	X(EventSynchronize,      "cuEventSynchronize",                 2000,  "cuEventSynchronize",              PFN_cuEventSynchronize_v2000) \
	X(EventQuery,            "cuEventQuery",                       2000,  "cuEventQuery",                    PFN_cuEventQuery_v2000)    \
	X(EventElapsedTime,      "cuEventElapsedTime",                12080,  "cuEventElapsedTime_v2",           PFN_cuEventElapsedTime_v12080) \
	X(MemcpyHtoDAsync,       "cuMemcpyHtoDAsync",                  3020,  "cuMemcpyHtoDAsync_v2",            PFN_cuMemcpyHtoDAsync_v3020) \
	X(MemcpyDtoHAsync,       "cuMemcpyDtoHAsync",                  3020,  "cuMemcpyDtoHAsync_v2",            PFN_cuMemcpyDtoHAsync_v3020) \
	X(MemcpyDtoDAsync,       "cuMemcpyDtoDAsync",                  3020,  "cuMemcpyDtoDAsync_v2",            PFN_cuMemcpyDtoDAsync_v3020) \
	X(MemsetD32,             "cuMemsetD32",                        3020,  "cuMemsetD32_v2",                  PFN_cuMemsetD32_v3020)     \
	X(StreamWriteValue32,    "cuStreamWriteValue32",              11070,  "cuStreamWriteValue32_v2",         PFN_cuStreamWriteValue32_v11070) \
	X(StreamWaitValue32,     "cuStreamWaitValue32",               11070,  "cuStreamWaitValue32_v2",          PFN_cuStreamWaitValue32_v11070) \
	X(MemsetD8Async,         "cuMemsetD8Async",                    3020,  "cuMemsetD8Async",                 PFN_cuMemsetD8Async_v3020) \
	X(StreamSetAttribute,    "cuStreamSetAttribute",              11000,  "cuStreamSetAttribute",            PFN_cuStreamSetAttribute_v11000) \
	X(StreamGetAttribute,    "cuStreamGetAttribute",              11000,  "cuStreamGetAttribute",            PFN_cuStreamGetAttribute_v11000) \
	X(CtxSetLimit,           "cuCtxSetLimit",                      3010,  "cuCtxSetLimit",                   PFN_cuCtxSetLimit_v3010)   \
	X(CtxGetLimit,           "cuCtxGetLimit",                      3010,  "cuCtxGetLimit",                   PFN_cuCtxGetLimit_v3010)   \
	X(Memcpy2DAsync,         "cuMemcpy2DAsync",                    3020,  "cuMemcpy2DAsync_v2",              PFN_cuMemcpy2DAsync_v3020) \
	X(Memcpy3DAsync,         "cuMemcpy3DAsync",                    3020,  "cuMemcpy3DAsync_v2",              PFN_cuMemcpy3DAsync_v3020) \
	X(Array3DCreate,         "cuArray3DCreate",                    3020,  "cuArray3DCreate_v2",              PFN_cuArray3DCreate_v3020) \
	X(ArrayDestroy,          "cuArrayDestroy",                     2000,  "cuArrayDestroy",                  PFN_cuArrayDestroy_v2000)  \
	X(TexObjectCreate,       "cuTexObjectCreate",                  5000,  "cuTexObjectCreate",               PFN_cuTexObjectCreate_v5000) \
	X(TexObjectDestroy,      "cuTexObjectDestroy",                 5000,  "cuTexObjectDestroy",              PFN_cuTexObjectDestroy_v5000) \
	X(SurfObjectCreate,      "cuSurfObjectCreate",                 5000,  "cuSurfObjectCreate",              PFN_cuSurfObjectCreate_v5000) \
	X(SurfObjectDestroy,     "cuSurfObjectDestroy",                5000,  "cuSurfObjectDestroy",             PFN_cuSurfObjectDestroy_v5000) \
	X(MemsetD2D8Async,       "cuMemsetD2D8Async",                  3020,  "cuMemsetD2D8Async",               PFN_cuMemsetD2D8Async_v3020) \
	X(ModuleLoadData,        "cuModuleLoadData",                   2000,  "cuModuleLoadData",                PFN_cuModuleLoadData_v2000) \
	X(ModuleUnload,          "cuModuleUnload",                     2000,  "cuModuleUnload",                  PFN_cuModuleUnload_v2000)  \
	X(ModuleGetFunction,     "cuModuleGetFunction",                2000,  "cuModuleGetFunction",             PFN_cuModuleGetFunction_v2000) \
	X(ModuleGetGlobal,       "cuModuleGetGlobal",                  3020,  "cuModuleGetGlobal_v2",            PFN_cuModuleGetGlobal_v3020) \
	X(FuncGetAttribute,      "cuFuncGetAttribute",                 2020,  "cuFuncGetAttribute",              PFN_cuFuncGetAttribute_v2020) \
	X(FuncSetAttribute,      "cuFuncSetAttribute",                 9000,  "cuFuncSetAttribute",              PFN_cuFuncSetAttribute_v9000) \
	X(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, \
	  "cuOccupancyMaxActiveBlocksPerMultiprocessor", PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050)                           \
	X(LaunchKernel,          "cuLaunchKernel",                     4000,  "cuLaunchKernel",                  PFN_cuLaunchKernel_v4000)   \
	X(LaunchKernelEx,        "cuLaunchKernelEx",                  11060,  "cuLaunchKernelEx",                PFN_cuLaunchKernelEx_v11060) \
	X(GraphCreate,           "cuGraphCreate",                     10000,  "cuGraphCreate",                   PFN_cuGraphCreate_v10000) \
	X(GraphAddNode,          "cuGraphAddNode",                    12030,  "cuGraphAddNode_v2",               PFN_cuGraphAddNode_v12030) \
	X(GraphConditionalHandleCreate, "cuGraphConditionalHandleCreate", 12030, "cuGraphConditionalHandleCreate", PFN_cuGraphConditionalHandleCreate_v12030) \
	X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",   11040,  "cuGraphInstantiateWithFlags",     PFN_cuGraphInstantiateWithFlags_v11040) \
	X(GraphLaunch,           "cuGraphLaunch",                     10000,  "cuGraphLaunch",                   PFN_cuGraphLaunch_v10000) \
	X(GraphExecDestroy,      "cuGraphExecDestroy",                10000,  "cuGraphExecDestroy",              PFN_cuGraphExecDestroy_v10000) \
	X(GraphDestroy,          "cuGraphDestroy",                    10000,  "cuGraphDestroy",                  PFN_cuGraphDestroy_v10000) \
	X(OccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", 11070, "cuOccupancyMaxActiveClusters",      \
	  PFN_cuOccupancyMaxActiveClusters_v11070)                                                                \
	X(OccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize", 11070,                          \
	  "cuOccupancyMaxPotentialClusterSize", PFN_cuOccupancyMaxPotentialClusterSize_v11070)

/* cuBLAS entry points: field, exported name, prototype (cublas_api.h). */
#define BLAS_SYMS(X)                                                                                       \
	X(Create, "cublasCreate_v2", cublasStatus_t, (cublasHandle_t *))                                   \
	X(Destroy, "cublasDestroy_v2", cublasStatus_t, (cublasHandle_t))                                   \
	X(GetStatusName, "cublasGetStatusName", const char *, (cublasStatus_t))                            \
	X(SetStream, "cublasSetStream_v2", cublasStatus_t, (cublasHandle_t, cudaStream_t))                 \
	X(SetMathMode, "cublasSetMathMode", cublasStatus_t, (cublasHandle_t, cublasMath_t))                \
	X(SetWorkspace, "cublasSetWorkspace_v2", cublasStatus_t, (cublasHandle_t, void *, size_t))         \
	X(SetPointerMode, "cublasSetPointerMode_v2", cublasStatus_t, (cublasHandle_t, cublasPointerMode_t)) \
	X(Sgemm, "cublasSgemm_v2", cublasStatus_t,                                                         \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,            \
	   const float *, int, const float *, int, const float *, float *, int))                          \
	X(SgemmStridedBatched, "cublasSgemmStridedBatched", cublasStatus_t,                                \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,            \
	   const float *, int, long long int, const float *, int, long long int, const float *, float *, \
	   int, long long int, int))                                                                       \
	X(SgemmBatched, "cublasSgemmBatched", cublasStatus_t,                                              \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,            \
	   const float *const *, int, const float *const *, int, const float *, float *const *, int,     \
	   int))                                                                                           \
	X(GemmBatchedEx, "cublasGemmBatchedEx", cublasStatus_t,                                            \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,             \
	   const void *const *, cudaDataType, int, const void *const *, cudaDataType, int, const void *,  \
	   void *const *, cudaDataType, int, int, cublasComputeType_t, cublasGemmAlgo_t))                  \
	X(GemmEx, "cublasGemmEx", cublasStatus_t,                                                          \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,             \
	   const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,        \
	   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t))                                      \
	X(GemmStridedBatchedEx, "cublasGemmStridedBatchedEx", cublasStatus_t,                              \
	  (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,             \
	   const void *, cudaDataType, int, long long int, const void *, cudaDataType, int,              \
	   long long int, const void *, void *, cudaDataType, int, long long int, int,                   \
	   cublasComputeType_t, cublasGemmAlgo_t))                                                         \
	X(Saxpy, "cublasSaxpy_v2", cublasStatus_t,                                                         \
	  (cublasHandle_t, int, const float *, const float *, int, float *, int))                          \
	X(Sscal, "cublasSscal_v2", cublasStatus_t, (cublasHandle_t, int, const float *, float *, int))    \
	X(Sdot, "cublasSdot_v2", cublasStatus_t,                                                           \
	  (cublasHandle_t, int, const float *, int, const float *, int, float *))                          \
	X(Snrm2, "cublasSnrm2_v2", cublasStatus_t, (cublasHandle_t, int, const float *, int, float *))    \
	X(Sgemv, "cublasSgemv_v2", cublasStatus_t,                                                         \
	  (cublasHandle_t, cublasOperation_t, int, int, const float *, const float *, int,               \
	   const float *, int, const float *, float *, int)) \
	X(AxpyS, "cublasSaxpy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, const void *, int, void *, int)) \
	X(AxpyD, "cublasDaxpy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, const void *, int, void *, int)) \
	X(AxpyC, "cublasCaxpy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, const void *, int, void *, int)) \
	X(AxpyZ, "cublasZaxpy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, const void *, int, void *, int)) \
	X(ScalS, "cublasSscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(ScalD, "cublasDscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(ScalC, "cublasCscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(ScalZ, "cublasZscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(ScalCs, "cublasCsscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(ScalZd, "cublasZdscal_v2", cublasStatus_t, (cublasHandle_t, int, const void *, void *, int)) \
	X(DotS, "cublasSdot_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(DotD, "cublasDdot_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(DotC, "cublasCdotu_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(DotZ, "cublasZdotu_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(DotcC, "cublasCdotc_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(DotcZ, "cublasZdotc_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, const void *, int, void *)) \
	X(Nrm2S, "cublasSnrm2_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(Nrm2D, "cublasDnrm2_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(Nrm2C, "cublasScnrm2_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(Nrm2Z, "cublasDznrm2_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(AsumS, "cublasSasum_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(AsumD, "cublasDasum_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(AsumC, "cublasScasum_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(AsumZ, "cublasDzasum_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *)) \
	X(IamaxS, "cublasIsamax_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IaminS, "cublasIsamin_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IamaxD, "cublasIdamax_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IaminD, "cublasIdamin_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IamaxC, "cublasIcamax_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IaminC, "cublasIcamin_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IamaxZ, "cublasIzamax_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(IaminZ, "cublasIzamin_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, int *)) \
	X(CopyS, "cublasScopy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *, int)) \
	X(SwapS, "cublasSswap_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int)) \
	X(CopyD, "cublasDcopy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *, int)) \
	X(SwapD, "cublasDswap_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int)) \
	X(CopyC, "cublasCcopy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *, int)) \
	X(SwapC, "cublasCswap_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int)) \
	X(CopyZ, "cublasZcopy_v2", cublasStatus_t, (cublasHandle_t, int, const void *, int, void *, int)) \
	X(SwapZ, "cublasZswap_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int)) \
	X(GemvS, "cublasSgemv_v2", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrsmS, "cublasStrsm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, void *, int)) \
	X(GemvD, "cublasDgemv_v2", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrsmD, "cublasDtrsm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, void *, int)) \
	X(GemvC, "cublasCgemv_v2", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrsmC, "cublasCtrsm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, void *, int)) \
	X(GemvZ, "cublasZgemv_v2", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrsmZ, "cublasZtrsm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, void *, int)) \
	X(SymvS, "cublasSsymv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(SyrkS, "cublasSsyrk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(RotS, "cublasSrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(SymvD, "cublasDsymv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(SyrkD, "cublasDsyrk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(RotD, "cublasDrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(SymvC, "cublasCsymv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(SyrkC, "cublasCsyrk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(RotC, "cublasCrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(SymvZ, "cublasZsymv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(SyrkZ, "cublasZsyrk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(RotZ, "cublasZrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(HemvC, "cublasChemv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(HerkC, "cublasCherk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(HemvZ, "cublasZhemv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(HerkZ, "cublasZherk_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, void *, int)) \
	X(SymmS, "cublasSsymm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Syr2kS, "cublasSsyr2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrmmS, "cublasStrmm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(SymmD, "cublasDsymm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Syr2kD, "cublasDsyr2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrmmD, "cublasDtrmm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(SymmC, "cublasCsymm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Syr2kC, "cublasCsyr2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrmmC, "cublasCtrmm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(SymmZ, "cublasZsymm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Syr2kZ, "cublasZsyr2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(TrmmZ, "cublasZtrmm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(HemmC, "cublasChemm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Her2kC, "cublasCher2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(HemmZ, "cublasZhemm_v2", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(Her2kZ, "cublasZher2k_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, int, int, const void *, const void *, int, const void *, int, const void *, void *, int)) \
	X(SyrS, "cublasSsyr_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Syr2S, "cublasSsyr2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(TrmvS, "cublasStrmv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(TrsvS, "cublasStrsv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(SyrD, "cublasDsyr_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Syr2D, "cublasDsyr2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(TrmvD, "cublasDtrmv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(TrsvD, "cublasDtrsv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(SyrC, "cublasCsyr_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Syr2C, "cublasCsyr2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(TrmvC, "cublasCtrmv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(TrsvC, "cublasCtrsv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(SyrZ, "cublasZsyr_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Syr2Z, "cublasZsyr2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(TrmvZ, "cublasZtrmv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(TrsvZ, "cublasZtrsv_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, const void *, int, void *, int)) \
	X(HerC, "cublasCher_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Her2C, "cublasCher2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(HerZ, "cublasZher_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, void *, int)) \
	X(Her2Z, "cublasZher2_v2", cublasStatus_t, (cublasHandle_t, cublasFillMode_t, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(RotCs, "cublasCsrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(RotZd, "cublasZdrot_v2", cublasStatus_t, (cublasHandle_t, int, void *, int, void *, int, const void *, const void *)) \
	X(GerS, "cublasSger_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GerD, "cublasDger_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GeruC, "cublasCgeru_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GercC, "cublasCgerc_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GeruZ, "cublasZgeru_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GercZ, "cublasZgerc_v2", cublasStatus_t, (cublasHandle_t, int, int, const void *, const void *, int, const void *, int, void *, int)) \
	X(GetrfS, "cublasSgetrfBatched", cublasStatus_t, (cublasHandle_t, int, void *const *, int, int *, int *, int)) \
	X(GetriS, "cublasSgetriBatched", cublasStatus_t, (cublasHandle_t, int, const void *const *, int, const int *, void *const *, int, int *, int)) \
	X(GetrsS, "cublasSgetrsBatched", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *const *, int, const int *, void *const *, int, int *, int)) \
	X(MatinvS, "cublasSmatinvBatched", cublasStatus_t, (cublasHandle_t, int, const void *const *, int, void *const *, int, int *, int)) \
	X(GetrfD, "cublasDgetrfBatched", cublasStatus_t, (cublasHandle_t, int, void *const *, int, int *, int *, int)) \
	X(GetriD, "cublasDgetriBatched", cublasStatus_t, (cublasHandle_t, int, const void *const *, int, const int *, void *const *, int, int *, int)) \
	X(GetrsD, "cublasDgetrsBatched", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, const void *const *, int, const int *, void *const *, int, int *, int)) \
	X(MatinvD, "cublasDmatinvBatched", cublasStatus_t, (cublasHandle_t, int, const void *const *, int, void *const *, int, int *, int)) \
	X(TrsmBatchedS, "cublasStrsmBatched", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *const *, int, void *const *, int, int)) \
	X(TrsmBatchedD, "cublasDtrsmBatched", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *const *, int, void *const *, int, int)) \
	X(TrsmBatchedC, "cublasCtrsmBatched", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *const *, int, void *const *, int, int)) \
	X(TrsmBatchedZ, "cublasZtrsmBatched", cublasStatus_t, (cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, int, int, const void *, const void *const *, int, void *const *, int, int)) \
	X(GeqrfS, "cublasSgeqrfBatched", cublasStatus_t, (cublasHandle_t, int, int, void *const *, int, void *const *, int *, int)) \
	X(GeqrfD, "cublasDgeqrfBatched", cublasStatus_t, (cublasHandle_t, int, int, void *const *, int, void *const *, int *, int)) \
	X(GelsS, "cublasSgelsBatched", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, int, void *const *, int, void *const *, int, int *, int *, int)) \
	X(GelsD, "cublasDgelsBatched", cublasStatus_t, (cublasHandle_t, cublasOperation_t, int, int, int, void *const *, int, void *const *, int, int *, int *, int))

#define CU_SYM_FIELD(field, name, version, export, type) type field;
struct cuda_driver_syms {
	CU_SYMS(CU_SYM_FIELD)
};
#undef CU_SYM_FIELD

#define BLAS_SYM_FIELD(field, export, ret, args) ret(*field) args;
struct cuda_blas_syms {
	BLAS_SYMS(BLAS_SYM_FIELD)
};
#undef BLAS_SYM_FIELD

/* Filled once by cuda_syms_load(); read-only afterwards. */
extern struct cuda_driver_syms cuda_drv;
extern struct cuda_blas_syms cuda_cublas;

/* Pre-warmed cuBLAS handles kept by an open device. */
#define CUDA_WARM_HANDLES 2
#define CUDA_MAX_PEERS 15

struct cuda_map;
struct cuda_hostreg;

/* The backend's device. device.h's handle type is `struct phos_device *`, but
 * proto.h already defines a struct of that name (the DEVICE_INFO record body),
 * so the backend keeps its own type and casts at the boundary (cuda_dev()). */
struct cuda_dev {
	int ordinal;
	CUdevice cudev;
	CUcontext ctx;
	bool ctx_retained;
	uint64_t gen;                 /* unique per open; see cuda_current() */

	CUdeviceptr arena;
	uint64_t arena_size;
	bool arena_reserved;

	pthread_mutex_t lock;         /* guards everything below */
	struct cuda_map *maps;        /* physical allocations, sorted by address, disjoint */
	size_t nmaps, maps_cap;
	struct cuda_hostreg *hostregs;/* page-locked host ranges */
	size_t nhostregs, hostregs_cap;
	cublasHandle_t warm[CUDA_WARM_HANDLES];
	unsigned nwarm;
	void *lt;                     /* cublasLtHandle_t, made at the first cuBLASLt call */
	void *sparse;                 /* cusparseHandle_t, made at the first cuSPARSE call */
	void *solver;                 /* cusolverDnHandle_t, made at the first cuSOLVER call */
	/* other devices of the executor that may reach this one's maps (peer_add) */
	int peers[CUDA_MAX_PEERS];
	unsigned npeers;
};

static inline struct cuda_dev *cuda_dev(struct phos_device *dev)
{
	return (struct cuda_dev *)(void *)dev;
}

/* The core (device_cuda_core.c). */

/* dlopen of a toolkit library by soname: the loader's search path, then
 * $CUDA_HOME and /usr/local/cuda (lib64, lib). NULL (logged) when none loads. */
void *cuda_lib_open(const char *soname);

/* Resolves every symbol of both libraries, once per process. 0 or a negated cudaError_t. */
int cuda_syms_load(void);
/* Resolves the driver's symbols only (once per process): device_count works
 * without cuBLAS. 0 or a negated cudaError_t. */
int cuda_driver_syms_load(void);

/* CUresult → cudaError_t (positive; 0 for success). */
int cu_to_phos(CUresult r);

/* Logs a failed driver call at file:line and returns -cu_to_phos(r). */
int cu_fail(CUresult r, const char *expr, const char *file, int line);

/* Evaluates a driver call; on failure logs it and returns the negated cudaError_t. */
#define CU_CHECK(call)                                                          \
	do {                                                                    \
		CUresult cu_check_r_ = (call);                                  \
		if (cu_check_r_ != CUDA_SUCCESS)                                \
			return cu_fail(cu_check_r_, #call, __FILE__, __LINE__); \
	} while (0)

/* The same for a result already in hand; name says which call it came from. */
#define CU_CHECK_RESULT(r, name)                                      \
	do {                                                          \
		if ((r) != CUDA_SUCCESS)                              \
			return cu_fail((r), name, __FILE__, __LINE__); \
	} while (0)

/* Makes the device's context current on the calling thread (once per thread
 * and device: a thread-local remembers the last one made current). */
int cuda_current(struct cuda_dev *d);
/* A new device generation (never 0, never reused) for cuda_current. */
uint64_t cuda_gen_next(void);
/* Makes the calling thread forget that d's context is current (d closes). */
void cuda_current_forget(const struct cuda_dev *d);
/* Logs a failed cuBLAS call at file:line and returns its negated cudaError_t. */
int cuda_blas_fail(cublasStatus_t s, const char *expr, const char *file, int line);
/* Ends a call that reports its cublasStatus_t: the status to *ret_blas_status
 * (may be NULL), a failure logged with what; 0 or a negated cudaError_t. */
int cuda_blas_result(cublasStatus_t s, int *ret_blas_status, const char *what);

/* CUDA graphs (device_cuda_graph.c). */
int cuda_graph_make(struct phos_device *dev, const struct phos_dev_graph *d, void **ret_graph);
int cuda_graph_launch(struct phos_device *dev, void *graph, void *stream);
void cuda_graph_destroy(struct phos_device *dev, void *graph);

/* cuBLAS side (device_cuda_blas.c). */
int cuda_blas_warm(struct cuda_dev *d);          /* fills d->warm */
void cuda_blas_release_warm(struct cuda_dev *d); /* destroys what is left in d->warm */
int cuda_blas_create(struct phos_device *dev, void **ret_handle);
int cuda_blas_destroy(struct phos_device *dev, void *handle);
int cuda_blas_set_stream(struct phos_device *dev, void *handle, void *stream);
int cuda_blas_set_math(struct phos_device *dev, void *handle, int mode);
int cuda_blas_set_workspace(struct phos_device *dev, void *handle, uint64_t addr, uint64_t size);
int cuda_blas_gemm(struct phos_device *dev, void *handle, const struct phos_blas_gemm *g,
		   int *ret_blas_status);
int cuda_blas_l1(struct phos_device *dev, void *handle, const struct phos_blas_l1 *op,
		 float *ret_result, int *ret_blas_status);
int cuda_blas_call(struct phos_device *dev, void *handle, const struct phos_blas_op *op, void *ret_result,
		   int *ret_blas_status);
int cuda_blas_lu(struct phos_device *dev, void *handle, const struct phos_blas_lu *op, int *ret_blas_status);
int cuda_blas_gemv(struct phos_device *dev, void *handle, const struct phos_blas_gemv *op,
		   int *ret_blas_status);

/* cuBLASLt side (device_cuda_blaslt.c): libcublasLt.so.13 is loaded at the
 * first call, and each device makes its cublasLtHandle_t then. */
int cuda_blaslt_matmul(struct phos_device *dev, void *stream, const struct phos_blaslt_matmul *m,
		       int *ret_blas_status);
int cuda_blaslt_heuristic(struct phos_device *dev, const struct phos_blaslt_heuristic *h,
			  struct phos_blaslt_result *ret, int *ret_count, int *ret_blas_status);
void cuda_blaslt_release(struct cuda_dev *d);   /* destroys d->lt */
void cuda_sparse_release(struct cuda_dev *d);   /* destroys d->sparse (device_cuda_sparse.c) */
void cuda_solver_release(struct cuda_dev *d);   /* destroys d->solver (device_cuda_solver.c) */
/* Makes d->lt and runs, for FP32, FP16 and BF16, a heuristic query and an
 * n x n x n matmul with a bias epilogue on buf (3 n^2 floats, zeroed), on the
 * legacy stream. Failures are logged at debug level only: the first real
 * call then pays what the warm-up would have. */
void cuda_blaslt_warm(struct cuda_dev *d, CUdeviceptr buf, int n);
