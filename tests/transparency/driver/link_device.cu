// SPDX-License-Identifier: MIT
// The device function link_kernel.cu's kernel calls: built by meson.build
// into relocatable PTX, a relocatable cubin and a host library (-lib), each
// linked with the kernel's PTX by driver.cpp.

__device__ float drv_link_affine(float x)
{
	return 3.0f * x + 1.0f;
}
