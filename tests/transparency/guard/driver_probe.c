/* SPDX-License-Identifier: MIT */
/*
 * Reaches the "driver" behind the runtime's back, the two ways a program can:
 *
 *   driver_probe dlopen PATH   dlopen()s a libcuda.so.1 and calls its cuInit
 *   driver_probe mmap PATH     maps the file by hand (no loader), then works
 *                              on for a second
 *   driver_probe forkmmap PATH the same in a child process, which the program
 *                              waits for
 *
 * The tests give it a stand-in libcuda.so.1 (fake_libcuda.c): natively it
 * prints "driver ran natively"; under phos-fn it must be refused.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: driver_probe dlopen|mmap|forkmmap PATH\n");
		return 2;
	}
	if (!strcmp(argv[1], "dlopen")) {
		void *lib = dlopen(argv[2], RTLD_NOW);
		int (*cu_init)(unsigned) = lib ? (int (*)(unsigned))dlsym(lib, "cuInit") : NULL;

		if (!cu_init) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		if (cu_init(0) == 0)
			printf("driver ran natively\n");
		return 0;
	}
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
