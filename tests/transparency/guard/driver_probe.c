/* SPDX-License-Identifier: MIT */
/*
 * Reaches the driver behind the runtime's back, the ways a program can:
 *
 *   driver_probe dlopen PATH   dlopen()s a driver library (libcuda.so.1,
 *                              libnvidia-ml.so.1) and calls its cuInit; when
 *                              it is a driver API (cuMemAlloc_v2 and friends),
 *                              allocates, sets and reads back through it
 *   driver_probe mmap PATH     maps the file by hand (no loader), then works
 *                              on for a second
 *   driver_probe forkmmap PATH the same in a child process, which the program
 *                              waits for
 *
 * The tests give it stand-ins (fake_libcuda.c, built as libcuda.so.1 and as
 * libnvidia-ml.so.1): natively it prints "driver ran natively". Under
 * phos-fn a dlopen of libcuda.so.1 gets phos-fn's driver stand-in, whose calls
 * are forwarded ("driver: forwarded ok", and "libcuda: PATH" names the library
 * that served); NVML and a driver mapped by hand are refused.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* The driver API through dlsym only: this program links no CUDA. */
static int probe_dlopen(const char *path)
{
	void *lib = dlopen(path, RTLD_NOW);
	int (*cu_init)(unsigned) = lib ? (int (*)(unsigned))dlsym(lib, "cuInit") : NULL;
	int (*retain)(void **, int), (*set_ctx)(void *), (*alloc)(unsigned long long *, size_t);
	int (*memset8)(unsigned long long, unsigned char, size_t), (*free_)(unsigned long long);
	int (*dtoh)(void *, unsigned long long, size_t);
	unsigned char back[4096];
	unsigned long long d = 0;
	void *ctx = NULL;
	Dl_info info;
	int r;

	if (!cu_init) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	if (dladdr((void *)cu_init, &info) && info.dli_fname)
		printf("libcuda: %s\n", info.dli_fname);
	if (cu_init(0) != 0) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	retain = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
	set_ctx = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
	alloc = (int (*)(unsigned long long *, size_t))dlsym(lib, "cuMemAlloc_v2");
	memset8 = (int (*)(unsigned long long, unsigned char, size_t))dlsym(lib, "cuMemsetD8_v2");
	dtoh = (int (*)(void *, unsigned long long, size_t))dlsym(lib, "cuMemcpyDtoH_v2");
	free_ = (int (*)(unsigned long long))dlsym(lib, "cuMemFree_v2");
	if (!retain || !set_ctx || !alloc || !memset8 || !dtoh || !free_) {
		printf("driver ran natively\n");   /* a bare stand-in with cuInit only */
		return 0;
	}
	if ((r = retain(&ctx, 0)) || (r = set_ctx(ctx)) || (r = alloc(&d, sizeof(back))) ||
	    (r = memset8(d, 0x5a, sizeof(back))) || (r = dtoh(back, d, sizeof(back))) || (r = free_(d))) {
		fprintf(stderr, "driver call failed: %d\n", r);
		return 1;
	}
	for (size_t i = 0; i < sizeof(back); i++)
		if (back[i] != 0x5a) {
			fprintf(stderr, "byte %zu reads %#x, want 0x5a\n", i, back[i]);
			return 1;
		}
	printf("driver: forwarded ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: driver_probe dlopen|mmap|forkmmap PATH\n");
		return 2;
	}
	if (!strcmp(argv[1], "dlopen"))
		return probe_dlopen(argv[2]);
	if (!strcmp(argv[1], "forkmmap")) {
		pid_t pid = fork();
		int status;

		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid > 0) {
			if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status))
				return 1;
			return WEXITSTATUS(status);
		}
	}
	int fd = open(argv[2], O_RDONLY);
	void *p = fd >= 0 ? mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;

	if (p == MAP_FAILED) {
		perror(argv[2]);
		return 1;
	}
	usleep(1000000);   /* long enough for any scan */
	printf("driver ran natively\n");
	return 0;
}
