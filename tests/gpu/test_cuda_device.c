/* SPDX-License-Identifier: MIT */
/*
 * The cuda device backend on a real GPU: arena placement, mappings, copies,
 * streams and events, cuBLAS against a host reference, and a kernel from a
 * fatbin.
 *
 *   test_cuda_device ADD_ONE_FATBIN
 *
 * ADD_ONE_FATBIN is tests/gpu/add_one.cu built with nvcc -fatbin. Exits 77
 * (skip) without a CUDA driver and GPU, 0 when every check passed, 1 otherwise.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>

#include "device.h"
#include "log.h"

#define ARENA_BASE 0x600000000000ull
#define ARENA_SIZE (64ull << 30)
#define MiB (1ull << 20)

/* cuBLAS values, spelled out so that the test needs no CUDA header. */
enum { OP_N = 0, OP_T = 1 };
enum { R_16F = 2, R_32F = 0, R_64F = 1 };
enum { COMPUTE_16F = 64, COMPUTE_32F = 68, COMPUTE_64F = 70, COMPUTE_32F_FAST_TF32 = 77 };
enum { GEMM_DEFAULT = -1 };
enum { ATTR_MULTIPROCESSOR_COUNT = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };
enum { FUNC_ATTR_MAX_DYNAMIC_SHARED = 8 };

static const struct phos_device_ops *ops = &phos_device_cuda;
static struct phos_device *dev;
static int failures;

static void fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	failures++;
}

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond))                                      \
			fail(__FILE__, __LINE__, __VA_ARGS__);    \
	} while (0)

/* A call that must succeed; the test cannot go on without it. */
#define MUST(expr)                                                                          \
	do {                                                                                \
		int must_r_ = (expr);                                                       \
		if (must_r_ < 0) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, \
				#expr, must_r_);                                            \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

/* A call that must fail with exactly err (a negated cudaError_t). */
#define EXPECT_ERR(expr, err)                                                      \
	do {                                                                       \
		int expect_r_ = (expr);                                            \
		CHECK(expect_r_ == (err), "%s returned %d, expected %d", #expr,    \
		      expect_r_, (err));                                           \
	} while (0)

static uint32_t rng = 12345;

static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)((rng >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		fprintf(stderr, "FAIL: out of host memory\n");
		exit(1);
	}
	return p;
}

static void *read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "FAIL: cannot read %s\n", path);
		exit(1);
	}
	buf = xmalloc((size_t)n);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "FAIL: short read of %s\n", path);
		exit(1);
	}
	fclose(f);
	*ret_len = (size_t)n;
	return buf;
}

/* ------------------------------------------------------------------------ */

static void test_open_refuses_taken_arena(void)
{
	struct phos_device *second = NULL;
	int r;

	/* The arena's addresses are reserved by dev already: a second device cannot
	 * get them and must refuse rather than take other addresses. */
	r = ops->open(0, ARENA_BASE, ARENA_SIZE, false, &second);
	CHECK(r == -PHOS_CUDA_MEMORY_ALLOCATION && !second,
	      "second open at a taken arena returned %d (expected %d)", r, -PHOS_CUDA_MEMORY_ALLOCATION);
	if (r == 0)
		ops->close(second);
}

static void test_queries(void)
{
	struct phos_reply_device info;
	uint64_t free_bytes = 0, total = 0;
	int count = 0;

	MUST(ops->device_count(dev, &count));
	CHECK(count >= 1, "device_count %d", count);
	MUST(ops->info(dev, &info));
	CHECK(info.name[0] != '\0', "empty device name");
	CHECK(info.total_mem >= (1ull << 30), "total_mem %llu", (unsigned long long)info.total_mem);
	CHECK(info.attr[ATTR_MULTIPROCESSOR_COUNT] > 0, "no multiprocessors");
	MUST(ops->mem_info(dev, &free_bytes, &total));
	CHECK(free_bytes > 0 && free_bytes <= total, "mem_info free %llu total %llu",
	      (unsigned long long)free_bytes, (unsigned long long)total);
	printf("device: %s, sm_%d%d, %d SMs, %llu MiB (%llu MiB free), %d device(s)\n", info.name,
	       info.attr[ATTR_CC_MAJOR], info.attr[ATTR_CC_MINOR], info.attr[ATTR_MULTIPROCESSOR_COUNT],
	       (unsigned long long)(total >> 20), (unsigned long long)(free_bytes >> 20), count);
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* Region A: 4 MiB at the arena base; region B: 64 MiB after it. */
static const uint64_t reg_a = ARENA_BASE, reg_a_len = 4 * MiB;
static const uint64_t reg_b = ARENA_BASE + 64 * MiB, reg_b_len = 64 * MiB;

static void test_copies(void *stream)
{
	size_t n = reg_b_len;
	uint8_t *src = xmalloc(n), *dst = xmalloc(n), *reg;
	size_t reg_len = 8 * MiB, i;

	/* memset, d2h */
	MUST(ops->memset(dev, reg_a, 0xab, reg_a_len, NULL));
	memset(dst, 0, reg_a_len);
	MUST(ops->memcpy_d2h(dev, dst, reg_a, reg_a_len, NULL));
	CHECK(all_bytes(dst, reg_a_len, 0xab), "memset/d2h: wrong bytes");

	/* h2d, d2h from pageable memory, 64 MiB */
	for (i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 7 + (i >> 12));
	MUST(ops->memcpy_h2d(dev, reg_b, src, n, NULL));
	memset(src, 0, 4096); /* the copy has taken the bytes already */
	memset(dst, 0, n);
	MUST(ops->memcpy_d2h(dev, dst, reg_b, n, NULL));
	CHECK(dst[0] == 0 && dst[4095] == (uint8_t)(4095 * 7) && !memcmp(dst + 4096, src + 4096, n - 4096),
	      "h2d/d2h 64 MiB: bytes differ");

	/* d2d on a stream: B's first 4 MiB → A */
	MUST(ops->memcpy_d2d(dev, reg_a, reg_b, reg_a_len, stream));
	memset(dst, 0, reg_a_len);
	MUST(ops->memcpy_d2h(dev, dst, reg_a, reg_a_len, stream));
	CHECK(!memcmp(dst + 4096, src + 4096, reg_a_len - 4096) && dst[4095] == (uint8_t)(4095 * 7),
	      "d2d: bytes differ");

	/* Registered (pinned) host memory: h2d must have read the source on return. */
	reg = mmap(NULL, reg_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(reg != MAP_FAILED, "mmap");
	if (reg == MAP_FAILED)
		goto out;
	MUST(ops->host_register(dev, reg, reg_len));
	for (i = 0; i < reg_a_len; i++)
		reg[i] = (uint8_t)(i * 13 + 1);
	MUST(ops->memcpy_h2d(dev, reg_a, reg, reg_a_len, stream));
	memset(reg, 0xee, reg_a_len); /* reuse at once, as the channel ring does */
	MUST(ops->memcpy_d2h(dev, reg + reg_a_len, reg_a, reg_a_len, stream));
	for (i = 0; i < reg_a_len; i++)
		if (reg[reg_a_len + i] != (uint8_t)(i * 13 + 1))
			break;
	CHECK(i == reg_a_len, "registered h2d/d2h: byte %zu differs", i);
	ops->host_unregister(dev, reg);
	munmap(reg, reg_len);
out:
	free(src);
	free(dst);
}

/* Pitched copies and sets, stream attributes and limits (issue 12). */
static void test_pitched_attrs(void *stream)
{
	enum { W = 300, H = 40, P = 512 };
	static uint8_t host[W * H], back[P * H];
	struct phos_copy_2d c = { 0 };
	uint8_t val[PHOS_STREAM_ATTR_BYTES] = { 0 }, got[PHOS_STREAM_ATTR_BYTES];
	uint64_t v = 0, stack = 0;
	int x, i, y;

	for (i = 0; i < W * H; i++)
		host[i] = (uint8_t)(i * 31 + 7);
	MUST(ops->memset(dev, reg_a, 0xee, P * H * 2, NULL));
	c.dst = reg_a;
	c.src_host = host;
	c.dpitch = P;
	c.spitch = W;
	c.width = W;
	c.height = H;
	MUST(ops->memcpy_2d(dev, &c, stream));
	memset(&c, 0, sizeof(c));                     /* device to device, P*H bytes further on */
	c.dst = reg_a + P * H;
	c.src = reg_a;
	c.dpitch = P;
	c.spitch = P;
	c.width = W;
	c.height = H;
	MUST(ops->memcpy_2d(dev, &c, stream));
	MUST(ops->memset_2d(dev, reg_a + P * H + 10, P, 0x33, 5, 2, stream));
	MUST(ops->memcpy_d2h(dev, back, reg_a + P * H, P * H, stream));
	for (y = 0; y < H; y++)
		for (i = 0; i < P; i++) {
			uint8_t want = i < W ? host[y * W + i] : 0xee;

			if (y < 2 && i >= 10 && i < 15)
				want = 0x33;
			if (back[y * P + i] != want) {
				CHECK(false, "memcpy_2d/memset_2d: byte %d of row %d = %u, want %u", i, y, back[y * P + i],
				      want);
				y = H;
				break;
			}
		}
	memset(&c, 0, sizeof(c));                     /* back to the host, packed */
	memset(back, 0, sizeof(back));
	c.dst_host = back;
	c.src = reg_a;
	c.dpitch = W;
	c.spitch = P;
	c.width = W;
	c.height = H;
	MUST(ops->memcpy_2d(dev, &c, stream));
	CHECK(!memcmp(back, host, W * H), "memcpy_2d d2h: bytes differ");

	/* stream attributes: synchronization policy and an access policy window */
	x = CU_SYNC_POLICY_BLOCKING_SYNC;
	memcpy(val, &x, sizeof(x));
	MUST(ops->stream_set_attr(dev, stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, val));
	MUST(ops->stream_get_attr(dev, stream, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, got));
	CHECK(!memcmp(got, &x, sizeof(x)), "sync policy read back");
	{
		CUaccessPolicyWindow w = { .base_ptr = (void *)(uintptr_t)reg_a, .num_bytes = 1 << 20,
					   .hitRatio = 0.5f, .hitProp = CU_ACCESS_PROPERTY_PERSISTING,
					   .missProp = CU_ACCESS_PROPERTY_STREAMING };
		CUaccessPolicyWindow r;

		memset(val, 0, sizeof(val));
		memcpy(val, &w, sizeof(w));
		MUST(ops->stream_set_attr(dev, stream, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, val));
		MUST(ops->stream_get_attr(dev, stream, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, got));
		memcpy(&r, got, sizeof(r));
		CHECK(r.base_ptr == w.base_ptr && r.num_bytes == w.num_bytes && r.hitRatio == w.hitRatio,
		      "access policy window read back");
		w.num_bytes = 0;                      /* clear it again */
		memcpy(val, &w, sizeof(w));
		MUST(ops->stream_set_attr(dev, stream, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, val));
	}

	/* limits: set, read back, put back */
	MUST(ops->limit_get(dev, CU_LIMIT_STACK_SIZE, &stack));
	MUST(ops->limit_set(dev, CU_LIMIT_STACK_SIZE, 8192));
	MUST(ops->limit_get(dev, CU_LIMIT_STACK_SIZE, &v));
	CHECK(v >= 8192, "stack size %llu after setting 8192", (unsigned long long)v);
	MUST(ops->limit_set(dev, CU_LIMIT_STACK_SIZE, stack));
	MUST(ops->limit_set(dev, CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 4 << 20));
	MUST(ops->limit_get(dev, CU_LIMIT_PERSISTING_L2_CACHE_SIZE, &v));
	CHECK(v > 0, "persisting L2 %llu after setting 4 MiB", (unsigned long long)v);
	MUST(ops->limit_set(dev, CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0));
	EXPECT_ERR(ops->limit_get(dev, 0x40, &v), -PHOS_CUDA_INVALID_VALUE); /* cuCtxGetLimit said so on an H100 */
}

static void test_mappings(void)
{
	const uint64_t c = ARENA_BASE + 256 * MiB;
	uint8_t *buf = xmalloc(8 * MiB);

	/* Refusals: taken, misaligned, outside the arena. */
	EXPECT_ERR(ops->map(dev, reg_a, 2 * MiB), -PHOS_CUDA_INVALID_VALUE);
	EXPECT_ERR(ops->map(dev, reg_b + 62 * MiB, 4 * MiB), -PHOS_CUDA_INVALID_VALUE);
	EXPECT_ERR(ops->map(dev, c + 4096, 2 * MiB), -PHOS_CUDA_INVALID_VALUE);
	EXPECT_ERR(ops->map(dev, ARENA_BASE + ARENA_SIZE, 2 * MiB), -PHOS_CUDA_INVALID_VALUE);

	/* One 8 MiB mapping, unmapped in pieces, its first chunk mapped again in between. */
	MUST(ops->map(dev, c, 8 * MiB));
	MUST(ops->memset(dev, c, 0x11, 8 * MiB, NULL));
	ops->unmap(dev, c, 2 * MiB);
	MUST(ops->map(dev, c, 2 * MiB));
	MUST(ops->memset(dev, c, 0x22, 2 * MiB, NULL));
	ops->unmap(dev, c + 2 * MiB, 4 * MiB);
	/* Chunks 1-2 are free again, chunk 3 is not: a map over 1-3 is refused. */
	EXPECT_ERR(ops->map(dev, c + 2 * MiB, 6 * MiB), -PHOS_CUDA_INVALID_VALUE);
	MUST(ops->map(dev, c + 2 * MiB, 4 * MiB));
	MUST(ops->memcpy_d2h(dev, buf, c, 8 * MiB, NULL));
	CHECK(all_bytes(buf, 2 * MiB, 0x22) && all_bytes(buf + 6 * MiB, 2 * MiB, 0x11),
	      "partial unmap/remap lost bytes of the live chunks");
	ops->unmap(dev, c, 8 * MiB);

	/* Everything released: a new mapping spanning the old one and beyond. */
	MUST(ops->map(dev, c, 16 * MiB));
	MUST(ops->memset(dev, c, 0x33, 16 * MiB, NULL));
	MUST(ops->memcpy_d2h(dev, buf, c + 8 * MiB, 8 * MiB, NULL));
	CHECK(all_bytes(buf, 8 * MiB, 0x33), "remap after release: wrong bytes");
	/* Two mappings released by one unmap. */
	MUST(ops->map(dev, c + 16 * MiB, 2 * MiB));
	ops->unmap(dev, c, 18 * MiB);
	MUST(ops->map(dev, c, 18 * MiB));
	ops->unmap(dev, c, 18 * MiB);
	free(buf);
}

static void test_events(void *stream)
{
	void *e0, *e1, *e_notiming, *s2;
	float ms = -1;
	int r;

	MUST(ops->event_create(dev, 0, &e0));
	MUST(ops->event_create(dev, 1 /* blocking sync */, &e1));
	MUST(ops->event_create(dev, 2 /* disable timing */, &e_notiming));
	EXPECT_ERR(ops->event_create(dev, 64, &e0), -PHOS_CUDA_INVALID_VALUE);
	MUST(ops->stream_create(dev, 1 /* non-blocking */, -1, &s2));

	MUST(ops->event_record(dev, e0, stream));
	for (int i = 0; i < 20; i++)
		MUST(ops->memset(dev, reg_b, (uint8_t)i, reg_b_len, stream));
	MUST(ops->event_record(dev, e1, stream));
	MUST(ops->event_record(dev, e_notiming, stream));
	/* s2 waits for stream's work, then its own copy sees the last memset. */
	MUST(ops->stream_wait_event(dev, s2, e1));
	r = ops->event_query(dev, e1);
	CHECK(r == 0 || r == -PHOS_CUDA_NOT_READY, "event_query %d", r);
	MUST(ops->event_sync(dev, e1));
	MUST(ops->event_query(dev, e1));
	MUST(ops->event_elapsed(dev, e0, e1, &ms));
	CHECK(ms > 0 && ms < 10000, "elapsed %f ms", ms);
	printf("20 memsets of 64 MiB: %.3f ms\n", ms);
	EXPECT_ERR(ops->event_elapsed(dev, e0, e_notiming, &ms), -PHOS_CUDA_INVALID_RESOURCE_HANDLE);
	MUST(ops->stream_sync(dev, s2));
	MUST(ops->stream_query(dev, s2));
	MUST(ops->stream_query(dev, stream));
	MUST(ops->stream_query(dev, NULL));
	MUST(ops->synchronize(dev));

	MUST(ops->stream_destroy(dev, s2));
	MUST(ops->event_destroy(dev, e0));
	MUST(ops->event_destroy(dev, e1));
	MUST(ops->event_destroy(dev, e_notiming));
}

/* ------------------------------------------------------------------------ */
/* cuBLAS                                                                     */

/* Column-major C = alpha op(A) op(B) + beta C on the host, in double. */
static void gemm_ref(int ta, int tb, int m, int n, int k, double alpha, const float *a, int lda,
		     const float *b, int ldb, double beta, float *c, int ldc)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;

			for (int l = 0; l < k; l++) {
				double x = ta ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda];
				double y = tb ? b[j + (size_t)l * ldb] : b[l + (size_t)j * ldb];

				s += x * y;
			}
			c[i + (size_t)j * ldc] = (float)(alpha * s + beta * c[i + (size_t)j * ldc]);
		}
}

static double max_rel_err(const float *x, const float *ref, size_t n)
{
	double worst = 0;

	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)x[i] - ref[i]) / (fabs(ref[i]) + 1.0);

		if (e > worst || isnan(e))
			worst = isnan(e) ? INFINITY : e;
	}
	return worst;
}

/* Device addresses inside region B for BLAS operands. */
#define DEV_A (reg_b)
#define DEV_B (reg_b + 8 * MiB)
#define DEV_C (reg_b + 16 * MiB)
#define DEV_WS (reg_b + 32 * MiB)

static void sgemm_case(void *h, void *stream, int ta, int tb, int batch, int compute, double tol)
{
	const int m = 128, n = 96, k = 64;
	const int lda = ta ? k : m, ldb = tb ? n : k, ldc = m;
	const size_t sa = (size_t)lda * (ta ? m : k), sb = (size_t)ldb * (tb ? k : n), sc = (size_t)ldc * n;
	float *a = xmalloc(sa * batch * 4), *b = xmalloc(sb * batch * 4);
	float *c = xmalloc(sc * batch * 4), *ref = xmalloc(sc * batch * 4);
	struct phos_blas_gemm g = {
		.transa = ta, .transb = tb, .m = m, .n = n, .k = k,
		.atype = R_32F, .btype = R_32F, .ctype = R_32F, .compute = compute, .algo = GEMM_DEFAULT,
		.lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
		.stride_a = (int64_t)sa, .stride_b = (int64_t)sb, .stride_c = (int64_t)sc,
		.a = DEV_A, .b = DEV_B, .c = DEV_C, .alpha = 1.5, .beta = 0.5,
	};
	int status = -1;
	double err;

	for (size_t i = 0; i < sa * batch; i++)
		a[i] = frand();
	for (size_t i = 0; i < sb * batch; i++)
		b[i] = frand();
	for (size_t i = 0; i < sc * batch; i++)
		ref[i] = c[i] = frand();
	MUST(ops->memcpy_h2d(dev, DEV_A, a, sa * batch * 4, stream));
	MUST(ops->memcpy_h2d(dev, DEV_B, b, sb * batch * 4, stream));
	MUST(ops->memcpy_h2d(dev, DEV_C, c, sc * batch * 4, stream));
	MUST(ops->blas_gemm(dev, h, &g, &status));
	CHECK(status == 0, "gemm status %d", status);
	MUST(ops->memcpy_d2h(dev, c, DEV_C, sc * batch * 4, stream));
	for (int bi = 0; bi < batch; bi++)
		gemm_ref(ta, tb, m, n, k, 1.5, a + bi * sa, lda, b + bi * sb, ldb, 0.5, ref + bi * sc, ldc);
	err = max_rel_err(c, ref, sc * batch);
	CHECK(err < tol, "gemm %c%c batch %d compute %d: relative error %g", ta ? 'T' : 'N',
	      tb ? 'T' : 'N', batch, compute, err);
	free(a);
	free(b);
	free(c);
	free(ref);
}

static void dgemm_case(void *h, void *stream)
{
	const int m = 48, n = 40, k = 32;
	double *a = xmalloc(sizeof(double) * m * k), *b = xmalloc(sizeof(double) * k * n);
	double *c = xmalloc(sizeof(double) * m * n);
	struct phos_blas_gemm g = {
		.transa = OP_N, .transb = OP_N, .m = m, .n = n, .k = k,
		.atype = R_64F, .btype = R_64F, .ctype = R_64F, .compute = COMPUTE_64F, .algo = GEMM_DEFAULT,
		.lda = m, .ldb = k, .ldc = m, .batch = 1, .a = DEV_A, .b = DEV_B, .c = DEV_C,
		.alpha = 0.25, .beta = 0,
	};
	int status = -1, bad = 0;

	for (int i = 0; i < m * k; i++)
		a[i] = i % 7 - 3;
	for (int i = 0; i < k * n; i++)
		b[i] = i % 5 - 2;
	MUST(ops->memcpy_h2d(dev, DEV_A, a, sizeof(double) * m * k, stream));
	MUST(ops->memcpy_h2d(dev, DEV_B, b, sizeof(double) * k * n, stream));
	MUST(ops->blas_gemm(dev, h, &g, &status));
	MUST(ops->memcpy_d2h(dev, c, DEV_C, sizeof(double) * m * n, stream));
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;

			for (int l = 0; l < k; l++)
				s += a[i + l * m] * b[l + j * k];
			bad += c[i + j * m] != 0.25 * s;
		}
	CHECK(bad == 0, "GemmEx 64F: %d wrong elements", bad);
	free(a);
	free(b);
	free(c);
}

static uint16_t to_half(int v)
{
	/* Small integers only (|v| < 2048): exact. */
	uint16_t sign = v < 0 ? 0x8000 : 0;
	unsigned u = (unsigned)(v < 0 ? -v : v);
	int e = 0;

	if (u == 0)
		return sign;
	while ((u >> e) > 1)
		e++;
	return (uint16_t)(sign | (unsigned)(e + 15) << 10 | ((u << (10 - e)) & 0x3ff));
}

static double from_half(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	double m = h & 0x3ff;
	double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);

	return h & 0x8000 ? -v : v;
}

static void hgemm_case(void *h, void *stream)
{
	/* 16-bit compute: alpha/beta go in as halves. Small integers keep it exact. */
	enum { M = 16, N = 8, K = 8 };
	uint16_t a[M * K], b[K * N], c[M * N];
	int ai[M * K], bi[K * N], ci[M * N], status = -1, bad = 0;
	struct phos_blas_gemm g = {
		.transa = OP_N, .transb = OP_N, .m = M, .n = N, .k = K,
		.atype = R_16F, .btype = R_16F, .ctype = R_16F, .compute = COMPUTE_16F, .algo = GEMM_DEFAULT,
		.lda = M, .ldb = K, .ldc = M, .batch = 1, .a = DEV_A, .b = DEV_B, .c = DEV_C,
		.alpha = 0.5, .beta = 2.0,
	};

	for (int i = 0; i < M * K; i++)
		a[i] = to_half(ai[i] = i % 5 - 2);
	for (int i = 0; i < K * N; i++)
		b[i] = to_half(bi[i] = i % 3 - 1);
	for (int i = 0; i < M * N; i++)
		c[i] = to_half(ci[i] = i % 9 - 4);
	MUST(ops->memcpy_h2d(dev, DEV_A, a, sizeof(a), stream));
	MUST(ops->memcpy_h2d(dev, DEV_B, b, sizeof(b), stream));
	MUST(ops->memcpy_h2d(dev, DEV_C, c, sizeof(c), stream));
	MUST(ops->blas_gemm(dev, h, &g, &status));
	MUST(ops->memcpy_d2h(dev, c, DEV_C, sizeof(c), stream));
	for (int j = 0; j < N; j++)
		for (int i = 0; i < M; i++) {
			int s = 0;

			for (int l = 0; l < K; l++)
				s += ai[i + l * M] * bi[l + j * K];
			bad += from_half(c[i + j * M]) != 0.5 * s + 2.0 * ci[i + j * M];
		}
	CHECK(bad == 0, "GemmEx 16F: %d wrong elements", bad);
}

static void level1_cases(void *h, void *stream)
{
	enum { N = 1000 };
	float *x = xmalloc(N * 4), *y = xmalloc(N * 4), *out = xmalloc(N * 4);
	struct phos_blas_l1 op = { .n = N, .incx = 1, .incy = 1, .x = DEV_A, .y = DEV_B };
	double dot = 0, nrm = 0;
	float result = 0;
	int status = -1, bad = 0;

	for (int i = 0; i < N; i++) {
		x[i] = frand();
		y[i] = frand();
		dot += (double)x[i] * y[i];
		nrm += (double)x[i] * x[i];
	}
	nrm = sqrt(nrm);
	MUST(ops->memcpy_h2d(dev, DEV_A, x, N * 4, stream));
	MUST(ops->memcpy_h2d(dev, DEV_B, y, N * 4, stream));

	op.kind = PHOS_BLAS_SDOT;
	MUST(ops->blas_l1(dev, h, &op, &result, &status));
	CHECK(status == 0 && fabs(result - dot) < 1e-3, "sdot %f, expected %f", result, dot);
	op.kind = PHOS_BLAS_SNRM2;
	MUST(ops->blas_l1(dev, h, &op, &result, &status));
	CHECK(status == 0 && fabs(result - nrm) < 1e-3, "snrm2 %f, expected %f", result, nrm);

	/* y = 2x + y, then x = -3x */
	op.kind = PHOS_BLAS_SAXPY;
	op.alpha = 2.0;
	MUST(ops->blas_l1(dev, h, &op, NULL, &status));
	op.kind = PHOS_BLAS_SSCAL;
	op.alpha = -3.0;
	MUST(ops->blas_l1(dev, h, &op, NULL, &status));
	MUST(ops->memcpy_d2h(dev, out, DEV_B, N * 4, stream));
	for (int i = 0; i < N; i++)
		bad += fabsf(out[i] - (2 * x[i] + y[i])) > 1e-5f;
	MUST(ops->memcpy_d2h(dev, out, DEV_A, N * 4, stream));
	for (int i = 0; i < N; i++)
		bad += fabsf(out[i] + 3 * x[i]) > 1e-5f;
	CHECK(bad == 0, "saxpy/sscal: %d wrong elements", bad);

	op.kind = 99;
	EXPECT_ERR(ops->blas_l1(dev, h, &op, &result, &status), -PHOS_CUDA_INVALID_VALUE);
	CHECK(status == 7 /* CUBLAS_STATUS_INVALID_VALUE */, "bad l1 kind: status %d", status);
	free(x);
	free(y);
	free(out);
}

static void gemv_case(void *h, void *stream)
{
	enum { M = 70, N = 50 };
	float *a = xmalloc(M * N * 4), *x = xmalloc(M * 4), *y = xmalloc(M * 4), *out = xmalloc(M * 4);
	struct phos_blas_gemv op = {
		.trans = OP_T, .m = M, .n = N, .lda = M, .incx = 1, .incy = 1,
		.a = DEV_A, .x = DEV_B, .y = DEV_C, .alpha = 2.0, .beta = -1.0,
	};
	int status = -1, bad = 0;

	/* y = 2 A^T x - y: x has M elements, y N. */
	for (int i = 0; i < M * N; i++)
		a[i] = frand();
	for (int i = 0; i < M; i++)
		x[i] = frand();
	for (int i = 0; i < N; i++)
		y[i] = frand();
	MUST(ops->memcpy_h2d(dev, DEV_A, a, M * N * 4, stream));
	MUST(ops->memcpy_h2d(dev, DEV_B, x, M * 4, stream));
	MUST(ops->memcpy_h2d(dev, DEV_C, y, N * 4, stream));
	MUST(ops->blas_gemv(dev, h, &op, &status));
	MUST(ops->memcpy_d2h(dev, out, DEV_C, N * 4, stream));
	for (int j = 0; j < N; j++) {
		double s = 0;

		for (int i = 0; i < M; i++)
			s += (double)a[i + j * M] * x[i];
		bad += fabs(out[j] - (2 * s - y[j])) > 1e-4;
	}
	CHECK(status == 0 && bad == 0, "sgemv: status %d, %d wrong elements", status, bad);
	free(a);
	free(x);
	free(y);
	free(out);
}

static void test_blas(void *stream)
{
	void *h, *h2;
	int status;
	struct phos_blas_gemm bad = { .batch = 0 };

	MUST(ops->blas_create(dev, &h));
	MUST(ops->blas_set_stream(dev, h, stream));
	MUST(ops->blas_set_math(dev, h, 0 /* CUBLAS_DEFAULT_MATH */));
	MUST(ops->blas_set_workspace(dev, h, DEV_WS, 4 * MiB));

	sgemm_case(h, stream, OP_T, OP_N, 1, COMPUTE_32F, 1e-4);
	sgemm_case(h, stream, OP_N, OP_T, 1, COMPUTE_32F, 1e-4);
	sgemm_case(h, stream, OP_N, OP_N, 3, COMPUTE_32F, 1e-4);
	sgemm_case(h, stream, OP_T, OP_T, 1, COMPUTE_32F_FAST_TF32, 2e-2); /* GemmEx */
	sgemm_case(h, stream, OP_N, OP_N, 2, COMPUTE_32F_FAST_TF32, 2e-2); /* GemmStridedBatchedEx */
	dgemm_case(h, stream);
	hgemm_case(h, stream);
	level1_cases(h, stream);
	gemv_case(h, stream);

	status = 0;
	EXPECT_ERR(ops->blas_gemm(dev, h, &bad, &status), -PHOS_CUDA_INVALID_VALUE);
	CHECK(status == 7, "gemm batch 0: status %d", status);

	/* A destroyed handle comes back reset: default stream, usable at once. */
	MUST(ops->blas_destroy(dev, h));
	MUST(ops->blas_create(dev, &h));
	MUST(ops->blas_create(dev, &h2));
	sgemm_case(h, NULL, OP_N, OP_N, 1, COMPUTE_32F, 1e-4);
	sgemm_case(h2, NULL, OP_T, OP_N, 1, COMPUTE_32F, 1e-4);
	MUST(ops->blas_destroy(dev, h2));
	MUST(ops->blas_destroy(dev, h));
}

/* ------------------------------------------------------------------------ */

static void test_kernel(const char *fatbin_path, void *stream)
{
	enum { N = 100000 };
	size_t len;
	void *image = read_file(fatbin_path, &len), *mod, *fn, *dummy;
	float *x = xmalloc(N * sizeof(float));
	struct phos_reply_func_info fi;
	uint64_t var = 0, var_size = 0, dptr = reg_b;
	uint8_t params[16];
	int32_t n = N, calls = -1, blocks = 0;
	uint32_t grid[3] = { (N + 255) / 256, 1, 1 }, block[3] = { 256, 1, 1 }, huge[3] = { 2048, 1, 1 };
	uint8_t junk[64] = { 1, 2, 3 };
	int bad = 0;

	EXPECT_ERR(ops->module_load(dev, junk, sizeof(junk), &dummy), -PHOS_CUDA_INVALID_KERNEL_IMAGE);
	MUST(ops->module_load(dev, image, len, &mod));
	memset(image, 0, len); /* the backend keeps its own copy */
	free(image);
	MUST(ops->module_function(dev, mod, "add_one", &fn));
	EXPECT_ERR(ops->module_function(dev, mod, "no_such_kernel", &dummy), -PHOS_CUDA_INVALID_DEVICE_FUNCTION);
	var_size = 12345; /* a hint, ignored */
	MUST(ops->module_global(dev, mod, "add_one_calls", &var, &var_size));
	CHECK(var != 0 && var_size == 4, "module_global: addr 0x%llx size %llu", (unsigned long long)var,
	      (unsigned long long)var_size);
	EXPECT_ERR(ops->module_global(dev, mod, "no_such_var", &var, &var_size), -PHOS_CUDA_SYMBOL_NOT_FOUND);

	memset(&fi, 0, sizeof(fi));
	MUST(ops->func_attrs(dev, fn, &fi));
	CHECK(fi.max_threads >= 256 && fi.num_regs > 0 && fi.binary_version >= 90, "func_attrs: max_threads %d regs %d binary %d",
	      fi.max_threads, fi.num_regs, fi.binary_version);
	MUST(ops->func_set_attr(dev, fn, FUNC_ATTR_MAX_DYNAMIC_SHARED, 1024));
	EXPECT_ERR(ops->func_set_attr(dev, fn, 0, 1), -PHOS_CUDA_INVALID_VALUE);
	MUST(ops->occupancy(dev, fn, 256, 0, &blocks));
	CHECK(blocks > 0, "occupancy %d", blocks);

	for (int i = 0; i < N; i++)
		x[i] = (float)i;
	MUST(ops->memcpy_h2d(dev, reg_b, x, N * sizeof(float), stream));
	MUST(ops->memset(dev, var, 0, 4, stream));
	memset(params, 0, sizeof(params));
	memcpy(params, &dptr, 8);
	memcpy(params + 8, &n, 4);
	MUST(ops->launch(dev, fn, NULL, grid, block, 0, stream, params, 12));
	memset(params, 0xff, sizeof(params)); /* the driver copied them */
	EXPECT_ERR(ops->launch(dev, fn, NULL, grid, huge, 0, stream, params, 12), -PHOS_CUDA_INVALID_CONFIGURATION);
	MUST(ops->memcpy_d2h(dev, x, reg_b, N * sizeof(float), stream));
	MUST(ops->memcpy_d2h(dev, &calls, var, 4, stream));
	for (int i = 0; i < N; i++)
		bad += x[i] != (float)i + 1.0f;
	CHECK(bad == 0 && calls == N, "add_one: %d wrong elements, %d calls (expected %d)", bad, calls, N);
	MUST(ops->synchronize(dev));
	MUST(ops->module_unload(dev, mod));
	free(x);
}

/* ------------------------------------------------------------------------ */

/* The executor calls from its dispatcher and a restore thread: each thread makes
 * the context current by itself, and the mapping table is shared. */
struct worker {
	uint64_t base;
	int errors;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = xmalloc(2 * MiB);
	void *s;

	for (int round = 0; round < 50; round++) {
		if (ops->map(dev, w->base, 4 * MiB) < 0 || ops->stream_create(dev, 1, 0, &s) < 0) {
			w->errors++;
			break;
		}
		memset(buf, round, 2 * MiB);
		if (ops->memcpy_h2d(dev, w->base + 2 * MiB, buf, 2 * MiB, s) < 0 ||
		    ops->memcpy_d2d(dev, w->base, w->base + 2 * MiB, 2 * MiB, s) < 0 ||
		    ops->memset(dev, w->base + 2 * MiB, 0, 2 * MiB, s) < 0)
			w->errors++;
		memset(buf, 0xff, 2 * MiB);
		if (ops->memcpy_d2h(dev, buf, w->base, 2 * MiB, s) < 0 || !all_bytes(buf, 2 * MiB, (uint8_t)round))
			w->errors++;
		if (ops->stream_destroy(dev, s) < 0)
			w->errors++;
		ops->unmap(dev, w->base, 4 * MiB);
	}
	free(buf);
	return NULL;
}

static void test_threads(void)
{
	struct worker w[4];
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++) {
		w[i] = (struct worker){ .base = ARENA_BASE + (1ull << 30) + (uint64_t)i * 64 * MiB };
		CHECK(pthread_create(&t[i], NULL, worker_run, &w[i]) == 0, "pthread_create");
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].errors == 0, "thread %d: %d errors", i, w[i].errors);
	}
}

int main(int argc, char **argv)
{
	void *stream;

	phos_log_init("test_cuda_device", PHOS_LOG_ERROR);
	if (!phos_device_cuda_available()) {
		printf("SKIP: no CUDA driver or GPU\n");
		return 77;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s ADD_ONE_FATBIN (tests/gpu/add_one.cu built with nvcc -fatbin)\n", argv[0]);
		return 1;
	}

	printf("note: the backend logs an error for each call this test makes it refuse\n");
	MUST(ops->open(0, ARENA_BASE, ARENA_SIZE, true, &dev));
	test_open_refuses_taken_arena();
	test_queries();
	MUST(ops->map(dev, reg_a, reg_a_len));
	MUST(ops->map(dev, reg_b, reg_b_len));
	MUST(ops->stream_create(dev, 0, 0, &stream));

	test_copies(stream);
	test_pitched_attrs(stream);
	test_mappings();
	test_events(stream);
	test_blas(stream);
	test_kernel(argv[1], stream);
	test_threads();

	MUST(ops->stream_destroy(dev, stream));
	ops->unmap(dev, reg_a, reg_a_len);
	ops->unmap(dev, reg_b, reg_b_len);
	ops->close(dev);
	ops->close(NULL);

	/* close gave the arena back: it can be had again, at the same address. */
	dev = NULL;
	MUST(ops->open(0, ARENA_BASE, ARENA_SIZE, false, &dev));
	MUST(ops->map(dev, reg_a, reg_a_len));
	MUST(ops->memset(dev, reg_a, 0, reg_a_len, NULL));
	MUST(ops->synchronize(dev));
	ops->close(dev); /* with the mapping still there */

	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
