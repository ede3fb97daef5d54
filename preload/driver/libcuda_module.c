/* SPDX-License-Identifier: MIT */
/*
 * The driver API stand-in, part two: modules, libraries, kernels, launches
 * and cuGetProcAddress.
 *
 * A module is loaded from a fatbin, a cubin or PTX text (kparam.h): checked
 * here, then sent like a registered fatbin (kernels.c, phos_module_load), and
 * the device's verdict waited for, so that a bad image is this call's
 * CUDA_ERROR_INVALID_IMAGE. JIT options are not forwarded (the executor
 * compiles with the driver's defaults); their log buffers come back empty.
 * A CUlibrary is its module (cuLibraryLoadData loads one module, a CUkernel is
 * that module's CUfunction: CUDA accepts a CUkernel wherever a CUfunction goes).
 *
 * Launches take the kernel's parameter layout from the executor (FUNC_INFO,
 * from the image's .nv.info or PTX) and carry the same read/write sets as
 * runtime launches; a kernel whose access the PTX analysis cannot bound
 * (every cubin-only kernel) is opaque.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcuda_internal.h"
#include "libcuda_procs.h"
#include "log.h"

#undef cuModuleGetGlobal
#undef cuGetProcAddress

#define MAX_MODULE_FILE (1u << 30)

static CUresult module_id(CUmodule m, uint32_t *ret_id)
{
	uint32_t id = phos_handle_unwrap(m, PHOS_H_MODULE);

	if (!id)
		return CUDA_ERROR_INVALID_HANDLE;
	*ret_id = id;
	return CUDA_SUCCESS;
}

/* --- modules --- */

void cu_jit_options_answer(unsigned n, const CUjit_option *options, void **values)
{
	size_t info_room = 0, error_room = 0;

	if (!options || !values)
		return;
	for (unsigned i = 0; i < n; i++) {
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			info_room = (size_t)(uintptr_t)values[i];
		else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			error_room = (size_t)(uintptr_t)values[i];
	}
	for (unsigned i = 0; i < n; i++) {
		switch (options[i]) {
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
			values[i] = (void *)(uintptr_t)0;   /* bytes written */
			break;
		case CU_JIT_INFO_LOG_BUFFER:
			if (values[i] && info_room)
				*(char *)values[i] = '\0';
			break;
		case CU_JIT_ERROR_LOG_BUFFER:
			if (values[i] && error_room)
				*(char *)values[i] = '\0';
			break;
		case CU_JIT_WALL_TIME: {   /* a float, written over the value */
			float ms = 0.0f;

			values[i] = NULL;
			memcpy(&values[i], &ms, sizeof(ms));
			break;
		}
		default:
			break;
		}
	}
}

PHOS_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	uint32_t id = 0;
	CUresult r;

	NEED_INIT();
	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(phos_module_load(image, &id));
	if (r == CUDA_SUCCESS)
		*module = (CUmodule)phos_handle_wrap(PHOS_H_MODULE, id);
	return r;
}

PHOS_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
					CUjit_option *options, void **optionValues)
{
	CUresult r = cuModuleLoadData(module, image);

	cu_jit_options_answer(numOptions, options, optionValues);
	return r;
}

PHOS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return cuModuleLoadData(module, fatCubin);
}

CUresult cu_read_module_file(const char *path, char **ret_buf, size_t *ret_size)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	CUresult r = CUDA_ERROR_FILE_NOT_FOUND;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > MAX_MODULE_FILE)
		goto out;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		got += (size_t)n;
	}
	buf[got] = '\0';
	*ret_buf = buf;
	*ret_size = got;
	buf = NULL;
	r = CUDA_SUCCESS;
out:
	free(buf);
	close(fd);
	return r;
}

/* Reads a module file (cubin, PTX, fatbin) and loads it. */
PHOS_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	char *buf = NULL;
	size_t size;
	CUresult r;

	NEED_INIT();
	if (!module || !fname)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_read_module_file(fname, &buf, &size);
	if (r == CUDA_SUCCESS)
		r = cuModuleLoadData(module, buf);
	free(buf);
	return r;
}

PHOS_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
	uint32_t id;
	CUresult r;

	NEED_INIT();
	r = module_id(hmod, &id);
	return r ? r : CU_RUN(phos_module_unload(id));
}

PHOS_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	uint32_t id;
	void *f = NULL;
	int err;
	CUresult r;

	NEED_INIT();
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	r = module_id(hmod, &id);
	if (r)
		return r;
	phos_error_quiet_begin();
	err = phos_module_function(id, name, &f);
	phos_error_quiet_end();
	if (err == cudaErrorInvalidDeviceFunction)
		return CUDA_ERROR_NOT_FOUND;
	r = cu_result(err);
	if (r == CUDA_SUCCESS)
		*hfunc = (CUfunction)f;
	return r;
}

PHOS_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	uint64_t addr = 0, size = 0;
	uint32_t id;
	int err;
	CUresult r;

	NEED_INIT();
	if (!name || (!dptr && !bytes))
		return CUDA_ERROR_INVALID_VALUE;
	r = module_id(hmod, &id);
	if (r)
		return r;
	phos_error_quiet_begin();
	err = phos_module_global(id, name, &addr, &size);
	phos_error_quiet_end();
	if (err == cudaErrorInvalidValue || err == cudaErrorSymbolNotFound || err == cudaErrorInvalidSymbol)
		return CUDA_ERROR_NOT_FOUND;
	r = cu_result(err);
	if (r)
		return r;
	if (dptr)
		*dptr = (CUdeviceptr)addr;
	if (bytes)
		*bytes = (size_t)size;
	return CUDA_SUCCESS;
}

/* --- libraries: one module each --- */

PHOS_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				       void **jitOptionsValues, unsigned int numJitOptions,
				       CUlibraryOption *libraryOptions, void **libraryOptionValues,
				       unsigned int numLibraryOptions)
{
	CUmodule m;
	CUresult r;

	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuModuleLoadDataEx(&m, code, numJitOptions, jitOptions, jitOptionsValues);
	if (r == CUDA_SUCCESS)
		*library = (CUlibrary)m;
	return r;
}

PHOS_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
	return cuModuleUnload((CUmodule)library);
}

PHOS_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	uint32_t id;
	CUresult r;

	NEED_INIT();
	if (!pMod)
		return CUDA_ERROR_INVALID_VALUE;
	r = module_id((CUmodule)library, &id);
	if (r == CUDA_SUCCESS)
		*pMod = (CUmodule)library;
	return r;
}

PHOS_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	return cuModuleGetFunction((CUfunction *)pKernel, (CUmodule)library, name);
}

PHOS_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	return cuModuleGetGlobal_v2(dptr, bytes, (CUmodule)library, name);
}

PHOS_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	NEED_INIT();
	if (!pFunc || !phos_handle_unwrap(kernel, PHOS_H_FUNC))
		return pFunc ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
	*pFunc = (CUfunction)kernel;
	return CUDA_SUCCESS;
}

/* --- kernel attributes --- */

PHOS_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	struct cudaFuncAttributes a;
	CUresult r;

	NEED_INIT();
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaFuncGetAttributes(&a, (const void *)hfunc));
	if (r)
		return r;
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = a.maxThreadsPerBlock; break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = (int)a.sharedSizeBytes; break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = (int)a.constSizeBytes; break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = (int)a.localSizeBytes; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = a.numRegs; break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = a.ptxVersion; break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = a.binaryVersion; break;
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = a.cacheModeCA; break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = a.maxDynamicSharedSizeBytes; break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = a.preferredShmemCarveout; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = a.clusterDimMustBeSet; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = a.requiredClusterWidth; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = a.requiredClusterHeight; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = a.requiredClusterDepth; break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = a.nonPortableClusterSizeAllowed; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = a.clusterSchedulingPolicyPreference; break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* CUfunction_attribute and cudaFuncAttribute share the settable numbers (8 to 15). */
PHOS_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	NEED_INIT();
	return CU_RUN(cudaFuncSetAttribute((const void *)hfunc, (enum cudaFuncAttribute)attrib, value));
}

PHOS_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	NEED_INIT();
	return CU_RUN(cudaFuncSetCacheConfig((const void *)hfunc, (enum cudaFuncCache)config));
}

PHOS_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	NEED_INIT();
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = phos_func_name(hfunc);
	return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

PHOS_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	return dev ? CUDA_ERROR_INVALID_DEVICE : cuFuncGetAttribute(pi, attrib, (CUfunction)kernel);
}

PHOS_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	return dev ? CUDA_ERROR_INVALID_DEVICE : cuFuncSetAttribute((CUfunction)kernel, attrib, val);
}

/* CU_OCCUPANCY_* and cudaOccupancy* share their bits. */
PHOS_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
									  int blockSize, size_t dynamicSMemSize,
									  unsigned int flags)
{
	NEED_INIT();
	return CU_RUN(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, (const void *)func, blockSize,
									    dynamicSMemSize, flags));
}

PHOS_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
								 size_t dynamicSMemSize)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
								     CU_OCCUPANCY_DEFAULT);
}

/* --- launches --- */

/* The two forms of arguments: kernelParams (a pointer per argument) or extra
 * (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: the packed buffer), not both. */
static CUresult launch(CUfunction f, const uint32_t grid[3], const uint32_t block[3], unsigned shmem,
		       CUstream stream, void **kernelParams, void **extra)
{
	const void *buf = NULL;
	size_t len = 0;
	bool have_len = false;

	NEED_INIT();
	if (!phos_handle_unwrap(f, PHOS_H_FUNC))
		return CUDA_ERROR_INVALID_HANDLE;
	if (kernelParams && extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (!extra)
		return CU_RUN(phos_launch_args(f, grid, block, kernelParams, shmem, stream));
	for (unsigned i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (i >= 64)
			return CUDA_ERROR_INVALID_VALUE;   /* no END in sight */
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
			buf = extra[i + 1];
		} else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
			if (!extra[i + 1])
				return CUDA_ERROR_INVALID_VALUE;
			len = *(const size_t *)extra[i + 1];
			have_len = true;
		} else {
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	if (buf && !have_len)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(phos_launch_packed(f, grid, block, buf, len, shmem, stream));
}

PHOS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
				    void **kernelParams, void **extra)
{
	const uint32_t grid[3] = { gridDimX, gridDimY, gridDimZ };
	const uint32_t block[3] = { blockDimX, blockDimY, blockDimZ };

	return launch(f, grid, block, sharedMemBytes, hStream, kernelParams, extra);
}
PHOS_ALIAS(cuLaunchKernel_ptsz, cuLaunchKernel);

/* Launch attributes change how a kernel runs (clusters, cooperative grids,
 * programmatic dependencies); none is forwarded yet, so a launch that asks
 * for one is refused rather than run differently. Priority 0 and a 1x1x1
 * cluster ask for nothing. */
PHOS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	static int logged;
	uint32_t grid[3], block[3];

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	if (config->numAttrs && !config->attrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		const CUlaunchAttribute *a = &config->attrs[i];
		bool none = (a->id == CU_LAUNCH_ATTRIBUTE_PRIORITY && a->value.priority == 0) ||
			    (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && a->value.clusterDim.x <= 1 &&
			     a->value.clusterDim.y <= 1 && a->value.clusterDim.z <= 1) ||
			    (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && !a->value.cooperative) ||
			    (a->id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
			     !a->value.programmaticStreamSerializationAllowed);

		if (!none) {
			phos_log_once("CUDA driver API", "cuLaunchKernelEx with launch attributes", &logged);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	grid[0] = config->gridDimX;
	grid[1] = config->gridDimY;
	grid[2] = config->gridDimZ;
	block[0] = config->blockDimX;
	block[1] = config->blockDimY;
	block[2] = config->blockDimZ;
	return launch(f, grid, block, config->sharedMemBytes, config->hStream, kernelParams, extra);
}
PHOS_ALIAS(cuLaunchKernelEx_ptsz, cuLaunchKernelEx);

/* --- cuGetProcAddress: our own entry points --- */

static int export_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct phos_cuda_export *)elem)->name);
}

static void *export_find(const char *name)
{
	const struct phos_cuda_export *e =
		bsearch(name, phos_cuda_exports, phos_cuda_nexports, sizeof(*e), export_cmp);

	return e ? e->fn : NULL;
}

/*
 * The entry point of `symbol` (a base name: "cuMemAlloc") at CUDA version
 * `version`: the newest revision cudaTypedefs.h gives it at or below that
 * version (cuMemAlloc at 3020 and later is cuMemAlloc_v2), then its
 * per-thread-stream form when flags ask for one and it has one. A name
 * cudaTypedefs.h does not version is looked up as it is.
 */
static CUresult proc_address(const char *symbol, void **pfn, int version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	const char *name = NULL;
	bool known = false;
	char pt[256];
	void *fn;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (unsigned i = 0; i < phos_cuda_nversions; i++) {
		const struct phos_cuda_version *v = &phos_cuda_versions[i];

		if (strcmp(v->base, symbol))
			continue;
		known = true;
		if (v->version <= version)
			name = v->name;
	}
	if (!known)
		name = symbol;
	/* With a status to fill, a symbol that is not there is CUDA_SUCCESS with
	 * the status saying why (what the driver answered on an H100, CUDA 13);
	 * without one, CUDA_ERROR_NOT_FOUND. */
	if (!name) {
		*pfn = NULL;
		if (status)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return status ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
	}
	fn = NULL;
	if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && strlen(name) + 6 < sizeof(pt)) {
		snprintf(pt, sizeof(pt), "%s_ptds", name);
		fn = export_find(pt);
		if (!fn) {
			snprintf(pt, sizeof(pt), "%s_ptsz", name);
			fn = export_find(pt);
		}
	}
	if (!fn)
		fn = export_find(name);
	if (!fn) {
		*pfn = NULL;
		if (status)
			*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return status ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
	}
	*pfn = fn;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					 CUdriverProcAddressQueryResult *symbolStatus)
{
	return proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* The CUDA 11.3 form, without the status (cuda.h names only the _v2 one now). */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
PHOS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return proc_address(symbol, pfn, cudaVersion, flags, NULL);
}
