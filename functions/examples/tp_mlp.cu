/*
 * tp_mlp: a tensor-parallel MLP over N ranks, one process per rank (one GPU
 * each), Megatron-style:
 *
 *        x (D x B, replicated)
 *        │
 *        ├─ rank r: Y_r = relu(W1_r x + b1_r)     column-parallel: W1_r = rows
 *        │          (H/N x B)                     [r H/N, (r+1) H/N) of W1 (H x D)
 *        ├─ rank r: Z_r = W2_r Y_r                row-parallel: W2_r = columns
 *        │          (D x B, a partial sum)        [r H/N, (r+1) H/N) of W2 (D x H)
 *        ├─ ncclAllReduce(Z_r, sum) ──▶ Z = W2 relu(W1 x + b1)
 *        └─ z = Z + b2                            (every rank holds all of z)
 *
 * Column-major throughout (cuBLAS): A(i, j) at i + j * rows. Weights and input
 * are a hash of (tensor, row, column), so every rank makes its slices alone
 * and the CPU reference (double accumulation) rebuilds the whole model.
 *
 *   tp_mlp RANK NRANKS IDFILE [--width D] [--hidden H] [--batch B]
 *
 * (or PHOS_TP_RANK, PHOS_TP_NRANKS, PHOS_TP_IDFILE). Rank 0 writes the NCCL
 * unique id to IDFILE, atomically; the others wait for it (up to 60 s). Rank
 * r uses device r modulo the devices it sees (natively: GPU r of the host;
 * under phos-fn: the one GPU of its executor, PHOS_GPU). Each
 * rank prints {"rank":R,"nranks":N,"max_abs_err":E,"tol":T,"ok":BOOL} after
 * init (and exits 1 when it is not ok), then serves: each request runs the
 * forward pass again and answers the same object (so that a snapshot of a
 * single-rank run can be checked).
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <phos/fn.h>
#include "nccl_id.h"
#include <unistd.h>
#include <vector>

#define CK(x)                                                                                    \
	do {                                                                                     \
		cudaError_t e_ = (x);                                                            \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "tp_mlp: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,       \
				cudaGetErrorString(e_));                                         \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)
#define BK(x)                                                                                    \
	do {                                                                                     \
		cublasStatus_t s_ = (x);                                                         \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
			fprintf(stderr, "tp_mlp: %s:%d: %s: status %d\n", __FILE__, __LINE__, #x, \
				(int)s_);                                                        \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)
#define NK(x)                                                                                    \
	do {                                                                                     \
		ncclResult_t n_ = (x);                                                           \
		if (n_ != ncclSuccess) {                                                         \
			fprintf(stderr, "tp_mlp: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,       \
				ncclGetErrorString(n_));                                         \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

/* y (rows x cols, column-major) += bias per row, then ReLU when relu != 0
 * (the same kernel as mlp's: its sim twin is _Z8bias_actPfPKfiii). */
__global__ void bias_act(float *y, const float *bias, int rows, int cols, int relu)
{
	size_t total = (size_t)rows * cols;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = y[i] + bias[i % rows];

		y[i] = relu ? fmaxf(v, 0.0f) : v;
	}
}

enum { T_W1 = 1, T_B1, T_W2, T_B2, T_X };

/* A value in [-scale, scale) from (tensor, i, j): splitmix64 of the three. */
static float param(int tensor, uint64_t i, uint64_t j, float scale)
{
	uint64_t z = ((uint64_t)tensor << 56) ^ (i << 28) ^ j;

	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return ((float)(z >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}

struct tp {
	int rank, nranks, D, H, Hr, B;
	ncclComm_t comm;
	cublasHandle_t blas;
	cudaStream_t stream;
	float *x, *w1, *b1, *w2, *b2, *y, *z;
	std::vector<double> ref;   /* D x B */
};

static float *upload(const std::vector<float> &h)
{
	float *d;

	CK(cudaMalloc(&d, h.size() * sizeof(float)));
	CK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
	return d;
}

static void setup(tp *t)
{
	const int D = t->D, H = t->H, Hr = t->Hr, B = t->B, r0 = t->rank * Hr;
	const float s1 = sqrtf(6.0f / D), s2 = sqrtf(6.0f / H);
	std::vector<float> x(D * B), w1(Hr * D), b1(Hr), w2(D * Hr), b2(D);

	for (int j = 0; j < B; j++)
		for (int i = 0; i < D; i++)
			x[i + j * D] = param(T_X, i, j, 1.0f);
	for (int k = 0; k < D; k++)
		for (int i = 0; i < Hr; i++)
			w1[i + k * Hr] = param(T_W1, r0 + i, k, s1);
	for (int i = 0; i < Hr; i++)
		b1[i] = param(T_B1, r0 + i, 0, 0.05f);
	for (int j = 0; j < Hr; j++)
		for (int i = 0; i < D; i++)
			w2[i + j * D] = param(T_W2, i, r0 + j, s2);
	for (int i = 0; i < D; i++)
		b2[i] = param(T_B2, i, 0, 0.05f);
	t->x = upload(x);
	t->w1 = upload(w1);
	t->b1 = upload(b1);
	t->w2 = upload(w2);
	t->b2 = upload(b2);
	CK(cudaMalloc(&t->y, (size_t)Hr * B * sizeof(float)));
	CK(cudaMalloc(&t->z, (size_t)D * B * sizeof(float)));

	/* The whole model on the CPU. */
	t->ref.assign((size_t)D * B, 0.0);
	std::vector<double> h(H);
	for (int j = 0; j < B; j++) {
		for (int u = 0; u < H; u++) {
			double a = param(T_B1, u, 0, 0.05f);
			for (int k = 0; k < D; k++)
				a += (double)param(T_W1, u, k, s1) * x[k + j * D];
			h[u] = a > 0 ? a : 0;
		}
		for (int i = 0; i < D; i++) {
			double a = param(T_B2, i, 0, 0.05f);
			for (int u = 0; u < H; u++)
				a += (double)param(T_W2, i, u, s2) * h[u];
			t->ref[i + (size_t)j * D] = a;
		}
	}
}

/* One forward pass; the largest difference from the CPU reference. */
static double forward(tp *t)
{
	const float one = 1.0f, zero = 0.0f;
	const int D = t->D, Hr = t->Hr, B = t->B;
	std::vector<float> z((size_t)D * B);
	double err = 0;

	BK(cublasSgemm(t->blas, CUBLAS_OP_N, CUBLAS_OP_N, Hr, B, D, &one, t->w1, Hr, t->x, D, &zero, t->y, Hr));
	bias_act<<<8, 128, 0, t->stream>>>(t->y, t->b1, Hr, B, 1);
	CK(cudaGetLastError());
	BK(cublasSgemm(t->blas, CUBLAS_OP_N, CUBLAS_OP_N, D, B, Hr, &one, t->w2, D, t->y, Hr, &zero, t->z, D));
	NK(ncclAllReduce(t->z, t->z, (size_t)D * B, ncclFloat, ncclSum, t->comm, t->stream));
	bias_act<<<8, 128, 0, t->stream>>>(t->z, t->b2, D, B, 0);
	CK(cudaGetLastError());
	CK(cudaMemcpyAsync(z.data(), t->z, z.size() * sizeof(float), cudaMemcpyDeviceToHost, t->stream));
	CK(cudaStreamSynchronize(t->stream));
	for (size_t i = 0; i < z.size(); i++) {
		double e = std::isfinite(z[i]) ? fabs(z[i] - t->ref[i]) : INFINITY;
		err = e > err ? e : err;
	}
	return err;
}

static const double TOL = 1e-4;

static char *report(tp *t, double err)
{
	char *s = NULL;

	if (asprintf(&s, "{\"rank\":%d,\"nranks\":%d,\"width\":%d,\"hidden\":%d,\"batch\":%d,"
			 "\"max_abs_err\":%.3g,\"tol\":%g,\"ok\":%s}",
		     t->rank, t->nranks, t->D, t->H, t->B, err, TOL, err <= TOL ? "true" : "false") < 0)
		return NULL;
	return s;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	tp *t = (tp *)arg;

	(void)req;
	resp->body = report(t, forward(t));
	if (!resp->body)
		return 500;
	resp->len = strlen(resp->body);
	return 0;
}

int main(int argc, char **argv)
{
	static tp t;
	const char *idfile = getenv("PHOS_TP_IDFILE");
	int pos = 0;
	ncclUniqueId id;
	int ndev = 0;
	double err;
	char *line;

	t.rank = getenv("PHOS_TP_RANK") ? atoi(getenv("PHOS_TP_RANK")) : 0;
	t.nranks = getenv("PHOS_TP_NRANKS") ? atoi(getenv("PHOS_TP_NRANKS")) : 1;
	t.D = 64;
	t.H = 192;
	t.B = 8;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--width") && i + 1 < argc)
			t.D = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
			t.H = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			t.B = atoi(argv[++i]);
		else if (pos == 0 && ++pos)
			t.rank = atoi(argv[i]);
		else if (pos == 1 && ++pos)
			t.nranks = atoi(argv[i]);
		else if (pos == 2 && ++pos)
			idfile = argv[i];
	}
	if (t.nranks < 1 || t.rank < 0 || t.rank >= t.nranks || !idfile || t.D < 1 || t.B < 1 ||
	    t.H % t.nranks != 0) {
		fprintf(stderr, "usage: tp_mlp RANK NRANKS IDFILE [--width D] [--hidden H] [--batch B] "
				"(H a multiple of NRANKS)\n");
		return 2;
	}
	t.Hr = t.H / t.nranks;
	if (nccl_id_exchange(idfile, t.rank, 60000, "tp_mlp", &id) < 0)
		return 1;
	/* One GPU per rank: rank r on device r natively; under phos-fn each rank's
	 * executor owns one GPU (PHOS_GPU), which the function sees as device 0. */
	CK(cudaGetDeviceCount(&ndev));
	CK(cudaSetDevice(t.rank % ndev));
	CK(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking));
	BK(cublasCreate(&t.blas));
	BK(cublasSetStream(t.blas, t.stream));
	NK(ncclCommInitRank(&t.comm, t.nranks, id, t.rank));
	setup(&t);
	err = forward(&t);
	line = report(&t, err);
	printf("%s\n", line ? line : "{\"ok\":false}");
	fflush(stdout);
	free(line);
	if (!(err <= TOL))   /* a model that is wrong at init is not served */
		return 1;
	return phos_fn_serve(handle, &t);
}
