// SPDX-License-Identifier: MIT
//
// Driver-API kernels in a runtime-API graph, as torch.compile's
// "reduce-overhead" mode does it: Triton loads its kernels with
// cuModuleLoadData and launches them with cuLaunchKernel, while PyTorch
// captures the stream with cudaStreamBeginCapture and replays the graph. Here
// kernels.cu's drv_saxpy (from the embedded fatbin) is launched twice into a
// capture (once with kernelParams, once with extra's packed buffer) between
// a runtime copy, the graph is launched three times on another stream with
// new inputs, and each result is checked against a CPU reference.
//
// Prints "driver_graph: ok" and exits 0 when every check passed.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_embedded.h"

#define CU(call)                                                                           \
	do {                                                                               \
		CUresult cu_r_ = (call);                                                   \
		if (cu_r_ != CUDA_SUCCESS) {                                               \
			fprintf(stderr, "driver_graph: %s:%d: %s: %d\n", __FILE__, __LINE__, #call, (int)cu_r_); \
			exit(1);                                                           \
		}                                                                          \
	} while (0)
#define CK(call)                                                                           \
	do {                                                                               \
		cudaError_t ck_r_ = (call);                                                \
		if (ck_r_ != cudaSuccess) {                                                \
			fprintf(stderr, "driver_graph: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				cudaGetErrorString(ck_r_));                                \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

enum { N = 1000 };

int main(void)
{
	CUmodule mod;
	CUfunction f;
	cudaStream_t cap, launch;
	cudaGraph_t g;
	cudaGraphExec_t x;
	float *dx, *dy, *dz, hx[N], hy[N], got[N];
	float a = 1.5f, b = -2.0f;
	int n = N, failures = 0;

	CK(cudaFree(0));   // the runtime's context, which the driver API then shares
	CU(cuModuleLoadData(&mod, kernels_fatbin));
	CU(cuModuleGetFunction(&f, mod, "_Z9drv_saxpyfPKfPfi"));
	CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&launch, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&dx, sizeof(hx)));
	CK(cudaMalloc((void **)&dy, sizeof(hy)));
	CK(cudaMalloc((void **)&dz, sizeof(hy)));

	// y += a x (kernelParams); z = y (copy); z += b x (extra)
	struct { float a; float *x, *y; int n; } packed;
	size_t packed_size = offsetof(decltype(packed), n) + sizeof(int);   // the parameters' 28 bytes, not 32
	void *args[] = { &a, &dx, &dy, &n };
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
			  CU_LAUNCH_PARAM_END };
	packed.a = b;
	packed.x = dx;
	packed.y = dz;
	packed.n = n;
	CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
	CU(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, (CUstream)cap, args, NULL));
	CK(cudaMemcpyAsync(dz, dy, sizeof(hy), cudaMemcpyDeviceToDevice, cap));
	CU(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, (CUstream)cap, NULL, extra));
	CK(cudaStreamEndCapture(cap, &g));
	CK(cudaGraphInstantiate(&x, g, 0));

	for (int it = 0; it < 3; it++) {
		for (int i = 0; i < N; i++) {
			hx[i] = (float)((i * 7 + it) % 13) - 6.0f;
			hy[i] = (float)(i % 5) + it;
		}
		CK(cudaMemcpy(dx, hx, sizeof(hx), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dy, hy, sizeof(hy), cudaMemcpyHostToDevice));
		CK(cudaGraphLaunch(x, launch));
		CK(cudaStreamSynchronize(launch));
		CK(cudaMemcpy(got, dz, sizeof(got), cudaMemcpyDeviceToHost));
		for (int i = 0; i < N; i++) {
			float want = (a * hx[i] + hy[i]) + b * hx[i];

			if (got[i] != want) {
				fprintf(stderr, "driver_graph: launch %d: z[%d] = %g, want %g\n", it, i, got[i], want);
				failures++;
				break;
			}
		}
	}
	CK(cudaGraphExecDestroy(x));
	CK(cudaGraphDestroy(g));
	CU(cuModuleUnload(mod));
	if (failures)
		return 1;
	printf("driver_graph: ok\n");
	return 0;
}
