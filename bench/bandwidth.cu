// Host<->device copy bandwidth, the physical limit that bench/snapshot.py
// compares snapshot and restore against (docs/design.md, "Benchmarks"):
//   h2d_pinned_gbs    cudaMemcpyAsync from cudaMallocHost memory to the device
//   d2h_pinned_gbs    the same, device to pinned host memory
//   h2d_pageable_gbs  cudaMemcpyAsync from malloc'd (touched) memory
// Each is the best of --reps timed copies of --mib MiB after one warm-up copy,
// timed by events on one stream; GB/s are decimal (1e9 bytes/s).
// Prints one JSON line.
//
// usage: bandwidth [--mib N (default 1024)] [--reps N (default 5)]
//        bandwidth --hold   keep a context (the GPU initialised) until stdin closes
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

// Best (shortest) time in seconds of reps copies of bytes, after one warm-up.
static double best_copy_s(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int reps,
			  cudaStream_t s)
{
	cudaEvent_t a, b;
	double best = 1e30;

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
	CK(cudaStreamSynchronize(s));
	for (int i = 0; i < reps; i++) {
		float ms;

		CK(cudaEventRecord(a, s));
		CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
		CK(cudaEventRecord(b, s));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		if (ms / 1e3 < best)
			best = ms / 1e3;
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return best;
}

static int hold(void)
{
	char buf[256];

	CK(cudaFree(0));
	printf("{\"holding\":true}\n");
	fflush(stdout);
	while (read(0, buf, sizeof buf) > 0)
		;
	return 0;
}

int main(int argc, char **argv)
{
	size_t mib = 1024;
	int reps = 5;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--hold") == 0)
			return hold();
		else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--mib N] [--reps N] | --hold\n", argv[0]);
			return 2;
		}
	}
	if (mib == 0 || mib > (64u << 10) || reps < 1 || reps > 1000) {
		fprintf(stderr, "bandwidth: --mib must be 1..65536 and --reps 1..1000\n");
		return 2;
	}

	size_t bytes = mib << 20;
	void *dev, *pinned, *pageable;
	cudaStream_t s;
	cudaDeviceProp prop;

	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&dev, bytes));
	CK(cudaMallocHost(&pinned, bytes));
	pageable = malloc(bytes);
	if (!pageable) {
		fprintf(stderr, "bandwidth: cannot allocate %zu MiB of pageable memory\n", mib);
		return 1;
	}
	memset(pinned, 0x5a, bytes);
	memset(pageable, 0x5a, bytes);  // touch every page: no first-touch faults in the timing

	double h2d = best_copy_s(dev, pinned, bytes, cudaMemcpyHostToDevice, reps, s);
	double d2h = best_copy_s(pinned, dev, bytes, cudaMemcpyDeviceToHost, reps, s);
	double h2d_pageable = best_copy_s(dev, pageable, bytes, cudaMemcpyHostToDevice, reps, s);

	printf("{\"device\":\"%s\",\"bytes\":%zu,\"reps\":%d,\"h2d_pinned_gbs\":%.3f,\"d2h_pinned_gbs\":%.3f,"
	       "\"h2d_pageable_gbs\":%.3f}\n",
	       prop.name, bytes, reps, bytes / h2d / 1e9, bytes / d2h / 1e9, bytes / h2d_pageable / 1e9);
	free(pageable);
	CK(cudaFreeHost(pinned));
	CK(cudaFree(dev));
	CK(cudaStreamDestroy(s));
	return 0;
}
