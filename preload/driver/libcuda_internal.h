/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libcuda.so.1: the CUDA driver API that runtime libraries and
 * JITs call (PyTorch, Triton, torch.compile), forwarded through the runtime
 * stand-in's one connection to the executor.
 *
 *   program / library ──▶ libcuda.so.1 (ours) ──▶ libcudart.so.13 (ours) ──▶ channel ──▶ executor
 *                          libcuda.c        init, devices, the primary context,
 *                                           memory, streams, events, pointers,
 *                                           error names
 *                          libcuda_module.c modules, libraries, kernels, launches,
 *                                           cuGetProcAddress
 *                          libcuda_link.c   JIT linking (nvJitLink for several inputs)
 *                          stubs (generated) every other export of the real
 *                                           libcuda: CUDA_ERROR_NOT_SUPPORTED,
 *                                           named once in the log
 *
 * Nothing is done twice: a driver call is the runtime stand-in's entry point
 * of the same meaning (cuMemAlloc is cudaMalloc, cuStreamCreate is
 * cudaStreamCreateWithFlags: CUstream and cudaStream_t are the same handles,
 * as in CUDA) or one of its internals (launch.c: modules from an image,
 * kernels by name, packed launches), run between phos_error_quiet_begin/end
 * so that it leaves the runtime's last error alone, its cudaError_t turned
 * into a CUresult at the boundary (cu_result). So driver allocations are
 * arena allocations, driver modules are modules (snapshot, restore, access
 * analysis), driver launches carry the same read/write sets.
 *
 * One context: the device's primary context, a constant handle. cuCtxCreate
 * retains it and cuCtxDestroy releases it (phos-fn gives a function one
 * context); the per-thread context stack holds that one handle.
 */
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "internal.h"

/* The cudaError_t of the runtime stand-in as the driver's CUresult. */
CUresult cu_result(int err);

/* Runs a runtime entry point without touching the runtime's last error. */
#define CU_RUN(expr)                                    \
	({                                              \
		int cu_run_r_;                          \
		phos_error_quiet_begin();               \
		cu_run_r_ = (int)(expr);                \
		phos_error_quiet_end();                 \
		cu_result(cu_run_r_);                   \
	})

/* The primary context handle of device 0. */
/* The primary context of device d of the executor (id d + 1): one per device,
 * as the driver has; making one current selects its device in the runtime
 * stand-in (cudaSetDevice), whose calls the driver API's go through. */
#define CU_PRIMARY_CTX_OF(d) ((CUcontext)phos_handle_wrap(PHOS_H_CONTEXT, (uint32_t)(d) + 1))
#define CU_PRIMARY_CTX CU_PRIMARY_CTX_OF(0)

/* libcuda.c: 0 once cuInit succeeded, else CUDA_ERROR_NOT_INITIALIZED. */
CUresult cu_initialized(void);
/* Returns cu_initialized()'s error from the calling entry point, if any. */
#define NEED_INIT()                                     \
	do {                                            \
		CUresult need_init_r_ = cu_initialized(); \
		if (need_init_r_)                       \
			return need_init_r_;            \
	} while (0)

/* libcuda_module.c: a module file (cubin, PTX, fatbin, at most 1 GiB) read
 * whole into *ret_buf (NUL-terminated, for PTX; the caller frees it), its
 * size in *ret_size. CUDA_ERROR_FILE_NOT_FOUND for a path that is no
 * readable regular file. */
CUresult cu_read_module_file(const char *path, char **ret_buf, size_t *ret_size);

/* libcuda_module.c: the answers of JIT options (values[i] for options[i]):
 * nothing was logged, so a log buffer gets an empty string when its size
 * option gave it room for one and the sizes say 0 bytes; the wall time is
 * 0 ms. Other options are taken and change nothing (the executor's driver
 * compiles with its defaults). */
void cu_jit_options_answer(unsigned n, const CUjit_option *options, void **values);
