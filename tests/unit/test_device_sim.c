/* SPDX-License-Identifier: MIT */
/* The sim device: arena memory, copies, streams/events, modules, kernels without twins, cuBLAS reference,
 * shared memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"

/* Clear of ASan's allocator (0x600000000000-0x640000000000) so that the ASan build runs too. */
#define BASE 0x510000000000ull
#define SIZE (64ull << 30)
#define MiB (1ull << 20)
#define CHUNK (2 * MiB)
#define BLAS_AREA (BASE + 256 * MiB)     /* 64 MiB mapped for the cuBLAS tests */

enum { ST_OK = 0, ST_NOT_INIT = 1, ST_INVALID = 7, ST_EXEC_FAILED = 13, ST_NOT_SUPPORTED = 15 };

static const struct phos_device_ops *ops = &phos_device_sim;
static struct phos_device *dev;
#include "check.h"
#define CHECK_RC(expr, want)                                                                 \
	do {                                                                                 \
		int rc_ = (expr);                                                            \
		CHECK(rc_ == (want), "%s = %d, want %d", #expr, rc_, (int)(want));           \
	} while (0)

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static float frand(void)
{
	return (float)((double)(rng() % 20001) / 10000.0 - 1.0);
}

static void *ptr(uint64_t addr)
{
	return (void *)(uintptr_t)addr;
}

static void test_info(void)
{
	struct phos_reply_device info;
	uint64_t free_b, total;
	int count = 0;

	CHECK_RC(ops->device_count(dev, &count), 0);
	CHECK(count == 1, "device_count %d", count);
	CHECK_RC(ops->info(dev, &info), 0);
	CHECK(strstr(info.name, "sim") != NULL, "name %s", info.name);
	CHECK(info.attr[1] == 1024 && info.attr[10] == 32 && info.attr[16] == 132, "threads/warp/SMs");
	CHECK(info.attr[75] == 9 && info.attr[76] == 0, "compute capability %d.%d", info.attr[75], info.attr[76]);
	CHECK(info.attr[97] == 232448 && info.attr[41] == 1, "optin shared, unified addressing");
	CHECK_RC(ops->mem_info(dev, &free_b, &total), 0);
	CHECK(total == 80ull << 30 && free_b == total, "mem_info %llu/%llu", (unsigned long long)free_b,
	      (unsigned long long)total);
}

static void test_memory(void)
{
	static uint8_t src[3 * MiB], dst[3 * MiB];
	uint64_t free_b, total, a = BASE + CHUNK - 1000;   /* spans chunks 0 and 1 */

	CHECK_RC(ops->map(dev, BASE, 2 * CHUNK), 0);
	CHECK_RC(ops->map(dev, BASE + 10 * CHUNK, CHUNK), 0);
	CHECK_RC(ops->map(dev, BASE, CHUNK), -PHOS_CUDA_INVALID_VALUE);           /* already mapped */
	CHECK_RC(ops->map(dev, BASE + 4096, CHUNK), -PHOS_CUDA_INVALID_VALUE);    /* misaligned */
	CHECK_RC(ops->map(dev, BASE + SIZE, CHUNK), -PHOS_CUDA_INVALID_VALUE);    /* outside */
	CHECK_RC(ops->map(dev, BASE + SIZE - CHUNK, 2 * CHUNK), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->mem_info(dev, &free_b, &total), 0);
	CHECK(total - free_b == 3 * CHUNK, "mapped bytes %llu", (unsigned long long)(total - free_b));

	/* Fresh memory is zero and directly dereferenceable. */
	CHECK(((uint8_t *)ptr(BASE))[0] == 0 && ((uint8_t *)ptr(BASE + 2 * CHUNK - 1))[0] == 0, "not zero");
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)rng();
	CHECK_RC(ops->memcpy_h2d(dev, a, src, 100000, NULL), 0);
	CHECK(memcmp(ptr(a), src, 100000) == 0, "h2d bytes");
	memset(dst, 0, sizeof(dst));
	CHECK_RC(ops->memcpy_d2h(dev, dst, a, 100000, NULL), 0);
	CHECK(memcmp(dst, src, 100000) == 0, "d2h bytes");
	CHECK_RC(ops->memcpy_d2d(dev, BASE + 10 * CHUNK + 7, a, 100000, NULL), 0);
	CHECK(memcmp(ptr(BASE + 10 * CHUNK + 7), src, 100000) == 0, "d2d bytes");
	CHECK_RC(ops->memset(dev, a + 10, 0xab, 5000, NULL), 0);
	CHECK_RC(ops->memcpy_d2h(dev, dst, a, 100000, NULL), 0);
	CHECK(memcmp(dst, src, 10) == 0 && dst[10] == 0xab && dst[5009] == 0xab &&
	      memcmp(dst + 5010, src + 5010, 100000 - 5010) == 0, "memset bytes");
	CHECK_RC(ops->memcpy_d2d(dev, a + 1, a, 1000, NULL), 0);                   /* overlapping */
	CHECK(((uint8_t *)ptr(a))[1] == src[0], "overlapping d2d");

	/* Unmapped or foreign addresses fail cleanly. */
	CHECK_RC(ops->memcpy_h2d(dev, BASE + 2 * CHUNK, src, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_h2d(dev, BASE + 2 * CHUNK - 8, src, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_d2h(dev, dst, BASE + 5 * CHUNK, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_d2h(dev, dst, 0x1000, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_d2d(dev, BASE, BASE + 3 * CHUNK, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memset(dev, BASE + SIZE - 8, 0, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memset(dev, UINT64_MAX - 8, 0, 100, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_h2d(dev, (uint64_t)(uintptr_t)src, dst, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_h2d(dev, BASE + 3 * CHUNK, src, 0, NULL), 0);        /* empty */

	/* Unmapping drops the data and access fails; remapping gives zeros. */
	ops->unmap(dev, BASE + 10 * CHUNK, CHUNK);
	CHECK_RC(ops->memcpy_d2h(dev, dst, BASE + 10 * CHUNK + 7, 16, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->mem_info(dev, &free_b, &total), 0);
	CHECK(total - free_b == 2 * CHUNK, "mapped bytes after unmap");
	CHECK_RC(ops->map(dev, BASE + 10 * CHUNK, CHUNK), 0);
	CHECK(((uint8_t *)ptr(BASE + 10 * CHUNK + 7))[0] == 0, "remapped memory not zero");
	ops->unmap(dev, BASE + 10 * CHUNK, CHUNK);

	/* Pinned ranges, as the driver keeps them: none overlaps another, and a
	 * copy lies inside one or touches none (a copy off a range's edge is
	 * refused: the host copies of checkpoints pin in pieces, staging.c). */
	CHECK_RC(ops->host_register(dev, src, MiB), 0);
	CHECK_RC(ops->host_register(dev, src + MiB, MiB), 0);
	CHECK_RC(ops->host_register(dev, src + MiB / 2, MiB), -PHOS_CUDA_HOST_MEMORY_ALREADY_REGISTERED);
	CHECK_RC(ops->host_register(dev, src, 0), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->map(dev, BASE + 10 * CHUNK, CHUNK), 0);
	CHECK_RC(ops->memcpy_d2h(dev, src + 1000, BASE + 10 * CHUNK, MiB - 1000, NULL), 0);            /* inside one */
	CHECK_RC(ops->memcpy_d2h(dev, src + MiB - 1000, BASE + 10 * CHUNK, 2000, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_h2d(dev, BASE + 10 * CHUNK, src + MiB - 1000, 2000, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_d2h(dev, src + 2 * MiB - 1000, BASE + 10 * CHUNK, 2000, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_d2h(dev, src + 2 * MiB, BASE + 10 * CHUNK, 4096, NULL), 0);               /* pageable */
	ops->host_unregister(dev, src + MiB);
	CHECK_RC(ops->memcpy_d2h(dev, src + 2 * MiB - 1000, BASE + 10 * CHUNK, 2000, NULL), 0);        /* now pageable */
	CHECK_RC(ops->host_register(dev, src + MiB / 2, MiB), -PHOS_CUDA_HOST_MEMORY_ALREADY_REGISTERED);
	ops->host_unregister(dev, src);
	CHECK_RC(ops->host_register(dev, src, sizeof(src)), 0);                                          /* all free again */
	ops->host_unregister(dev, src);
	ops->unmap(dev, BASE + 10 * CHUNK, CHUNK);
}

static void test_streams_events(void)
{
	void *s = NULL, *e1 = NULL, *e2 = NULL, *e3 = NULL, *dead = NULL;
	int bogus;
	float ms = 0;
	struct timespec pause = { 0, 20 * 1000 * 1000 };

	CHECK_RC(ops->stream_create(dev, 1, 0, &s), 0);
	CHECK_RC(ops->stream_create(dev, 8, 0, &dead), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->stream_sync(dev, s), 0);
	CHECK_RC(ops->stream_query(dev, s), 0);
	CHECK_RC(ops->stream_sync(dev, NULL), 0);
	CHECK_RC(ops->stream_sync(dev, &bogus), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->memset(dev, BASE, 1, 16, &bogus), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->memset(dev, BASE, 1, 16, s), 0);

	CHECK_RC(ops->event_create(dev, 0, &e1), 0);
	CHECK_RC(ops->event_create(dev, 1, &e2), 0);
	CHECK_RC(ops->event_create(dev, 2, &e3), 0);               /* cudaEventDisableTiming */
	CHECK_RC(ops->event_create(dev, 0x100, &dead), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->event_query(dev, e1), 0);
	CHECK_RC(ops->event_elapsed(dev, e1, e2, &ms), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);  /* unrecorded */
	CHECK_RC(ops->event_record(dev, e1, NULL), 0);
	nanosleep(&pause, NULL);
	CHECK_RC(ops->event_record(dev, e2, s), 0);
	CHECK_RC(ops->event_record(dev, e3, s), 0);
	CHECK_RC(ops->event_record(dev, e3, &bogus), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->event_sync(dev, e2), 0);
	CHECK_RC(ops->event_elapsed(dev, e1, e2, &ms), 0);
	CHECK(ms >= 15.0f && ms < 5000.0f, "elapsed %.3f ms for a 20 ms pause", ms);
	CHECK_RC(ops->event_elapsed(dev, e1, e3, &ms), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->stream_wait_event(dev, s, e1), 0);
	CHECK_RC(ops->stream_wait_event(dev, s, &bogus), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->event_destroy(dev, e3), 0);
	CHECK_RC(ops->event_destroy(dev, e3), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);  /* stale */
	CHECK_RC(ops->event_query(dev, s), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);     /* wrong kind */
	CHECK_RC(ops->event_destroy(dev, e1), 0);
	CHECK_RC(ops->event_destroy(dev, e2), 0);
	CHECK_RC(ops->stream_destroy(dev, s), 0);
	CHECK_RC(ops->stream_sync(dev, s), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
}

static void test_modules(void)
{
	uint8_t image[64] = { 0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0 };   /* fatbin header magic, LE */
	uint8_t bad[64] = { 0 };
	struct phos_kernel_info ki = { .name = (char *)"_Z3fooPfi", .nparams = 2, .param_bytes = 12,
				       .params = { { 0, 8, PHOS_PARAM_PTR }, { 8, 4, PHOS_PARAM_SCALAR } } };
	struct phos_reply_func_info fi;
	uint8_t params[16] = { 0 };
	uint32_t grid[3] = { 4, 1, 1 }, block[3] = { 256, 1, 1 }, big[3] = { 2048, 1, 1 }, zero[3] = { 0, 1, 1 };
	void *mod = NULL, *f = NULL, *f2 = NULL;
	uint64_t va = 0, vb = 0, size, probe;
	int blocks = -1;

	CHECK_RC(ops->module_load(dev, image, 8, &mod), -PHOS_CUDA_INVALID_KERNEL_IMAGE);
	CHECK_RC(ops->module_load(dev, bad, sizeof(bad), &mod), -PHOS_CUDA_INVALID_KERNEL_IMAGE);
	CHECK_RC(ops->module_load(dev, image, sizeof(image), &mod), 0);
	CHECK_RC(ops->module_function(dev, mod, "_Z3fooPfi", &f), 0);
	CHECK_RC(ops->module_function(dev, mod, "_Z3fooPfi", &f2), 0);
	CHECK(f && f == f2, "same name gave another function");
	CHECK_RC(ops->module_function(dev, bad, "_Z3fooPfi", &f2), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);

	CHECK_RC(ops->func_attrs(dev, f, &fi), 0);
	CHECK(fi.max_threads == 1024 && fi.max_dynamic_shared == 49152, "func attrs");
	CHECK_RC(ops->func_set_attr(dev, f, 8, 100000), 0);
	CHECK_RC(ops->func_set_attr(dev, f, 8, 300000), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->func_set_attr(dev, f, 9, 50), 0);
	CHECK_RC(ops->func_set_attr(dev, f, 0, 1), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->func_attrs(dev, f, &fi), 0);
	CHECK(fi.max_dynamic_shared == 100000, "max dynamic shared %d", fi.max_dynamic_shared);
	CHECK_RC(ops->occupancy(dev, f, 256, 0, &blocks), 0);
	CHECK(blocks == 8, "occupancy(256) = %d", blocks);
	CHECK_RC(ops->occupancy(dev, f, 32, 0, &blocks), 0);
	CHECK(blocks == 32, "occupancy(32) = %d", blocks);
	CHECK_RC(ops->occupancy(dev, f, 128, 60000, &blocks), 0);
	CHECK(blocks == 3, "occupancy(128, 60000 B) = %d", blocks);

	/* No twin plugin: launches fail with NOT_SUPPORTED after validation. */
	CHECK_RC(ops->launch(dev, f, &ki, grid, block, 0, NULL, params, 12), -PHOS_CUDA_NOT_SUPPORTED);
	CHECK_RC(ops->launch(dev, f, &ki, grid, big, 0, NULL, params, 12), -PHOS_CUDA_INVALID_CONFIGURATION);
	CHECK_RC(ops->launch(dev, f, &ki, zero, block, 0, NULL, params, 12), -PHOS_CUDA_INVALID_CONFIGURATION);
	CHECK_RC(ops->launch(dev, f, &ki, grid, block, 200000, NULL, params, 12), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->launch(dev, &ki, &ki, grid, block, 0, NULL, params, 12), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);

	/* __device__ variables: sized by the hint, zeroed, stable, usable by copies. */
	size = 100;
	CHECK_RC(ops->module_global(dev, mod, "counter", &va, &size), 0);
	CHECK(va == BASE + SIZE + (1ull << 30) && size == 100, "var at %#llx size %llu", (unsigned long long)va,
	      (unsigned long long)size);
	size = 4;
	CHECK_RC(ops->module_global(dev, mod, "table", &vb, &size), 0);
	CHECK(vb == va + 256 && size == 4, "second var at %#llx", (unsigned long long)vb);
	size = 0;
	CHECK_RC(ops->module_global(dev, mod, "counter", &probe, &size), 0);
	CHECK(probe == va && size == 100, "lookup of a known var");
	size = 0;
	CHECK_RC(ops->module_global(dev, mod, "unknown", &probe, &size), -PHOS_CUDA_SYMBOL_NOT_FOUND);
	CHECK(((uint8_t *)ptr(va))[99] == 0, "var not zeroed");
	CHECK_RC(ops->memset(dev, va, 7, 100, NULL), 0);
	CHECK_RC(ops->memset(dev, va, 7, 101 + 255 + 4, NULL), -PHOS_CUDA_INVALID_VALUE);

	CHECK_RC(ops->module_unload(dev, mod), 0);
	CHECK_RC(ops->func_attrs(dev, f, &fi), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);   /* died with it */
	CHECK_RC(ops->module_unload(dev, mod), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
}

/* ---- cuBLAS ---- */

static uint64_t blas_next;   /* bump allocator in the mapped cuBLAS area */

static uint64_t dalloc(size_t bytes)
{
	uint64_t a = blas_next;

	blas_next += (bytes + 255) / 256 * 256;
	if (blas_next > BLAS_AREA + 64 * MiB) {
		fprintf(stderr, "test bug: cuBLAS area exhausted\n");
		exit(1);
	}
	return a;
}

static uint16_t to_half(float f)   /* test-side conversion, by a different method: truncate, then round */
{
	int e;
	float m = frexpf(f, &e);    /* f = m * 2^e, 0.5 <= |m| < 1; test values are normal halves */
	uint16_t sign = f < 0 ? 0x8000 : 0;
	int mant = (int)lrintf(fabsf(m) * 2048.0f) - 1024;   /* 10 fraction bits */

	if (f == 0)
		return sign;
	if (mant == 1024) {
		mant = 0;
		e++;
	}
	return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)mant);
}

static float from_half(uint16_t h)
{
	int e = h >> 10 & 0x1f, mant = h & 0x3ff;
	float v = e ? ldexpf(1.0f + (float)mant / 1024.0f, e - 15) : ldexpf((float)mant, -24);

	return h & 0x8000 ? -v : v;
}

static float from_bf16(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* Element i of a float (0), half (2) or bfloat16 (14) array. */
static float elem(uint64_t base, int type, int64_t i)
{
	if (type == 0)
		return ((float *)ptr(base))[i];
	return type == 2 ? from_half(((uint16_t *)ptr(base))[i]) : from_bf16(((uint16_t *)ptr(base))[i]);
}

static void fill(uint64_t base, int type, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = frand();

		uint32_t bits;

		memcpy(&bits, &v, sizeof(bits));
		if (type == 0)
			((float *)ptr(base))[i] = v;
		else if (type == 2)
			((uint16_t *)ptr(base))[i] = to_half(v);
		else
			((uint16_t *)ptr(base))[i] = (uint16_t)(bits >> 16);   /* bfloat16 by truncation */
	}
}

/* Runs one GEMM on the device and checks it against a naive double loop. */
static void gemm_case(void *h, int ta, int tb, int m, int n, int k, int pad, int batch, int type, int ctype,
		      double alpha, double beta)
{
	int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
	int lda = (int)arows + pad, ldb = (int)brows + 2 * pad, ldc = m + pad;
	int64_t sa = (int64_t)lda * acols + 3, sb = (int64_t)ldb * bcols + 5, sc = (int64_t)ldc * n + 1;
	size_t es = type == 0 ? 4 : 2, ces = ctype == 0 ? 4 : 2;
	uint64_t a = dalloc((size_t)(sa * batch) * es), b = dalloc((size_t)(sb * batch) * es);
	uint64_t c = dalloc((size_t)(sc * batch) * ces);
	double *want = malloc(sizeof(double) * (size_t)(sc * batch));
	struct phos_blas_gemm g = { .transa = ta, .transb = tb, .m = m, .n = n, .k = k, .atype = type,
				    .btype = type, .ctype = ctype, .compute = 68, .lda = lda, .ldb = ldb,
				    .ldc = ldc, .batch = batch, .stride_a = sa, .stride_b = sb, .stride_c = sc,
				    .a = a, .b = b, .c = c, .alpha = alpha, .beta = beta };
	int st = -1, bad = 0;
	double worst = 0;

	fill(a, type, sa * batch);
	fill(b, type, sb * batch);
	fill(c, ctype, sc * batch);
	if (beta == 0 && ctype == 0)
		((float *)ptr(c))[0] = NAN;   /* must not leak into the result */
	for (int bi = 0; bi < batch; bi++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				double s = 0;

				for (int p = 0; p < k; p++) {
					int64_t ai = ta ? p + (int64_t)i * lda : i + (int64_t)p * lda;
					int64_t bj = tb ? j + (int64_t)p * ldb : p + (int64_t)j * ldb;

					s += (double)elem(a, type, bi * sa + ai) * elem(b, type, bi * sb + bj);
				}
				int64_t ci = bi * sc + i + (int64_t)j * ldc;

				want[ci] = alpha * s + (beta != 0 ? beta * elem(c, ctype, ci) : 0);
			}
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
	CHECK(st == ST_OK, "gemm status %d", st);
	for (int bi = 0; bi < batch; bi++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				int64_t ci = bi * sc + i + (int64_t)j * ldc;
				double got = elem(c, ctype, ci), err = fabs(got - want[ci]);
				double rel = ctype == 0 ? 0 : ctype == 2 ? 0x1p-11 : 0x1p-8;   /* half an ulp of output rounding */
				double tol = 1e-5 * (k + 1) + rel * fabs(want[ci]);

				if (!(err <= tol))
					bad++;
				if (err > worst)
					worst = err;
			}
	CHECK(!bad, "gemm ta=%d tb=%d %dx%dx%d pad=%d batch=%d type=%d/%d: %d wrong, worst error %g", ta, tb, m,
	      n, k, pad, batch, type, ctype, bad, worst);
	free(want);
}

/* Exact half conversions through 1x1x1 GEMMs: C = alpha * A * B with A = B = 1. */
static void test_half_rounding(void *h)
{
	static const struct { double alpha; uint16_t want; } cases[] = {
		{ 1.0, 0x3c00 }, { 1.0 + 0x1p-11, 0x3c00 }, { 1.0 + 0x3p-11, 0x3c02 },   /* ties to even */
		{ 1.0 + 0x1.8p-11, 0x3c01 }, { 65504.0, 0x7bff }, { 65520.0, 0x7c00 }, { -1e6, 0xfc00 },
		{ 0x1p-24, 0x0001 }, { 0x3p-25, 0x0002 }, { 0x1p-25, 0x0000 }, { 0x1.8p-14, 0x0600 },
		{ -0.0, 0x8000 }, { -2.5, 0xc100 }, { NAN, 0x7e00 },
	};
	uint64_t ab = dalloc(4), c = dalloc(4), cf = dalloc(4);
	struct phos_blas_gemm g = { .m = 1, .n = 1, .k = 1, .atype = 2, .btype = 2, .ctype = 2, .compute = 68,
				    .lda = 1, .ldb = 1, .ldc = 1, .batch = 1, .a = ab, .b = ab, .c = c, .beta = 0 };
	uint16_t *abp = ptr(ab), *cp = ptr(c);
	int st;

	abp[0] = 0x3c00;   /* 1.0 */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		g.alpha = cases[i].alpha;
		CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
		CHECK(cases[i].alpha != cases[i].alpha ? (cp[0] & 0x7e00) == 0x7e00 : cp[0] == cases[i].want,
		      "half(%a) = %#x, want %#x", cases[i].alpha, cp[0], cases[i].want);
	}
	/* Decoding, into a float C: the smallest subnormal, then the largest normal. */
	g.ctype = 0;
	g.c = cf;
	g.b = ab + 2;
	abp[1] = 0x0001;
	g.alpha = 0x1p24;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
	CHECK(*(float *)ptr(cf) == 1.0f, "half 0x0001 decoded as %a", *(float *)ptr(cf) / 0x1p24);
	abp[1] = 0x7bff;
	g.alpha = 1.0;
	g.beta = 1.0;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
	CHECK(*(float *)ptr(cf) == 65505.0f, "half decoding: %g, want 65505", *(float *)ptr(cf));
}

static void test_gemm(void *h)
{
	struct phos_blas_gemm g = { .transa = 0, .transb = 0, .m = 8, .n = 8, .k = 8, .lda = 8, .ldb = 8, .ldc = 8,
				    .compute = 68, .batch = 1, .alpha = 1, .beta = 0 };
	int st, bogus;

	for (int ta = 0; ta < 3; ta++)
		for (int tb = 0; tb < 3; tb++)
			gemm_case(h, ta, tb, 37, 29, 41, (ta + tb) % 3, 1, 0, 0, 1.5, 0.5);
	gemm_case(h, 0, 0, 17, 13, 9, 1, 3, 0, 0, -0.75, 0.0);       /* strided batched, beta 0 */
	gemm_case(h, 1, 0, 64, 48, 1, 0, 2, 0, 0, 1.0, 1.0);
	gemm_case(h, 0, 1, 33, 1, 70, 4, 1, 0, 0, 0.0, 2.0);         /* alpha 0: C = beta C */
	gemm_case(h, 0, 0, 512, 512, 512, 0, 1, 0, 0, 1.0, 0.0);
	gemm_case(h, 0, 1, 40, 24, 56, 2, 2, 2, 0, 1.0, 0.25);       /* half A/B, float C */
	gemm_case(h, 1, 0, 31, 17, 23, 0, 1, 2, 2, 0.5, 0.5);        /* half A/B/C */
	gemm_case(h, 0, 0, 21, 19, 33, 1, 2, 14, 14, 1.0, -0.5);     /* bfloat16 A/B/C, batched */
	gemm_case(h, 1, 1, 8, 9, 10, 0, 1, 14, 0, 2.0, 0.0);         /* bfloat16 A/B, float C */
	test_half_rounding(h);

	/* Argument errors, as cuBLAS reports them. */
	g.a = g.b = g.c = dalloc(64 * 4);
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
	g.lda = 7;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_INVALID_VALUE);
	CHECK(st == ST_INVALID, "lda < m: status %d", st);
	g.transa = 1;                      /* A stored k x m: lda must cover k = 9 */
	g.k = 9;
	g.lda = 8;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_INVALID_VALUE);
	g.transa = 0;
	g.k = 8;
	g.ldc = 7;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_INVALID_VALUE);
	g.ldc = 8;
	g.transb = 5;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_INVALID_VALUE);
	CHECK(st == ST_INVALID, "bad transb: status %d", st);
	g.transb = 0;
	g.k = -1;
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_INVALID_VALUE);
	g.k = 8;
	g.atype = g.btype = g.ctype = 1;   /* CUDA_R_64F with a 32F compute type: no such GEMM */
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_NOT_SUPPORTED);
	CHECK(st == ST_NOT_SUPPORTED, "double gemm, 32F compute: status %d", st);
	g.atype = g.btype = g.ctype = 0;
	g.compute = 70;                    /* CUBLAS_COMPUTE_64F on floats */
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_NOT_SUPPORTED);
	g.compute = 77;                    /* FAST_TF32: computed in float */
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), 0);
	g.c = BASE + 3 * CHUNK;            /* unmapped */
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_ILLEGAL_ADDRESS);
	CHECK(st == ST_EXEC_FAILED, "unmapped C: status %d", st);
	g.c = g.a;
	g.batch = 2;
	g.stride_c = 1ll << 40;            /* second C far away */
	CHECK_RC(ops->blas_gemm(dev, h, &g, &st), -PHOS_CUDA_ILLEGAL_ADDRESS);
	CHECK_RC(ops->blas_gemm(dev, &bogus, &g, &st), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK(st == ST_NOT_INIT, "bad handle: status %d", st);
}

static void test_l1_gemv(void *h)
{
	const int n = 1000;
	uint64_t x = dalloc(3 * n * 4), y = dalloc(3 * n * 4), a = dalloc(60 * 50 * 4);
	float *xp = ptr(x), *yp = ptr(y), *ap = ptr(a), r = -1, y0[3000], ywant[60];
	struct phos_blas_l1 op = { .n = n, .incx = 1, .incy = 1, .x = x, .y = y, .alpha = 2.0 };
	double dot = 0, nrm = 0;
	int st;

	fill(x, 0, 3 * n);
	fill(y, 0, 3 * n);
	memcpy(y0, yp, sizeof(y0));
	op.kind = PHOS_BLAS_SAXPY;
	op.incx = 2;
	op.incy = -3;   /* y walked from its far end */
	CHECK_RC(ops->blas_l1(dev, h, &op, NULL, &st), 0);
	for (int i = 0, bad = 0; i < n && !bad; i++) {
		float want = y0[(n - 1 - i) * 3] + 2.0f * xp[i * 2];

		bad = yp[(n - 1 - i) * 3] != want;
		CHECK(!bad, "saxpy element %d", i);
	}
	op.kind = PHOS_BLAS_SDOT;
	op.incx = 1;
	op.incy = 2;
	for (int i = 0; i < n; i++)
		dot += (double)xp[i] * yp[2 * i];
	CHECK_RC(ops->blas_l1(dev, h, &op, &r, &st), 0);
	CHECK(fabs(r - dot) < 1e-3, "sdot %g want %g", r, dot);
	op.kind = PHOS_BLAS_SNRM2;
	op.incx = 3;
	for (int i = 0; i < n; i++)
		nrm += (double)xp[3 * i] * xp[3 * i];
	CHECK_RC(ops->blas_l1(dev, h, &op, &r, &st), 0);
	CHECK(fabs(r - sqrt(nrm)) < 1e-3, "snrm2 %g want %g", r, sqrt(nrm));
	xp[0] = 3e30f;
	xp[3] = 4e30f;
	op.n = 2;
	CHECK_RC(ops->blas_l1(dev, h, &op, &r, &st), 0);
	CHECK(fabsf(r - 5e30f) < 1e25f, "snrm2 of big values %g", r);
	xp[0] = 0.5f;
	xp[3] = 0.25f;
	op.n = 0;
	r = -1;
	CHECK_RC(ops->blas_l1(dev, h, &op, &r, &st), 0);
	CHECK(r == 0 && st == ST_OK, "snrm2 n=0");
	op.kind = PHOS_BLAS_SSCAL;
	op.n = n;
	op.incx = 1;
	op.alpha = -0.5;
	xp[5] = 4.0f;
	CHECK_RC(ops->blas_l1(dev, h, &op, NULL, &st), 0);
	CHECK(xp[5] == -2.0f, "sscal");
	op.x = BASE + 5 * CHUNK;
	CHECK_RC(ops->blas_l1(dev, h, &op, NULL, &st), -PHOS_CUDA_ILLEGAL_ADDRESS);
	CHECK(st == ST_EXEC_FAILED, "sscal unmapped: status %d", st);
	op.kind = 9;
	CHECK_RC(ops->blas_l1(dev, h, &op, NULL, &st), -PHOS_CUDA_INVALID_VALUE);

	/* GEMV, A 50x40 with lda 60, both transposes, strided x and y. */
	fill(a, 0, 60 * 50);
	for (int trans = 0; trans < 2; trans++) {
		int m = 50, nn = 40, leny = trans ? nn : m, lenx = trans ? m : nn;
		struct phos_blas_gemv gv = { .trans = trans, .m = m, .n = nn, .lda = 60, .incx = 2, .incy = 1,
					     .a = a, .x = x, .y = y, .alpha = 1.25, .beta = -1.0 };

		for (int t = 0; t < leny; t++) {
			double s = 0;

			for (int q = 0; q < lenx; q++)
				s += (double)(trans ? ap[q + t * 60] : ap[t + q * 60]) * xp[2 * q];
			ywant[t] = (float)(1.25 * s - yp[t]);
		}
		CHECK_RC(ops->blas_gemv(dev, h, &gv, &st), 0);
		for (int t = 0; t < leny; t++)
			CHECK(fabsf(yp[t] - ywant[t]) < 1e-4f, "gemv trans=%d y[%d] %g want %g", trans, t, yp[t],
			      ywant[t]);
		gv.lda = m - 1;
		CHECK_RC(ops->blas_gemv(dev, h, &gv, &st), -PHOS_CUDA_INVALID_VALUE);
		CHECK(st == ST_INVALID, "gemv lda: status %d", st);
		gv.lda = 60;
		gv.incx = 0;
		CHECK_RC(ops->blas_gemv(dev, h, &gv, &st), -PHOS_CUDA_INVALID_VALUE);
	}
}

static void test_blas(void)
{
	void *h = NULL, *s = NULL;
	int bogus;

	CHECK_RC(ops->map(dev, BLAS_AREA, 64 * MiB), 0);
	blas_next = BLAS_AREA;
	CHECK_RC(ops->blas_create(dev, &h), 0);
	CHECK_RC(ops->stream_create(dev, 0, 0, &s), 0);
	CHECK_RC(ops->blas_set_stream(dev, h, s), 0);
	CHECK_RC(ops->blas_set_stream(dev, h, &bogus), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->blas_set_math(dev, h, 3), 0);
	CHECK_RC(ops->blas_set_math(dev, h, 16 | 2), 0);
	CHECK_RC(ops->blas_set_math(dev, h, 99), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->blas_set_workspace(dev, h, BLAS_AREA + 60 * MiB, 4 * MiB), 0);
	CHECK_RC(ops->blas_set_workspace(dev, h, BASE + 5 * CHUNK, 4 * MiB), -PHOS_CUDA_INVALID_VALUE);
	test_gemm(h);
	test_l1_gemv(h);
	CHECK_RC(ops->blas_destroy(dev, h), 0);
	CHECK_RC(ops->blas_destroy(dev, h), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->stream_destroy(dev, s), 0);
}

/* Pitched copies and sets touch exactly their rows; stream attributes and
 * limits take what an H100 takes and refuse the rest. */
static void test_pitched_attrs(void)
{
	const uint64_t a = BASE + 64 * MiB;
	static uint8_t host[4096], back[4096];
	struct phos_copy_2d c = { 0 };
	uint8_t value[PHOS_STREAM_ATTR_BYTES] = { 0 }, got[PHOS_STREAM_ATTR_BYTES];
	uint64_t v = 0;
	void *s = NULL;
	int x;

	CHECK_RC(ops->map(dev, a, CHUNK), 0);
	for (int i = 0; i < 4096; i++)
		host[i] = (uint8_t)(i * 7 + 1);
	CHECK_RC(ops->memset(dev, a, 0xee, 8192, NULL), 0);
	/* 5 rows of 40 bytes, packed on the host, pitch 100 on the device */
	c.dst = a;
	c.src_host = host;
	c.dpitch = 100;
	c.spitch = 40;
	c.width = 40;
	c.height = 5;
	CHECK_RC(ops->memcpy_2d(dev, &c, NULL), 0);
	CHECK_RC(ops->memcpy_d2h(dev, back, a, 500, NULL), 0);
	for (int y = 0; y < 5; y++)
		for (int i = 0; i < 100; i++)
			if (back[y * 100 + i] != (i < 40 ? host[y * 40 + i] : 0xee)) {
				CHECK(false, "memcpy_2d h2d: byte %d of row %d = %u", i, y, back[y * 100 + i]);
				y = 5;
				break;
			}
	/* device to device with another pitch, then back to the host packed */
	memset(&c, 0, sizeof(c));
	c.dst = a + 4096;
	c.src = a;
	c.dpitch = 64;
	c.spitch = 100;
	c.width = 40;
	c.height = 5;
	CHECK_RC(ops->memcpy_2d(dev, &c, NULL), 0);
	memset(&c, 0, sizeof(c));
	c.dst_host = back;
	c.src = a + 4096;
	c.dpitch = 40;
	c.spitch = 64;
	c.width = 40;
	c.height = 5;
	memset(back, 0, sizeof(back));
	CHECK_RC(ops->memcpy_2d(dev, &c, NULL), 0);
	CHECK(!memcmp(back, host, 200), "memcpy_2d d2d + d2h round trip");
	c.spitch = 39;                                   /* pitch < width over several rows */
	CHECK_RC(ops->memcpy_2d(dev, &c, NULL), -PHOS_CUDA_INVALID_VALUE);
	c.src = a + CHUNK - 100;                         /* runs off the mapped memory */
	c.spitch = 64;
	CHECK_RC(ops->memcpy_2d(dev, &c, NULL), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->memcpy_2d(dev, &c, &x), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	/* a set leaves the pitch's padding alone */
	CHECK_RC(ops->memset_2d(dev, a, 100, 0x5a, 10, 3, NULL), 0);
	CHECK_RC(ops->memcpy_d2h(dev, back, a, 300, NULL), 0);
	CHECK(back[0] == 0x5a && back[9] == 0x5a && back[10] == host[10] && back[100] == 0x5a &&
	      back[110] == host[50] && back[209] == 0x5a, "memset_2d rows and padding");
	CHECK_RC(ops->memset_2d(dev, a, 5, 0, 10, 3, NULL), -PHOS_CUDA_INVALID_VALUE);

	/* stream attributes */
	CHECK_RC(ops->stream_create(dev, 0, 0, &s), 0);
	x = 3;                                           /* CU_SYNC_POLICY_YIELD */
	memcpy(value, &x, sizeof(x));
	CHECK_RC(ops->stream_set_attr(dev, s, 3, value), 0);
	CHECK_RC(ops->stream_get_attr(dev, s, 3, got), 0);
	CHECK(!memcmp(got, value, sizeof(x)), "sync policy read back");
	x = 7;
	memcpy(value, &x, sizeof(x));
	CHECK_RC(ops->stream_set_attr(dev, s, 3, value), -PHOS_CUDA_INVALID_VALUE);
	x = -9;                                          /* priority: clamped */
	memcpy(value, &x, sizeof(x));
	CHECK_RC(ops->stream_set_attr(dev, s, 8, value), 0);
	CHECK_RC(ops->stream_get_attr(dev, s, 8, got), 0);
	memcpy(&x, got, sizeof(x));
	CHECK(x == -5, "priority -9 read back as %d, want -5", x);
	CHECK_RC(ops->stream_set_attr(dev, s, 2, value), -PHOS_CUDA_INVALID_VALUE);   /* a launch-only one */
	CHECK_RC(ops->stream_get_attr(dev, s, 64, got), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->stream_get_attr(dev, &x, 3, got), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	CHECK_RC(ops->stream_get_attr(dev, NULL, 3, got), 0);                        /* default stream */
	memcpy(&x, got, sizeof(x));
	/* never set: -1 on the default stream, as an H100's driver reads it, and
	 * -1 cannot be set back */
	CHECK(x == -1, "default stream's sync policy %d, want -1 (never set)", x);
	CHECK_RC(ops->stream_set_attr(dev, NULL, 3, got), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->stream_destroy(dev, s), 0);

	/* limits */
	CHECK_RC(ops->limit_set(dev, 6, 1ull << 40), 0);     /* persisting L2: capped */
	CHECK_RC(ops->limit_get(dev, 6, &v), 0);
	CHECK(v > 0 && v < (1ull << 40), "persisting L2 after asking 1 TiB: %llu", (unsigned long long)v);
	CHECK_RC(ops->limit_set(dev, 6, 0), 0);
	CHECK_RC(ops->limit_set(dev, 5, 129), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->limit_set(dev, 0, 8192), 0);
	CHECK_RC(ops->limit_get(dev, 0, &v), 0);
	CHECK(v == 8192, "stack size %llu", (unsigned long long)v);
	CHECK_RC(ops->limit_get(dev, 40, &v), -PHOS_CUDA_INVALID_VALUE);     /* an unknown id (H100) */
	ops->unmap(dev, a, CHUNK);
}

/* Shared memory (device.h share_out, share_in, share_own; issue 42): one
 * process stands in for two executors at two addresses of its arena. */
static void test_share(void)
{
	static uint8_t pat[2 * CHUNK], got[2 * CHUNK];
	const uint64_t a = BASE + 256 * CHUNK, b = BASE + 300 * CHUNK, len = 2 * CHUNK;
	struct stat st;
	int fd = -1, small = -1, status = 0;
	pid_t child;

	for (size_t i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)(i * 7 + 3);
	CHECK_RC(ops->share_out(dev, a, len, &fd), -PHOS_CUDA_INVALID_VALUE);   /* nothing mapped there */
	CHECK_RC(ops->map(dev, a, len), 0);
	CHECK_RC(ops->memcpy_h2d(dev, a, pat, len, NULL), 0);
	CHECK_RC(ops->share_out(dev, a, len, &fd), 0);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == len, "the shared memory's size");
	CHECK((fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE) != 0, "sealed against writes");
	CHECK_RC(ops->memcpy_d2h(dev, got, a, len, NULL), 0);
	CHECK(!memcmp(got, pat, len), "the exporter reads its contents after the move");

	/* the other instance maps it, read-only */
	CHECK_RC(ops->share_in(dev, a, len, fd), -PHOS_CUDA_INVALID_VALUE);   /* mapped already */
	small = memfd_create("small", MFD_CLOEXEC);
	CHECK(small >= 0 && ftruncate(small, CHUNK) == 0, "a memfd");
	CHECK_RC(ops->share_in(dev, b, len, small), -PHOS_CUDA_INVALID_VALUE);   /* another size, unsealed */
	CHECK_RC(ops->share_in(dev, b, len, fd), 0);
	CHECK_RC(ops->memcpy_d2h(dev, got, b, len, NULL), 0);
	CHECK(!memcmp(got, pat, len), "the importer reads the same contents");
	/* a write into shared memory faults the writer */
	fflush(NULL);
	child = fork();
	if (child == 0) {
		signal(SIGSEGV, SIG_DFL);   /* (a sanitizer's handler would report it and abort) */
		ops->memcpy_h2d(dev, b, pat, 16, NULL);
		_exit(0);
	}
	/* (0 only when the write went through) */
	CHECK(child > 0 && waitpid(child, &status, 0) == child && status != 0,
	      "a write into a shared mapping is a fault (status %#x)", status);

	/* copy on write: b becomes its own, a keeps the shared contents */
	CHECK_RC(ops->share_own(dev, b, len), 0);
	CHECK_RC(ops->memcpy_d2h(dev, got, b, len, NULL), 0);
	CHECK(!memcmp(got, pat, len), "the private copy holds the contents");
	CHECK_RC(ops->memset(dev, b, 0xee, len, NULL), 0);
	CHECK_RC(ops->memcpy_d2h(dev, got, a, len, NULL), 0);
	CHECK(!memcmp(got, pat, len), "the shared memory is untouched by the copy's write");
	CHECK_RC(ops->share_own(dev, b + 4 * CHUNK, len), -PHOS_CUDA_INVALID_VALUE);   /* not mapped */
	ops->unmap(dev, a, len);
	ops->unmap(dev, b, len);
	/* the descriptor keeps the memory: mapped again after both went */
	CHECK_RC(ops->share_in(dev, a, len, fd), 0);
	CHECK_RC(ops->memcpy_d2h(dev, got, a, len, NULL), 0);
	CHECK(!memcmp(got, pat, len), "the memory outlives its mappings while a descriptor holds it");
	ops->unmap(dev, a, len);
	close(fd);
	close(small);
}

int main(void)
{
	struct phos_device *other = NULL;
	void *leak = NULL;
	int r;

	r = ops->open(0, BASE, SIZE, false, &dev);
	if (r < 0) {
		fprintf(stderr, "FAIL: open at %#llx: %d\n", BASE, r);
		return 1;
	}
	CHECK(!strcmp(ops->name, "sim"), "name %s", ops->name);
	fprintf(stderr, "expected next: an error saying the arena is taken\n");
	CHECK_RC(ops->open(0, BASE, SIZE, false, &other), -PHOS_CUDA_INITIALIZATION);
	CHECK_RC(ops->open(0, BASE + 4096, SIZE, false, &other), -PHOS_CUDA_INVALID_VALUE);
	CHECK_RC(ops->open(1, BASE, SIZE, false, &other), -PHOS_CUDA_INVALID_DEVICE);
	test_info();
	test_memory();
	test_streams_events();
	test_pitched_attrs();
	test_modules();
	test_blas();
	test_share();
	/* close() frees what is left (a stream here) and releases the arena: reopening works. */
	CHECK_RC(ops->stream_create(dev, 0, 0, &leak), 0);
	ops->close(dev);
	ops->close(NULL);
	dev = NULL;
	r = ops->open(0, BASE, SIZE, false, &dev);
	CHECK(r == 0, "reopen at the same base: %d", r);
	if (r == 0) {
		CHECK_RC(ops->memcpy_h2d(dev, BASE, &r, sizeof(r), NULL), -PHOS_CUDA_INVALID_VALUE);
		ops->close(dev);
	}
	if (failures) {
		fprintf(stderr, "%d failure(s)\n", failures);
		return 1;
	}
	printf("device_sim: all passed\n");
	return 0;
}
