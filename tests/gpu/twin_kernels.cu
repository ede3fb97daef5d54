// Kernels of the validation-twin GPU test (test_twin_gpu.c), compiled to PTX.
extern "C" __global__ void scale(const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = 2.0f * x[i];
}

// Reaches z through a pointer kept in device memory: the analysis calls this
// opaque; its twin must see the accesses to z.
extern "C" __global__ void through_table(float *const *tab, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = tab[0][i];
}

extern "C" __global__ void count(unsigned *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		atomicAdd(c, 1u);
}
