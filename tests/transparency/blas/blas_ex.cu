// SPDX-License-Identifier: MIT
// Mixed-precision GEMMs as programs call them: cublasHgemm (and its strided
// batched form), cublasGemmEx and cublasGemmStridedBatchedEx with the common
// type combinations (F16 and BF16 inputs with F16/BF16/F32 outputs, F32 with
// TF32 math, F64, C32F), checked against a CPU reference computed from the
// same rounded inputs. Exits 1 on a wrong answer.
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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
			failures++;                                                           \
			return;                                                               \
		}                                                                             \
	} while (0)

static unsigned seed = 7;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) % 17) / 8.0 - 1.0;   // multiples of 1/8 in [-1, 1]: exact in half
}

// Element conversions for the types used here.
static double get(const void *p, cudaDataType t, size_t i, double *im = nullptr)
{
	switch (t) {
	case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
	case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	case CUDA_R_32F: return ((const float *)p)[i];
	case CUDA_R_64F: return ((const double *)p)[i];
	case CUDA_C_32F: if (im) *im = ((const float *)p)[2 * i + 1]; return ((const float *)p)[2 * i];
	default: return 0;
	}
}
static void put(void *p, cudaDataType t, size_t i, double v, double im = 0)
{
	switch (t) {
	case CUDA_R_16F: ((__half *)p)[i] = __float2half((float)v); break;
	case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16((float)v); break;
	case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
	case CUDA_R_64F: ((double *)p)[i] = v; break;
	case CUDA_C_32F: ((float *)p)[2 * i] = (float)v, ((float *)p)[2 * i + 1] = (float)im; break;
	default: break;
	}
}
static size_t esize(cudaDataType t)
{
	return t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : t == CUDA_R_32F ? 4 : 8;
}

struct Case {
	const char *name;
	cudaDataType ab, c;
	cublasComputeType_t compute;
	double tol;
};

// C = alpha A^T B + beta C, batch of 2 by stride; scalars of the compute type.
static void gemm_case(cublasHandle_t h, const Case &cs, bool hgemm)
{
	const int m = 24, n = 16, k = 32, batch = 2, lda = k, ldb = k, ldc = m;
	const long long sa = (long long)lda * m, sb = (long long)ldb * n, sc = (long long)ldc * n;
	bool cplx = cs.c == CUDA_C_32F;
	std::vector<char> hA(sa * batch * esize(cs.ab)), hB(sb * batch * esize(cs.ab)), hC(sc * batch * esize(cs.c));
	std::vector<std::complex<double>> want(sc * batch);
	for (size_t i = 0; i < (size_t)sa * batch; i++) put(hA.data(), cs.ab, i, rnd(), cplx ? rnd() : 0);
	for (size_t i = 0; i < (size_t)sb * batch; i++) put(hB.data(), cs.ab, i, rnd(), cplx ? rnd() : 0);
	for (size_t i = 0; i < (size_t)sc * batch; i++) put(hC.data(), cs.c, i, rnd(), cplx ? rnd() : 0);
	const double alpha = 0.5, beta = -0.25;
	for (int b = 0; b < batch; b++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				std::complex<double> s = 0;
				for (int p = 0; p < k; p++) {
					double ar, ai = 0, br, bi = 0;
					ar = get(hA.data(), cs.ab, b * sa + p + (size_t)i * lda, &ai);
					br = get(hB.data(), cs.ab, b * sb + p + (size_t)j * ldb, &bi);
					s += std::complex<double>(ar, ai) * std::complex<double>(br, bi);
				}
				double cr, ci = 0;
				cr = get(hC.data(), cs.c, b * sc + i + (size_t)j * ldc, &ci);
				want[b * sc + i + (size_t)j * ldc] = alpha * s + beta * std::complex<double>(cr, ci);
			}
	void *A, *B, *C;
	CU(cudaMalloc(&A, hA.size()));
	CU(cudaMalloc(&B, hB.size()));
	CU(cudaMalloc(&C, hC.size()));
	CU(cudaMemcpy(A, hA.data(), hA.size(), cudaMemcpyHostToDevice));
	CU(cudaMemcpy(B, hB.data(), hB.size(), cudaMemcpyHostToDevice));
	CU(cudaMemcpy(C, hC.data(), hC.size(), cudaMemcpyHostToDevice));
	// scalars of the compute type
	float af = (float)alpha, bf = (float)beta;
	double ad = alpha, bd = beta;
	__half ah = __float2half(af), bh = __float2half(bf);
	cuComplex ac = make_cuComplex(af, 0), bc = make_cuComplex(bf, 0);
	const void *pa, *pb;
	if (cplx) pa = &ac, pb = &bc;
	else if (cs.compute == CUBLAS_COMPUTE_16F) pa = &ah, pb = &bh;
	else if (cs.compute == CUBLAS_COMPUTE_64F) pa = &ad, pb = &bd;
	else pa = &af, pb = &bf;
	if (hgemm) {
		CK(cublasHgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &ah, (const __half *)A, lda, (const __half *)B, ldb,
			       &bh, (__half *)C, ldc));
		CK(cublasHgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &ah, (const __half *)A + sa, lda, 0,
					     (const __half *)B + sb, ldb, 0, &bh, (__half *)C + sc, ldc, 0, 1));
	} else {
		CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, pa, A, cs.ab, lda, B, cs.ab, ldb, pb, C, cs.c, ldc,
				cs.compute, CUBLAS_GEMM_DEFAULT));
		// the second batch entry through the strided form (batch 1 from offset 1)
		CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, pa, (char *)A + sa * esize(cs.ab),
					      cs.ab, lda, sa, (char *)B + sb * esize(cs.ab), cs.ab, ldb, sb, pb,
					      (char *)C + sc * esize(cs.c), cs.c, ldc, sc, 1, cs.compute,
					      CUBLAS_GEMM_DEFAULT));
	}
	CU(cudaMemcpy(hC.data(), C, hC.size(), cudaMemcpyDeviceToHost));
	double worst = 0;
	for (size_t i = 0; i < want.size(); i++) {
		double im = 0, re = get(hC.data(), cs.c, i, &im);
		worst = std::max(worst, std::abs(std::complex<double>(re, im) - want[i]) / (1 + std::abs(want[i])));
	}
	if (worst > cs.tol) {
		printf("FAIL %s%s: relative error %g (tolerance %g)\n", hgemm ? "Hgemm " : "", cs.name, worst, cs.tol);
		failures++;
	} else {
		printf("%s%s: ok (error %.2g)\n", hgemm ? "Hgemm " : "", cs.name, worst);
	}
	cudaFree(A), cudaFree(B), cudaFree(C);
}

int main()
{
	cublasHandle_t h;
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
		return 1;
	const Case cases[] = {
		{ "F16 in, F16 out, 16F compute", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F, 1e-2 },
		{ "F16 in, F16 out, 32F compute", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 5e-3 },
		{ "F16 in, F32 out, 32F compute", CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1e-5 },
		{ "BF16 in, BF16 out, 32F compute", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2e-2 },
		{ "BF16 in, F32 out, 32F compute", CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1e-5 },
		{ "F32, TF32 fast compute", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 2e-2 },
		{ "F32, 32F compute", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 1e-5 },
		{ "F64, 64F compute", CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 1e-12 },
		{ "C32F, 32F compute", CUDA_C_32F, CUDA_C_32F, CUBLAS_COMPUTE_32F, 1e-5 },
	};
	gemm_case(h, cases[0], true);
	for (const Case &c : cases)
		gemm_case(h, c, false);
	cublasDestroy(h);
	if (failures) {
		printf("blas_ex: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_ex: ok\n");
	return 0;
}
