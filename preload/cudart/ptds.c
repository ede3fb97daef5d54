/* SPDX-License-Identifier: MIT */
/*
 * The per-thread default stream.
 *
 * A program built with `nvcc --default-stream per-thread` (or that defines
 * CUDA_API_PER_THREAD_DEFAULT_STREAM) calls the _ptsz / _ptds forms of the
 * stream-ordered APIs; in them the null stream means the calling thread's own
 * default stream, not the legacy one. Each form here runs its plain API with
 * phos_ptds_null set, which phos_stream_resolve (conn.c) reads: a null stream
 * is then the thread's stream, as cudaStreamPerThread always is. That stream
 * (stream.c, phos_stream_per_thread) is an ordinary blocking stream of the
 * executor, made at the thread's first use and destroyed when the thread
 * ends, so work of different host threads is ordered only by what the
 * program itself asks for, as on CUDA (and each still synchronizes with the
 * legacy stream, as CUDA's per-thread stream does).
 */
#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "internal.h"

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream);

/* name##sfx: name with the null stream meaning this thread's stream. */
#define PTDS(name, sfx, params, args)                               \
	PHOS_EXPORT cudaError_t name##sfx params;                   \
	PHOS_EXPORT cudaError_t name##sfx params                    \
	{                                                           \
		bool old = phos_ptds_null;                          \
		cudaError_t r;                                      \
                                                                    \
		phos_ptds_null = true;                              \
		r = name args;                                      \
		phos_ptds_null = old;                               \
		return r;                                           \
	}

PHOS_EXPORT_NAMES(__cudaLaunchKernel_ptsz cudaLaunchKernel_ptsz cudaLaunchKernelExC_ptsz
		  cudaLaunchCooperativeKernel_ptsz cudaLaunchHostFunc_ptsz cudaStreamAddCallback_ptsz
		  cudaMemcpy_ptds cudaMemcpyAsync_ptsz cudaMemset_ptds cudaMemsetAsync_ptsz
		  cudaMemcpyToSymbol_ptds cudaMemcpyFromSymbol_ptds cudaMemcpyToSymbolAsync_ptsz
		  cudaMemcpyFromSymbolAsync_ptsz cudaMemcpy2D_ptds cudaMemcpy2DAsync_ptsz cudaMemcpy3D_ptds
		  cudaMemcpy3DAsync_ptsz cudaMemset2D_ptds cudaMemset2DAsync_ptsz cudaMemset3D_ptds
		  cudaMemset3DAsync_ptsz cudaMallocAsync_ptsz cudaMallocFromPoolAsync_ptsz cudaFreeAsync_ptsz
		  cudaStreamSynchronize_ptsz cudaStreamQuery_ptsz cudaStreamWaitEvent_ptsz cudaStreamGetFlags_ptsz
		  cudaStreamGetPriority_ptsz cudaStreamSetAttribute_ptsz cudaStreamGetAttribute_ptsz
		  cudaEventRecord_ptsz cudaEventRecordWithFlags_ptsz cudaGraphLaunch_ptsz cudaGraphUpload_ptsz
		  cudaStreamBeginCapture_ptsz cudaStreamBeginCaptureToGraph_ptsz cudaStreamEndCapture_ptsz
		  cudaStreamGetCaptureInfo_ptsz cudaStreamIsCapturing_ptsz cudaGraphInstantiateWithParams_ptsz
		  cudaStreamUpdateCaptureDependencies_ptsz cudaStreamGetId_ptsz cudaStreamGetDevice_ptsz)

/* launches */
PTDS(__cudaLaunchKernel, _ptsz, (cudaKernel_t k, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s),
     (k, g, b, a, sh, s))
PTDS(cudaLaunchKernel, _ptsz, (const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s),
     (f, g, b, a, sh, s))
PTDS(cudaLaunchKernelExC, _ptsz, (const cudaLaunchConfig_t *c, const void *f, void **a), (c, f, a))
PTDS(cudaLaunchCooperativeKernel, _ptsz, (const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s),
     (f, g, b, a, sh, s))
PTDS(cudaLaunchHostFunc, _ptsz, (cudaStream_t s, cudaHostFn_t fn, void *d), (s, fn, d))
PTDS(cudaStreamAddCallback, _ptsz, (cudaStream_t s, cudaStreamCallback_t cb, void *d, unsigned int fl),
     (s, cb, d, fl))

/* copies and sets */
PTDS(cudaMemcpy, _ptds, (void *d, const void *s, size_t n, enum cudaMemcpyKind k), (d, s, n, k))
PTDS(cudaMemcpyAsync, _ptsz, (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st),
     (d, s, n, k, st))
PTDS(cudaMemset, _ptds, (void *d, int v, size_t n), (d, v, n))
PTDS(cudaMemsetAsync, _ptsz, (void *d, int v, size_t n, cudaStream_t st), (d, v, n, st))
PTDS(cudaMemcpyToSymbol, _ptds, (const void *sym, const void *s, size_t n, size_t o, enum cudaMemcpyKind k),
     (sym, s, n, o, k))
PTDS(cudaMemcpyFromSymbol, _ptds, (void *d, const void *sym, size_t n, size_t o, enum cudaMemcpyKind k),
     (d, sym, n, o, k))
PTDS(cudaMemcpyToSymbolAsync, _ptsz,
     (const void *sym, const void *s, size_t n, size_t o, enum cudaMemcpyKind k, cudaStream_t st),
     (sym, s, n, o, k, st))
PTDS(cudaMemcpyFromSymbolAsync, _ptsz,
     (void *d, const void *sym, size_t n, size_t o, enum cudaMemcpyKind k, cudaStream_t st), (d, sym, n, o, k, st))
PTDS(cudaMemcpy2D, _ptds,
     (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k),
     (d, dp, s, sp, w, h, k))
PTDS(cudaMemcpy2DAsync, _ptsz,
     (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k, cudaStream_t st),
     (d, dp, s, sp, w, h, k, st))
PTDS(cudaMemcpy3D, _ptds, (const struct cudaMemcpy3DParms *p), (p))
PTDS(cudaMemcpy3DAsync, _ptsz, (const struct cudaMemcpy3DParms *p, cudaStream_t st), (p, st))
PTDS(cudaMemset2D, _ptds, (void *d, size_t p, int v, size_t w, size_t h), (d, p, v, w, h))
PTDS(cudaMemset2DAsync, _ptsz, (void *d, size_t p, int v, size_t w, size_t h, cudaStream_t st),
     (d, p, v, w, h, st))
PTDS(cudaMemset3D, _ptds, (struct cudaPitchedPtr p, int v, struct cudaExtent e), (p, v, e))
PTDS(cudaMemset3DAsync, _ptsz, (struct cudaPitchedPtr p, int v, struct cudaExtent e, cudaStream_t st),
     (p, v, e, st))

/* stream-ordered allocation */
PTDS(cudaMallocAsync, _ptsz, (void **p, size_t n, cudaStream_t st), (p, n, st))
PTDS(cudaMallocFromPoolAsync, _ptsz, (void **p, size_t n, cudaMemPool_t pool, cudaStream_t st), (p, n, pool, st))
PTDS(cudaFreeAsync, _ptsz, (void *p, cudaStream_t st), (p, st))

/* streams and events */
PTDS(cudaStreamSynchronize, _ptsz, (cudaStream_t st), (st))
PTDS(cudaStreamQuery, _ptsz, (cudaStream_t st), (st))
PTDS(cudaStreamWaitEvent, _ptsz, (cudaStream_t st, cudaEvent_t e, unsigned int fl), (st, e, fl))
PTDS(cudaStreamGetFlags, _ptsz, (cudaStream_t st, unsigned int *fl), (st, fl))
PTDS(cudaStreamGetPriority, _ptsz, (cudaStream_t st, int *p), (st, p))
PTDS(cudaStreamSetAttribute, _ptsz, (cudaStream_t st, cudaStreamAttrID a, const cudaStreamAttrValue *v),
     (st, a, v))
PTDS(cudaStreamGetAttribute, _ptsz, (cudaStream_t st, cudaStreamAttrID a, cudaStreamAttrValue *v), (st, a, v))
PTDS(cudaEventRecord, _ptsz, (cudaEvent_t e, cudaStream_t st), (e, st))
PTDS(cudaEventRecordWithFlags, _ptsz, (cudaEvent_t e, cudaStream_t st, unsigned int fl), (e, st, fl))

/* graphs */
PTDS(cudaGraphLaunch, _ptsz, (cudaGraphExec_t x, cudaStream_t st), (x, st))
PTDS(cudaGraphUpload, _ptsz, (cudaGraphExec_t x, cudaStream_t st), (x, st))
PTDS(cudaStreamBeginCapture, _ptsz, (cudaStream_t st, enum cudaStreamCaptureMode m), (st, m))
PTDS(cudaStreamBeginCaptureToGraph, _ptsz,
     (cudaStream_t st, cudaGraph_t g, const cudaGraphNode_t *d, const cudaGraphEdgeData *ed, size_t n,
      enum cudaStreamCaptureMode m),
     (st, g, d, ed, n, m))
PTDS(cudaStreamEndCapture, _ptsz, (cudaStream_t st, cudaGraph_t *g), (st, g))
PTDS(cudaStreamGetCaptureInfo, _ptsz,
     (cudaStream_t st, enum cudaStreamCaptureStatus *cs, unsigned long long *id, cudaGraph_t *g,
      const cudaGraphNode_t **d, const cudaGraphEdgeData **ed, size_t *n),
     (st, cs, id, g, d, ed, n))
PTDS(cudaStreamIsCapturing, _ptsz, (cudaStream_t st, enum cudaStreamCaptureStatus *cs), (st, cs))
PTDS(cudaStreamUpdateCaptureDependencies, _ptsz,
     (cudaStream_t st, cudaGraphNode_t *d, const cudaGraphEdgeData *ed, size_t n, unsigned int fl), (st, d, ed, n, fl))
PTDS(cudaGraphInstantiateWithParams, _ptsz, (cudaGraphExec_t *x, cudaGraph_t g, cudaGraphInstantiateParams *p),
     (x, g, p))
PTDS(cudaStreamGetId, _ptsz, (cudaStream_t st, unsigned long long *id), (st, id))
PTDS(cudaStreamGetDevice, _ptsz, (cudaStream_t st, int *dev), (st, dev))
