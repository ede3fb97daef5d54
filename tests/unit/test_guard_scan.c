/* SPDX-License-Identifier: MIT */
/*
 * The forwarding guard's scan (runtime/guard/guard_scan.c): a process that maps a
 * library named like CUDA's from outside the stand-ins' folder is found; one
 * that maps the stand-in is not, also after the stand-in was replaced on disk
 * (an upgrade or a rebuild while instances run: /proc then shows its path
 * with " (deleted)"); a deleted library of that name from elsewhere still is.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "guard.h"

static void write_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	CHECK(fd >= 0 && write(fd, "not a library", 13) == 13, "write %s", path);
	if (fd >= 0)
		close(fd);
}

/* A child that maps path read-only, says so on its pipe, and waits. */
static pid_t mapper(const char *path)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		int fd = open(path, O_RDONLY);
		void *m = fd >= 0 ? mmap(NULL, 13, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;

		c = m == MAP_FAILED ? 'x' : 'm';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	c = 0;
	if (read(p[0], &c, 1) != 1 || c != 'm')
		pid = -1;
	close(p[0]);
	return pid;
}

static int scan(pid_t pid, const char *dir, char *what, size_t len)
{
	pid_t who = 0;

	what[0] = '\0';
	return phos_guard_scan(pid, dir, &who, what, len);
}

int main(void)
{
	char base[] = "/tmp/phos-test-guard-XXXXXX", ours[300], other[300], lib[400], olib[400], what[512];
	pid_t a, b;
	int r;

	if (!mkdtemp(base))
		return 1;
	/* the libraries refused by name: cuSOLVER 12 and any other major, never cuSOLVERMg (a library of its own) */
	CHECK(phos_guard_is_cuda_library("/x/nvidia/cu13/lib/libcusolver.so.12") &&
	      phos_guard_is_cuda_library("libcusolver.so.11") && phos_guard_is_cuda_library("/x/libcusolver.so") &&
	      !phos_guard_is_cuda_library("/x/libcusolverMg.so.12"),
	      "libcusolver of any major is a CUDA library by its name, libcusolverMg is not");
	/* the libraries refused by name: cuSPARSE 12 and any other major, never cuSPARSELt (a library of its own) */
	CHECK(phos_guard_is_cuda_library("/x/nvidia/cu13/lib/libcusparse.so.12") &&
	      phos_guard_is_cuda_library("libcusparse.so.11") && phos_guard_is_cuda_library("/x/libcufft.so.12") &&
	      !phos_guard_is_cuda_library("/x/libcusparseLt.so.0") && !phos_guard_is_cuda_library("/x/libcufftw.so.12"),
	      "library names");
	snprintf(ours, sizeof(ours), "%s/preload", base);
	snprintf(other, sizeof(other), "%s/elsewhere", base);
	CHECK(mkdir(ours, 0755) == 0 && mkdir(other, 0755) == 0, "mkdir");
	snprintf(lib, sizeof(lib), "%s/libcudart.so.13", ours);
	snprintf(olib, sizeof(olib), "%s/libcudart.so.13", other);
	write_file(lib);
	write_file(olib);

	a = mapper(lib);
	b = mapper(olib);
	CHECK(a > 0 && b > 0, "mappers");
	r = scan(a, ours, what, sizeof(what));
	CHECK(r == 0, "the stand-in mapped: %d %s", r, what);
	r = scan(b, ours, what, sizeof(what));
	CHECK(r == 1 && strstr(what, "elsewhere/libcudart.so.13"), "a foreign libcudart: %d %s", r, what);

	/* both replaced on disk (rename over, as an install does) */
	{
		char tmp[450];

		snprintf(tmp, sizeof(tmp), "%s.new", lib);
		write_file(tmp);
		CHECK(rename(tmp, lib) == 0, "replace the stand-in");
		snprintf(tmp, sizeof(tmp), "%s.new", olib);
		write_file(tmp);
		CHECK(rename(tmp, olib) == 0, "replace the foreign one");
	}
	r = scan(a, ours, what, sizeof(what));
	CHECK(r == 0, "the stand-in replaced on disk while mapped: %d %s", r, what);
	r = scan(b, ours, what, sizeof(what));
	CHECK(r == 1 && strstr(what, "(deleted)"), "a foreign libcudart replaced on disk: %d %s", r, what);
	CHECK(!phos_guard_in_dir("/x (deleted)", ours) && !phos_guard_in_dir(" (deleted)", ours),
	      "odd deleted paths are not ours");

	kill(a, SIGKILL);
	kill(b, SIGKILL);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
	unlink(lib);
	unlink(olib);
	rmdir(ours);
	rmdir(other);
	rmdir(base);
	return failures ? 1 : 0;
}
