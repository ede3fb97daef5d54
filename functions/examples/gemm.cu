/* SPDX-License-Identifier: MIT */
/*
 * gemm: cuBLAS SGEMM (plain, GemmEx f32, strided batched) and level-1 calls.
 *
 *   init:    cublasCreate, a stream, cublasSetStream, cublasSetMathMode
 *            (CUBLAS_DEFAULT_MATH: full fp32, no TF32), four device matrices
 *            of --max-elems floats and their pinned staging, one small warm-up
 *            GEMM.
 *   request: {"m":512,"n":256,"k":1024,"seed":3,"trans_a":false,"trans_b":true,
 *             "alpha":1.5,"beta":-0.5,"batch":1,"api":"sgemm","checksum":true,
 *             "check":true}
 *            every field optional (m = n = k = 256, seed 1, no transposes,
 *            alpha 1, beta 0, batch 1, api "sgemm", checksum and check on).
 *            api "sgemm" runs cublasSgemm, or cublasSgemmStridedBatched when
 *            batch > 1; api "gemmex" runs cublasGemmEx (CUDA_R_32F,
 *            CUBLAS_COMPUTE_32F; batch 1 only).
 *            A, B and C (column-major, as stored: op(A) is m x k, op(B) k x n)
 *            are streams 0, 1, 2 of the seed, uniform in [-1, 1).
 *   checksum: on the GPU, D = C_out - beta*C_in (cublasSaxpy), then
 *            cublasSnrm2(D) and cublasSdot(D, C_in); D = alpha*op(A)op(B).
 *   reply:   {"m":..,"n":..,"k":..,"batch":..,"api":"sgemm_strided_batched",
 *             "trans_a":..,"trans_b":..,"alpha":..,"beta":..,"seed":..,
 *             "checksum":{"nrm2":..,"dot":..,"nrm2_ref":..,"dot_ref":..,"rel_err":..},
 *             "max_abs_err":..,"tol":..,"ok":true}
 *
 * The CPU reference accumulates in double. Tolerance on C:
 * 2^-20 * (|alpha|*k + |beta| + 1) (about 1e-6 per unit of the dot product's
 * length). The checksum's rel_err is normalised by ||alpha*AB|| + |beta|*||C_in||
 * (times ||C_in|| for the dot) and must be <= 1e-4. With "check": false the CPU
 * reference is skipped: "max_abs_err" is null and "ok" true. The CPU check is
 * refused (400) above m*n*k*batch = 2^32 multiply-adds.
 *
 * Usage: gemm [--max-elems N (floats per matrix, default 1<<22, at most 1<<28)]
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "example.h"

#define DEFAULT_MAX_ELEMS (1ull << 22)
#define MAX_MAX_ELEMS (1ull << 28)
#define MAX_DIM 16384
#define MAX_BATCH 256
#define MAX_CHECK_MACS (1ull << 32)
#define CHECKSUM_TOL 1e-4

struct gemm {
	size_t max_elems;
	float *d_a, *d_b, *d_c, *d_cin;
	float *h_a, *h_b, *h_c, *h_cin;     /* pinned staging */
	cublasHandle_t blas;
	cudaStream_t stream;
};

enum gemm_api { API_SGEMM, API_GEMMEX };

struct gemm_req {
	int m, n, k, batch;
	uint32_t seed;
	bool trans_a, trans_b, checksum, check;
	float alpha, beta;
	enum gemm_api api;
};

struct gemm_sums {
	float nrm2, dot;                    /* from the GPU */
	double nrm2_ref, dot_ref, rel_err;  /* from the CPU reference */
};

static void gemm_free(struct gemm *g)
{
	if (g->blas)
		cublasDestroy(g->blas);
	if (g->stream)
		cudaStreamDestroy(g->stream);
	cudaFree(g->d_a);
	cudaFree(g->d_b);
	cudaFree(g->d_c);
	cudaFree(g->d_cin);
	cudaFreeHost(g->h_a);
	cudaFreeHost(g->h_b);
	cudaFreeHost(g->h_c);
	cudaFreeHost(g->h_cin);
	memset(g, 0, sizeof(*g));
}

static int gemm_init(struct gemm *g, size_t max_elems, struct ex_err *err)
{
	size_t bytes = max_elems * sizeof(float);
	const float one = 1.0f, zero = 0.0f;

	memset(g, 0, sizeof(*g));
	g->max_elems = max_elems;
	CUBLAS_TRY(err, cublasCreate(&g->blas));
	CUDA_TRY(err, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
	CUBLAS_TRY(err, cublasSetStream(g->blas, g->stream));
	CUBLAS_TRY(err, cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));
	CUDA_TRY(err, cudaMalloc((void **)&g->d_a, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&g->d_b, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&g->d_c, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&g->d_cin, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&g->h_a, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&g->h_b, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&g->h_c, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&g->h_cin, bytes));
	CUDA_TRY(err, cudaMemsetAsync(g->d_a, 0, bytes, g->stream));
	CUDA_TRY(err, cudaMemsetAsync(g->d_b, 0, bytes, g->stream));

	/* Warm-up: the first GEMM of a process loads cuBLAS's kernels lazily. */
	{
		int w = max_elems >= 64 * 64 ? 64 : 1;

		CUBLAS_TRY(err, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, w, w, w, &one, g->d_a, w,
					    g->d_b, w, &zero, g->d_c, w));
	}
	CUDA_TRY(err, cudaStreamSynchronize(g->stream));
	return 0;
fail:
	gemm_free(g);
	return -1;
}

static int parse_request(const struct gemm *g, const struct phos_fn_request *req, struct gemm_req *r,
			 struct ex_err *err)
{
	static const char *const known[] = {"m", "n", "k", "seed", "trans_a", "trans_b", "alpha",
					    "beta", "batch", "api", "checksum", "check", NULL};
	json_t *root = ex_request_parse(req, err);
	long long m, n, k, batch, seed;
	double alpha, beta;
	const char *api = "sgemm";
	json_t *v;
	int rc = -1;

	if (!root)
		return -1;
	if (ex_request_known(root, known, err) ||
	    ex_request_int(root, "m", 256, 1, MAX_DIM, &m, NULL, err) ||
	    ex_request_int(root, "n", 256, 1, MAX_DIM, &n, NULL, err) ||
	    ex_request_int(root, "k", 256, 1, MAX_DIM, &k, NULL, err) ||
	    ex_request_int(root, "batch", 1, 1, MAX_BATCH, &batch, NULL, err) ||
	    ex_request_int(root, "seed", 1, 0, UINT32_MAX, &seed, NULL, err) ||
	    ex_request_real(root, "alpha", 1.0, -1000.0, 1000.0, &alpha, NULL, err) ||
	    ex_request_real(root, "beta", 0.0, -1000.0, 1000.0, &beta, NULL, err) ||
	    ex_request_bool(root, "trans_a", false, &r->trans_a, err) ||
	    ex_request_bool(root, "trans_b", false, &r->trans_b, err) ||
	    ex_request_bool(root, "checksum", true, &r->checksum, err) ||
	    ex_request_bool(root, "check", true, &r->check, err))
		goto out;

	v = json_object_get(root, "api");
	if (v && !json_is_string(v)) {
		ex_err_set(err, "\"api\" must be \"sgemm\" or \"gemmex\"");
		goto out;
	}
	if (v)
		api = json_string_value(v);
	if (strcmp(api, "sgemm") == 0) {
		r->api = API_SGEMM;
	} else if (strcmp(api, "gemmex") == 0) {
		r->api = API_GEMMEX;
		if (batch > 1) {
			ex_err_set(err, "\"api\": \"gemmex\" takes \"batch\": 1 only");
			goto out;
		}
	} else {
		ex_err_set(err, "\"api\" must be \"sgemm\" or \"gemmex\"");
		goto out;
	}

	/* Each matrix of the batch must fit the buffers made at init. */
	if ((unsigned long long)(m * k * batch) > g->max_elems ||
	    (unsigned long long)(k * n * batch) > g->max_elems ||
	    (unsigned long long)(m * n * batch) > g->max_elems) {
		ex_err_set(err, "m*k, k*n and m*n times batch must each be at most %zu (gemm --max-elems)",
			   g->max_elems);
		goto out;
	}
	if (r->check && (unsigned long long)(m * n) * (unsigned long long)(k * batch) > MAX_CHECK_MACS) {
		ex_err_set(err, "m*n*k*batch is above %llu, too much for the CPU check; send \"check\": false",
			   MAX_CHECK_MACS);
		goto out;
	}
	r->m = (int)m;
	r->n = (int)n;
	r->k = (int)k;
	r->batch = (int)batch;
	r->seed = (uint32_t)seed;
	r->alpha = (float)alpha;
	r->beta = (float)beta;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

static int run_gpu(struct gemm *g, const struct gemm_req *r, struct gemm_sums *sums, struct ex_err *err)
{
	size_t na = (size_t)r->m * r->k * r->batch, nb = (size_t)r->k * r->n * r->batch;
	size_t nc = (size_t)r->m * r->n * r->batch;
	cublasOperation_t ta = r->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t tb = r->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	int lda = r->trans_a ? r->k : r->m, ldb = r->trans_b ? r->n : r->k, ldc = r->m;
	float minus_beta = -r->beta;

	CUDA_TRY(err, cudaMemcpyAsync(g->d_a, g->h_a, na * sizeof(float), cudaMemcpyHostToDevice, g->stream));
	CUDA_TRY(err, cudaMemcpyAsync(g->d_b, g->h_b, nb * sizeof(float), cudaMemcpyHostToDevice, g->stream));
	CUDA_TRY(err, cudaMemcpyAsync(g->d_c, g->h_cin, nc * sizeof(float), cudaMemcpyHostToDevice, g->stream));
	if (r->checksum)
		CUDA_TRY(err, cudaMemcpyAsync(g->d_cin, g->d_c, nc * sizeof(float), cudaMemcpyDeviceToDevice,
					      g->stream));

	if (r->api == API_GEMMEX)
		CUBLAS_TRY(err, cublasGemmEx(g->blas, ta, tb, r->m, r->n, r->k, &r->alpha, g->d_a, CUDA_R_32F,
					     lda, g->d_b, CUDA_R_32F, ldb, &r->beta, g->d_c, CUDA_R_32F, ldc,
					     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	else if (r->batch > 1)
		CUBLAS_TRY(err, cublasSgemmStridedBatched(g->blas, ta, tb, r->m, r->n, r->k, &r->alpha,
							  g->d_a, lda, (long long)r->m * r->k,
							  g->d_b, ldb, (long long)r->k * r->n, &r->beta,
							  g->d_c, ldc, (long long)r->m * r->n, r->batch));
	else
		CUBLAS_TRY(err, cublasSgemm(g->blas, ta, tb, r->m, r->n, r->k, &r->alpha, g->d_a, lda,
					    g->d_b, ldb, &r->beta, g->d_c, ldc));
	CUDA_TRY(err, cudaMemcpyAsync(g->h_c, g->d_c, nc * sizeof(float), cudaMemcpyDeviceToHost, g->stream));

	if (r->checksum) {
		/* d_c becomes alpha*op(A)op(B); nrm2 and dot return to the host (synchronous). */
		CUBLAS_TRY(err, cublasSaxpy(g->blas, (int)nc, &minus_beta, g->d_cin, 1, g->d_c, 1));
		CUBLAS_TRY(err, cublasSnrm2(g->blas, (int)nc, g->d_c, 1, &sums->nrm2));
		CUBLAS_TRY(err, cublasSdot(g->blas, (int)nc, g->d_c, 1, g->d_cin, 1, &sums->dot));
	}
	CUDA_TRY(err, cudaStreamSynchronize(g->stream));
	return 0;
fail:
	return -1;
}

/* Compares h_c with alpha*op(A)op(B) + beta*C_in computed in double; fills the
 * checksum references. Returns the largest absolute error, or -1 without memory. */
static double check_cpu(const struct gemm *g, const struct gemm_req *r, struct gemm_sums *sums)
{
	int m = r->m, n = r->n, k = r->k;
	float *opa = (float *)malloc((size_t)m * k * sizeof(float));   /* op(A), m x k column-major */
	double *acc = (double *)malloc((size_t)m * sizeof(double));
	double max_err = 0, d2 = 0, dc = 0, c2 = 0, scale;

	if (!opa || !acc) {
		free(opa);
		free(acc);
		return -1;
	}
	for (int b = 0; b < r->batch; b++) {
		const float *a = g->h_a + (size_t)b * m * k, *bm = g->h_b + (size_t)b * k * n;
		const float *cin = g->h_cin + (size_t)b * m * n, *cout = g->h_c + (size_t)b * m * n;

		for (int p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				opa[i + (size_t)p * m] = r->trans_a ? a[p + (size_t)i * k] : a[i + (size_t)p * m];
		for (int j = 0; j < n; j++) {
			memset(acc, 0, (size_t)m * sizeof(double));
			for (int p = 0; p < k; p++) {
				double bpj = r->trans_b ? bm[j + (size_t)p * n] : bm[p + (size_t)j * k];
				const float *col = opa + (size_t)p * m;

				for (int i = 0; i < m; i++)
					acc[i] += (double)col[i] * bpj;
			}
			for (int i = 0; i < m; i++) {
				double cij = cin[i + (size_t)j * m];
				double d = (double)r->alpha * acc[i];
				double want = d + (double)r->beta * cij;

				max_err = fmax(max_err, ex_abs_err(cout[i + (size_t)j * m], want));
				d2 += d * d;
				dc += d * cij;
				c2 += cij * cij;
			}
		}
	}
	free(opa);
	free(acc);

	sums->nrm2_ref = sqrt(d2);
	sums->dot_ref = dc;
	scale = sqrt(d2) + fabs((double)r->beta) * sqrt(c2) + 1e-30;
	sums->rel_err = fmax(ex_abs_err(sums->nrm2, sums->nrm2_ref) / scale,
			     ex_abs_err(sums->dot, sums->dot_ref) / (scale * sqrt(c2) + 1e-30));
	return max_err;
}

static const char *api_name(const struct gemm_req *r)
{
	if (r->api == API_GEMMEX)
		return "gemmex";
	return r->batch > 1 ? "sgemm_strided_batched" : "sgemm";
}

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct gemm *g = (struct gemm *)state;
	struct gemm_sums sums = {0, 0, 0, 0, 0};
	struct gemm_req r;
	struct ex_err err;
	size_t na, nb, nc;
	double max_err = 0, tol;
	bool ok = true;
	json_t *out, *cs = NULL;

	if (parse_request(g, req, &r, &err))
		return ex_reply_error(resp, 400, err.msg);

	na = (size_t)r.m * r.k * r.batch;
	nb = (size_t)r.k * r.n * r.batch;
	nc = (size_t)r.m * r.n * r.batch;
	for (size_t i = 0; i < na; i++)
		g->h_a[i] = ex_uniform(r.seed, 0, i);
	for (size_t i = 0; i < nb; i++)
		g->h_b[i] = ex_uniform(r.seed, 1, i);
	for (size_t i = 0; i < nc; i++)
		g->h_cin[i] = ex_uniform(r.seed, 2, i);

	if (run_gpu(g, &r, &sums, &err))
		return ex_reply_error(resp, 500, err.msg);

	tol = 0x1p-20 * (fabs((double)r.alpha) * r.k + fabs((double)r.beta) + 1.0);
	if (r.check) {
		max_err = check_cpu(g, &r, &sums);
		if (max_err < 0)
			return ex_reply_error(resp, 500, "out of memory for the CPU reference");
		ok = max_err <= tol && (!r.checksum || sums.rel_err <= CHECKSUM_TOL);
	}

	if (r.checksum) {
		cs = json_pack("{s:o, s:o}", "nrm2", ex_json_err(sums.nrm2), "dot", ex_json_err(sums.dot));
		if (cs && r.check) {
			json_object_set_new(cs, "nrm2_ref", json_real(sums.nrm2_ref));
			json_object_set_new(cs, "dot_ref", json_real(sums.dot_ref));
			json_object_set_new(cs, "rel_err", ex_json_err(sums.rel_err));
			json_object_set_new(cs, "tol", json_real(CHECKSUM_TOL));
		}
	}
	out = json_pack("{s:i, s:i, s:i, s:i, s:s, s:b, s:b, s:f, s:f, s:I, s:o, s:f, s:b}",
			"m", r.m, "n", r.n, "k", r.k, "batch", r.batch, "api", api_name(&r),
			"trans_a", r.trans_a, "trans_b", r.trans_b, "alpha", (double)r.alpha,
			"beta", (double)r.beta, "seed", (json_int_t)r.seed,
			"max_abs_err", r.check ? ex_json_err(max_err) : json_null(), "tol", tol, "ok", ok);
	if (out && cs)
		json_object_set_new(out, "checksum", cs);
	else
		json_decref(cs);
	return ex_reply(resp, out, 0);
}

int main(int argc, char **argv)
{
	unsigned long long max_elems = DEFAULT_MAX_ELEMS;
	struct gemm g;
	struct ex_err err;
	int rc;

	for (int i = 1; i < argc; i++) {
		int bad;

		if (strcmp(argv[i], "--max-elems") == 0) {
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_MAX_ELEMS, &max_elems, &err);
		} else {
			ex_err_set(&err, "unknown argument \"%s\"; usage: gemm [--max-elems N]", argv[i]);
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "gemm: %s\n", err.msg);
			return 2;
		}
	}

	if (gemm_init(&g, (size_t)max_elems, &err)) {
		fprintf(stderr, "gemm: init failed: %s\n", err.msg);
		return 1;
	}
	rc = phos_fn_serve(handle, &g);
	gemm_free(&g);
	return rc ? 1 : 0;
}
