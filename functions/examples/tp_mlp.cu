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
 *          [--weights-mib M [--no-check] [--save-weights F | --weights-file F]]
 *
 * Small models (the default, D 64, H 192) are made on the host and checked
 * whole against the CPU reference. --weights-mib M gives each rank M MiB of
 * weights (W1_r and W2_r, M/2 MiB each; D 8192 unless --width, so that
 * Hr = M MiB / 8D), made on the GPU by mlp's init_weights kernel (one stream
 * of mlp_weights.h per tensor and rank); then the CPU reference covers rows
 * 0..7 of column 0 (still every weight once: 2 x 8 GiB takes a few seconds on
 * 16 threads), --no-check skips it (max_abs_err null), and the answer carries
 * those rows ("sample"), so that runs can be compared with each other. The
 * cold-start benchmark (bench/nccl.py) loads them from disk as a real model
 * would: --save-weights F writes the rank's W1_r and W2_r to F (atomically)
 * after init, --weights-file F reads them back instead of making them (two
 * pinned 64 MiB buffers, disk reads overlapping the copies; a file of another
 * shape, rank or seed is refused).
 *
 * (or PHOS_TP_RANK, PHOS_TP_NRANKS, PHOS_TP_IDFILE). Rank 0 writes the NCCL
 * unique id to IDFILE, atomically; the others wait for it (up to 60 s). Rank
 * r uses device r modulo the devices it sees (natively: GPU r of the host;
 * under phos-fn: the one GPU of its executor, PHOS_GPU). Each
 * rank prints {"rank":R,"nranks":N,"max_abs_err":E,"tol":T,"ok":BOOL} after
 * init (and exits 1 when it is not ok), then serves: each request runs the
 * forward pass again and answers the same object (so that a snapshot of a
 * single-rank run can be checked).
 *
 *   tp_mlp --one-process NRANKS [--width D] [--hidden H] [--batch B] [--weights-mib M [--no-check]]
 *
 * The other shape: one process drives NRANKS GPUs (devices 0..NRANKS-1 of
 * what it sees; under phos-fn: phos-fn run --gpus A,B,...), with
 * ncclCommInitAll and the all-reduces of every rank in one NCCL group. Every
 * rank's answer is checked against the one CPU reference; it prints and
 * serves {"rank":"all","nranks":N,...} (the sample is rank 0's).
 *
 *   tp_mlp --threads NRANKS [--width D] [--hidden H] [--batch B] [--weights-mib M [--no-check]]
 *
 * The same, with a thread per rank as NCCL's "one device per thread"
 * example has it: each thread selects its device, calls ncclCommInitRank
 * (outside any group) and, for every forward pass, runs its rank's layers,
 * its ncclAllReduce (outside any group), a cuBLAS norm of the sum into host
 * memory and its cudaStreamSynchronize; rank 0's answer is checked against
 * the CPU reference, and every rank's sample and norm must equal rank 0's.
 * It prints and serves {"rank":"threads",...}.
 */
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <phos/fn.h>
#include <string>
#include "mlp_weights.h"
#include "nccl_id.h"
#include <fcntl.h>
#include <thread>
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

/* Big models: the mlp_weights.h tensor of (kind, rank); W1_r (Hr x D) and
 * W2_r (D x Hr) are streams indexed by their column-major offsets. */
enum { BIG_W1 = 0x100, BIG_B1 = 0x200, BIG_W2 = 0x300, BIG_B2 = 0x400, BIG_X = 0x500 };
static const uint32_t BIG_SEED = 42;
static const int BIG_ROWS = 8;     /* rows of column 0 checked and answered */

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
	bool big, check;
	const char *save, *load;   /* --save-weights, --weights-file */
	ncclComm_t comm;
	cublasHandle_t blas;
	cudaStream_t stream;
	float *x, *w1, *b1, *w2, *b2, *y, *z;
	std::vector<double> ref;   /* D x B; big: BIG_ROWS of column 0; none: unchecked */
	/* --threads: the all-reduced Z's norm read into host memory by cuBLAS
	 * right after the all-reduce (a wait for the stream while the peer
	 * thread's all-reduce may not be queued yet), then checked against z */
	bool norm;
	float z_norm;
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

/* ---- big models: weights made on the GPU, or read from a file ---------- */

struct wfile_header {
	char magic[8];   /* "PHOSTPMW" */
	uint32_t width, hidden_rank, rank, nranks, seed, pad;
	uint64_t floats; /* W1_r then W2_r */
	char unused[24];
};
static_assert(sizeof(wfile_header) == 64, "the weights file's header is 64 bytes");

static const size_t WFILE_BUF = 64u << 20;

static wfile_header wfile_expect(const tp *t)
{
	wfile_header h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, "PHOSTPMW", 8);
	h.width = (uint32_t)t->D;
	h.hidden_rank = (uint32_t)t->Hr;
	h.rank = (uint32_t)t->rank;
	h.nranks = (uint32_t)t->nranks;
	h.seed = BIG_SEED;
	h.floats = 2 * (uint64_t)t->Hr * t->D;
	return h;
}

static void die(const char *what, const char *path)
{
	fprintf(stderr, "tp_mlp: %s %s: %s\n", what, path, errno ? strerror(errno) : "short file");
	exit(1);
}

/* W1_r and W2_r from path: pread into two pinned buffers, each copied while
 * the other fills. */
static void wfile_load(tp *t, const char *path)
{
	const wfile_header want = wfile_expect(t);
	const size_t n1 = (size_t)t->Hr * t->D;
	wfile_header got;
	float *buf[2];
	cudaEvent_t done[2];
	int fd = open(path, O_RDONLY | O_CLOEXEC), cur = 0;
	off_t off = sizeof(got);

	if (fd < 0)
		die("cannot open the weights file", path);
	if (pread(fd, &got, sizeof(got), 0) != (ssize_t)sizeof(got) || memcmp(&got, &want, sizeof(got)) != 0 ||
	    lseek(fd, 0, SEEK_END) != (off_t)(sizeof(got) + want.floats * 4)) {
		fprintf(stderr, "tp_mlp: %s is not the weights file of rank %d of %d (width %d, %d hidden rows, "
				"seed %u)\n", path, t->rank, t->nranks, t->D, t->Hr, BIG_SEED);
		exit(1);
	}
	for (int i = 0; i < 2; i++) {
		CK(cudaMallocHost((void **)&buf[i], WFILE_BUF));
		CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
		CK(cudaEventRecord(done[i], t->stream));
	}
	for (int k = 0; k < 2; k++) {
		float *dst = k ? t->w2 : t->w1;

		for (size_t at = 0; at < n1;) {
			size_t len = n1 - at < WFILE_BUF / 4 ? n1 - at : WFILE_BUF / 4, got_b = 0;

			CK(cudaEventSynchronize(done[cur]));   /* its last copy is done */
			while (got_b < len * 4) {
				ssize_t r = pread(fd, (char *)buf[cur] + got_b, len * 4 - got_b, off + (off_t)got_b);

				errno = r < 0 ? errno : 0;
				if (r <= 0)
					die("reading", path);
				got_b += (size_t)r;
			}
			CK(cudaMemcpyAsync(dst + at, buf[cur], len * 4, cudaMemcpyHostToDevice, t->stream));
			CK(cudaEventRecord(done[cur], t->stream));
			off += (off_t)(len * 4);
			at += len;
			cur ^= 1;
		}
	}
	CK(cudaStreamSynchronize(t->stream));
	close(fd);
	for (int i = 0; i < 2; i++) {
		CK(cudaFreeHost(buf[i]));
		CK(cudaEventDestroy(done[i]));
	}
}

/* W1_r and W2_r to path (a temporary file renamed into place). */
static void wfile_save(tp *t, const char *path)
{
	const wfile_header h = wfile_expect(t);
	const size_t n1 = (size_t)t->Hr * t->D;
	std::string tmp = std::string(path) + ".tmp-" + std::to_string(getpid());
	FILE *f = fopen(tmp.c_str(), "wbe");
	float *buf;

	if (!f)
		die("cannot create", tmp.c_str());
	CK(cudaMallocHost((void **)&buf, WFILE_BUF));
	errno = 0;
	if (fwrite(&h, sizeof(h), 1, f) != 1)
		die("writing", tmp.c_str());
	for (int k = 0; k < 2; k++) {
		const float *src = k ? t->w2 : t->w1;

		for (size_t at = 0; at < n1;) {
			size_t len = n1 - at < WFILE_BUF / 4 ? n1 - at : WFILE_BUF / 4;

			CK(cudaMemcpy(buf, src + at, len * 4, cudaMemcpyDeviceToHost));
			if (fwrite(buf, 4, len, f) != len)
				die("writing", tmp.c_str());
			at += len;
		}
	}
	if (fflush(f) || fsync(fileno(f)) || fclose(f))
		die("writing", tmp.c_str());
	CK(cudaFreeHost(buf));
	if (rename(tmp.c_str(), path) < 0)
		die("cannot rename", tmp.c_str());
}

static std::vector<float> big_host(uint32_t tensor, size_t n, float scale)
{
	std::vector<float> v(n);
	uint64_t st = mlpw_stream(BIG_SEED, tensor);
	float unit = mlpw_unit(scale);

	for (size_t i = 0; i < n; i++)
		v[i] = mlpw_at(st, i, unit);
	return v;
}

/* Rows 0..BIG_ROWS-1 of column 0 of the whole model (every rank's slices),
 * in double, on every CPU: the hidden layer is every weight of W1 once. */
static std::vector<double> big_reference(const tp *t, const std::vector<float> &x)
{
	const int D = t->D, Hr = t->Hr, R = t->nranks, rows = D < BIG_ROWS ? D : BIG_ROWS;
	const float u1 = mlpw_unit(sqrtf(6.0f / D)), u2 = mlpw_unit(sqrtf(6.0f / t->H)), ub = mlpw_unit(0.05f);
	unsigned nt = std::thread::hardware_concurrency();
	std::vector<double> h((size_t)R * Hr), z(rows);
	std::vector<std::thread> th;

	nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
	for (unsigned w = 0; w < nt; w++)
		th.emplace_back([&, w] {
			for (size_t g = w; g < (size_t)R * Hr; g += nt) {
				int q = (int)(g / Hr);
				size_t u = g % Hr;
				uint64_t s1 = mlpw_stream(BIG_SEED, BIG_W1 + q);
				double a = mlpw_at(mlpw_stream(BIG_SEED, BIG_B1 + q), u, ub);

				for (int k = 0; k < D; k++)
					a += (double)mlpw_at(s1, u + (size_t)k * Hr, u1) * x[k];
				h[g] = a > 0 ? a : 0;
			}
		});
	for (auto &x_ : th)
		x_.join();
	for (int i = 0; i < rows; i++) {
		double a = mlpw_at(mlpw_stream(BIG_SEED, BIG_B2), i, ub);

		for (int q = 0; q < R; q++) {
			uint64_t s2 = mlpw_stream(BIG_SEED, BIG_W2 + q);

			for (int u = 0; u < Hr; u++)
				a += (double)mlpw_at(s2, i + (size_t)u * D, u2) * h[(size_t)q * Hr + u];
		}
		z[i] = a;
	}
	return z;
}

static void setup_big(tp *t)
{
	const int D = t->D, Hr = t->Hr, B = t->B;
	const size_t n1 = (size_t)Hr * D;
	std::vector<float> x = big_host(BIG_X, (size_t)D * B, 1.0f);

	CK(cudaMalloc(&t->w1, n1 * sizeof(float)));
	CK(cudaMalloc(&t->w2, n1 * sizeof(float)));
	if (t->load) {
		wfile_load(t, t->load);
	} else {
		init_weights<<<1024, 256, 0, t->stream>>>(t->w1, n1, BIG_SEED, BIG_W1 + t->rank, sqrtf(6.0f / D));
		CK(cudaGetLastError());
		init_weights<<<1024, 256, 0, t->stream>>>(t->w2, n1, BIG_SEED, BIG_W2 + t->rank,
							  sqrtf(6.0f / t->H));
		CK(cudaGetLastError());
		CK(cudaStreamSynchronize(t->stream));
	}
	t->x = upload(x);
	t->b1 = upload(big_host(BIG_B1 + t->rank, Hr, 0.05f));
	t->b2 = upload(big_host(BIG_B2, D, 0.05f));
	CK(cudaMalloc(&t->y, (size_t)Hr * B * sizeof(float)));
	CK(cudaMalloc(&t->z, (size_t)D * B * sizeof(float)));
	if (t->check)
		t->ref = big_reference(t, x);
	if (t->save)
		wfile_save(t, t->save);
}

/* One forward pass; the largest difference from the CPU reference (NaN when
 * there is none); rows 0..BIG_ROWS-1 of column 0 in sample. */
static double forward(tp *t, std::vector<float> &sample)
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
	if (t->norm)
		BK(cublasSnrm2(t->blas, D * B, t->z, 1, &t->z_norm));
	bias_act<<<8, 128, 0, t->stream>>>(t->z, t->b2, D, B, 0);
	CK(cudaGetLastError());
	CK(cudaMemcpyAsync(z.data(), t->z, z.size() * sizeof(float), cudaMemcpyDeviceToHost, t->stream));
	CK(cudaStreamSynchronize(t->stream));
	sample.assign(z.begin(), z.begin() + (D < BIG_ROWS ? D : BIG_ROWS));
	if (t->ref.empty())
		return NAN;
	for (size_t i = 0; i < t->ref.size(); i++) {
		double e = std::isfinite(z[i]) ? fabs(z[i] - t->ref[i]) : INFINITY;
		err = e > err ? e : err;
	}
	return err;
}

/* Small models are checked whole; a big one sums 8192 x H products in float
 * (cuBLAS) against double. */
static double tol(const tp *t)
{
	return t->big ? 2e-3 : 1e-4;
}

static bool ok(const tp *t, double err)
{
	return std::isnan(err) ? t->ref.empty() : err <= tol(t);
}

static char *report(tp *t, double err, const std::vector<float> &sample)
{
	std::string smp = "[";
	char num[32], e[32], *s = NULL;

	for (size_t i = 0; i < sample.size(); i++) {
		snprintf(num, sizeof(num), "%s%.7g", i ? "," : "", sample[i]);
		smp += num;
	}
	smp += "]";
	if (std::isnan(err))
		snprintf(e, sizeof(e), "null");
	else
		snprintf(e, sizeof(e), "%.3g", err);
	if (asprintf(&s, "{\"rank\":%d,\"nranks\":%d,\"width\":%d,\"hidden\":%d,\"batch\":%d,"
			 "\"weights_bytes\":%llu,\"sample\":%s,\"max_abs_err\":%s,\"tol\":%g,\"ok\":%s}",
		     t->rank, t->nranks, t->D, t->H, t->B, 2ull * t->Hr * t->D * sizeof(float), smp.c_str(), e,
		     tol(t), ok(t, err) ? "true" : "false") < 0)
		return NULL;
	return s;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	tp *t = (tp *)arg;

	std::vector<float> sample;
	double err;

	(void)req;
	err = forward(t, sample);
	resp->body = report(t, err, sample);
	if (!resp->body)
		return 500;
	resp->len = strlen(resp->body);
	return 0;
}

/* --- one process, every rank (--one-process, --threads) --- */

struct tp_all {
	std::vector<tp> r;
	bool threads;   /* --threads: a thread per rank; else one thread drives every rank */
};

/* The forward pass of every rank: each rank's layers on its device, the
 * all-reduces in one group (one thread drives every communicator), then
 * each rank's result; the largest difference of any rank from rank 0's CPU
 * reference. */
static double forward_all(tp_all *a, std::vector<float> &sample)
{
	const float one = 1.0f, zero = 0.0f;
	const int n = (int)a->r.size();
	std::vector<std::vector<float>> z(n);
	const std::vector<double> &ref = a->r[0].ref;
	double err = 0;

	for (int k = 0; k < n; k++) {
		tp *t = &a->r[k];

		CK(cudaSetDevice(k));
		BK(cublasSgemm(t->blas, CUBLAS_OP_N, CUBLAS_OP_N, t->Hr, t->B, t->D, &one, t->w1, t->Hr, t->x, t->D,
			       &zero, t->y, t->Hr));
		bias_act<<<8, 128, 0, t->stream>>>(t->y, t->b1, t->Hr, t->B, 1);
		CK(cudaGetLastError());
		BK(cublasSgemm(t->blas, CUBLAS_OP_N, CUBLAS_OP_N, t->D, t->B, t->Hr, &one, t->w2, t->D, t->y, t->Hr,
			       &zero, t->z, t->D));
	}
	NK(ncclGroupStart());
	for (int k = 0; k < n; k++) {
		tp *t = &a->r[k];

		NK(ncclAllReduce(t->z, t->z, (size_t)t->D * t->B, ncclFloat, ncclSum, t->comm, t->stream));
	}
	NK(ncclGroupEnd());
	for (int k = 0; k < n; k++) {
		tp *t = &a->r[k];

		CK(cudaSetDevice(k));
		z[k].resize((size_t)t->D * t->B);
		bias_act<<<8, 128, 0, t->stream>>>(t->z, t->b2, t->D, t->B, 0);
		CK(cudaGetLastError());
		CK(cudaMemcpyAsync(z[k].data(), t->z, z[k].size() * sizeof(float), cudaMemcpyDeviceToHost, t->stream));
	}
	for (int k = 0; k < n; k++) {
		CK(cudaSetDevice(k));
		CK(cudaStreamSynchronize(a->r[k].stream));
	}
	CK(cudaSetDevice(0));
	sample.assign(z[0].begin(), z[0].begin() + (a->r[0].D < BIG_ROWS ? a->r[0].D : BIG_ROWS));
	if (ref.empty())
		return NAN;
	for (int k = 0; k < n; k++) {
		for (size_t i = 0; i < ref.size(); i++) {
			double e = std::isfinite(z[k][i]) ? fabs(z[k][i] - ref[i]) : INFINITY;
			err = e > err ? e : err;
		}
	}
	return err;
}

/* Every rank's forward pass on a thread of its own, at once; rank 0's error
 * (infinite when another rank's sample differs from rank 0's). */
static double forward_threads(tp_all *a, std::vector<float> &sample)
{
	const int n = (int)a->r.size();
	std::vector<std::vector<float>> samples(n);
	std::vector<double> errs(n);
	std::vector<std::thread> th;

	for (int k = 0; k < n; k++)
		th.emplace_back([a, k, &samples, &errs] {
			CK(cudaSetDevice(k));
			errs[k] = forward(&a->r[k], samples[k]);
		});
	for (auto &t : th)
		t.join();
	sample = samples[0];
	for (int k = 0; k < n; k++) {
		/* every rank holds the same sum: the same norm, positive */
		if (samples[k] != samples[0] || !(a->r[k].z_norm > 0) || a->r[k].z_norm != a->r[0].z_norm)
			return INFINITY;
	}
	return errs[0];
}

static char *report_all(tp_all *a, double err, const std::vector<float> &sample)
{
	char *one = report(&a->r[0], err, sample), *s = NULL;
	const char *rest = one ? strchr(one, ',') : NULL;   /* after "rank":0 */

	if (rest && asprintf(&s, "{\"rank\":\"%s\"%s", a->threads ? "threads" : "all", rest) < 0)
		s = NULL;
	free(one);
	return s;
}

static int handle_all(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	tp_all *a = (tp_all *)arg;
	std::vector<float> sample;
	double err;

	(void)req;
	err = a->threads ? forward_threads(a, sample) : forward_all(a, sample);
	resp->body = report_all(a, err, sample);
	if (!resp->body)
		return 500;
	resp->len = strlen(resp->body);
	return 0;
}

/* Rank k of a one-process shape: its device selected, its stream, cuBLAS
 * handle and weights made there. */
static void rank_prepare(tp *t, int k)
{
	CK(cudaSetDevice(k));
	CK(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
	BK(cublasCreate(&t->blas));
	BK(cublasSetStream(t->blas, t->stream));
	if (t->big)
		setup_big(t);
	else
		setup(t);
}

/* The init line of a one-process shape, then serving (1 when the model is wrong). */
static int report_and_serve(tp_all *a, double err, const std::vector<float> &sample)
{
	char *line = report_all(a, err, sample);

	printf("%s\n", line ? line : "{\"ok\":false}");
	fflush(stdout);
	free(line);
	if (!ok(&a->r[0], err))
		return 1;
	return phos_fn_serve(handle_all, a);
}

/* --- a thread per rank (--threads) --- */

static int main_threads(const tp &proto)
{
	static tp_all a;
	const int n = proto.nranks;
	std::vector<std::thread> th;
	std::vector<float> sample;
	ncclUniqueId id;
	int ndev = 0;

	CK(cudaGetDeviceCount(&ndev));
	if (ndev < n) {
		fprintf(stderr, "tp_mlp: --threads %d needs %d devices, %d seen\n", n, n, ndev);
		return 1;
	}
	NK(ncclGetUniqueId(&id));
	a.r.assign(n, proto);
	a.threads = true;
	for (int k = 0; k < n; k++)
		th.emplace_back([&proto, &id, n, k] {
			tp *t = &a.r[k];

			t->rank = k;
			t->check = proto.check && k == 0;
			t->norm = true;
			rank_prepare(t, k);
			NK(ncclCommInitRank(&t->comm, n, id, k));
		});
	for (auto &t : th)
		t.join();
	return report_and_serve(&a, forward_threads(&a, sample), sample);
}

static int main_one_process(const tp &proto)
{
	static tp_all a;
	const int n = proto.nranks;
	std::vector<ncclComm_t> comms(n);
	std::vector<float> sample;
	int ndev = 0;
	double err;

	CK(cudaGetDeviceCount(&ndev));
	if (ndev < n) {
		fprintf(stderr, "tp_mlp: --one-process %d needs %d devices, %d seen\n", n, n, ndev);
		return 1;
	}
	NK(ncclCommInitAll(comms.data(), n, NULL));
	a.r.assign(n, proto);
	for (int k = 0; k < n; k++) {
		tp *t = &a.r[k];

		t->rank = k;
		t->comm = comms[k];
		t->check = proto.check && k == 0;   /* one reference serves every rank */
		rank_prepare(t, k);
	}
	CK(cudaSetDevice(0));
	err = forward_all(&a, sample);
	return report_and_serve(&a, err, sample);
}

/* A positive int from an option's value, or -1. */
static long positive(const char *v, long max)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	return errno || end == v || *end || n < 1 || n > max ? -1 : n;
}

int main(int argc, char **argv)
{
	static tp t;
	const char *idfile = getenv("PHOS_TP_IDFILE");
	int pos = 0, width = 0;
	long mib = 0;
	bool bad = false, one_process = false, threads = false;
	ncclUniqueId id;
	int ndev = 0;
	double err;
	char *line;
	std::vector<float> sample;

	t.rank = getenv("PHOS_TP_RANK") ? atoi(getenv("PHOS_TP_RANK")) : 0;
	t.nranks = getenv("PHOS_TP_NRANKS") ? atoi(getenv("PHOS_TP_NRANKS")) : 1;
	t.D = 64;
	t.H = 192;
	t.B = 8;
	t.check = true;
	for (int i = 1; i < argc; i++) {
		bool val = i + 1 < argc;

		if (!strcmp(argv[i], "--width") && val)
			bad |= (t.D = width = (int)positive(argv[++i], 1 << 20)) < 0;
		else if (!strcmp(argv[i], "--hidden") && val)
			bad |= (t.H = (int)positive(argv[++i], 1 << 30)) < 0;
		else if (!strcmp(argv[i], "--batch") && val)
			bad |= (t.B = (int)positive(argv[++i], 4096)) < 0;
		else if (!strcmp(argv[i], "--weights-mib") && val)
			bad |= (mib = positive(argv[++i], 65536)) < 0;
		else if (!strcmp(argv[i], "--no-check"))
			t.check = false;
		else if (!strcmp(argv[i], "--one-process") && val && pos == 0 && !threads)
			one_process = true, pos = 3, bad |= (t.nranks = (int)positive(argv[++i], 8)) < 0;
		else if (!strcmp(argv[i], "--threads") && val && pos == 0 && !one_process)
			threads = true, pos = 3, bad |= (t.nranks = (int)positive(argv[++i], 8)) < 0;
		else if (!strcmp(argv[i], "--save-weights") && val)
			t.save = argv[++i];
		else if (!strcmp(argv[i], "--weights-file") && val)
			t.load = argv[++i];
		else if (argv[i][0] == '-' && argv[i][1] == '-')
			bad = true;
		else if (pos == 0 && ++pos)
			t.rank = atoi(argv[i]);
		else if (pos == 1 && ++pos)
			t.nranks = atoi(argv[i]);
		else if (pos == 2 && ++pos)
			idfile = argv[i];
		else
			bad = true;
	}
	if (mib > 0) {   /* Hr = M MiB / (2 matrices x D x 4 bytes) */
		t.big = true;
		t.D = width > 0 ? width : 8192;
		t.Hr = ((mib << 17) % t.D == 0) ? (int)((mib << 17) / t.D) : 0;
		t.H = t.Hr * t.nranks;
	} else {
		t.Hr = t.nranks >= 1 && t.H % t.nranks == 0 ? t.H / t.nranks : 0;
		bad |= !t.check || t.save || t.load;   /* big models only */
	}
	if (one_process || threads) {
		t.rank = 0;
		bad |= t.save || t.load;   /* weights files are per rank */
	}
	if (bad || t.nranks < 1 || t.rank < 0 || t.rank >= t.nranks || (!idfile && !one_process && !threads) || t.D < 1 ||
	    t.B < 1 || t.Hr < 1 || (t.save && t.load)) {
		fprintf(stderr, "usage: tp_mlp RANK NRANKS IDFILE [--width D] [--hidden H] [--batch B] "
				"[--weights-mib M [--no-check] [--save-weights F | --weights-file F]]\n"
				"       tp_mlp --one-process NRANKS [--width D] [--hidden H] [--batch B] "
				"[--weights-mib M [--no-check]]\n"
				"       tp_mlp --threads NRANKS [--width D] [--hidden H] [--batch B] "
				"[--weights-mib M [--no-check]]\n"
				"(H a multiple of NRANKS; M MiB a multiple of 8 D bytes)\n");
		return 2;
	}
	if (one_process)
		return main_one_process(t);
	if (threads)
		return main_threads(t);
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
	if (t.big)
		setup_big(&t);
	else
		setup(&t);
	err = forward(&t, sample);
	line = report(&t, err, sample);
	printf("%s\n", line ? line : "{\"ok\":false}");
	fflush(stdout);
	free(line);
	if (!ok(&t, err))   /* a model that is wrong at init is not served */
		return 1;
	return phos_fn_serve(handle, &t);
}
