// SPDX-License-Identifier: MIT
//
// A driver API program, as a JIT or a runtime library writes one: it links
// libcuda only (-cudart none), loads kernels.cu's kernels from an embedded PTX
// text, fatbin and cubin with cuModuleLoadData, launches them with both forms
// of arguments (kernelParams, and extra's packed buffer) and through
// cuLaunchKernelEx, and checks every answer against a CPU reference. Also:
// memory (device, pinned, sets of 1, 2 and 4 bytes), streams, events,
// pointer attributes, module variables, kernel attributes, cuGetProcAddress,
// error names, and bad images refused; modules loaded from files
// (cuModuleLoad), and PTX linked at run time as NVIDIA's ptxjit does
// (cuLinkCreate, cuLinkAddData/AddFile, cuLinkComplete), and relocatable
// device code of several inputs linked into one cubin; the legacy launch
// API (cuFuncSetBlockShape, cuParamSet*, cuLaunchGrid).
//
//   driver [phos]   "phos": also checks what only phos-fn promises (exact
//                   error codes for bad images, cuGetProcAddress returning
//                   the exported entry points themselves)
//
// Prints "driver: ok" and exits 0 when every check passed.
#include <cuda.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels_embedded.h"

static int failures;
static bool phos_mode;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "driver: %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			failures++;                                        \
		}                                                          \
	} while (0)

#define CU(call)                                                                  \
	do {                                                                      \
		CUresult cu_r_ = (call);                                          \
		if (cu_r_ != CUDA_SUCCESS) {                                      \
			const char *cu_n_ = "?";                                  \
			cuGetErrorName(cu_r_, &cu_n_);                            \
			fprintf(stderr, "driver: %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, cu_n_, \
				(int)cu_r_);                                      \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

enum { N = 1000 };

static void check_saxpy(CUmodule mod, const char *what, CUstream stream)
{
	CUfunction f;
	CUdeviceptr dx, dy;
	float x[N], y[N], want[N], got[N], a = 2.5f;
	int n = N;

	CU(cuModuleGetFunction(&f, mod, "_Z9drv_saxpyfPKfPfi"));
	for (int i = 0; i < N; i++) {
		x[i] = (float)i * 0.5f;
		y[i] = (float)(N - i);
		want[i] = a * x[i] + y[i];
	}
	CU(cuMemAlloc(&dx, sizeof(x)));
	CU(cuMemAlloc(&dy, sizeof(y)));
	CU(cuMemcpyHtoD(dx, x, sizeof(x)));
	CU(cuMemcpyHtoD(dy, y, sizeof(y)));

	// kernelParams: a pointer to each argument
	void *args[] = { &a, &dx, &dy, &n };
	CU(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, args, NULL));
	CU(cuStreamSynchronize(stream));
	CU(cuMemcpyDtoH(got, dy, sizeof(got)));
	for (int i = 0; i < N; i++)
		CHECK(got[i] == want[i], "%s saxpy (kernelParams): y[%d] = %g, want %g", what, i, got[i], want[i]);

	// extra: the packed parameter buffer, laid out as the kernel's ABI says
	struct packed_params {
		float a;
		CUdeviceptr x, y;
		int n;
	} packed = { a, dx, dy, n };
	// the size is the parameters' (28 bytes), not the struct's padded 32:
	// the driver refuses a longer buffer (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	// on an H100)
	size_t size = offsetof(packed_params, n) + sizeof(int);
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };
	size_t padded = sizeof(packed);
	void *extra_padded[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &padded,
				 CU_LAUNCH_PARAM_END };
	CUresult pe = cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, NULL, extra_padded);
	CHECK(padded == size || pe == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
	      "%s: a %zu-byte buffer for %zu bytes of parameters gave %d", what, padded, size, (int)pe);
	CU(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, NULL, extra));
	CU(cuStreamSynchronize(stream));
	CU(cuMemcpyDtoH(got, dy, sizeof(got)));
	for (int i = 0; i < N; i++) {
		float w = a * x[i] + want[i];

		CHECK(got[i] == w, "%s saxpy (extra): y[%d] = %g, want %g", what, i, got[i], w);
	}
	// both forms at once is an error
	CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, args, extra) == CUDA_ERROR_INVALID_VALUE,
	      "%s: kernelParams and extra together accepted", what);

	int v = -1;
	CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	CHECK(v >= 128, "%s: max threads per block %d", what, v);
	CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
	CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	CHECK(v == 1024, "%s: max dynamic shared %d after setting 1024", what, v);
	CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&v, f, 128, 0));
	CHECK(v >= 1, "%s: %d blocks of 128 threads per SM", what, v);
	CU(cuMemFree(dx));
	CU(cuMemFree(dy));
}

// extern "C" drv_fill through cuLaunchKernelEx, on a stream, between two events.
static void check_fill(CUmodule mod, CUstream stream)
{
	CUfunction f;
	CUdeviceptr d;
	CUevent start, stop;
	unsigned got[N], v = 7;
	int n = N;
	float ms = -1;

	CU(cuModuleGetFunction(&f, mod, "drv_fill"));
	CU(cuMemAlloc(&d, sizeof(got)));
	CU(cuMemsetD32Async(d, 0xdeadbeefu, N, stream));
	CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
	CU(cuEventRecord(start, stream));

	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDimX = (N + 255) / 256;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 256;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = stream;
	void *args[] = { &d, &v, &n };
	CU(cuLaunchKernelEx(&cfg, f, args, NULL));
	CU(cuEventRecord(stop, stream));
	CU(cuEventSynchronize(stop));
	CHECK(cuEventQuery(stop) == CUDA_SUCCESS, "event query after its synchronize");
	CU(cuEventElapsedTime(&ms, start, stop));
	CHECK(ms >= 0, "elapsed %g ms", ms);
	CU(cuMemcpyDtoH(got, d, sizeof(got)));
	for (int i = 0; i < N; i++)
		CHECK(got[i] == v + (unsigned)i, "fill: out[%d] = %u, want %u", i, got[i], v + (unsigned)i);
	CU(cuEventDestroy(start));
	CU(cuEventDestroy(stop));
	CU(cuMemFree(d));
}

// Sets of 1, 2 and 4 bytes, uniform and not, over more than one 64 KiB block.
static void check_memsets(CUstream stream)
{
	enum { M = (1 << 18) + 3 };   // elements of 4 bytes: 1 MiB + 12 bytes
	CUdeviceptr d;
	unsigned *h = (unsigned *)malloc(M * 4);

	CU(cuMemAlloc(&d, M * 4));
	CU(cuMemsetD32(d, 0x01020304u, M));
	CU(cuMemcpyDtoH(h, d, M * 4));
	for (int i = 0; i < M; i++)
		if (h[i] != 0x01020304u) {
			CHECK(0, "memsetD32: element %d = %#x", i, h[i]);
			break;
		}
	CU(cuMemsetD16Async(d + 4, 0xabcd, 5, stream));
	CU(cuMemsetD8Async(d + 16, 0x77, 3, stream));
	CU(cuStreamSynchronize(stream));
	CU(cuMemcpyDtoH(h, d, 32));
	const unsigned char *b = (const unsigned char *)h;
	unsigned char want[32];
	for (int i = 0; i < 32; i += 4) {
		want[i] = 0x04, want[i + 1] = 0x03, want[i + 2] = 0x02, want[i + 3] = 0x01;
	}
	for (int i = 4; i < 14; i += 2)
		want[i] = 0xcd, want[i + 1] = 0xab;
	for (int i = 16; i < 19; i++)
		want[i] = 0x77;
	CHECK(!memcmp(b, want, 32), "memsetD16/D8 bytes differ");
	CU(cuMemsetD32(d, 0, M));
	CU(cuMemcpyDtoH(h, d, M * 4));
	for (int i = 0; i < M; i++)
		if (h[i] != 0) {
			CHECK(0, "memsetD32 0: element %d = %#x", i, h[i]);
			break;
		}
	CU(cuMemFree(d));
	free(h);
}

static void check_host_memory(CUstream stream)
{
	void *pinned, *mapped;
	CUdeviceptr d;
	unsigned type = 0;

	CU(cuMemAllocHost(&pinned, 4096));
	CU(cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_PORTABLE));
	CU(cuMemAlloc(&d, 4096));
	for (int i = 0; i < 4096; i++)
		((unsigned char *)pinned)[i] = (unsigned char)(i * 7);
	CU(cuMemcpyHtoDAsync(d, pinned, 4096, stream));
	CU(cuMemcpyDtoDAsync(d + 2048, d, 1024, stream));
	CU(cuMemcpyDtoHAsync(mapped, d, 4096, stream));
	CU(cuStreamSynchronize(stream));
	for (int i = 0; i < 4096; i++) {
		unsigned char w = (unsigned char)((i >= 2048 && i < 3072 ? i - 2048 : i) * 7);

		if (((unsigned char *)mapped)[i] != w) {
			CHECK(0, "pinned round trip: byte %d", i);
			break;
		}
	}
	CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pinned));
	CHECK(type == CU_MEMORYTYPE_HOST, "pinned memory type %u", type);
	CU(cuMemFreeHost(pinned));
	CU(cuMemFreeHost(mapped));
	CU(cuMemFree(d));
}

static void host_fn(void *arg)
{
	(*(int *)arg)++;
}

// Stream-ordered allocation from the default pool, a host function after it,
// and registered host memory as a copy's source.
static void check_async_memory(CUstream stream)
{
	CUmemoryPool pool;
	CUdeviceptr d;
	cuuint64_t reserved = 0;
	static unsigned char src[8192] __attribute__((aligned(4096))), back[8192];
	int ran = 0;

	CU(cuDeviceGetDefaultMemPool(&pool, 0));
	CU(cuMemAllocAsync(&d, sizeof(src), stream));
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (unsigned char)(i * 13 + 1);
	CU(cuMemHostRegister(src, sizeof(src), 0));
	CU(cuMemcpyHtoDAsync(d, src, sizeof(src), stream));
	CU(cuMemcpyDtoHAsync(back, d, sizeof(back), stream));
	CU(cuLaunchHostFunc(stream, host_fn, &ran));
	CU(cuMemFreeAsync(d, stream));
	CU(cuStreamSynchronize(stream));
	CHECK(ran == 1, "host function ran %d times", ran);
	CHECK(!memcmp(src, back, sizeof(src)), "registered source: bytes differ");
	CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
	CU(cuMemPoolTrimTo(pool, 0));
	CU(cuMemHostUnregister(src));
}

static void check_pointers(CUcontext ctx)
{
	CUdeviceptr d, dp = 0;
	unsigned type = 0;
	CUcontext pc = NULL;

	CU(cuMemAlloc(&d, 256));
	CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 16));
	CHECK(type == CU_MEMORYTYPE_DEVICE, "device memory type %u", type);
	CU(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, d));
	CHECK(pc == ctx, "pointer context %p, want %p", (void *)pc, (void *)ctx);
	CU(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d));
	CHECK(dp == d, "device pointer %#llx, want %#llx", (unsigned long long)dp, (unsigned long long)d);
	CUdeviceptr base = 0;
	size_t size = 0;
	CU(cuMemGetAddressRange(&base, &size, d + 100));
	CHECK(base == d && size == 256, "range of d+100: %#llx + %zu, want %#llx + 256", (unsigned long long)base, size,
	      (unsigned long long)d);
	CU(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 200));
	CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 200));
	CHECK(base == d && size == 256, "range attributes of d+200: %#llx + %zu", (unsigned long long)base, size);

	CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT };
	void *data[] = { &type, &pc };
	int local = 0;
	CU(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)(uintptr_t)&local));
	CHECK(type == 0 && pc == NULL, "unregistered host memory: type %u context %p", type, (void *)pc);
	CU(cuMemFree(d));
}

static void check_globals(CUmodule mod)
{
	CUdeviceptr d;
	size_t size = 0;
	int in[16], out[16];

	CU(cuModuleGetGlobal(&d, &size, mod, "drv_table"));
	CHECK(size == sizeof(in), "drv_table is %zu bytes, want %zu", size, sizeof(in));
	for (int i = 0; i < 16; i++)
		in[i] = i * i - 3;
	CU(cuMemcpyHtoD(d, in, sizeof(in)));
	CU(cuMemcpyDtoH(out, d, sizeof(out)));
	CHECK(!memcmp(in, out, sizeof(in)), "drv_table does not read back");
	CHECK(cuModuleGetGlobal(&d, &size, mod, "no_such_variable") == CUDA_ERROR_NOT_FOUND,
	      "a missing variable is not CUDA_ERROR_NOT_FOUND");
}

// Images that are not one: refused, never a crash.
static void check_bad_images(void)
{
	static const char junk[] = "this is not a module at all, neither PTX nor ELF nor fatbin";
	static const char bad_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry (\n";
	static unsigned long long bad_elf[16] = { 0x00010102464c457fULL };   // \x7fELF, 64-bit, no sections
	static unsigned bad_fatbin[8] = { 0xBA55ED50u, 0x00100001u, 0xffffffffu, 0x7fffu };
	const void *images[] = { junk, bad_ptx, bad_elf, bad_fatbin };
	const char *names[] = { "junk", "broken PTX", "ELF without sections", "fatbin of 2^47 bytes" };

	// The last two would make the real driver read past them (their headers
	// claim more bytes than there are): phos-fn only, which reads headers first.
	for (int i = 0; i < (phos_mode ? 4 : 2); i++) {
		CUmodule m = NULL;
		CUresult r = cuModuleLoadData(&m, images[i]);

		CHECK(r != CUDA_SUCCESS, "%s loaded", names[i]);
		if (phos_mode)
			CHECK(r == CUDA_ERROR_INVALID_IMAGE, "%s: error %d, want CUDA_ERROR_INVALID_IMAGE", names[i], (int)r);
	}
}

static void check_proc_address(void)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*fr)(CUdeviceptr);
	CUdeviceptr d = 0;

	CU(cuGetProcAddress("cuMemAlloc", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	CHECK(p && st == CU_GET_PROC_ADDRESS_SUCCESS, "cuMemAlloc: %p status %d", p, (int)st);
	alloc = (CUresult(*)(CUdeviceptr *, size_t))p;
	CU(cuGetProcAddress("cuMemFree", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	fr = (CUresult(*)(CUdeviceptr))p;
	CU(alloc(&d, 512));
	CHECK(d != 0, "cuMemAlloc through cuGetProcAddress gave 0");
	CU(fr(d));
	CUresult miss = cuGetProcAddress("cuNoSuchEntryPoint", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
	// the driver (H100, CUDA 13) answers success with the status saying why
	CHECK(miss == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && !p,
	      "a missing entry point: result %d, status %d", (int)miss, (int)st);
	if (phos_mode) {
		// phos-fn hands out its exports: the v2 ABI at 13000, the per-thread forms on request
		CU(cuGetProcAddress("cuMemAlloc", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
		CHECK(p == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), "cuMemAlloc at 13000 is not cuMemAlloc_v2");
		CU(cuGetProcAddress("cuMemAlloc", &p, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
		CHECK(p == dlsym(RTLD_DEFAULT, "cuMemAlloc"), "cuMemAlloc at 2000 is not the v1 cuMemAlloc");
		CU(cuGetProcAddress("cuMemcpyHtoD", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
		CHECK(p == dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds"), "per-thread cuMemcpyHtoD is not _v2_ptds");
		CU(cuGetProcAddress("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
		CHECK(p == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"), "per-thread cuLaunchKernel is not _ptsz");
		CU(cuGetProcAddress("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
		CHECK(p == dlsym(RTLD_DEFAULT, "cuLaunchKernel"), "cuLaunchKernel is not ours");
		CHECK(cuGetProcAddress("cuMemAlloc", &p, 1000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS &&
			      st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
		      "cuMemAlloc at 1000: status %d", (int)st);
	}
}

// image (size bytes) into a new temporary file; its path in path (PATH_MAX).
static bool write_temp(const void *image, size_t size, const char *suffix, char *path)
{
	snprintf(path, 256, "/tmp/phos-driver-XXXXXX%s", suffix);
	int fd = mkstemps(path, (int)strlen(suffix));
	if (fd < 0)
		return false;
	bool ok = write(fd, image, size) == (ssize_t)size;
	close(fd);
	return ok;
}

// y[i] = 3 y[i] + 1 by drv_linked of module m (relocatable code linked at run time).
static void check_linked(CUmodule m, const char *what)
{
	CUfunction f;
	CUdeviceptr dy;
	float y[N], got[N];
	int n = N;

	CU(cuModuleGetFunction(&f, m, "_Z10drv_linkedPfi"));
	for (int i = 0; i < N; i++)
		y[i] = (float)i - 7.0f;
	CU(cuMemAlloc(&dy, sizeof(y)));
	CU(cuMemcpyHtoD(dy, y, sizeof(y)));
	void *args[] = { &dy, &n };
	CU(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CU(cuCtxSynchronize());
	CU(cuMemcpyDtoH(got, dy, sizeof(got)));
	for (int i = 0; i < N; i++)
		CHECK(got[i] == 3.0f * y[i] + 1.0f, "%s: y[%d] = %g, want %g", what, i, got[i], 3.0f * y[i] + 1.0f);
	CU(cuMemFree(dy));
}

// Several inputs linked into one cubin (relocatable device code, as Numba
// links its PTX with libcudadevrt.a): the kernel's PTX with the function it
// calls as PTX, as a cubin and as a host library; then a link with a symbol
// left undefined fails with a message in the error log, and NVVM IR is
// refused.
static void check_link_several(void)
{
	struct {
		const char *what;
		CUjitInputType type;
		const void *data;
		size_t size;
	} device[] = {
		{ "PTX + PTX", CU_JIT_INPUT_PTX, link_device_ptx, strlen((const char *)link_device_ptx) + 1 },
		{ "PTX + cubin", CU_JIT_INPUT_CUBIN, link_device_cubin, link_device_cubin_len },
		{ "PTX + library", CU_JIT_INPUT_LIBRARY, link_device_lib, link_device_lib_len },
	};
	size_t kernel_size = strlen((const char *)link_kernel_ptx) + 1;

	for (size_t k = 0; k < sizeof(device) / sizeof(device[0]); k++) {
		char errors[4096];
		CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
		void *vals[] = { errors, (void *)(uintptr_t)sizeof(errors) };
		CUlinkState ls;
		CUmodule m;
		void *out = NULL;
		size_t out_size = 0;

		errors[0] = '\0';
		CU(cuLinkCreate(2, opts, vals, &ls));
		CU(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)link_kernel_ptx, kernel_size, "link_kernel.ptx", 0, NULL,
				 NULL));
		CU(cuLinkAddData(ls, device[k].type, (void *)device[k].data, device[k].size, "link_device", 0, NULL,
				 NULL));
		CUresult r = cuLinkComplete(ls, &out, &out_size);
		CHECK(r == CUDA_SUCCESS, "%s: cuLinkComplete: %d (%s)", device[k].what, (int)r, errors);
		if (r == CUDA_SUCCESS) {
			CHECK(out && out_size > 0, "%s: link output %p of %zu bytes", device[k].what, out, out_size);
			CU(cuModuleLoadData(&m, out));
			check_linked(m, device[k].what);
			CU(cuModuleUnload(m));
		}
		CU(cuLinkDestroy(ls));
	}

	// drv_link_affine defined nowhere: the link fails and says why
	char errors[4096];
	CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *vals[] = { errors, (void *)(uintptr_t)sizeof(errors) };
	CUlinkState ls;
	void *out = NULL;
	size_t out_size = 0;

	errors[0] = '\0';
	CU(cuLinkCreate(2, opts, vals, &ls));
	CU(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)link_kernel_ptx, kernel_size, "link_kernel.ptx", 0, NULL, NULL));
	CU(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)kernels_ptx, strlen((const char *)kernels_ptx) + 1, "kernels.ptx",
			 0, NULL, NULL));
	CUresult r = cuLinkComplete(ls, &out, &out_size);
	CHECK(r != CUDA_SUCCESS, "a link with drv_link_affine undefined succeeded");
	CHECK(strstr(errors, "drv_link_affine") != NULL, "the failed link's error log does not name the symbol: '%s'",
	      errors);
	if (phos_mode)
		CHECK(cuLinkAddData(ls, CU_JIT_INPUT_NVVM, (void *)kernels_ptx, 16, NULL, 0, NULL, NULL) ==
			      CUDA_ERROR_NOT_SUPPORTED,
		      "NVVM IR is not refused");
	CU(cuLinkDestroy(ls));
}

// The legacy launch API CUDA still exports (old driver-API programs):
// block shape, parameters at their ABI offsets, cuLaunchGrid and
// cuLaunchGridAsync; saxpy's answers checked. mod: the PTX module.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void check_legacy(CUmodule mod, CUstream stream)
{
	CUfunction f;
	CUdeviceptr dx, dy;
	float x[N], y[N], want[N], got[N], a = -1.5f;
	int n = N;

	CU(cuModuleGetFunction(&f, mod, "_Z9drv_saxpyfPKfPfi"));
	if (phos_mode)
		CHECK(cuLaunchGrid(f, 1, 1) == CUDA_ERROR_INVALID_VALUE, "a legacy launch without a block shape");
	for (int i = 0; i < N; i++) {
		x[i] = (float)(i % 17);
		y[i] = 0.25f * (float)i;
		want[i] = a * x[i] + y[i];
	}
	CU(cuMemAlloc(&dx, sizeof(x)));
	CU(cuMemAlloc(&dy, sizeof(y)));
	CU(cuMemcpyHtoD(dx, x, sizeof(x)));
	CU(cuMemcpyHtoD(dy, y, sizeof(y)));
	CU(cuFuncSetBlockShape(f, 128, 1, 1));
	CU(cuFuncSetSharedSize(f, 0));
	CU(cuParamSetf(f, 0, a));
	CU(cuParamSetv(f, 8, &dx, sizeof(dx)));
	CU(cuParamSetv(f, 16, &dy, sizeof(dy)));
	CU(cuParamSeti(f, 24, (unsigned)n));
	CU(cuParamSetSize(f, 28));
	CU(cuLaunchGrid(f, (N + 127) / 128, 1));
	CU(cuCtxSynchronize());
	CU(cuMemcpyDtoH(got, dy, sizeof(got)));
	for (int i = 0; i < N; i++)
		CHECK(got[i] == want[i], "legacy launch: y[%d] = %g, want %g", i, got[i], want[i]);
	// again on a stream, y = a x + y once more
	CU(cuLaunchGridAsync(f, (N + 127) / 128, 1, stream));
	CU(cuStreamSynchronize(stream));
	CU(cuMemcpyDtoH(got, dy, sizeof(got)));
	for (int i = 0; i < N; i++)
		CHECK(got[i] == a * x[i] + want[i], "legacy async launch: y[%d] = %g, want %g", i, got[i],
		      a * x[i] + want[i]);
	if (phos_mode)
		CHECK(cuParamSetv(f, 4090, &dx, sizeof(dx)) == CUDA_ERROR_INVALID_VALUE,
		      "a parameter past the legacy API's 4 KiB");
	CU(cuMemFree(dx));
	CU(cuMemFree(dy));
}
#pragma GCC diagnostic pop

// Modules read from files: PTX and a cubin, and a path that is not there.
static void check_module_files(void)
{
	char ptx[256], cubin[256];
	CUmodule m;

	CHECK(write_temp(kernels_ptx, strlen((const char *)kernels_ptx), ".ptx", ptx), "temporary PTX file");
	CHECK(write_temp(kernels_cubin, kernels_cubin_len, ".cubin", cubin), "temporary cubin file");
	CU(cuModuleLoad(&m, ptx));
	check_saxpy(m, "PTX file", NULL);
	CU(cuModuleUnload(m));
	CU(cuModuleLoad(&m, cubin));
	check_saxpy(m, "cubin file", NULL);
	CU(cuModuleUnload(m));
	CHECK(cuModuleLoad(&m, "/nonexistent/kernels.cubin") == CUDA_ERROR_FILE_NOT_FOUND,
	      "a missing module file is not CUDA_ERROR_FILE_NOT_FOUND");

	// PTX linked at run time, from memory and from the file, with the
	// options ptxjit passes; the output loads as a module
	for (int from_file = 0; from_file < 2; from_file++) {
		char info[1024];
		float walltime = -1.0f;
		CUjit_option opts[] = { CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
					CU_JIT_LOG_VERBOSE };
		void *vals[] = { &walltime, info, (void *)(uintptr_t)sizeof(info), (void *)(uintptr_t)1 };
		CUlinkState ls;
		void *out = NULL;
		size_t out_size = 0;

		memset(info, 'x', sizeof(info));
		CU(cuLinkCreate(4, opts, vals, &ls));
		if (from_file)
			CU(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, ptx, 0, NULL, NULL));
		else
			CU(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)kernels_ptx, strlen((const char *)kernels_ptx) + 1,
					 "kernels.ptx", 0, NULL, NULL));
		CU(cuLinkComplete(ls, &out, &out_size));
		CHECK(out && out_size > 0, "link output %p of %zu bytes", out, out_size);
		CHECK(memchr(info, 0, sizeof(info)), "the link's info log is not a string");
		CU(cuModuleLoadData(&m, out));
		check_saxpy(m, from_file ? "PTX linked from a file" : "PTX linked", NULL);
		CU(cuModuleUnload(m));
		CU(cuLinkDestroy(ls));
	}
	CUlinkState ls;
	void *out = NULL;
	size_t out_size = 0;
	CU(cuLinkCreate(0, NULL, NULL, &ls));
	CHECK(cuLinkAddData(ls, CU_JIT_INPUT_CUBIN, (void *)"not a cubin", 12, NULL, 0, NULL, NULL) != CUDA_SUCCESS,
	      "a bad cubin linked");
	CHECK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, "/nonexistent/k.ptx", 0, NULL, NULL) == CUDA_ERROR_FILE_NOT_FOUND,
	      "a missing PTX file is not CUDA_ERROR_FILE_NOT_FOUND");
	if (phos_mode)
		CHECK(cuLinkDestroy((CUlinkState)&out) == CUDA_ERROR_INVALID_HANDLE, "a link state that is none");
	CU(cuLinkDestroy(ls));
	check_link_several();
	unlink(ptx);
	unlink(cubin);
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx = NULL, cur = NULL;
	CUstream stream;
	CUmodule mods[3];
	const char *what[3] = { "PTX", "fatbin", "cubin" };
	const void *images[3] = { kernels_ptx, kernels_fatbin, kernels_cubin };
	char name[256];
	int count = 0, version = 0, major = 0;
	size_t total = 0, mfree = 0;
	const char *s = NULL;
	CUuuid uuid;

	phos_mode = argc > 1 && !strcmp(argv[1], "phos");
	CU(cuInit(0));
	CU(cuDriverGetVersion(&version));
	CHECK(version >= 13000, "driver version %d", version);
	CU(cuDeviceGetCount(&count));
	CHECK(count >= 1, "%d devices", count);
	CU(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGet(&dev, count) == CUDA_ERROR_INVALID_DEVICE, "device %d exists", count);
	CU(cuDeviceGet(&dev, 0));
	CU(cuDeviceGetName(name, sizeof(name), dev));
	CHECK(name[0], "empty device name");
	CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(major >= 7, "compute capability %d", major);
	CU(cuDeviceTotalMem(&total, dev));
	CHECK(total > 0, "total memory 0");
	CU(cuDeviceGetUuid(&uuid, dev));
	char bus[32];
	unsigned dom = 99999, b = 999, d = 999;
	CU(cuDeviceGetPCIBusId(bus, sizeof(bus), dev));
	CHECK(sscanf(bus, "%x:%x:%x.", &dom, &b, &d) == 3 && dom <= 0xffff && b <= 0xff && d <= 0x1f,
	      "PCI bus id %s", bus);

	unsigned flags = 0;
	int active = -1;
	CU(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	CHECK(active == 1 && (flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC, "primary context: flags %#x active %d",
	      flags, active);
	CU(cuCtxSetCurrent(ctx));
	CU(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
	CU(cuCtxGetCurrent(&cur));
	CHECK(cur == ctx, "current context %p, want the primary %p", (void *)cur, (void *)ctx);
	CU(cuCtxPushCurrent(ctx));
	CU(cuCtxPopCurrent(&cur));
	CHECK(cur == ctx, "popped %p, want %p", (void *)cur, (void *)ctx);
	CUdevice cdev = -1;
	CU(cuCtxGetDevice(&cdev));
	CHECK(cdev == dev, "context device %d", cdev);
	CU(cuMemGetInfo(&mfree, &total));
	CHECK(total > 0 && mfree <= total, "memory info: %zu free of %zu", mfree, total);

	CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	for (int i = 0; i < 3; i++) {
		CU(cuModuleLoadData(&mods[i], images[i]));
		check_saxpy(mods[i], what[i], i == 1 ? stream : NULL);
	}
	// JIT options with log buffers: accepted, the logs come back as strings
	char info_log[256], error_log[256];
	memset(info_log, 'x', sizeof(info_log));
	memset(error_log, 'x', sizeof(error_log));
	CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
				CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *vals[] = { info_log, (void *)(uintptr_t)sizeof(info_log), error_log, (void *)(uintptr_t)sizeof(error_log) };
	CUmodule ex;
	CU(cuModuleLoadDataEx(&ex, kernels_ptx, 4, opts, vals));
	CHECK((uintptr_t)vals[1] < sizeof(info_log) && memchr(info_log, 0, sizeof(info_log)),
	      "info log of %zu bytes, not a string", (size_t)(uintptr_t)vals[1]);
	CHECK((uintptr_t)vals[3] < sizeof(error_log) && memchr(error_log, 0, sizeof(error_log)),
	      "error log of %zu bytes, not a string", (size_t)(uintptr_t)vals[3]);
	check_saxpy(ex, "PTX with JIT options", NULL);
	CU(cuModuleUnload(ex));

	CUfunction f;
	CHECK(cuModuleGetFunction(&f, mods[0], "no_such_kernel") == CUDA_ERROR_NOT_FOUND,
	      "a missing kernel is not CUDA_ERROR_NOT_FOUND");
	check_fill(mods[1], stream);
	check_globals(mods[0]);
	check_memsets(stream);
	check_host_memory(stream);
	check_async_memory(stream);
	check_pointers(ctx);
	check_bad_images();
	check_module_files();
	check_legacy(mods[0], stream);
	check_proc_address();
	if (phos_mode) {
		// what phos-fn does not forward is refused, never faked (and named once in its log)
		CUgraph g;

		CHECK(cuGraphCreate(&g, 0) == CUDA_ERROR_NOT_SUPPORTED, "cuGraphCreate is not refused");
		CHECK(cuGraphCreate(&g, 0) == CUDA_ERROR_NOT_SUPPORTED, "cuGraphCreate is not refused twice");
	}

	CUevent e;
	CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	CU(cuEventRecord(e, stream));
	CU(cuStreamWaitEvent(NULL, e, 0));
	CU(cuCtxSynchronize());
	CHECK(cuStreamQuery(stream) == CUDA_SUCCESS, "stream busy after cuCtxSynchronize");
	CU(cuEventDestroy(e));
	CU(cuStreamDestroy(stream));
	for (int i = 0; i < 3; i++)
		CU(cuModuleUnload(mods[i]));

	CU(cuGetErrorName(CUDA_ERROR_INVALID_IMAGE, &s));
	CHECK(s && !strcmp(s, "CUDA_ERROR_INVALID_IMAGE"), "error name %s", s ? s : "(null)");
	CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	CHECK(s && !strcmp(s, "out of memory"), "error string %s", s ? s : "(null)");
	CU(cuDevicePrimaryCtxRelease(dev));

	if (failures) {
		fprintf(stderr, "driver: %d checks failed\n", failures);
		return 1;
	}
	printf("driver: ok\n");
	return 0;
}
