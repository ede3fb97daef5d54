/* SPDX-License-Identifier: MIT */
/* phos-fn: the command-line front end. One file per subcommand. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* phos-fn run [--device auto|cuda|sim] [--gpu N] [--trace FILE] -- PROGRAM ARGS... */
int cli_run(int argc, char **argv);

/* phos-fn snapshot [--device D] [--stats FILE] [--timeout S] -o DIR -- PROGRAM ARGS... */
int cli_snapshot(int argc, char **argv);

/* phos-fn deploy|list|describe|remove|invoke|logs|snapshot NAME against the
 * invoker's HTTP API (cli_gateway.c); argv[0] is the command. */
int cli_gateway(int argc, char **argv);

/* phos-fn checkpoint [--mode stw|cow|recopy] -o DIR PID (cli_checkpoint.c) */
int cli_checkpoint(int argc, char **argv);

/* The checkpoint endpoint of a `phos-fn run --checkpointable` (cli_checkpoint.c):
 * the socket path of run process pid (make_dir: its directory is made);
 * cli_run_listen binds and listens on ours (returns the fd or -errno, path
 * in buf); cli_run_serve_checkpoint accepts one request on it and answers. */
struct phos_checkpoint_target;
int cli_run_socket_path(pid_t pid, bool make_dir, char *buf, size_t len);
int cli_run_listen(char *buf, size_t len);
void cli_run_serve_checkpoint(int listen_fd, const struct phos_checkpoint_target *t);

/* phos-fn restore [--device D] [--stats FILE] DIR */
int cli_restore(int argc, char **argv);

/* Where the pieces live, found next to the phos-fn binary (build tree or
 * install tree) unless the environment says otherwise (PHOS_EXECUTOR,
 * PHOS_PRELOAD_DIR, PHOS_SIM_TWINS). Return 0 and a path in buf, or -ENOENT. */
int cli_find_executor(char *buf, size_t len);
int cli_find_preload_dir(char *buf, size_t len);
int cli_find_sim_twins(char *buf, size_t len);

/* "cuda" or "sim" for a --device value (auto picks cuda when a GPU is there,
 * else sim with a one-line notice); NULL for an unknown value. */
const char *cli_resolve_device(const char *device);
