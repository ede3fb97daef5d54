// SPDX-License-Identifier: MIT
// Relocatable device code that driver.cpp links at run time (cuLinkAddData
// of several inputs): the kernel here calls a function defined in
// link_device.cu, so neither links alone. Built by meson.build into PTX
// (-rdc); sim twin: tests/transparency/twins.c.

extern __device__ float drv_link_affine(float x);

__global__ void drv_linked(float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = drv_link_affine(y[i]);
}
