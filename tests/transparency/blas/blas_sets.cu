// SPDX-License-Identifier: MIT
// A few cuBLAS calls whose read/write sets the integration test checks in the
// executor's trace (test_transparency_blas.py): one call per routine, each on
// its own buffers, whose addresses are printed as one JSON line at the end.
#include <cstdio>

#include <cublas_v2.h>
#include <cuda_runtime.h>

static void *dev(size_t bytes)
{
	void *p = nullptr;
	if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
		printf("FAIL: cudaMalloc(%zu)\n", bytes);
		exit(1);
	}
	return p;
}

#define CK(call)                                                     \
	do {                                                         \
		if ((call) != CUBLAS_STATUS_SUCCESS) {               \
			printf("FAIL: %s\n", #call);                 \
			return 1;                                    \
		}                                                    \
	} while (0)

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	float hv[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
	float *sv = (float *)dev(4096);
	// 10 floats, device increment 2: (9 * 2 + 1) * 4 = 76 bytes written
	CK(cublasSetVector(10, sizeof(float), hv, 1, sv, 2));
	// 3 x 4 floats, ldb 5: (3 * 5 + 3) * 4 = 72 bytes read
	float hm[12];
	CK(cublasGetMatrix(3, 4, sizeof(float), sv, 5, hm, 3));

	// daxpy n 8, incx 2, incy 3: x (7 * 2 + 1) * 8 = 120 read, y (7 * 3 + 1) * 8 = 176 read and written
	double *dx = (double *)dev(4096), *dy = (double *)dev(4096), two = 2;
	CK(cublasDaxpy(h, 8, &two, dx, 2, dy, 3));
	// zdotc n 5: 80 bytes of each read, host result
	cuDoubleComplex *zx = (cuDoubleComplex *)dev(4096), *zy = (cuDoubleComplex *)dev(4096), zr;
	CK(cublasZdotc(h, 5, zx, 1, zy, 1, &zr));
	// cgemv T, m 6 n 4, lda 7: A (3 * 7 + 6) * 8 = 216 read, x 6 * 8 = 48 read, y 4 * 8 = 32 written only (beta 0)
	cuComplex *ca = (cuComplex *)dev(4096), *cx = (cuComplex *)dev(4096), *cy = (cuComplex *)dev(4096);
	cuComplex one = make_cuComplex(1, 0), zero = make_cuComplex(0, 0);
	CK(cublasCgemv(h, CUBLAS_OP_T, 6, 4, &one, ca, 7, cx, 1, &zero, cy, 1));
	// strsm left, m 5 n 3, lda 6 ldb 8: A (4 * 6 + 5) * 4 = 116 read, B (2 * 8 + 5) * 4 = 84 read and written
	float *ta = (float *)dev(4096), *tb = (float *)dev(4096), onef = 1;
	for (int i = 0; i < 5; i++)
		CK(cublasSetVector(1, sizeof(float), &onef, 1, ta + i * 7, 1));   // unit diagonal
	CK(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 5, 3, &onef, ta, 6,
		       tb, 8));
	// device pointer mode: snrm2 of 16 floats into a device result (4 bytes written),
	// dgemm 4x4x4 with alpha, beta read from device memory (8 bytes each)
	float *nx = (float *)dev(4096), *nr = (float *)dev(256);
	double *ga = (double *)dev(4096), *gs = (double *)dev(256), s2[2] = { 1, 0.5 };
	cudaMemcpy(gs, s2, sizeof(s2), cudaMemcpyHostToDevice);
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
	CK(cublasSnrm2(h, 16, nx, 1, nr));
	CK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, gs, ga, 4, ga + 16, 4, gs + 1, ga + 32, 4));
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
	// sgetrfBatched of 2 matrices 3 x 3, lda 4, named by a device array: the
	// array (16 bytes) read, each matrix (2 * 4 + 3) * 4 = 44 bytes read and
	// written, pivots 3 * 2 * 4 = 24 and info 2 * 4 = 8 bytes written
	float *lm = (float *)dev(4096), **la = (float **)dev(256);
	int *lp = (int *)dev(256), *li = (int *)dev(256);
	float *lptr[2] = { lm, lm + 256 };
	float eye[12] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0 };
	cudaMemcpy(la, lptr, sizeof(lptr), cudaMemcpyHostToDevice);
	cudaMemcpy(lm, eye, sizeof(eye), cudaMemcpyHostToDevice);
	cudaMemcpy(lm + 256, eye, sizeof(eye), cudaMemcpyHostToDevice);
	CK(cublasSgetrfBatched(h, 3, la, 4, lp, li, 2));
	// strsmBatched left of 2 pairs, m 3 n 2, lda 4 ldb 5, named by two device
	// arrays (16 bytes each read): each A (2 * 4 + 3) * 4 = 44 bytes read, each
	// B (1 * 5 + 3) * 4 = 32 bytes read and written
	float *tbm = (float *)dev(4096), **tba = (float **)dev(256), **tbb = (float **)dev(256), half = 0.5f;
	float *tbap[2] = { tbm, tbm + 256 }, *tbbp[2] = { tbm + 512, tbm + 768 };
	cudaMemcpy(tba, tbap, sizeof(tbap), cudaMemcpyHostToDevice);
	cudaMemcpy(tbb, tbbp, sizeof(tbbp), cudaMemcpyHostToDevice);
	cudaMemcpy(tbm, eye, sizeof(eye), cudaMemcpyHostToDevice);
	cudaMemcpy(tbm + 256, eye, sizeof(eye), cudaMemcpyHostToDevice);
	CK(cublasStrsmBatched(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, 3, 2, &half,
			      (const float *const *)tba, 4, tbb, 5, 2));
	// dgeqrfBatched of 2 matrices 4 x 3, lda 5, and their tau vectors, named by
	// two device arrays (16 bytes each read): each A (2 * 5 + 4) * 8 = 112
	// bytes read and written, each tau 3 * 8 = 24 bytes written
	double *qm = (double *)dev(4096), **qa = (double **)dev(256), **qt = (double **)dev(256);
	double *qap[2] = { qm, qm + 128 }, *qtp[2] = { qm + 256, qm + 384 };
	double qone[3] = { 1, 2, 3 };
	int qinfo = 99;
	cudaMemcpy(qa, qap, sizeof(qap), cudaMemcpyHostToDevice);
	cudaMemcpy(qt, qtp, sizeof(qtp), cudaMemcpyHostToDevice);
	cudaMemcpy(qm, qone, sizeof(qone), cudaMemcpyHostToDevice);
	CK(cublasDgeqrfBatched(h, 4, 3, qa, 5, qt, &qinfo, 2));
	if (qinfo != 0)
		return 1;
	// sgelsBatched of 2 systems, A 4 x 3 (lda 5) and C 4 x 2 (ldc 6), named by
	// two device arrays (16 bytes each read): each A (2 * 5 + 4) * 4 = 56 and
	// each C (1 * 6 + 4) * 4 = 40 bytes read and written, devInfo 2 * 4 = 8
	// bytes written
	float *lsm = (float *)dev(4096), **lsa = (float **)dev(256), **lsc = (float **)dev(256);
	int *lsi = (int *)dev(256);
	float *lsap[2] = { lsm, lsm + 256 }, *lscp[2] = { lsm + 512, lsm + 768 };
	float ls3[15] = { 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0 };   // the first 3 columns of I, lda 5
	int lsinfo = 99;
	cudaMemcpy(lsa, lsap, sizeof(lsap), cudaMemcpyHostToDevice);
	cudaMemcpy(lsc, lscp, sizeof(lscp), cudaMemcpyHostToDevice);
	cudaMemcpy(lsm, ls3, sizeof(ls3), cudaMemcpyHostToDevice);
	cudaMemcpy(lsm + 256, ls3, sizeof(ls3), cudaMemcpyHostToDevice);
	CK(cublasSgelsBatched(h, CUBLAS_OP_N, 4, 3, 2, lsa, 5, lsc, 6, &lsinfo, lsi, 2));
	if (lsinfo != 0)
		return 1;
	if (cudaDeviceSynchronize() != cudaSuccess)
		return 1;
	cublasDestroy(h);
	printf("{\"sv\":%llu,\"dx\":%llu,\"dy\":%llu,\"zx\":%llu,\"zy\":%llu,\"ca\":%llu,\"cx\":%llu,\"cy\":%llu,"
	       "\"ta\":%llu,\"tb\":%llu,\"nx\":%llu,\"nr\":%llu,\"ga\":%llu,\"gs\":%llu,"
	       "\"lm\":%llu,\"la\":%llu,\"lp\":%llu,\"li\":%llu,\"tbm\":%llu,\"tba\":%llu,\"tbb\":%llu,"
	       "\"qm\":%llu,\"qa\":%llu,\"qt\":%llu,\"lsm\":%llu,\"lsa\":%llu,\"lsc\":%llu,\"lsi\":%llu}\n",
	       (unsigned long long)sv, (unsigned long long)dx, (unsigned long long)dy, (unsigned long long)zx,
	       (unsigned long long)zy, (unsigned long long)ca, (unsigned long long)cx, (unsigned long long)cy,
	       (unsigned long long)ta, (unsigned long long)tb, (unsigned long long)nx, (unsigned long long)nr,
	       (unsigned long long)ga, (unsigned long long)gs, (unsigned long long)lm, (unsigned long long)la,
	       (unsigned long long)lp, (unsigned long long)li, (unsigned long long)tbm, (unsigned long long)tba,
	       (unsigned long long)tbb, (unsigned long long)qm, (unsigned long long)qa, (unsigned long long)qt,
	       (unsigned long long)lsm, (unsigned long long)lsa, (unsigned long long)lsc, (unsigned long long)lsi);
	return 0;
}
