// A function that never reaches phos_fn_serve, for the deploy timeout and
// cancel tests: it allocates a device buffer (so it is a live client of its
// executor), says so on stderr, then sleeps until it is killed.
#include <cstdio>
#include <cuda_runtime.h>
#include <unistd.h>

int main(void)
{
	int *dev;

	if (cudaMalloc(&dev, sizeof(int)) != cudaSuccess)
		return 1;
	fprintf(stderr, "never_serves: initialised, sleeping forever\n");
	for (;;)
		pause();
}
