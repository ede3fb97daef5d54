/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA's libraries that ship apart from the toolkit (NCCL, cuDNN), found
 * for the executor's cuda backend (libfind.h).
 */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>

#include "libfind.h"
#include "log.h"

static void *try_open(const char *path, const char *what)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return NULL;
	if (dlsym(lib, "phos_preload_connect")) {
		phos_warn("cuda: %s is phos-fn's %s stand-in, not NVIDIA's: skipped", path, what);
		dlclose(lib);
		return NULL;
	}
	phos_info("cuda: %s from %s", what, path);
	return lib;
}

static void *open_glob(const char *pattern, const char *what)
{
	glob_t g;
	void *lib = NULL;

	if (glob(pattern, 0, NULL, &g) != 0)
		return NULL;
	for (size_t i = g.gl_pathc; !lib && i-- > 0;)   /* newest python first */
		lib = try_open(g.gl_pathv[i], what);
	globfree(&g);
	return lib;
}

void *phos_lib_find(const char *what, const char *env_name, const char *soname, const char *pip)
{
	const char *env = getenv(env_name), *venv = getenv("VIRTUAL_ENV"), *home = getenv("HOME");
	const char *cuda = getenv("CUDA_HOME");
	const char *roots[] = { "/usr/local/lib", "/usr/lib", venv ? venv : "", "" };
	char pat[8448];   /* a root of up to 4 KiB and the rest */
	void *lib;

	if (env && *env) {
		lib = try_open(env, what);
		if (!lib)
			phos_err("cuda: %s=%s cannot be loaded: %s", env_name, env, dlerror() ?: "phos-fn's own stand-in");
		return lib;   /* an explicit choice is not second-guessed */
	}
	if ((lib = try_open(soname, what)))
		return lib;
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		const char *root = roots[i];
		char local[4096];

		if (i == 3) {
			if (!home || !*home)
				continue;
			snprintf(local, sizeof(local), "%s/.local/lib", home);
			root = local;
		}
		if (!*root)
			continue;
		for (int k = 0; k < 2; k++) {
			snprintf(pat, sizeof(pat), "%s/python3*/%s/nvidia/%s/lib/%s", root,
				 k ? "dist-packages" : "site-packages", pip, soname);
			if ((lib = open_glob(pat, what)))
				return lib;
		}
		if (i == 2) {   /* a venv's lib folder */
			snprintf(pat, sizeof(pat), "%s/lib/python3*/site-packages/nvidia/%s/lib/%s", root, pip, soname);
			if ((lib = open_glob(pat, what)))
				return lib;
		}
	}
	if (cuda && *cuda) {
		snprintf(pat, sizeof(pat), "%s/lib64/%s", cuda, soname);
		if ((lib = try_open(pat, what)))
			return lib;
	}
	snprintf(pat, sizeof(pat), "/usr/local/cuda/lib64/%s", soname);
	return try_open(pat, what);
}