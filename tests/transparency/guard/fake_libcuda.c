/* SPDX-License-Identifier: MIT */
/* A stand-in for the real driver library (libcuda.so.1) for the guard tests:
 * a GPU-less machine has none, and the guard judges by the file name. */
__attribute__((visibility("default"))) int cuInit(unsigned flags);
__attribute__((visibility("default"))) int cuInit(unsigned flags)
{
	(void)flags;
	return 0;
}
