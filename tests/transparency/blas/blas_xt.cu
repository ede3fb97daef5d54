// SPDX-License-Identifier: MIT
// cublasXt, as a program that wants multi-GPU BLAS on host memory calls it.
// Natively it must compute a right answer ("xt: ok"); under phos-fn, which
// does not forward cublasXt, every call must be refused with
// CUBLAS_STATUS_NOT_SUPPORTED ("xt: refused"), never answer wrongly.
// Exits 1 on a wrong answer or an unexpected status.
#include <cstdio>
#include <vector>

#include <cublasXt.h>

int main()
{
	cublasXtHandle_t h = nullptr;
	cublasStatus_t s = cublasXtCreate(&h);
	if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
		int dev[1] = { 0 };
		float one = 1;
		// every other entry point is refused the same way
		if (cublasXtDeviceSelect(h, 1, dev) != CUBLAS_STATUS_NOT_SUPPORTED ||
		    cublasXtSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &one, 1, &one, 1, &one, &one, 1) !=
			    CUBLAS_STATUS_NOT_SUPPORTED) {
			printf("FAIL: cublasXt refused only in part\n");
			return 1;
		}
		printf("xt: refused\n");
		return 0;
	}
	if (s != CUBLAS_STATUS_SUCCESS) {
		printf("FAIL: cublasXtCreate -> %d\n", (int)s);
		return 1;
	}
	int dev[1] = { 0 };
	const int n = 64;
	std::vector<float> a(n * n, 1.0f), b(n * n, 2.0f), c(n * n, 0.0f);
	float alpha = 1, beta = 0;
	if (cublasXtDeviceSelect(h, 1, dev) != CUBLAS_STATUS_SUCCESS ||
	    cublasXtSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), n, b.data(), n, &beta, c.data(), n) !=
		    CUBLAS_STATUS_SUCCESS) {
		printf("FAIL: cublasXt call failed\n");
		return 1;
	}
	for (float v : c)
		if (v != 2.0f * n) {
			printf("FAIL: cublasXtSgemm gave %g, want %g\n", v, 2.0f * n);
			return 1;
		}
	cublasXtDestroy(h);
	printf("xt: ok\n");
	return 0;
}
