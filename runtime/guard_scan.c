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
	       starts_with(b, "libcudart.so") || starts_with(b, "libcublas.so");
}

int phos_guard_in_dir(const char *path, const char *dir_real)
{
	char real[PATH_MAX];
	size_t n = strlen(dir_real);

	if (!realpath(path, real))
		return 0;
	return !strncmp(real, dir_real, n) && real[n] == '/' && !strchr(real + n + 1, '/');
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

int phos_guard_scan(pid_t pid, const char *standin_dir, char *ret_what, size_t len)
{
	char dir_real[PATH_MAX];
	int r;

	if (!realpath(standin_dir, dir_real))
		return -errno;
	r = scan_maps(pid, dir_real, ret_what, len);
	if (r != 0)
		return r;
	return scan_fds(pid, ret_what, len);
}
