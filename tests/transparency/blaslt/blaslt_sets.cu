// SPDX-License-Identifier: MIT
// Two cuBLASLt matmuls whose read/write sets test_transparency_blaslt.py
// checks in the executor's trace, to the byte. Prints the pointers as JSON.
//   1. FP32 column order, beta 0 (C not read), bias epilogue, a workspace
//   2. FP32 row order, 2 strided batches, C == D, alpha and beta in device memory
// With the argument "transc", a matmul with CUBLASLT_MATMUL_DESC_TRANSC set
// instead: it prints the status cublasLtMatmul gave.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x) do { if ((x) != 0) { printf("%s:%d %s failed\n", __FILE__, __LINE__, #x); exit(1); } } while (0)

// 2. row order, 2 strided batches, C == D, alpha and beta in device memory
static void matmul2(cublasLtHandle_t lt, float *a2, float *b2, float *cd2, float *s2)
{
	cublasLtMatmulDesc_t op2;
	cublasLtMatrixLayout_t la2, lb2, lcd2;
	cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
	CK(cublasLtMatmulDescCreate(&op2, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CK(cublasLtMatmulDescSetAttribute(op2, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
	CK(cublasLtMatrixLayoutCreate(&la2, CUDA_R_32F, 4, 3, 5));
	CK(cublasLtMatrixLayoutCreate(&lb2, CUDA_R_32F, 3, 2, 2));
	CK(cublasLtMatrixLayoutCreate(&lcd2, CUDA_R_32F, 4, 2, 2));
	cublasLtOrder_t row = CUBLASLT_ORDER_ROW;
	int32_t batch = 2;
	const int64_t strides[3] = { 30, 6, 8 };
	cublasLtMatrixLayout_t ls[3] = { la2, lb2, lcd2 };
	for (int i = 0; i < 3; i++) {
		CK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row)));
		CK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
		CK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
						    sizeof(strides[i])));
	}
	CK(cublasLtMatmul(lt, op2, s2, a2, la2, b2, lb2, s2 + 2, cd2, lcd2, cd2, lcd2, nullptr, nullptr, 0, 0));
	CK(cublasLtMatrixLayoutDestroy(la2));
	CK(cublasLtMatrixLayoutDestroy(lb2));
	CK(cublasLtMatrixLayoutDestroy(lcd2));
	CK(cublasLtMatmulDescDestroy(op2));
}

int main(int argc, char **argv)
{
	cublasLtHandle_t lt;
	float *a, *b, *c, *d, *bias, *ws, *a2, *b2, *cd2, *s2;
	CK(cublasLtCreate(&lt));
	CK(cudaMalloc(&a, 4096));
	CK(cudaMalloc(&b, 4096));
	CK(cudaMalloc(&c, 4096));
	CK(cudaMalloc(&d, 4096));
	CK(cudaMalloc(&bias, 4096));
	CK(cudaMalloc(&ws, 1 << 20));
	CK(cudaMalloc(&a2, 4096));
	CK(cudaMalloc(&b2, 4096));
	CK(cudaMalloc(&cd2, 4096));
	CK(cudaMalloc(&s2, 4096));
	CK(cudaMemset(a, 0, 4096));
	CK(cudaMemset(b, 0, 4096));
	CK(cudaMemset(bias, 0, 4096));
	CK(cudaMemset(a2, 0, 4096));
	CK(cudaMemset(b2, 0, 4096));
	CK(cudaMemset(cd2, 0, 4096));
	const float scal[3] = { 1.0f, 0.0f, 1.0f };   // alpha at s2, beta at s2 + 2
	CK(cudaMemcpy(s2, scal, sizeof(scal), cudaMemcpyHostToDevice));

	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc, ld;
	CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
	const void *bp = bias;
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
	CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 6, 10));
	CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 6, 5, 6));
	CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 8, 5, 9));
	CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 5, 9));
	float alpha = 1, beta = 0;
	if (argc > 1 && !strcmp(argv[1], "transc")) {
		cublasOperation_t t = CUBLAS_OP_T;
		CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSC, &t, sizeof(t)));
		cublasStatus_t s = cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, d, ld, nullptr, ws,
						  1 << 20, 0);
		printf("transc: %s\n", cublasLtGetStatusName(s));
	} else {
		CK(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, d, ld, nullptr, ws, 1 << 20, 0));
		matmul2(lt, a2, b2, cd2, s2);
		CK(cudaDeviceSynchronize());
		printf("{\"a\": %llu, \"b\": %llu, \"c\": %llu, \"d\": %llu, \"bias\": %llu, \"ws\": %llu, "
		       "\"a2\": %llu, \"b2\": %llu, \"cd2\": %llu, \"s2\": %llu}\n",
		       (unsigned long long)a, (unsigned long long)b, (unsigned long long)c, (unsigned long long)d,
		       (unsigned long long)bias, (unsigned long long)ws, (unsigned long long)a2, (unsigned long long)b2,
		       (unsigned long long)cd2, (unsigned long long)s2);
	}
	cublasLtMatrixLayout_t all[4] = { la, lb, lc, ld };
	for (int i = 0; i < 4; i++)
		CK(cublasLtMatrixLayoutDestroy(all[i]));
	CK(cublasLtMatmulDescDestroy(op));
	float *bufs[10] = { a, b, c, d, bias, ws, a2, b2, cd2, s2 };
	for (int i = 0; i < 10; i++)
		CK(cudaFree(bufs[i]));
	CK(cublasLtDestroy(lt));
	return 0;
}
