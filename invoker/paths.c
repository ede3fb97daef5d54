/* SPDX-License-Identifier: MIT */
/* Locating the executor, the preload libraries and the sim twins. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "paths.h"
#include "device.h"

static int exe_dir(char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

	if (n < 0)
		return -errno;
	path[n] = '\0';
	if ((size_t)snprintf(buf, len, "%s", dirname(path)) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* First of the candidates (relative to the binary's folder) that exists. */
static int find(const char *env, const char *const *rel, char *buf, size_t len)
{
	const char *e = getenv(env);
	char dir[PATH_MAX];

	if (e && *e) {
		if (access(e, F_OK) < 0)
			return -ENOENT;
		snprintf(buf, len, "%s", e);
		return 0;
	}
	if (exe_dir(dir, sizeof(dir)) < 0)
		return -ENOENT;
	for (; *rel; rel++) {
		if ((size_t)snprintf(buf, len, "%s/%s", dir, *rel) < len && access(buf, F_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

int cli_find_executor(char *buf, size_t len)
{
	static const char *const rel[] = { "../ctxpool/phos-executor", "phos-executor",
					   "../libexec/phos-fn/phos-executor", NULL };

	return find("PHOS_EXECUTOR", rel, buf, len);
}

int cli_find_preload_dir(char *buf, size_t len)
{
	static const char *const rel[] = { "../preload", "../lib/phos-fn", NULL };
	int r = find("PHOS_PRELOAD_DIR", rel, buf, len);
	char lib[PATH_MAX];

	if (r < 0)
		return r;
	if ((size_t)snprintf(lib, sizeof(lib), "%s/libcudart.so.13", buf) >= sizeof(lib) || access(lib, F_OK) < 0)
		return -ENOENT;
	return 0;
}

int cli_find_sim_twins(char *buf, size_t len)
{
	static const char *const rel[] = { "../functions/examples/libphos-twins-examples.so",
					   "../lib/phos-fn/libphos-twins-examples.so", NULL };
	const char *e = getenv("PHOS_SIM_TWINS");

	/* A colon-separated list: passed on as it is. */
	if (e && *e) {
		snprintf(buf, len, "%s", e);
		return 0;
	}
	return find("PHOS_SIM_TWINS", rel, buf, len);
}

const char *cli_resolve_device(const char *device)
{
	if (!strcmp(device, "cuda") || !strcmp(device, "sim"))
		return device;
	if (strcmp(device, "auto"))
		return NULL;
	if (phos_device_cuda_available())
		return "cuda";
	fprintf(stderr, "phos-fn: no GPU found, using the sim device (for development only, not a GPU)\n");
	return "sim";
}
