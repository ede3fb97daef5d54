/* SPDX-License-Identifier: MIT */
/*
 * Finding a library of NVIDIA's that ships apart from the toolkit, for the
 * executor's cuda backend. Where it is looked for, first found wins:
 *
 *   1. $ENV_NAME (a path: an explicit choice, not second-guessed);
 *   2. the soname through the loader's search path;
 *   3. pip's wheel (nvidia/PIP/lib/SONAME) under the site-packages and
 *      dist-packages of /usr/local/lib/python3*, /usr/lib/python3*,
 *      $VIRTUAL_ENV and ~/.local;
 *   4. $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
 *
 * A library that turns out to be phos-fn's own stand-in (it reaches
 * phos_preload_connect) is skipped: the executor never forwards to itself.
 */
#pragma once

/* dlopen'ed (RTLD_NOW | RTLD_LOCAL), or NULL. `what` names it in the log. */
void *phos_lib_find(const char *what, const char *env_name, const char *soname, const char *pip);
