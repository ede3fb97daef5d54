/* SPDX-License-Identifier: MIT */
/*
 * phos-fn pool: keeps warm executors for `phos-fn run` on this machine.
 *
 *   phos-fn pool [--size N] [--device auto|cuda|sim] [--gpu N] [--socket PATH]
 *
 * N executors (default 2), each with its CUDA context, cuBLAS handles and
 * arena, wait on the lending socket (snapshotter/lend.c); a `phos-fn run`
 * that finds it takes one instead of starting its own, which saves it the
 * context creation. Runs until SIGINT or SIGTERM. The executors run as this
 * user with this process's environment.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "rundir.h"
#include "snapshotter.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int cli_executor_socket_default(char *buf, size_t len, bool make_dir)
{
	const char *env = getenv("PHOS_EXECUTOR_SOCKET");
	char dir[PATH_MAX - 32];
	int r;

	(void)make_dir;   /* phos_rundir makes it anyway (0700, ours) */
	if (env && *env)
		return (size_t)snprintf(buf, len, "%s", env) < len ? 0 : -ENAMETOOLONG;
	r = phos_rundir(dir, sizeof(dir));
	if (r < 0)
		return r;
	return (size_t)snprintf(buf, len, "%s/executors.sock", dir) < len ? 0 : -ENAMETOOLONG;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-fn pool [--size N] [--device auto|cuda|sim] [--gpu N] [--socket PATH]\n"
		   "  keeps N warm executors (default 2) that `phos-fn run` takes instead of starting its own\n"
		   "  --socket PATH  where runs ask (default $PHOS_EXECUTOR_SOCKET, else /run/phos-fn/executors.sock\n"
		   "                 for root, $XDG_RUNTIME_DIR/phos-fn/executors.sock or /tmp/phos-fn-UID/...)\n");
}

int cli_pool(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 'n' },   { "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },    { "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },         { 0 },
	};
	const char *device = "auto", *sock = NULL;
	char exe[PATH_MAX], preload[PATH_MAX], twins[PATH_MAX], path[PATH_MAX], criu[PATH_MAX], err[512];
	struct phos_runtime_paths paths = { 0 };
	struct phos_pool *pool = NULL;
	struct phos_lender *lender = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned long size = 2;
	int c, gpu;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'n':
			size = strtoul(optarg, &end, 10);
			if (*end || size < 1 || size > 64) {
				fprintf(stderr, "phos-fn pool: --size takes 1..64\n");
				return 2;
			}
			break;
		case 'd': device = optarg; break;
		case 'g': setenv("PHOS_GPU", optarg, 1); break;   /* the executors check it */
		case 's': sock = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	device = cli_resolve_device(device);
	if (!device) {
		fprintf(stderr, "phos-fn pool: unknown device (use auto, cuda or sim)\n");
		return 2;
	}
	gpu = atoi(getenv("PHOS_GPU") ? getenv("PHOS_GPU") : "0");
	if (cli_find_executor(exe, sizeof(exe)) < 0 || cli_find_preload_dir(preload, sizeof(preload)) < 0) {
		fprintf(stderr, "phos-fn pool: phos-executor or the preload libraries not found\n");
		return 1;
	}
	if (sock)
		snprintf(path, sizeof(path), "%s", sock);
	else if (cli_executor_socket_default(path, sizeof(path), true) < 0) {
		fprintf(stderr, "phos-fn pool: no directory for the socket (set --socket)\n");
		return 1;
	}
	paths.executor = exe;
	paths.preload_dir = preload;
	paths.device = device;
	paths.criu = criu;
	criu[0] = '\0';
	if (!strcmp(device, "sim") && cli_find_sim_twins(twins, sizeof(twins)) == 0)
		paths.sim_twins = twins;
	if (phos_pool_new(&paths, (unsigned)size, &pool) < 0) {
		fprintf(stderr, "phos-fn pool: cannot start the executors\n");
		return 1;
	}
	if (phos_lender_start(pool, path, device, gpu, &lender, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn pool: %s\n", err);
		phos_pool_free(pool);
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "phos-fn pool: %lu warm %s executors (GPU %d) at %s\n", size, device, gpu, path);
	while (!stop)
		pause();
	phos_lender_stop(lender);
	phos_pool_free(pool);
	return 0;
}
