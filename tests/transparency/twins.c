/* SPDX-License-Identifier: MIT */
/* sim twins of the kernels of tests/transparency/guard and samples. */
#include <stdint.h>

#include "sim_twin.h"

#define EXPORT __attribute__((visibility("default")))

/* for each (block, thread) of a 1-D launch: i = blockIdx.x * blockDim.x + threadIdx.x */
#define FOR_EACH_THREAD_1D(l, i)                                                      \
	for (uint64_t i = 0; i < (uint64_t)(l)->grid[0] * (l)->block[0]; i++)

/* guard/rpath_cudart.cu */
static void guard_add(const struct phos_sim_launch *l)
{
	const float *x = PHOS_SIM_ARG(l, 0, const float *);
	float *y = PHOS_SIM_ARG(l, 1, float *);
	int n = PHOS_SIM_ARG(l, 2, int);

	FOR_EACH_THREAD_1D(l, i)
		if (i < (uint64_t)n)
			y[i] += x[i];
}

static const struct phos_sim_twin twins[] = {
	{ "_Z9guard_addPKfPfi", guard_add },
};

EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count);
EXPORT const struct phos_sim_twin *phos_sim_twins(unsigned *ret_count)
{
	*ret_count = sizeof(twins) / sizeof(twins[0]);
	return twins;
}
