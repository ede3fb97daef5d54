/* SPDX-License-Identifier: MIT */
/*
 * train: a deterministic MLP training loop, the program that checkpoints of
 * running programs are tested with (issue 11). It never calls phos_fn_serve:
 * it runs, prints, and exits, as a long training job does.
 *
 *   data:    X (D x B) uniform from the seed, targets Y = T X for a random
 *            teacher T (C x D); fixed for the whole run
 *   model:   Z1 = W1 X (SGEMM), A1 = relu(Z1 + b1)       W1: H x D, b1: H
 *            Z2 = W2 A1 (SGEMM) + b2                      W2: C x H, b2: C
 *   loss:    mean squared error; dZ2 = 2 (Z2 - Y) / (C B)
 *   backward and SGD, on two streams:
 *     stream a: dW2 = dZ2 A1^T, db2 = rows of dZ2, dA1 = W2^T dZ2 ──event──┐
 *     stream b: (waits) W2 -= lr dW2, b2 -= lr db2 ──event──┐              │
 *     stream a: dZ1 = dA1 * (A1 > 0), dW1 = dZ1 X^T, db1, W1 -= lr dW1,    │
 *               b1 -= lr db1, then waits for stream b before the next step ◀┘
 *   Column-major, as cuBLAS wants: M(i, j) at j * rows + i.
 *
 * Every kernel gives each element to one thread and sums in a fixed order
 * (no atomics), and fused multiply-adds are written out (__fmaf_rn), so a run
 * is the same bit for bit every time, on the GPU and on the sim device with
 * the twins of functions/examples/sim_twins.c.
 *
 * Output: "step N loss L" every K steps (and after the last), then
 * "done steps N checksum HEX": XXH-like FNV-1a 64 of the weights' bytes
 * (W1, b1, W2, b2, in that order).
 *
 * Usage: train [--steps N (1000)] [--seed S (1)] [--size D (64): D = H, C = 8,
 *              B = 32] [--every K (100)] [--lr X (0.01)] [--pinned] [--pause-us U (0)]
 *              [--frozen-mib F (0)]
 * --frozen-mib: F MiB of frozen state (a pretrained embedding table, say) in
 * buffers of up to 256 MiB, filled from the seed at init and never written
 * again; the checksum then also covers the 64-bit integer sum of each
 * buffer's words (sum_direct, tables' kernel and twin). Checkpoint benchmarks
 * use it for state that a training step does not write.
 * --pinned: the loss is read back into pinned host memory (cudaMallocHost),
 * which the program shares with its executor. --pause-us: U microseconds of
 * CPU-side pause after each step (the results do not change; tests use it to
 * keep a run going while they checkpoint it, and to catch it off the GPU).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "int_sum.cuh"
#include "mlp_weights.h"

#define THREADS 128
#define CLASSES 8
#define BATCH 32
#define MAX_SIZE 4096
#define MAX_STEPS 100000000L
#define MAX_FROZEN_MIB 131072L
#define FROZEN_CHUNK (256ull << 20)

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "train: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define CB(call)                                                                                   \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			fprintf(stderr, "train: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, \
				#call, (int)s_);                                                   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define LAUNCH(kernel, n, stream, ...)                                                             \
	do {                                                                                       \
		kernel<<<blocks(n), THREADS, 0, stream>>>(__VA_ARGS__);                            \
		CK(cudaGetLastError());                                                            \
	} while (0)

/* ---- kernels (twins in sim_twins.c) --------------------------------------- */

/* z (rows x cols) = relu(z + b per row) when relu, else z + b per row. */
__global__ void bias_act(float *z, const float *b, int rows, int cols, int relu)
{
	size_t n = (size_t)rows * cols;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float v = __fadd_rn(z[i], b[i % rows]);

		z[i] = relu ? fmaxf(v, 0.0f) : v;
	}
}

/* dz = (z - y) * scale; err[j] = sum over rows of (z - y)^2 (column j, in row order). */
__global__ void mse_grad(const float *z, const float *y, float *dz, float *err, int rows, int cols, float scale)
{
	for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
		float e = 0.0f;

		for (int i = 0; i < rows; i++) {
			size_t k = (size_t)j * rows + i;
			float d = __fsub_rn(z[k], y[k]);

			dz[k] = __fmul_rn(d, scale);
			e = __fmaf_rn(d, d, e);
		}
		err[j] = e;
	}
}

/* out[i] = sum over columns of g(i, j), in column order. */
__global__ void row_sum(const float *g, float *out, int rows, int cols)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += gridDim.x * blockDim.x) {
		float s = 0.0f;

		for (int j = 0; j < cols; j++)
			s = __fadd_rn(s, g[(size_t)j * rows + i]);
		out[i] = s;
	}
}

/* d = a > 0 ? d : 0 */
__global__ void relu_grad(float *d, const float *a, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

/* w -= lr * g */
__global__ void sgd(float *w, const float *g, size_t n, float lr)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		w[i] = __fmaf_rn(-lr, g[i], w[i]);
}

/* ---- the loop ------------------------------------------------------------- */

static unsigned blocks(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;

	return b < 1 ? 1 : b > 1024 ? 1024 : (unsigned)b;
}

static int parse_long(const char *s, long min, long max, long *ret)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end == s || *end || v < min || v > max)
		return -1;
	*ret = v;
	return 0;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static void usage(void)
{
	fprintf(stderr, "usage: train [--steps N] [--seed S] [--size D (8..%d)] [--every K] [--lr X] [--pinned] "
			"[--pause-us U] [--frozen-mib F (0..%ld)]\n", MAX_SIZE, MAX_FROZEN_MIB);
	exit(2);
}

int main(int argc, char **argv)
{
	long steps = 1000, seed = 1, size = 64, every = 100, pause_us = 0, frozen_mib = 0;
	float lr = 0.01f, e_stack[BATCH], *e = e_stack;
	bool pinned = false;

	for (int i = 1; i < argc; i++) {
		long *dst = NULL, min = 1, max = MAX_STEPS;

		if (!strcmp(argv[i], "--steps")) {
			dst = &steps;
		} else if (!strcmp(argv[i], "--seed")) {
			dst = &seed;
			min = 0;
			max = 0xffffffffL;
		} else if (!strcmp(argv[i], "--size")) {
			dst = &size;
			min = 8;
			max = MAX_SIZE;
		} else if (!strcmp(argv[i], "--every")) {
			dst = &every;
		} else if (!strcmp(argv[i], "--pause-us")) {
			dst = &pause_us;
			min = 0;
			max = 1000000;
		} else if (!strcmp(argv[i], "--frozen-mib")) {
			dst = &frozen_mib;
			min = 0;
			max = MAX_FROZEN_MIB;
		} else if (!strcmp(argv[i], "--pinned")) {
			pinned = true;
			continue;
		} else if (!strcmp(argv[i], "--lr") && i + 1 < argc) {
			char *end;

			lr = strtof(argv[++i], &end);
			if (*end || !(lr > 0.0f && lr < 1.0f))
				usage();
			continue;
		} else {
			usage();
		}
		if (i + 1 >= argc || parse_long(argv[++i], min, max, dst) < 0)
			usage();
	}

	const int D = (int)size, H = (int)size, C = CLASSES, B = BATCH;
	const float one = 1.0f, zero = 0.0f;
	float *X, *Y, *T, *W1, *b1, *W2, *b2, *Z1, *Z2, *dZ2, *dA1, *dW1, *db1, *dW2, *db2, *err;
	cudaStream_t sa, sb;
	cudaEvent_t grads2, updated2;
	cublasHandle_t blas;
	uint32_t s = (uint32_t)seed;

	CK(cudaStreamCreate(&sa));
	CK(cudaStreamCreate(&sb));
	CK(cudaEventCreateWithFlags(&grads2, cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&updated2, cudaEventDisableTiming));
	CB(cublasCreate(&blas));
	CB(cublasSetStream(blas, sa));
	float **all[] = { &X, &Y, &T, &W1, &b1, &W2, &b2, &Z1, &Z2, &dZ2, &dA1, &dW1, &db1, &dW2, &db2, &err };
	size_t count[] = { (size_t)D * B, (size_t)C * B, (size_t)C * D, (size_t)H * D, (size_t)H, (size_t)C * H,
			   (size_t)C, (size_t)H * B, (size_t)C * B, (size_t)C * B, (size_t)H * B, (size_t)H * D,
			   (size_t)H, (size_t)C * H, (size_t)C, (size_t)B };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		CK(cudaMalloc((void **)all[i], count[i] * sizeof(float)));
	if (pinned)
		CK(cudaMallocHost((void **)&e, BATCH * sizeof(float)));
	/* frozen state: filled once, never written again */
	const size_t frozen_bytes = (size_t)frozen_mib << 20;
	const size_t nfrozen = (frozen_bytes + FROZEN_CHUNK - 1) / FROZEN_CHUNK;
	float **frozen = (float **)calloc(nfrozen ? nfrozen : 1, sizeof(float *));
	size_t *frozen_count = (size_t *)calloc(nfrozen ? nfrozen : 1, sizeof(size_t));

	if (!frozen || !frozen_count) {
		fprintf(stderr, "train: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < nfrozen; i++) {
		size_t bytes = frozen_bytes - i * FROZEN_CHUNK < FROZEN_CHUNK ? frozen_bytes - i * FROZEN_CHUNK : FROZEN_CHUNK;

		frozen_count[i] = bytes / sizeof(float);
		CK(cudaMalloc((void **)&frozen[i], bytes));
		LAUNCH(init_weights, frozen_count[i], sa, frozen[i], frozen_count[i], s, 1000u + (uint32_t)i, 1.0f);
	}

	/* data and initial weights */
	LAUNCH(init_weights, count[0], sa, X, count[0], s, MLPW_TENSOR_INPUT, 1.0f);
	LAUNCH(init_weights, count[2], sa, T, count[2], s, MLPW_TENSOR_HEAD, sqrtf(3.0f / D));
	CB(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, D, &one, T, C, X, D, &zero, Y, C));
	LAUNCH(init_weights, count[3], sa, W1, count[3], s, mlpw_tensor_weight(0), sqrtf(6.0f / D));
	LAUNCH(init_weights, count[4], sa, b1, count[4], s, mlpw_tensor_bias(0), 0.05f);
	LAUNCH(init_weights, count[5], sa, W2, count[5], s, mlpw_tensor_weight(1), sqrtf(6.0f / H));
	LAUNCH(init_weights, count[6], sa, b2, count[6], s, mlpw_tensor_bias(1), 0.05f);

	for (long step = 1; step <= steps; step++) {
		/* forward */
		CB(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, H, B, D, &one, W1, H, X, D, &zero, Z1, H));
		LAUNCH(bias_act, (size_t)H * B, sa, Z1, b1, H, B, 1);   /* Z1 is A1 from here */
		CB(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, H, &one, W2, C, Z1, H, &zero, Z2, C));
		LAUNCH(bias_act, (size_t)C * B, sa, Z2, b2, C, B, 0);
		LAUNCH(mse_grad, (size_t)B, sa, Z2, Y, dZ2, err, C, B, 2.0f / (C * B));
		/* backward, layer 2 */
		CB(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, C, H, B, &one, dZ2, C, Z1, H, &zero, dW2, C));
		LAUNCH(row_sum, (size_t)C, sa, dZ2, db2, C, B);
		CB(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, H, B, C, &one, W2, C, dZ2, C, &zero, dA1, H));
		CK(cudaEventRecord(grads2, sa));
		/* layer 2's update on the other stream, beside layer 1's backward */
		CK(cudaStreamWaitEvent(sb, grads2, 0));
		LAUNCH(sgd, count[5], sb, W2, dW2, count[5], lr);
		LAUNCH(sgd, count[6], sb, b2, db2, count[6], lr);
		CK(cudaEventRecord(updated2, sb));
		/* backward, layer 1 */
		LAUNCH(relu_grad, (size_t)H * B, sa, dA1, Z1, (size_t)H * B);
		CB(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, H, D, B, &one, dA1, H, X, D, &zero, dW1, H));
		LAUNCH(row_sum, (size_t)H, sa, dA1, db1, H, B);
		LAUNCH(sgd, count[3], sa, W1, dW1, count[3], lr);
		LAUNCH(sgd, count[4], sa, b1, db1, count[4], lr);
		CK(cudaStreamWaitEvent(sa, updated2, 0));
		if (step % every == 0 || step == steps) {
			double loss = 0;

			CK(cudaMemcpyAsync(e, err, BATCH * sizeof(float), cudaMemcpyDeviceToHost, sa));
			CK(cudaStreamSynchronize(sa));
			for (int j = 0; j < B; j++)
				loss += e[j];
			printf("step %ld loss %.9g\n", step, loss / ((double)C * B));
			fflush(stdout);
		}
		if (pause_us)
			usleep((useconds_t)pause_us);
	}

	uint64_t h = 0xcbf29ce484222325ull;
	float *wts[] = { W1, b1, W2, b2 };
	size_t wcount[] = { count[3], count[4], count[5], count[6] };
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < 4; i++) {
		float *host = (float *)malloc(wcount[i] * sizeof(float));

		if (!host) {
			fprintf(stderr, "train: out of memory\n");
			return 1;
		}
		CK(cudaMemcpy(host, wts[i], wcount[i] * sizeof(float), cudaMemcpyDeviceToHost));
		h = fnv1a(h, host, wcount[i] * sizeof(float));
		free(host);
	}
	if (nfrozen) {
		unsigned long long *dsum, sum;

		CK(cudaMalloc((void **)&dsum, sizeof(*dsum)));
		for (size_t i = 0; i < nfrozen; i++) {
			CK(cudaMemsetAsync(dsum, 0, sizeof(*dsum), sa));
			LAUNCH(sum_direct, frozen_count[i], sa, (const unsigned *)frozen[i],
			       (unsigned long long)frozen_count[i], dsum);
			CK(cudaMemcpyAsync(&sum, dsum, sizeof(sum), cudaMemcpyDeviceToHost, sa));
			CK(cudaStreamSynchronize(sa));
			h = fnv1a(h, &sum, sizeof(sum));
		}
		CK(cudaFree(dsum));
	}
	printf("done steps %ld checksum %016" PRIx64 "\n", steps, h);
	fflush(stdout);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		CK(cudaFree(*all[i]));
	for (size_t i = 0; i < nfrozen; i++)
		CK(cudaFree(frozen[i]));
	free(frozen);
	free(frozen_count);
	CB(cublasDestroy(blas));
	if (pinned)
		CK(cudaFreeHost(e));
	return 0;
}
