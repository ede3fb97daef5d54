// SPDX-License-Identifier: MIT
// cuBLASLt as its users write it (the pattern of NVIDIA's LtSgemm and
// LtHSHgemmStridedBatchSimple samples, and of PyTorch's addmm): descriptors,
// layouts, a preference with a workspace, the heuristic, then cublasLtMatmul.
// Each case is checked against a CPU reference:
//   1. FP32, A transposed, workspace, the heuristic's first algorithm
//   2. FP16 in and out (FP32 compute), bias + ReLU and bias + GELU epilogues,
//      no algorithm given
//   3. BF16, row-major layouts, 3 strided batches, descriptors in the
//      caller's storage (cublasLt*Init)
//   4. FP64 with alpha and beta in device memory (CUBLASLT_POINTER_MODE_DEVICE)
//   5. attributes read back, and size checks
//   6. a cublasHandle_t cast to a cublasLtHandle_t, as cuBLAS allows (PyTorch does it)
// Prints "blaslt: ok" when every check passed.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cublasLtGetStatusName(s_)); exit(1); } } while (0)

static int failures;

static void expect(bool ok, const char *what)
{
	if (!ok) {
		printf("FAIL %s\n", what);
		failures++;
	}
}

static float frand(unsigned &s)
{
	s = s * 1664525u + 1013904223u;
	return ((s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// max |got - want| / (1 + |want|)
template <typename F>
static double compare(const std::vector<double> &want, int n, F got)
{
	double err = 0;
	for (int i = 0; i < n; i++)
		err = fmax(err, fabs(got(i) - want[i]) / (1 + fabs(want[i])));
	return err;
}

static void case_fp32(cublasLtHandle_t lt, void *ws, size_t ws_size, cudaStream_t st)
{
	const int m = 37, n = 29, k = 45, lda = 48, ldb = 45, ldc = 40;   // A stored k x m (transposed)
	std::vector<float> a(lda * m), b(ldb * n), c(ldc * n);
	unsigned s = 1;
	for (auto &x : a) x = frand(s);
	for (auto &x : b) x = frand(s);
	for (auto &x : c) x = frand(s);
	float alpha = 1.5f, beta = -0.5f;
	std::vector<double> want(m * n);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double acc = 0;
			for (int p = 0; p < k; p++)
				acc += (double)a[p + i * lda] * b[p + j * ldb];
			want[i + j * m] = alpha * acc + beta * c[i + j * ldc];
		}
	float *da, *db, *dc;
	CK(cudaMalloc(&da, a.size() * 4));
	CK(cudaMalloc(&db, b.size() * 4));
	CK(cudaMalloc(&dc, c.size() * 4));
	CK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));

	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasOperation_t t = CUBLAS_OP_T;
	LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
	LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, lda));
	LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, ldb));
	LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
	cublasLtMatmulPreference_t pref;
	LT(cublasLtMatmulPreferenceCreate(&pref));
	LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
						sizeof(ws_size)));
	cublasLtMatmulHeuristicResult_t res[4] = {};
	int found = 0;
	LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, res, &found));
	expect(found >= 1 && found <= 4, "heuristic found 1..4 algorithms");
	expect(res[0].state == CUBLAS_STATUS_SUCCESS && res[0].workspaceSize <= ws_size,
	       "first algorithm usable within the workspace");
	// the same query again (cuBLASLt caches answers), and with its cache off
	for (size_t capacity : { (size_t)8192, (size_t)0 }) {
		cublasLtMatmulHeuristicResult_t again[4] = {};
		int found2 = 0;
		LT(cublasLtHeuristicsCacheSetCapacity(capacity));
		LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, again, &found2));
		bool same = found2 == found;
		for (int i = 0; same && i < found; i++)
			same = !memcmp(&again[i].algo, &res[i].algo, sizeof(res[i].algo)) &&
			       again[i].workspaceSize == res[i].workspaceSize;
		expect(same, "the same heuristic query gives the same algorithms");
	}
	LT(cublasLtHeuristicsCacheSetCapacity(8192));
	LT(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dc, lc, dc, lc, &res[0].algo, ws, ws_size, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
	double err = compare(want, m * n, [&](int i) { return (double)c[i % m + (i / m) * ldc]; });
	expect(err < 1e-4, "fp32 matmul matches the reference");
	printf("fp32: max rel err %.2e, %d algorithms\n", err, found);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatmulDescDestroy(op);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
}

static void case_fp16_bias_relu(cublasLtHandle_t lt, cudaStream_t st)
{
	const int m = 64, n = 48, k = 32;
	std::vector<__half> a(m * k), b(k * n), d(m * n), bias(m);
	std::vector<float> af(m * k), bf(k * n), biasf(m);
	unsigned s = 7;
	for (int i = 0; i < m * k; i++) { a[i] = __float2half(frand(s)); af[i] = __half2float(a[i]); }
	for (int i = 0; i < k * n; i++) { b[i] = __float2half(frand(s)); bf[i] = __half2float(b[i]); }
	for (int i = 0; i < m; i++) { bias[i] = __float2half(frand(s)); biasf[i] = __half2float(bias[i]); }
	std::vector<double> want(m * n), want_gelu(m * n);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double acc = 0;
			for (int p = 0; p < k; p++)
				acc += (double)af[i + p * m] * bf[p + j * k];
			double v = acc + biasf[i];
			want[i + j * m] = fmax(v, 0.0);
			want_gelu[i + j * m] = 0.5 * v * (1 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
		}
	__half *da, *db, *dd, *dbias;
	CK(cudaMalloc(&da, m * k * 2));
	CK(cudaMalloc(&db, k * n * 2));
	CK(cudaMalloc(&dd, m * n * 2));
	CK(cudaMalloc(&dbias, m * 2));
	CK(cudaMemcpyAsync(da, a.data(), m * k * 2, cudaMemcpyHostToDevice, st));
	CK(cudaMemcpyAsync(db, b.data(), k * n * 2, cudaMemcpyHostToDevice, st));
	CK(cudaMemcpyAsync(dbias, bias.data(), m * 2, cudaMemcpyHostToDevice, st));

	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
	const void *bias_ptr = dbias;
	LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
	LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
	LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, m, k, m));
	LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, k, n, k));
	LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, m, n, m));
	float alpha = 1, beta = 0;
	LT(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, nullptr, nullptr, 0, st));
	CK(cudaMemcpyAsync(d.data(), dd, m * n * 2, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	double err = compare(want, m * n, [&](int i) { return (double)__half2float(d[i]); });
	expect(err < 1e-2, "fp16 bias+relu matches the reference");
	int negatives = 0;
	for (auto x : d)
		negatives += __half2float(x) < 0;
	expect(negatives == 0, "relu leaves no negative output");
	printf("fp16 bias+relu: max rel err %.2e\n", err);
	epi = CUBLASLT_EPILOGUE_GELU_BIAS;
	LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
	LT(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, nullptr, nullptr, 0, st));
	CK(cudaMemcpyAsync(d.data(), dd, m * n * 2, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	err = compare(want_gelu, m * n, [&](int i) { return (double)__half2float(d[i]); });
	expect(err < 1e-2, "fp16 bias+gelu matches the reference");
	printf("fp16 bias+gelu: max rel err %.2e\n", err);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(ld);
	cublasLtMatmulDescDestroy(op);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dd);
	cudaFree(dbias);
}

static void case_bf16_rows_batched(cublasLtHandle_t lt, void *ws, size_t ws_size, cudaStream_t st)
{
	const int m = 24, n = 40, k = 16, batch = 3;
	const long long sa = m * k + 8, sb = k * n, sd = m * n + 16;   // strides in elements
	std::vector<__nv_bfloat16> a(sa * batch), b(sb * batch), d(sd * batch);
	unsigned s = 11;
	for (auto &x : a) x = __float2bfloat16(frand(s));
	for (auto &x : b) x = __float2bfloat16(frand(s));
	std::vector<double> want(m * n * batch);
	for (int q = 0; q < batch; q++)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++) {
				double acc = 0;
				for (int p = 0; p < k; p++)   // row-major: A[i][p] at i*k + p, B[p][j] at p*n + j
					acc += (double)__bfloat162float(a[q * sa + i * k + p]) *
					       __bfloat162float(b[q * sb + p * n + j]);
				want[q * m * n + i * n + j] = acc;
			}
	__nv_bfloat16 *da, *db, *dd;
	CK(cudaMalloc(&da, a.size() * 2));
	CK(cudaMalloc(&db, b.size() * 2));
	CK(cudaMalloc(&dd, d.size() * 2));
	CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
	CK(cudaMemset(dd, 0, d.size() * 2));

	// descriptors in the caller's storage, as the header's Init helpers allow
	cublasLtMatmulDescOpaque_t op_store;
	cublasLtMatrixLayoutOpaque_t l_store[3];
	cublasLtMatmulDesc_t op = &op_store;
	cublasLtMatrixLayout_t la = &l_store[0], lb = &l_store[1], ld = &l_store[2];
	LT(cublasLtMatmulDescInit(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatrixLayoutInit(la, CUDA_R_16BF, m, k, k));
	LT(cublasLtMatrixLayoutInit(lb, CUDA_R_16BF, k, n, n));
	LT(cublasLtMatrixLayoutInit(ld, CUDA_R_16BF, m, n, n));
	cublasLtOrder_t row = CUBLASLT_ORDER_ROW;
	int32_t bc = batch;
	const long long strides[3] = { sa, sb, sd };
	cublasLtMatrixLayout_t ls[3] = { la, lb, ld };
	for (int i = 0; i < 3; i++) {
		LT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row)));
		LT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
		LT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
						    sizeof(strides[i])));
	}
	cublasLtMatmulPreferenceOpaque_t pref_store;
	cublasLtMatmulPreference_t pref = &pref_store;
	LT(cublasLtMatmulPreferenceInit(pref));
	LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size,
						sizeof(ws_size)));
	cublasLtMatmulHeuristicResult_t res = {};
	int found = 0;
	LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found));
	expect(found == 1, "heuristic found the one algorithm asked for");
	float alpha = 1, beta = 0;
	LT(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, &res.algo, ws, ws_size, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost));
	double err = compare(want, m * n * batch, [&](int i) {
		int q = i / (m * n), r = i % (m * n);
		return (double)__bfloat162float(d[q * sd + r]);
	});
	expect(err < 3e-2, "bf16 row-major batched matches the reference");
	bool gaps_kept = true;   // the 16 elements between batch members are not written
	for (int q = 0; q < batch; q++)
		for (int g = 0; g < 16; g++)
			gaps_kept &= __bfloat162float(d[q * sd + m * n + g]) == 0.0f;
	expect(gaps_kept, "elements between batch members left alone");
	printf("bf16 row-major batched: max rel err %.2e\n", err);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dd);
}

static void case_fp64_device_scalars(cublasLtHandle_t lt, cudaStream_t st)
{
	const int m = 9, n = 7, k = 5;
	std::vector<double> a(m * k), b(k * n), c(m * n), want(m * n);
	unsigned s = 3;
	for (auto &x : a) x = frand(s);
	for (auto &x : b) x = frand(s);
	for (auto &x : c) x = frand(s);
	const double scal[2] = { -2.0, 0.25 };
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double acc = 0;
			for (int p = 0; p < k; p++)
				acc += a[i + p * m] * b[p + j * k];
			want[i + j * m] = scal[0] * acc + scal[1] * c[i + j * m];
		}
	double *da, *db, *dc, *ds;
	CK(cudaMalloc(&da, a.size() * 8));
	CK(cudaMalloc(&db, b.size() * 8));
	CK(cudaMalloc(&dc, c.size() * 8));
	CK(cudaMalloc(&ds, 16));
	CK(cudaMemcpy(da, a.data(), a.size() * 8, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(db, b.data(), b.size() * 8, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dc, c.data(), c.size() * 8, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(ds, scal, 16, cudaMemcpyHostToDevice));
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
	LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_64F, CUDA_R_64F));
	LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
	LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_64F, m, k, m));
	LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_64F, k, n, k));
	LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_64F, m, n, m));
	LT(cublasLtMatmul(lt, op, ds, da, la, db, lb, ds + 1, dc, lc, dc, lc, nullptr, nullptr, 0, st));
	CK(cudaMemcpyAsync(c.data(), dc, c.size() * 8, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	double err = compare(want, m * n, [&](int i) { return c[i]; });
	expect(err < 1e-12, "fp64 with device scalars matches the reference");
	printf("fp64 device scalars: max rel err %.2e\n", err);
	cublasLtMatrixLayoutDestroy(la);
	cublasLtMatrixLayoutDestroy(lb);
	cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatmulDescDestroy(op);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	cudaFree(ds);
}

static void case_attributes(void)
{
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t l;
	cublasLtMatmulPreference_t pref;
	LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
	LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 10, 20, 16));
	LT(cublasLtMatmulPreferenceCreate(&pref));
	int32_t compute = -1, scale = -1;
	size_t written = 0;
	LT(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof(compute), &written));
	expect(compute == CUBLAS_COMPUTE_32F_FAST_TF32 && written == 4, "compute type read back");
	LT(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof(scale), nullptr));
	expect(scale == CUDA_R_32F, "scale type read back");
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
	LT(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), nullptr));
	expect(epi == CUBLASLT_EPILOGUE_DEFAULT, "epilogue defaults to DEFAULT");
	written = 0;
	LT(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, &written));
	expect(written == sizeof(void *), "size query of the bias pointer");
	int8_t wrong_size[2] = { 0, 0 };
	expect(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, wrong_size, 2) ==
	       CUBLAS_STATUS_INVALID_VALUE, "an attribute of the wrong size is refused");
	uint64_t rows = 0, cols = 0;
	int64_t ld = 0;
	uint32_t type = 0;
	int32_t order = -1, batch = 0;
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows), nullptr));
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols), nullptr));
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld), nullptr));
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof(type), nullptr));
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order), nullptr));
	LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch), nullptr));
	expect(rows == 10 && cols == 20 && ld == 16 && type == CUDA_R_16F && order == CUBLASLT_ORDER_COL && batch == 1,
	       "layout read back with its defaults");
	expect(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, 4, nullptr) ==
	       CUBLAS_STATUS_INVALID_VALUE, "a read into a short buffer is refused");
	uint64_t wsmax = 1;
	uint32_t align = 0;
	LT(cublasLtMatmulPreferenceGetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof(wsmax),
						 nullptr));
	LT(cublasLtMatmulPreferenceGetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align),
						 nullptr));
	expect(wsmax == 0 && align == 256, "preference defaults");
	expect(cublasLtGetVersion() >= 130000, "cuBLASLt 13");
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatrixLayoutDestroy(l);
	cublasLtMatmulDescDestroy(op);
}

static void case_cublas_handle(cudaStream_t st)
{
	const int n = 16;
	std::vector<float> a(n * n), c(n * n);
	for (int i = 0; i < n * n; i++)
		a[i] = (float)(i % 7) - 3.0f;
	float *da, *dc;
	CK(cudaMalloc(&da, n * n * 4));
	CK(cudaMalloc(&dc, n * n * 4));
	CK(cudaMemcpy(da, a.data(), n * n * 4, cudaMemcpyHostToDevice));
	cublasHandle_t blas;
	if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
		printf("cublasCreate failed\n");
		exit(1);
	}
	cublasLtHandle_t lt = (cublasLtHandle_t)blas;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t l;
	LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, n, n, n));
	float alpha = 1, beta = 0;
	LT(cublasLtMatmul(lt, op, &alpha, da, l, da, l, &beta, dc, l, dc, l, nullptr, nullptr, 0, st));
	CK(cudaMemcpyAsync(c.data(), dc, n * n * 4, cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	double err = 0;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) {
			double acc = 0;
			for (int p = 0; p < n; p++)
				acc += (double)a[i + p * n] * a[p + j * n];
			err = fmax(err, fabs(acc - c[i + j * n]));
		}
	expect(err < 1e-3, "a matmul on a cuBLAS handle cast to cuBLASLt's");
	printf("cublas handle as cublasLt handle: max abs err %.2e\n", err);
	cublasLtMatrixLayoutDestroy(l);
	cublasLtMatmulDescDestroy(op);
	cublasDestroy(blas);
	cudaFree(da);
	cudaFree(dc);
}

int main()
{
	cublasLtHandle_t lt;
	cudaStream_t st;
	void *ws;
	const size_t ws_size = 4 << 20;
	LT(cublasLtCreate(&lt));
	CK(cudaStreamCreate(&st));
	CK(cudaMalloc(&ws, ws_size));
	case_fp32(lt, ws, ws_size, st);
	case_fp16_bias_relu(lt, st);
	case_bf16_rows_batched(lt, ws, ws_size, st);
	case_fp64_device_scalars(lt, st);
	case_attributes();
	case_cublas_handle(st);
	CK(cudaFree(ws));
	CK(cudaStreamDestroy(st));
	LT(cublasLtDestroy(lt));
	if (failures) {
		printf("blaslt: %d checks failed\n", failures);
		return 1;
	}
	printf("blaslt: ok\n");
	return 0;
}
