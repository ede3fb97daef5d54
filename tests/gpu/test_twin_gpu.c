/* SPDX-License-Identifier: MIT */
/*
 * The validation twin (runtime/kernel/ptx_twin.h) on a real GPU: the twin of
 * twin_kernels.cu computes what the module computes, counts no miss when the
 * table allows every access, counts each access the table does not allow
 * (writes to a read-only range, reads through a pointer kept in memory, atom
 * as a write), and checks nothing outside the arena.
 *
 *   test_twin_gpu TWIN_KERNELS_PTX
 *
 * Exits 77 (skip) without a CUDA driver and GPU, 0 when every check passed.
 * The driver is dlopen'ed: the test links no CUDA library.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "ptx_twin.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*cuModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				  unsigned, void *, void **, void **);
static CUresult (*cuCtxSynchronize)(void);

#define CU(call)                                                                      \
	do {                                                                          \
		CUresult r_ = (call);                                                 \
		if (r_) {                                                             \
			fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

#define N 4096

static CUmodule mod;
static CUdeviceptr tab, arena, miss, last;

static int load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);

	if (!h)
		return -1;
#define SYM(v, name) if (!(*(void **)&v = dlsym(h, name))) return -1
	SYM(cuInit, "cuInit");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuModuleLoadData, "cuModuleLoadData");
	SYM(cuModuleGetFunction, "cuModuleGetFunction");
	SYM(cuModuleGetGlobal, "cuModuleGetGlobal_v2");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(cuLaunchKernel, "cuLaunchKernel");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
#undef SYM
	return 0;
}

/* Sets the table to the n triples of r and the arena to [lo, hi); zeroes the counters. */
static void set_table(const uint64_t *r, unsigned n, uint64_t lo, uint64_t hi)
{
	uint64_t t[1 + 3 * 8] = { n }, a[2] = { lo, hi }, zero = 0;

	memcpy(t + 1, r, n * 3 * sizeof(*r));
	CU(cuMemcpyHtoD(tab, t, (1 + 3 * n) * sizeof(uint64_t)));
	CU(cuMemcpyHtoD(arena, a, sizeof(a)));
	CU(cuMemcpyHtoD(miss, &zero, 4));
	CU(cuMemcpyHtoD(last, &zero, 8));
}

static void launch(const char *name, void **args, unsigned *ret_miss, uint64_t *ret_last)
{
	CUfunction f;

	CU(cuModuleGetFunction(&f, mod, name));
	CU(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CU(cuCtxSynchronize());
	*ret_miss = 0;
	CU(cuMemcpyDtoH(ret_miss, miss, 4));
	CU(cuMemcpyDtoH(ret_last, last, 8));
}

int main(int argc, char **argv)
{
	static float hx[N], hy[N], hz[N];
	FILE *f;
	char *ptx, *twin;
	size_t len, tlen, sz;
	CUcontext ctx;
	CUdeviceptr base, x, y, z, ptab, cnt;
	int dev, n = N;
	unsigned m;
	uint64_t l;

	if (argc != 2)
		return 1;
	if (load_driver() < 0 || cuInit(0) || cuDeviceGet(&dev, 0)) {
		printf("SKIP: no CUDA driver or GPU\n");
		return 77;
	}
	f = fopen(argv[1], "rb");
	if (!f)
		return 1;
	fseek(f, 0, SEEK_END);
	len = (size_t)ftell(f);
	rewind(f);
	ptx = malloc(len);
	if (!ptx || fread(ptx, 1, len, f) != len)
		return 1;
	fclose(f);
	CHECK(phos_ptx_twin(ptx, len, &twin, &tlen) == 0, "twin");

	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&mod, twin));
	CU(cuModuleGetGlobal(&tab, &sz, mod, PHOS_TWIN_TAB));
	CHECK(sz == (1 + 3 * PHOS_TWIN_MAX_RANGES) * 8, "table size %zu", sz);
	CU(cuModuleGetGlobal(&arena, &sz, mod, PHOS_TWIN_ARENA));
	CU(cuModuleGetGlobal(&miss, &sz, mod, PHOS_TWIN_MISS));
	CU(cuModuleGetGlobal(&last, &sz, mod, PHOS_TWIN_LAST));

	/* one allocation: x, y, z, the pointer table, a counter */
	CU(cuMemAlloc(&base, 3 * N * 4 + 64));
	x = base, y = x + N * 4, z = y + N * 4, ptab = z + N * 4, cnt = ptab + 8;
	for (int i = 0; i < N; i++)
		hx[i] = (float)i, hz[i] = (float)(3 * i + 1);
	CU(cuMemcpyHtoD(x, hx, sizeof(hx)));
	CU(cuMemcpyHtoD(z, hz, sizeof(hz)));
	CU(cuMemcpyHtoD(ptab, &z, 8));

	{
		void *args[] = { &x, &y, &n };
		const uint64_t allowed[] = { x, x + N * 4, PHOS_TWIN_READ, y, y + N * 4, PHOS_TWIN_READ | PHOS_TWIN_WRITE };
		const uint64_t y_read_only[] = { x, x + N * 4, PHOS_TWIN_READ, y, y + N * 4, PHOS_TWIN_READ };

		set_table(allowed, 2, base, base + 3 * N * 4 + 64);
		launch("scale", args, &m, &l);
		CU(cuMemcpyDtoH(hy, y, sizeof(hy)));
		CHECK(m == 0, "scale, everything allowed: %u misses", m);
		for (int i = 0; i < N; i++)
			if (hy[i] != 2.0f * hx[i]) {
				CHECK(0, "scale: y[%d] = %f", i, hy[i]);
				break;
			}

		set_table(y_read_only, 2, base, base + 3 * N * 4 + 64);
		launch("scale", args, &m, &l);
		CHECK(m == N, "scale, y read-only: %u misses, want %d", m, N);
		CHECK(l >= y && l < y + N * 4, "scale: the last miss %#llx is not in y", (unsigned long long)l);

		set_table(y_read_only, 2, 0, 0);       /* an empty arena: nothing checked */
		launch("scale", args, &m, &l);
		CHECK(m == 0, "an empty arena: %u misses", m);
		set_table(y_read_only, 2, z, z + N * 4);       /* y outside the arena */
		launch("scale", args, &m, &l);
		CHECK(m == 0, "y outside the arena: %u misses", m);
	}
	{
		void *args[] = { &ptab, &y, &n };
		const uint64_t allowed[] = { ptab, ptab + 8, PHOS_TWIN_READ, y, y + N * 4, PHOS_TWIN_WRITE };

		set_table(allowed, 2, base, base + 3 * N * 4 + 64);
		launch("through_table", args, &m, &l);
		CU(cuMemcpyDtoH(hy, y, sizeof(hy)));
		CHECK(m == N, "through_table: %u misses, want %d (the reads of z)", m, N);
		CHECK(l >= z && l < z + N * 4, "through_table: the last miss %#llx is not in z", (unsigned long long)l);
		CHECK(!memcmp(hy, hz, sizeof(hz)), "through_table: y is not z");
	}
	{
		void *args[] = { &cnt, &n };
		const uint64_t read_only[] = { cnt, cnt + 4, PHOS_TWIN_READ };
		const uint64_t writable[] = { cnt, cnt + 4, PHOS_TWIN_WRITE };
		unsigned c = 0;

		CU(cuMemcpyHtoD(cnt, &c, 4));
		set_table(read_only, 1, base, base + 3 * N * 4 + 64);
		launch("count", args, &m, &l);
		CHECK(m == N && l == cnt, "atomicAdd on a read-only range: %u misses", m);
		set_table(writable, 1, base, base + 3 * N * 4 + 64);
		launch("count", args, &m, &l);
		CU(cuMemcpyDtoH(&c, cnt, 4));
		CHECK(m == 0 && c == 2 * N, "atomicAdd allowed: %u misses, count %u", m, c);
	}
	free(twin);
	free(ptx);
	printf("%s\n", failures ? "FAILED" : "all twin GPU checks passed");
	return failures ? 1 : 0;
}
