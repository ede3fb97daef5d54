// SPDX-License-Identifier: MIT
// Extended and cooperative launches: cudaLaunchCooperativeKernel with a
// grid-wide sync, cudaLaunchKernelEx with attributes (cooperative, cluster
// dimensions, priority, programmatic stream serialization), the errors CUDA
// gives (an unknown attribute, a cooperative grid larger than the device
// holds at once), and the occupancy calculator (blocks and clusters). Results are checked against a
// CPU reference.
#include <cooperative_groups.h>
#include <vector>

#include "common.h"

namespace cg = cooperative_groups;

// partial[b] = sum of the x[i] that block b's threads visit (grid-stride);
// after the grid-wide sync, thread 0 of the grid writes the total
__global__ void coop_sum(const int *x, int *partial, int *out, int n)
{
	cg::grid_group grid = cg::this_grid();
	int stride = gridDim.x * blockDim.x;

	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		atomicAdd(&partial[blockIdx.x], x[i]);
	grid.sync();
	if (grid.thread_rank() == 0) {
		int t = 0;

		for (unsigned b = 0; b < gridDim.x; b++)
			t += partial[b];
		*out = t;
	}
}

// y[i] = 2 i + k
__global__ void coop_iota(int *y, int n, int k)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = 2 * i + k;
}

static const int N = 100000;

static void check_sum(const int *dpartial, const int *dout, int grid, int block, const std::vector<int> &x,
		      const char *what)
{
	std::vector<int> part(grid), want(grid, 0);
	int out = 0, total = 0;

	CK(cudaMemcpy(part.data(), dpartial, grid * sizeof(int), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(&out, dout, sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++) {
		want[(i / block) % grid] += x[i];
		total += x[i];
	}
	for (int b = 0; b < grid; b++)
		EXPECT(part[b] == want[b], "%s: partial[%d] = %d, want %d", what, b, part[b], want[b]);
	EXPECT(out == total, "%s: total %d, want %d", what, out, total);
}

static void check_iota(const int *dy, int n, int k, const char *what)
{
	std::vector<int> y(n);

	CK(cudaMemcpy(y.data(), dy, n * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		if (y[i] != 2 * i + k) {
			EXPECT(false, "%s: y[%d] = %d, want %d", what, i, y[i], 2 * i + k);
			return;
		}
}

int main()
{
	int dev = 0, sms = 0, coop = 0, per_sm = 0;
	int *dx, *dpartial, *dout, *dy;
	std::vector<int> x(N);
	int n = N;
	cudaStream_t s;

	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
	EXPECT(coop == 1, "cooperative launch not supported (%d)", coop);
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum, 256, 0));
	EXPECT(per_sm > 0, "%d blocks of 256 per SM", per_sm);
	int min_grid = 0, best = 0;
	CK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best, coop_iota, 0, 0));
	EXPECT(best > 0 && best <= 1024 && best % 32 == 0 && min_grid >= sms, "potential block size %d, grid %d",
	       best, min_grid);

	for (int i = 0; i < N; i++)
		x[i] = i % 1000 - 300;
	CK(cudaStreamCreate(&s));
	CK(cudaMalloc(&dx, N * sizeof(int)));
	CK(cudaMalloc(&dy, N * sizeof(int)));
	CK(cudaMalloc(&dout, sizeof(int)));
	int grid = sms * (per_sm < 2 ? per_sm : 2), block = 256;
	CK(cudaMalloc(&dpartial, grid * sizeof(int)));
	CK(cudaMemcpy(dx, x.data(), N * sizeof(int), cudaMemcpyHostToDevice));

	// cudaLaunchCooperativeKernel
	void *args[] = { &dx, &dpartial, &dout, &n };
	CK(cudaMemsetAsync(dpartial, 0, grid * sizeof(int), s));
	CK(cudaLaunchCooperativeKernel((void *)coop_sum, dim3(grid), dim3(block), args, 0, s));
	CK(cudaStreamSynchronize(s));
	check_sum(dpartial, dout, grid, block, x, "cudaLaunchCooperativeKernel");

	// too many blocks to be resident at once
	cudaError_t e = cudaLaunchCooperativeKernel((void *)coop_sum, dim3(sms * per_sm + 1), dim3(block), args, 0, s);
	EXPECT(e == cudaErrorCooperativeLaunchTooLarge, "oversized cooperative grid: %s", cudaGetErrorName(e));
	(void)cudaGetLastError();

	// cudaLaunchKernelEx, cooperative attribute plus hints
	cudaLaunchAttribute attrs[4];
	cudaLaunchConfig_t cfg = {};
	attrs[0].id = cudaLaunchAttributeCooperative;
	attrs[0].val.cooperative = 1;
	attrs[1].id = cudaLaunchAttributePriority;
	attrs[1].val.priority = 0;
	attrs[2].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attrs[2].val.programmaticStreamSerializationAllowed = 1;
	cfg.gridDim = dim3(grid);
	cfg.blockDim = dim3(block);
	cfg.stream = s;
	cfg.attrs = attrs;
	cfg.numAttrs = 3;
	CK(cudaMemsetAsync(dpartial, 0, grid * sizeof(int), s));
	CK(cudaLaunchKernelEx(&cfg, coop_sum, (const int *)dx, dpartial, dout, n));
	CK(cudaStreamSynchronize(s));
	check_sum(dpartial, dout, grid, block, x, "cudaLaunchKernelEx cooperative");

	// clusters of 2 blocks (sm_90)
	attrs[0].id = cudaLaunchAttributeClusterDimension;
	attrs[0].val.clusterDim.x = 2;
	attrs[0].val.clusterDim.y = 1;
	attrs[0].val.clusterDim.z = 1;
	cfg.gridDim = dim3(((N + 255) / 256 + 1) & ~1u);   // a whole number of clusters
	cfg.blockDim = dim3(256);
	cfg.numAttrs = 2;
	CK(cudaLaunchKernelEx(&cfg, coop_iota, dy, n, 7));
	CK(cudaStreamSynchronize(s));
	check_iota(dy, N, 7, "cudaLaunchKernelEx with clusters");
	int clusters = 0, csize = 0;
	CK(cudaOccupancyMaxActiveClusters(&clusters, coop_iota, &cfg));
	EXPECT(clusters > 0, "%d clusters of 2 blocks resident at once", clusters);
	cfg.numAttrs = 0;
	CK(cudaOccupancyMaxPotentialClusterSize(&csize, coop_iota, &cfg));
	EXPECT(csize >= 2, "largest cluster size %d", csize);

	// no attributes at all, on the legacy stream
	cfg.numAttrs = 0;
	cfg.attrs = nullptr;
	cfg.stream = 0;
	CK(cudaLaunchKernelEx(&cfg, coop_iota, dy, n, -3));
	CK(cudaDeviceSynchronize());
	check_iota(dy, N, -3, "cudaLaunchKernelEx without attributes");

	// an attribute id CUDA does not know
	attrs[0].id = (cudaLaunchAttributeID)999;
	cfg.attrs = attrs;
	cfg.numAttrs = 1;
	e = cudaLaunchKernelEx(&cfg, coop_iota, dy, n, 100);
	EXPECT(e != cudaSuccess, "an unknown launch attribute was accepted");
	(void)cudaGetLastError();
	CK(cudaDeviceSynchronize());
	check_iota(dy, N, -3, "after a refused launch");

	CK(cudaFree(dx));
	CK(cudaFree(dy));
	CK(cudaFree(dout));
	CK(cudaFree(dpartial));
	CK(cudaStreamDestroy(s));
	if (failures) {
		fprintf(stderr, "launch_ex: %d failures\n", failures);
		return 1;
	}
	printf("launch_ex: ok\n");
	return 0;
}
