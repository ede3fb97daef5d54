// The second translation unit of lazy_modules: never used.
__device__ float lz_other_var;

__global__ void lz_unused(float *x)
{
	x[0] = lz_other_var;
}
