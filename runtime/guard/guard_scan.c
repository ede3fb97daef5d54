/* SPDX-License-Identifier: MIT */
/* The forwarding guard's scan of a running function process (guard.h). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"

static int starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

int phos_guard_is_cuda_library(const char *path)
{
	const char *s = strrchr(path, '/');
	const char *b = s ? s + 1 : path;

	return starts_with(b, "libcuda.so") || starts_with(b, "libnvidia-ml.so") ||
	       starts_with(b, "libcudart.so") || starts_with(b, "libcublas.so") || starts_with(b, "libcublasLt.so") ||
	       starts_with(b, "libnccl.so") || starts_with(b, "libcudnn.so") || starts_with(b, "libcudnn_") ||
	       starts_with(b, "libcufft.so") || starts_with(b, "libcusparse.so") ||
	       starts_with(b, "libcurand.so") || starts_with(b, "libcusolver.so");
}

int phos_guard_in_dir(const char *path, const char *dir_real)
{
	static const char deleted[] = " (deleted)";
	char real[PATH_MAX], dir[PATH_MAX];
	size_t n = strlen(dir_real), len = strlen(path), dl = sizeof(deleted) - 1;
	char *slash;

	if (realpath(path, real))
		return !strncmp(real, dir_real, n) && real[n] == '/' && !strchr(real + n + 1, '/');
	/* A stand-in replaced on disk after the process mapped it (an upgrade, a
	 * rebuild): /proc shows its old path and " (deleted)". Its folder is
	 * still the stand-ins' own, where no function writes. */
	if (len <= dl || len - dl >= sizeof(dir) || strcmp(path + len - dl, deleted))
		return 0;
	memcpy(dir, path, len - dl);
	dir[len - dl] = '\0';
	slash = strrchr(dir, '/');
	if (!slash || slash == dir || !slash[1])
		return 0;
	*slash = '\0';
	return realpath(dir, real) && !strcmp(real, dir_real);
}

static int scan_maps(pid_t pid, const char *dir_real, char *ret_what, size_t len)
{
	char path[64], line[PATH_MAX + 256];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (!found && fgets(line, sizeof(line), f)) {
		char *file = strchr(line, '/');

		if (!file)
			continue;
		file[strcspn(file, "\n")] = '\0';
		if (phos_guard_is_cuda_library(file) && !phos_guard_in_dir(file, dir_real)) {
			snprintf(ret_what, len, "%s", file);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

static int scan_fds(pid_t pid, char *ret_what, size_t len)
{
	char path[64], fd_path[64 + 256], target[PATH_MAX];
	struct dirent *d;
	DIR *dir;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while (!found && (d = readdir(dir))) {
		ssize_t n;

		if (d->d_name[0] == '.')
			continue;
		snprintf(fd_path, sizeof(fd_path), "%s/%s", path, d->d_name);
		n = readlink(fd_path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (starts_with(target, "/dev/nvidia")) {
			snprintf(ret_what, len, "%s", target);
			found = 1;
		}
	}
	closedir(dir);
	return found;
}

static int scan_one(pid_t pid, const char *dir_real, char *ret_what, size_t len)
{
	int r = scan_maps(pid, dir_real, ret_what, len);

	return r != 0 ? r : scan_fds(pid, ret_what, len);
}

/* Scans pid, then its descendants (each thread's children file), depth first. */
static int scan_tree(pid_t pid, const char *dir_real, unsigned depth, unsigned *budget, pid_t *ret_pid,
		     char *ret_what, size_t len)
{
	char path[64], kids[4096];
	struct dirent *d;
	DIR *tasks;
	int r = scan_one(pid, dir_real, ret_what, len);

	if (r == 1)
		*ret_pid = pid;
	if (r != 0 || depth >= PHOS_GUARD_SCAN_DEPTH)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	if (!tasks)
		return 0;   /* gone since: nothing more to see */
	while (r == 0 && (d = readdir(tasks))) {
		char kpath[64 + 256 + 16];
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(kpath, sizeof(kpath), "%s/%s/children", path, d->d_name);
		f = fopen(kpath, "re");
		if (!f)
			continue;
		size_t n = fread(kids, 1, sizeof(kids) - 1, f);

		fclose(f);
		kids[n] = '\0';
		char *save = NULL;

		for (char *tok = strtok_r(kids, " \n", &save); r == 0 && tok; tok = strtok_r(NULL, " \n", &save)) {
			if (*budget == 0)
				break;
			(*budget)--;
			/* a child that exited between the two reads is simply gone */
			r = scan_tree((pid_t)atoi(tok), dir_real, depth + 1, budget, ret_pid, ret_what, len);
			if (r < 0)
				r = 0;
		}
	}
	closedir(tasks);
	return r;
}

int phos_guard_scan(pid_t pid, const char *standin_dir, pid_t *ret_pid, char *ret_what, size_t len)
{
	char dir_real[PATH_MAX];
	unsigned budget = PHOS_GUARD_SCAN_PROCS;

	if (!realpath(standin_dir, dir_real))
		return -errno;
	return scan_tree(pid, dir_real, 0, &budget, ret_pid, ret_what, len);
}
