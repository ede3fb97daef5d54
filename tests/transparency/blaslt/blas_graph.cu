// SPDX-License-Identifier: MIT
// cuBLAS and cuBLASLt captured into a CUDA graph, as PyTorch's CUDA graphs
// (torch.cuda.graph, torch.compile's "reduce-overhead") capture a model's
// GEMMs: the handle's stream set to the capturing stream, cublasSgemm and
// cublasLtMatmul captured with a memcpy between them, the graph launched on
// another stream with new inputs each time (each checked against a CPU
// reference); afterwards the same handle runs eagerly on other streams and
// still answers right.
//
//   blas_graph [strict]
//
// strict (under phos-fn): a cuBLAS call whose result the host reads now
// (cublasSdot in host pointer mode) on a capturing stream is refused and the
// capture invalidated (CUDA's behaviour there is not specified).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	printf("%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static int failures;

static void expect(bool ok, const char *what)
{
	if (!ok) {
		printf("FAIL %s\n", what);
		failures++;
	}
}

static const int M = 24, N = 16, K = 20;   // column-major: A M x K, B K x N, C M x N

// C = A * B (column-major), in double
static std::vector<double> ref_gemm(const std::vector<float> &a, const std::vector<float> &b, int m, int n, int k)
{
	std::vector<double> c(m * n, 0.0);
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++)
			for (int p = 0; p < k; p++)
				c[i + j * m] += (double)a[i + p * m] * b[p + j * k];
	return c;
}

static bool close(const std::vector<float> &got, const std::vector<double> &want, const char *what)
{
	for (size_t i = 0; i < want.size(); i++)
		if (fabs(got[i] - want[i]) > 1e-3 * (1 + fabs(want[i]))) {
			printf("%s: [%zu] = %g, want %g\n", what, i, got[i], want[i]);
			return false;
		}
	return true;
}

static void fill(std::vector<float> &v, unsigned seed)
{
	for (auto &x : v) {
		seed = seed * 1664525u + 1013904223u;
		x = ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
	}
}

int main(int argc, char **argv)
{
	const bool strict = argc > 1 && strcmp(argv[1], "strict") == 0;
	std::vector<float> a(M * K), b(K * N), b2(N * N), c(M * N), d(M * N);
	float *da, *db, *db2, *dc, *dc2, *dd;
	cudaStream_t cap, launch, other;
	cublasHandle_t h;
	cublasLtHandle_t lt;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t lc, lb2, ld;
	const float one = 1.0f, zero = 0.0f;

	CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&launch, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&da, a.size() * 4));
	CK(cudaMalloc((void **)&db, b.size() * 4));
	CK(cudaMalloc((void **)&db2, b2.size() * 4));
	CK(cudaMalloc((void **)&dc, c.size() * 4));
	CK(cudaMalloc((void **)&dc2, c.size() * 4));
	CK(cudaMalloc((void **)&dd, d.size() * 4));
	fill(b, 7);
	fill(b2, 11);
	CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(db2, b2.data(), b2.size() * 4, cudaMemcpyHostToDevice));
	BK(cublasCreate(&h));
	BK(cublasLtCreate(&lt));
	BK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	BK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
	BK(cublasLtMatrixLayoutCreate(&lb2, CUDA_R_32F, N, N, N));
	BK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M));

	// capture: C = A B (cuBLAS), C2 = C (copy), D = C2 B2 (cuBLASLt)
	cudaGraph_t g;
	cudaGraphExec_t x;
	BK(cublasSetStream(h, cap));
	CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
	BK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc, M));
	CK(cudaMemcpyAsync(dc2, dc, c.size() * 4, cudaMemcpyDeviceToDevice, cap));
	BK(cublasLtMatmul(lt, desc, &one, dc2, lc, db2, lb2, &zero, dd, ld, dd, ld, nullptr, nullptr, 0, cap));
	CK(cudaStreamEndCapture(cap, &g));
	CK(cudaGraphInstantiate(&x, g, 0));

	for (int it = 0; it < 3; it++) {
		fill(a, 100 + it);
		CK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
		CK(cudaGraphLaunch(x, launch));
		CK(cudaStreamSynchronize(launch));
		CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
		std::vector<double> wc = ref_gemm(a, b, M, N, K);
		std::vector<float> cf(wc.begin(), wc.end());
		std::vector<double> wd = ref_gemm(cf, b2, M, N, N);
		expect(close(c, wc, "captured cublasSgemm"), "the graph's cuBLAS GEMM");
		expect(close(d, wd, "captured cublasLtMatmul"), "the graph's cuBLASLt matmul");
	}

	// the handle, eagerly, on its own stream again and then on another one
	for (cudaStream_t s : { cap, other }) {
		BK(cublasSetStream(h, s));
		CK(cudaMemsetAsync(dc, 0, c.size() * 4, s));
		BK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc, M));
		CK(cudaStreamSynchronize(s));
		CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
		expect(close(c, ref_gemm(a, b, M, N, K), "eager cublasSgemm"), "the handle runs eagerly after the graph");
	}
	// a graph launch between eager calls on the handle's stream
	CK(cudaGraphLaunch(x, launch));
	BK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero, dc2, M));
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(c.data(), dc2, c.size() * 4, cudaMemcpyDeviceToHost));
	expect(close(c, ref_gemm(a, b, M, N, K), "eager cublasSgemm after a launch"), "eager after a launch");

	if (strict) {
		cudaGraph_t bad;
		float r = 0;

		BK(cublasSetStream(h, cap));
		CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
		expect(cublasSdot(h, 8, da, 1, db, 1, &r) != CUBLAS_STATUS_SUCCESS,
		       "a host-result cublasSdot on a capturing stream is refused");
		expect(cudaStreamEndCapture(cap, &bad) != cudaSuccess, "... and the capture invalidated");
		cudaGetLastError();
		BK(cublasSetStream(h, other));
	}

	CK(cudaGraphExecDestroy(x));
	CK(cudaGraphDestroy(g));
	cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatrixLayoutDestroy(lb2);
	cublasLtMatrixLayoutDestroy(ld);
	cublasLtMatmulDescDestroy(desc);
	cublasLtDestroy(lt);
	cublasDestroy(h);
	if (failures) {
		printf("blas_graph: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_graph: ok\n");
	return 0;
}
