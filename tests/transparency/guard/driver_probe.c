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
 *   driver_probe mmapserve PATH maps the file by hand, then reaches the
 *                              snapshot point (phos_fn_serve_impl of the
 *                              libcudart.so.13 it dlopens): what phos-fn
 *                              snapshot must refuse to snapshot
 *   driver_probe servemap PATH reaches the snapshot point with nothing mapped,
 *                              and maps the file by hand in each request,
 *                              then works on for three seconds: what the
 *                              invoker's scan of its instances must catch
 *   driver_probe exporttable PATH   asks the driver for a private export table
 *                              (cuGetExportTable, as NVIDIA's static runtime
 *                              does) and prints the CUresult
 *
 * The tests give it stand-ins (fake_libcuda.c, built as libcuda.so.1 and as
 * libnvidia-ml.so.1): natively it prints "driver ran natively". Under
 * phos-fn a dlopen of libcuda.so.1 gets phos-fn's driver stand-in, whose calls
 * are forwarded ("driver: forwarded ok", and "libcuda: PATH" names the library
 * that served); NVML is not found, and a driver mapped by hand is refused.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* mmapserve's handler: answers every request with nothing (status 0). */
static int serve_nothing(void *state, const void *req, void *resp)
{
	(void)state;
	(void)req;
	(void)resp;
	return 0;
}

/* servemap's handler: the driver mapped by hand during a call. */
static int serve_mapping(void *state, const void *req, void *resp)
{
	int fd = open((const char *)state, O_RDONLY);

	(void)req;
	(void)resp;
	if (fd < 0 || mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED)
		return 500;
	sleep(3);
	return 0;
}

static int serve_with(int (*handler)(void *, const void *, void *), void *state)
{
	void *rt = dlopen("libcudart.so.13", RTLD_NOW);
	int (*serve)(int (*)(void *, const void *, void *), void *) =
		rt ? (int (*)(int (*)(void *, const void *, void *), void *))dlsym(rt, "phos_fn_serve_impl") : NULL;

	if (!serve) {
		fprintf(stderr, "no phos_fn_serve_impl: %s\n", dlerror());
		return 1;
	}
	return serve(handler, state);
}

/* The driver API through dlsym only: this program links no CUDA. */
static int probe_dlopen(const char *path)
{
	void *lib = dlopen(path, RTLD_NOW);
	void *cu_init = lib ? dlsym(lib, "cuInit") : NULL;

	if (!cu_init) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	return drive_driver(lib, cu_init);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: driver_probe dlopen|mmap|forkmmap|mmapserve|servemap|exporttable PATH\n");
		return 2;
	}
	if (!strcmp(argv[1], "dlopen"))
		return probe_dlopen(argv[2]);
	if (!strcmp(argv[1], "exporttable")) {
		void *lib = dlopen(argv[2], RTLD_NOW);
		int (*get)(const void **, const void *) = lib ? (int (*)(const void **, const void *))dlsym(lib, "cuGetExportTable") : NULL;
		const unsigned char uuid[16] = { 0 };
		const void *table = &uuid;

		if (!get) {
			fprintf(stderr, "dlopen/dlsym: %s\n", dlerror());
			return 1;
		}
		int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
		int rc = init ? init(0) : -1;   /* a driver client, as the static runtime is */

		if (rc) {
			fprintf(stderr, "cuInit: %d\n", rc);
			return 1;
		}
		rc = get(&table, uuid);

		printf("export table: %d %s\n", rc, table ? "set" : "null");
		return 0;
	}
	if (!strcmp(argv[1], "servemap"))
		return serve_with(serve_mapping, argv[2]);
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
	if (!strcmp(argv[1], "mmapserve"))
		return serve_with(serve_nothing, NULL);
	usleep(1000000);   /* long enough for any scan */
	printf("driver ran natively\n");
	return 0;
}
