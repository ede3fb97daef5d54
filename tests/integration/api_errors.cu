// Error paths that must give a clean CUDA error and leave the process working:
// an API we do not forward, a malformed fatbin, calls on a freed buffer, bad
// handles. Prints one line per check; exits non-zero on the first wrong answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

extern "C" void **__cudaRegisterFatBinary(void *fatCubin);
extern "C" void __cudaRegisterFatBinaryEnd(void **handle);
extern "C" void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
				       const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
				       dim3 *bDim, dim3 *gDim, int *wSize);

__global__ void touch(float *x, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = 1.0f;
}

static int failures;
static void expect(const char *what, cudaError_t got, cudaError_t want)
{
	printf("%-40s %s (%d)\n", what, cudaGetErrorName(got), (int)got);
	if (got != want) {
		printf("  expected %s (%d)\n", cudaGetErrorName(want), (int)want);
		failures++;
	}
}

static void expect_fail(const char *what, cudaError_t got)
{
	printf("%-40s %s (%d)\n", what, cudaGetErrorName(got), (int)got);
	if (got == cudaSuccess) {
		printf("  expected an error\n");
		failures++;
	}
}

static void fake_host_stub(void) {}

int main()
{
	float *p, *q;
	cudaGraph_t g;
	cudaStream_t s;

	/* 1. An API we do not forward: a clean error, then everything still works. */
	expect("cudaGraphCreate", cudaGraphCreate(&g, 0), cudaSuccess);
	cudaGraphNode_t sem;
	struct cudaExternalSemaphoreSignalNodeParams semp;
	memset(&semp, 0, sizeof(semp));
	expect("cudaGraphAddExternalSemaphoresSignalNode (not forwarded)",
	       cudaGraphAddExternalSemaphoresSignalNode(&sem, g, NULL, 0, &semp), cudaErrorNotSupported);
	expect("cudaGraphDestroy", cudaGraphDestroy(g), cudaSuccess);
	expect("cudaGetLastError after it", cudaGetLastError(), cudaErrorNotSupported);
	expect("cudaGetLastError cleared", cudaGetLastError(), cudaSuccess);
	expect("cudaMalloc still works", cudaMalloc(&q, 4096), cudaSuccess);

	/* 2. A malformed fatbin: registration survives, its kernel cannot launch. */
	static unsigned long long garbage[64];
	memset(garbage, 0xAB, sizeof(garbage));
	static struct { int magic; int version; const unsigned long long *data; void *f; } wrapper = {
		0x466243b1, 1, garbage, NULL };
	void **mod = __cudaRegisterFatBinary(&wrapper);
	if (!mod) {
		printf("__cudaRegisterFatBinary returned NULL\n");
		return 1;
	}
	__cudaRegisterFunction(mod, (const char *)fake_host_stub, (char *)"_Z4fakePf", "_Z4fakePf", -1,
			       NULL, NULL, NULL, NULL, NULL);
	__cudaRegisterFatBinaryEnd(mod);
	void *args[1] = { &q };
	expect_fail("launch from a malformed fatbin", cudaLaunchKernel((const void *)fake_host_stub, dim3(1),
								      dim3(1), args, 0, 0));
	cudaGetLastError();
	expect("device still usable", cudaDeviceSynchronize(), cudaSuccess);

	/* 3. Calls on a freed buffer. It is big enough to have its own 2 MiB chunk: a
	 * pointer just past the end of a live buffer is a valid bound that kernels
	 * get without dereferencing it, and is not refused. */
	expect("cudaMalloc", cudaMalloc(&p, 4 << 20), cudaSuccess);
	expect("cudaFree", cudaFree(p), cudaSuccess);
	float host[16] = { 0 };
	expect("cudaMemcpy H2D into freed buffer", cudaMemcpy(p, host, sizeof(host), cudaMemcpyHostToDevice),
	       cudaErrorInvalidValue);
	expect("cudaMemcpy D2H from freed buffer", cudaMemcpy(host, p, sizeof(host), cudaMemcpyDeviceToHost),
	       cudaErrorInvalidValue);
	expect("cudaFree twice", cudaFree(p), cudaErrorInvalidValue);
	cudaGetLastError();
	touch<<<1, 32>>>(p, 16);
	expect_fail("launch on freed buffer, at sync", cudaDeviceSynchronize());
	cudaGetLastError();
	touch<<<1, 32>>>(q, 16);
	expect("a good launch afterwards", cudaDeviceSynchronize(), cudaSuccess);

	/* 4. Bad handles and arguments. */
	expect("cudaStreamSynchronize(garbage)", cudaStreamSynchronize((cudaStream_t)0x5555), cudaErrorInvalidResourceHandle);
	cudaGetLastError();
	expect("cudaStreamCreate", cudaStreamCreate(&s), cudaSuccess);
	expect("cudaStreamDestroy", cudaStreamDestroy(s), cudaSuccess);
	expect("cudaMemcpy null dst", cudaMemcpy(NULL, host, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	cudaGetLastError();
	expect("cudaMalloc of 1 PiB", cudaMalloc(&p, 1ull << 50), cudaErrorMemoryAllocation);
	cudaGetLastError();
	expect("cudaFree", cudaFree(q), cudaSuccess);
	expect("final sync", cudaDeviceSynchronize(), cudaSuccess);

	if (failures) {
		printf("%d check(s) failed\n", failures);
		return 1;
	}
	printf("all error paths clean\n");
	return 0;
}
