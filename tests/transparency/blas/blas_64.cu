// SPDX-License-Identifier: MIT
// cuBLAS's 64-bit-integer API (the _64 forms of CUDA 12+), as a program
// built for large problems calls it: cublasSetMatrix_64/GetMatrix_64,
// cublasSgemm_v2_64, cublasDgemm_v2_64, cublasSgemmStridedBatched_64,
// cublasGemmEx_64, cublasSgemv_v2_64, cublasSaxpy_v2_64, cublasSdot_v2_64,
// cublasSnrm2_v2_64 and cublasSscal_v2_64, each checked against a CPU
// reference (values in multiples of 1/8: every sum exact). Exits 1 on a
// wrong answer.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

static int failures;

#define CU(call)                                                                                        \
	do {                                                                                            \
		cudaError_t e_ = (call);                                                                \
		if (e_ != cudaSuccess) {                                                                \
			printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)
#define CK(call)                                                                              \
	do {                                                                                  \
		cublasStatus_t s_ = (call);                                                   \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
			printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #call, (int)s_); \
			exit(1);                                                              \
		}                                                                             \
	} while (0)
#define EXPECT(cond, ...)                                       \
	do {                                                    \
		if (!(cond)) {                                  \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                    \
			printf("\n");                           \
			failures++;                             \
		}                                               \
	} while (0)

static unsigned seed = 11;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) % 17) / 8.0 - 1.0;
}

// C = A B, column-major, m x k times k x n.
template <typename T>
static std::vector<T> matmul(const std::vector<T> &A, const std::vector<T> &B, int64_t m, int64_t n, int64_t k)
{
	std::vector<T> C(m * n, 0);
	for (int64_t j = 0; j < n; j++)
		for (int64_t p = 0; p < k; p++)
			for (int64_t i = 0; i < m; i++)
				C[i + j * m] += A[i + p * m] * B[p + j * k];
	return C;
}

int main()
{
	cublasHandle_t h;
	const int64_t m = 37, n = 21, k = 45, batch = 3;
	CK(cublasCreate(&h));

	// matrices through SetMatrix_64 / GetMatrix_64
	std::vector<float> A(m * k), B(k * n), C(m * n, 0), R;
	for (auto &v : A)
		v = (float)rnd();
	for (auto &v : B)
		v = (float)rnd();
	float *dA, *dB, *dC;
	CU(cudaMalloc(&dA, A.size() * 4));
	CU(cudaMalloc(&dB, B.size() * 4));
	CU(cudaMalloc(&dC, C.size() * 4));
	CK(cublasSetMatrix_64(m, k, 4, A.data(), m, dA, m));
	CK(cublasSetMatrix_64(k, n, 4, B.data(), k, dB, k));
	const float one = 1, zero = 0;
	CK(cublasSgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, m, dB, k, &zero, dC, m));
	CK(cublasGetMatrix_64(m, n, 4, dC, m, C.data(), m));
	R = matmul(A, B, m, n, k);
	int bad = 0;
	for (int64_t i = 0; i < m * n; i++)
		bad += C[i] != R[i];
	EXPECT(bad == 0, "Sgemm_v2_64: %d of %lld wrong", bad, (long long)(m * n));

	// GemmEx_64, the same product in F32
	CU(cudaMemset(dC, 0, C.size() * 4));
	CK(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_32F, m, dB, CUDA_R_32F, k, &zero, dC,
			   CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	CK(cublasGetMatrix_64(m, n, 4, dC, m, C.data(), m));
	bad = 0;
	for (int64_t i = 0; i < m * n; i++)
		bad += C[i] != R[i];
	EXPECT(bad == 0, "GemmEx_64: %d wrong", bad);

	// Dgemm_v2_64
	{
		std::vector<double> dA_h(m * k), dB_h(k * n), dC_h(m * n);
		for (auto &v : dA_h)
			v = rnd();
		for (auto &v : dB_h)
			v = rnd();
		double *a, *b, *c;
		const double d1 = 1, d0 = 0;
		CU(cudaMalloc(&a, dA_h.size() * 8));
		CU(cudaMalloc(&b, dB_h.size() * 8));
		CU(cudaMalloc(&c, dC_h.size() * 8));
		CK(cublasSetVector_64(m * k, 8, dA_h.data(), 1, a, 1));
		CK(cublasSetVector_64(k * n, 8, dB_h.data(), 1, b, 1));
		CK(cublasDgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &d1, a, m, b, k, &d0, c, m));
		CK(cublasGetVector_64(m * n, 8, c, 1, dC_h.data(), 1));
		std::vector<double> dR = matmul(dA_h, dB_h, m, n, k);
		bad = 0;
		for (int64_t i = 0; i < m * n; i++)
			bad += dC_h[i] != dR[i];
		EXPECT(bad == 0, "Dgemm_v2_64: %d wrong", bad);
		CU(cudaFree(a));
		CU(cudaFree(b));
		CU(cudaFree(c));
	}

	// SgemmStridedBatched_64: batch copies of A times B, each scaled by its index + 1 in B
	{
		std::vector<float> Bs(k * n * batch), Cs(m * n * batch);
		for (int64_t s = 0; s < batch; s++)
			for (int64_t i = 0; i < k * n; i++)
				Bs[s * k * n + i] = B[i] * (float)(s + 1);
		float *bs, *cs;
		CU(cudaMalloc(&bs, Bs.size() * 4));
		CU(cudaMalloc(&cs, Cs.size() * 4));
		CU(cudaMemcpy(bs, Bs.data(), Bs.size() * 4, cudaMemcpyHostToDevice));
		CK(cublasSgemmStridedBatched_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, m, 0, bs, k, k * n, &zero,
						cs, m, m * n, batch));
		CU(cudaMemcpy(Cs.data(), cs, Cs.size() * 4, cudaMemcpyDeviceToHost));
		bad = 0;
		for (int64_t s = 0; s < batch; s++)
			for (int64_t i = 0; i < m * n; i++)
				bad += Cs[s * m * n + i] != R[i] * (float)(s + 1);
		EXPECT(bad == 0, "SgemmStridedBatched_64: %d wrong", bad);
		CU(cudaFree(bs));
		CU(cudaFree(cs));
	}

	// level 1 and 2 on vectors of k
	{
		std::vector<float> x(k), y(k), yr(k), g(m);
		for (auto &v : x)
			v = (float)rnd();
		for (auto &v : y)
			v = (float)rnd();
		float *dx, *dy, *dg;
		CU(cudaMalloc(&dx, k * 4));
		CU(cudaMalloc(&dy, k * 4));
		CU(cudaMalloc(&dg, m * 4));
		CK(cublasSetVector_64(k, 4, x.data(), 1, dx, 1));
		CK(cublasSetVector_64(k, 4, y.data(), 1, dy, 1));
		const float a = 0.5f, s = -2.0f;
		CK(cublasSaxpy_v2_64(h, k, &a, dx, 1, dy, 1));
		CK(cublasSscal_v2_64(h, k, &s, dy, 1));
		CK(cublasGetVector_64(k, 4, dy, 1, yr.data(), 1));
		bad = 0;
		for (int64_t i = 0; i < k; i++)
			bad += yr[i] != (y[i] + 0.5f * x[i]) * -2.0f;
		EXPECT(bad == 0, "Saxpy_v2_64, Sscal_v2_64: %d wrong", bad);
		float dot = 0, nrm = 0;
		double want_dot = 0, want_nrm = 0;
		CK(cublasSdot_v2_64(h, k, dx, 1, dy, 1, &dot));
		CK(cublasSnrm2_v2_64(h, k, dx, 1, &nrm));
		for (int64_t i = 0; i < k; i++) {
			want_dot += (double)x[i] * yr[i];
			want_nrm += (double)x[i] * x[i];
		}
		EXPECT(dot == (float)want_dot, "Sdot_v2_64: %g, want %g", dot, want_dot);
		EXPECT(std::fabs(nrm - std::sqrt(want_nrm)) <= 1e-5 * std::sqrt(want_nrm), "Snrm2_v2_64: %g, want %g", nrm,
		       std::sqrt(want_nrm));
		// y = A x (m x k times k)
		CK(cublasSgemv_v2_64(h, CUBLAS_OP_N, m, k, &one, dA, m, dx, 1, &zero, dg, 1));
		CK(cublasGetVector_64(m, 4, dg, 1, g.data(), 1));
		bad = 0;
		for (int64_t i = 0; i < m; i++) {
			float w = 0;
			for (int64_t p = 0; p < k; p++)
				w += A[i + p * m] * x[p];
			bad += g[i] != w;
		}
		EXPECT(bad == 0, "Sgemv_v2_64: %d wrong", bad);
		CU(cudaFree(dx));
		CU(cudaFree(dy));
		CU(cudaFree(dg));
	}

	CU(cudaFree(dA));
	CU(cudaFree(dB));
	CU(cudaFree(dC));
	CK(cublasDestroy(h));
	if (failures) {
		printf("blas_64: %d check(s) failed\n", failures);
		return 1;
	}
	printf("blas_64: ok\n");
	return 0;
}
