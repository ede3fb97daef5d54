/* SPDX-License-Identifier: MIT */
/*
 * *sum += the 32-bit words of t: a 64-bit integer sum, the same in any order
 * on the GPU, on the sim device (twin _Z10sum_directPKjyPy, sim_twins.c) and
 * on the CPU. tables sums its tables with it, train its frozen state.
 */
#ifndef PHOS_EXAMPLE_INT_SUM_CUH
#define PHOS_EXAMPLE_INT_SUM_CUH

__global__ void sum_direct(const unsigned *t, unsigned long long n, unsigned long long *sum)
{
	unsigned long long s = 0;

	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s += t[i];
	atomicAdd(sum, s);
}

#endif
