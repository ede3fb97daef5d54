/* SPDX-License-Identifier: MIT */
/*
 * The forwarding guard's contract with whoever starts a function process
 * (preload/guard/guard.c has the picture). The process runs with
 *
 *   LD_LIBRARY_PATH=<dir>:<existing>
 *   LD_AUDIT=<dir>/libphos-guard.so:<existing>
 *
 * (phos_function_env in snapshotter/spawn.c builds it). A process that loads a
 * real CUDA runtime or driver library prints why on stderr, appends the
 * library's path to $PHOS_GUARD_REPORT when that is set, and exits with
 * PHOS_GUARD_EXIT before the library runs.
 */
#pragma once

#define PHOS_GUARD_LIB "libphos-guard.so"
#define PHOS_GUARD_EXIT 121

#include <stddef.h>
#include <sys/types.h>

/*
 * The guard's second line, from outside: scans /proc/PID/maps and /proc/PID/fd
 * of a running function process and of its descendants (at most
 * PHOS_GUARD_SCAN_PROCS of them, PHOS_GUARD_SCAN_DEPTH deep) for a real CUDA
 * library (one not in standin_dir) or an open /dev/nvidia*. Returns 1 and
 * names it in ret_what[len] and the process in *ret_pid when found, 0 when
 * all are clean, -errno when pid cannot be read (it has exited). Catches what
 * the loader does not see: a library mapped by hand, a device node opened
 * directly.
 */
#define PHOS_GUARD_SCAN_PROCS 256
#define PHOS_GUARD_SCAN_DEPTH 16
int phos_guard_scan(pid_t pid, const char *standin_dir, pid_t *ret_pid, char *ret_what, size_t len);

/* True when a mapped or loaded file is a real CUDA runtime or driver library
 * (libcuda.so*, libnvidia-ml.so*, libcudart.so*, libcublas.so*,
 * libcublasLt.so*, libnccl.so*, libcudnn.so*, cuDNN's libcudnn_*, libcufft.so*,
 * libcusparse.so*: not libcusparseLt.so*, libcurand.so*, libcusolver.so*: not
 * libcusolverMg.so*)
 * by its name. */
int phos_guard_is_cuda_library(const char *path);

/* True when path resolves to a file directly in dir_real (a resolved path),
 * or is such a file's old path that /proc marks " (deleted)": a stand-in
 * replaced on disk while a process kept it mapped. */
int phos_guard_in_dir(const char *path, const char *dir_real);
