// SPDX-License-Identifier: MIT
// The few helpers of CUB's test/test_util.h that its examples use, written
// for phos-fn (the Debian package ships the examples without them): command
// line flags, device selection, result checks, random keys, a GPU timer, and
// SafeBitCast and MaxSmOccupancy, which CUB no longer offers.
// Semantics follow CUB's: CompareDeviceResults returns 0 when equal, and
// AssertEquals ends the program with status 1 on a mismatch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include <cub/util_debug.cuh>

#ifndef CubDebugExit
#define CubDebugExit(e)                                                                          \
	do {                                                                                     \
		cudaError_t e_ = (e);                                                            \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "%s:%d: CUDA error %d: %s\n", __FILE__, __LINE__, (int)e_, \
				cudaGetErrorString(e_));                                         \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)
#endif

#define AssertEquals(a, b)                                                                       \
	do {                                                                                     \
		if ((a) != (b)) {                                                                \
			std::cerr << "\n" << __FILE__ << ": " << __LINE__ << ": " #a " != " #b "\n"; \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

// cub::SafeBitCast of CUB 1.x, gone from the toolkit's CUB (CCCL 3).
template <typename To, typename From> To SafeBitCast(const From &in)
{
	static_assert(sizeof(To) == sizeof(From), "SafeBitCast: sizes differ");
	To out;

	memcpy(&out, &in, sizeof(To));
	return out;
}

// cub::MaxSmOccupancy of CUB 1.x (now internal to CUB): the occupancy API.
template <typename KernelPtr>
cudaError_t MaxSmOccupancy(int &sm_occupancy, KernelPtr kernel, int block_threads, int dynamic_smem_bytes = 0)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&sm_occupancy, kernel, block_threads, dynamic_smem_bytes);
}

struct CommandLineArgs {
	int argc;
	char **argv;

	CommandLineArgs(int c, char **v) : argc(c), argv(v) {}

	// The value of --name=value, or NULL; "" for a bare --name.
	const char *find(const char *name) const
	{
		size_t n = strlen(name);

		for (int i = 1; i < argc; i++) {
			const char *a = argv[i];

			if (a[0] != '-' || a[1] != '-' || strncmp(a + 2, name, n))
				continue;
			if (a[2 + n] == '\0')
				return "";
			if (a[2 + n] == '=')
				return a + 3 + n;
		}
		return NULL;
	}

	bool CheckCmdLineFlag(const char *name) const { return find(name) != NULL; }

	template <typename T> void GetCmdLineArgument(const char *name, T &val) const
	{
		const char *v = find(name);

		if (v && *v) {
			std::istringstream in(v);
			in >> val;
		}
	}

	cudaError_t DeviceInit(int dev = -1)
	{
		int count = 0;
		cudaDeviceProp prop;
		cudaError_t e = cudaGetDeviceCount(&count);

		if (e != cudaSuccess)
			return e;
		if (count == 0)
			return cudaErrorNoDevice;
		if (dev < 0)
			GetCmdLineArgument("device", dev);
		if (dev < 0 || dev >= count)
			dev = 0;
		if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
			return e;
		printf("Using device %d: %s (SM%d, %d SMs)\n", dev, prop.name, prop.major * 10 + prop.minor,
		       prop.multiProcessorCount);
		fflush(stdout);
		return cudaSuccess;
	}
};

template <typename T> void DisplayResults(const T *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		std::cout << (i ? ", " : "") << +h[i];
	std::cout << "\n";
}

// 0 when the n items at d_data equal h_reference, 1 otherwise.
template <typename S, typename T, typename OffsetT>
int CompareDeviceResults(const S *h_reference, const T *d_data, OffsetT n, bool verbose = true, bool display = false)
{
	T *h = (T *)malloc(sizeof(T) * (size_t)n);
	int differ = 0;

	if (!h || cudaMemcpy(h, d_data, sizeof(T) * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess) {
		free(h);
		return 1;
	}
	for (size_t i = 0; i < (size_t)n; i++) {
		if (!(h[i] == (T)h_reference[i])) {
			if (verbose)
				std::cout << "INCORRECT: [" << i << "]: " << +h[i] << " != " << +h_reference[i] << "\n";
			differ = 1;
			break;
		}
	}
	if (display) {
		std::cout << "\n\nDevice results:\n";
		DisplayResults(h, (size_t)n);
	}
	free(h);
	return differ;
}

// Random bits for a key of type K (a fixed-seed generator: runs repeat); never
// a NaN, as CUB's own helper, so that float keys have an order.
template <typename K> void RandomBits(K &key, int entropy_reduction = 0, int begin_bit = 0, int end_bit = sizeof(K) * 8)
{
	static unsigned long long state = 0x9e3779b97f4a7c15ull;
	unsigned char bytes[sizeof(K)];

	(void)entropy_reduction;
	(void)begin_bit;
	(void)end_bit;
	do {
		for (size_t i = 0; i < sizeof(K); i++) {
			state = state * 6364136223846793005ull + 1442695040888963407ull;
			bytes[i] = (unsigned char)(state >> 56);
		}
		memcpy(&key, bytes, sizeof(K));
	} while (!(key == key));
}

struct GpuTimer {
	cudaEvent_t start, stop;

	GpuTimer()
	{
		cudaEventCreate(&start);
		cudaEventCreate(&stop);
	}
	~GpuTimer()
	{
		cudaEventDestroy(start);
		cudaEventDestroy(stop);
	}
	void Start() { cudaEventRecord(start, 0); }
	void Stop() { cudaEventRecord(stop, 0); }
	float ElapsedMillis()
	{
		float ms = 0;

		cudaEventSynchronize(stop);
		cudaEventElapsedTime(&ms, start, stop);
		return ms;
	}
};
