/* SPDX-License-Identifier: MIT */
/* Where the executor, the preload libraries and the sim twins are: shared by
 * the phos-fn CLI (cli/) and the phos-invoker daemon. */
#ifndef PHOS_INVOKER_PATHS_H
#define PHOS_INVOKER_PATHS_H

#include <stddef.h>

/* Where the pieces live, found next to the phos-fn binary (build tree or
 * install tree) unless the environment says otherwise (PHOS_EXECUTOR,
 * PHOS_PRELOAD_DIR, PHOS_SIM_TWINS). Return 0 and a path in buf, or -ENOENT. */
int cli_find_executor(char *buf, size_t len);
int cli_find_preload_dir(char *buf, size_t len);
int cli_find_sim_twins(char *buf, size_t len);

/* "cuda" or "sim" for a --device value (auto picks cuda when a GPU is there,
 * else sim with a one-line notice); NULL for an unknown value. */
const char *cli_resolve_device(const char *device);

#endif
