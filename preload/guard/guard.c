/* SPDX-License-Identifier: MIT */
/*
 * The forwarding guard: an LD_AUDIT module (rtld-audit(7)) that every function
 * process runs with, so that a CUDA program is either forwarded or refused,
 * never run natively under phos-fn's name (issue 12, docs/design.md "Processes").
 *
 *   dynamic loader ──la_objsearch(name)──▶ guard ── libcudart.so*, libcublas[Lt].so.*, libnccl.so.2,
 *         │                                  │       libcudnn.so.9, libcufft.so.12, libcusparse.so.12,
 *         │                                  │       libcurand.so.10, libcusolver.so.12,
 *         │                                  │       libcuda.so, libcuda.so.1
 *         │                                  │       (a bare soname, an RPATH/RUNPATH
 *         │                                  │        lookup or a dlopen by path)
 *         │◀── <stand-in dir>/libcudart.so.13 ┘         → the stand-in (loaded once)
 *         │
 *         ├──la_objsearch(libnvidia-ml.so*)──▶ NULL: NVML is not found, as on a
 *         │        machine without the driver (one line on stderr says so); PyTorch
 *         │        and most NVML users go on without it
 *         │
 *         └──la_objopen(map)──▶ guard ── libnvidia-ml.so* (loaded some other way), another libcuda.so*
 *                                        (a copy under another name), or a
 *                                        libcudart/libcublas[Lt]/libnccl/libcudnn that is not
 *                                        ours (cuDNN's own libcudnn_*.so.9 parts included),
 *                                        a libcufft, libcusparse, libcurand or libcusolver of
 *                                        another major
 *                                        → "refusing ..." on stderr, the reason in
 *                                          $PHOS_GUARD_REPORT, _exit(PHOS_GUARD_EXIT)
 *
 * la_objsearch sees every name before the search: a DT_NEEDED libcudart.so.13
 * whatever DT_RPATH/RUNPATH the program carries (RPATH beats LD_LIBRARY_PATH),
 * a dlopen of an absolute path, other names (libcudart.so); the redirected
 * path is the stand-in, and a second load of it finds the one already there.
 * The driver library, libcuda.so.1, has a stand-in too (preload/driver/libcuda.c,
 * the driver API forwarded): a program or library that loads the driver by
 * soname or by the path of the real one gets ours.
 * la_objopen catches what is not redirected: the driver itself, another
 * major of the runtime, a copy of a name we do not know. It runs before
 * the object's relocation and constructors, so a refused library never runs
 * a line of code; the real driver never opens /dev/nvidia*. The stand-ins are
 * not preloaded: a process that never loads libcudart (a shell that starts
 * the program) must not become a client of the channel.
 *
 * The module lives in its own link namespace with its own libc; it uses only
 * plain libc calls (and runtime/guard/guard_scan.c, compiled in) and is built
 * without sanitizers (meson.build).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"   /* runtime/guard/guard.h; runtime/guard/guard_scan.c is compiled in */

#define EXPORT __attribute__((visibility("default")))

static char standin_dir[PATH_MAX];   /* the folder of this module: the stand-ins' */
static char standin_cudart[PATH_MAX + 32];
static char standin_cublas[PATH_MAX + 32];
static char standin_cublaslt[PATH_MAX + 32];
static char standin_cuda[PATH_MAX + 32];
static char standin_nccl[PATH_MAX + 32];
static char standin_cudnn[PATH_MAX + 32];
static char standin_cufft[PATH_MAX + 32];
static char standin_cusparse[PATH_MAX + 32];
static char standin_curand[PATH_MAX + 32];
static char standin_cusolver[PATH_MAX + 32];

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static int starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static void refuse(const char *lib)
{
	char msg[PATH_MAX + 512], exe[PATH_MAX];
	ssize_t e = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *report = getenv("PHOS_GUARD_REPORT");
	int len;

	exe[e > 0 ? e : 0] = '\0';
	len = snprintf(msg, sizeof(msg),
		       "phos-fn: refusing to run %s: it loads %s, a real CUDA library that would reach the "
		       "GPU driver directly instead of being forwarded (phos-fn stands in for "
		       "libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libnccl.so.2, libcudnn.so.9, libcufft.so.12, "
		       "libcusparse.so.12, libcurand.so.10, libcusolver.so.12 and the driver "
		       "libcuda.so.1 only; "
		       "no other CUDA runtime, no other driver library and no NVML may be loaded)\n",
		       e > 0 ? exe : "the program", lib);
	if (len > (int)sizeof(msg) - 1)
		len = sizeof(msg) - 1;
	if (write(STDERR_FILENO, msg, len) < 0) {
		/* nothing more to do: the exit status still says it */
	}
	if (report && *report) {
		int fd = open(report, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			if (write(fd, lib, strlen(lib)) < 0 || write(fd, "\n", 1) < 0) {
				/* the exit status still says it */
			}
			close(fd);
		}
	}
	_exit(PHOS_GUARD_EXIT);
}

EXPORT unsigned int la_version(unsigned int version)
{
	Dl_info info;
	char real[PATH_MAX];

	if (dladdr((void *)la_version, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
		char *slash = strrchr(real, '/');

		if (slash) {
			*slash = '\0';
			snprintf(standin_dir, sizeof(standin_dir), "%s", real);
			snprintf(standin_cudart, sizeof(standin_cudart), "%s/libcudart.so.13", real);
			snprintf(standin_cublas, sizeof(standin_cublas), "%s/libcublas.so.13", real);
			snprintf(standin_cublaslt, sizeof(standin_cublaslt), "%s/libcublasLt.so.13", real);
			snprintf(standin_cuda, sizeof(standin_cuda), "%s/libcuda.so.1", real);
			snprintf(standin_nccl, sizeof(standin_nccl), "%s/libnccl.so.2", real);
			snprintf(standin_cudnn, sizeof(standin_cudnn), "%s/libcudnn.so.9", real);
			snprintf(standin_cufft, sizeof(standin_cufft), "%s/libcufft.so.12", real);
			snprintf(standin_cusparse, sizeof(standin_cusparse), "%s/libcusparse.so.12", real);
			snprintf(standin_curand, sizeof(standin_curand), "%s/libcurand.so.10", real);
			snprintf(standin_cusolver, sizeof(standin_cusolver), "%s/libcusolver.so.12", real);
		}
	}
	/* Without its own folder the module still refuses, it only cannot redirect. */
	return version < LAV_CURRENT ? version : LAV_CURRENT;
}

/* NVML reads the driver directly (it opens /dev/nvidia*), and a function
 * process must not: it is not found. Said once on stderr, whatever PHOS_LOG. */
static char *nvml_hidden(const char *name)
{
	static int said;
	char msg[PATH_MAX + 256];
	int len;

	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
		len = snprintf(msg, sizeof(msg),
			       "phos-fn: %s (NVML) is not available inside a function: it would open the GPU driver "
			       "directly; its load fails, as on a machine without the NVIDIA driver\n",
			       name);
		if (len > (int)sizeof(msg) - 1)
			len = sizeof(msg) - 1;
		if (write(STDERR_FILENO, msg, len) < 0) {
			/* the failed load still says it */
		}
	}
	return NULL;
}

EXPORT char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag)
{
	const char *b = base_name(name);

	(void)cookie;
	if (flag != LA_SER_ORIG || !standin_dir[0])
		return (char *)name;
	/* libcudart.so, libcudart.so.13, libcudart.so.13.0.48: the one ABI we stand in for */
	if (!strcmp(b, "libcudart.so") || starts_with(b, "libcudart.so.13"))
		return standin_cudart;
	if (!strcmp(b, "libcublas.so") || starts_with(b, "libcublas.so.13"))
		return standin_cublas;
	if (!strcmp(b, "libcublasLt.so") || starts_with(b, "libcublasLt.so.13"))
		return standin_cublaslt;
	/* the driver API: one ABI since CUDA 4 (libcuda.so.1, and the toolkit's link name) */
	if (!strcmp(b, "libcuda.so") || !strcmp(b, "libcuda.so.1") || starts_with(b, "libcuda.so.1."))
		return standin_cuda;
	if (!strcmp(b, "libnccl.so") || starts_with(b, "libnccl.so.2"))
		return standin_nccl;
	if (!strcmp(b, "libcudnn.so") || starts_with(b, "libcudnn.so.9"))
		return standin_cudnn;
	/* CUDA 13's cuFFT 12 (the toolkit's, or the nvidia/cu13/lib of the wheels
	 * PyTorch needs, whatever RPATH names it); not libcufftw, which calls it */
	if (!strcmp(b, "libcufft.so") || starts_with(b, "libcufft.so.12"))
		return standin_cufft;
	/* CUDA 13's cuSPARSE 12, the same way (not libcusparseLt, a library of its own) */
	if (!strcmp(b, "libcusparse.so") || starts_with(b, "libcusparse.so.12"))
		return standin_cusparse;
	/* CUDA 13's cuRAND 10 (it carries a CUDA runtime of its own, linked in:
	 * never to run in the function process) */
	if (!strcmp(b, "libcurand.so") || starts_with(b, "libcurand.so.10"))
		return standin_curand;
	/* CUDA 13's cuSOLVER 12, the same way (not libcusolverMg, a library of its own) */
	if (!strcmp(b, "libcusolver.so") || starts_with(b, "libcusolver.so.12"))
		return standin_cusolver;
	if (starts_with(b, "libnvidia-ml.so"))
		return nvml_hidden(name);
	return (char *)name;
}

EXPORT unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	(void)lmid;
	(void)cookie;
	if (map->l_name && map->l_name[0] && phos_guard_is_cuda_library(map->l_name) &&
	    !(standin_dir[0] && phos_guard_in_dir(map->l_name, standin_dir)))
		refuse(map->l_name);
	return 0;   /* no symbol binding audit: calls run at full speed */
}
