/* SPDX-License-Identifier: MIT */
/*
 * phos-fn snapshot: run a function until phos_fn_serve and snapshot it there.
 * phos-fn restore:  start it again from a snapshot and serve requests from
 *                   stdin (one per line), as `phos-fn run` does; or a program
 *                   from its checkpoint, which goes on where it was and may be
 *                   checkpointed again (`phos-fn checkpoint -o DIR <our pid>`).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"
#include "criu.h"
#include "image.h"
#include "snapshotter.h"

struct paths_buf {
	char executor[PATH_MAX], preload[PATH_MAX], twins[PATH_MAX], criu[PATH_MAX];
};

static int resolve_paths(const char *device, struct paths_buf *b, struct phos_runtime_paths *p)
{
	char err[256];

	memset(p, 0, sizeof(*p));
	p->device = cli_resolve_device(device);
	if (!p->device) {
		fprintf(stderr, "phos-fn: unknown device '%s' (use auto, cuda or sim)\n", device);
		return 2;
	}
	if (cli_find_executor(b->executor, sizeof(b->executor)) < 0) {
		fprintf(stderr, "phos-fn: phos-executor not found (set PHOS_EXECUTOR)\n");
		return 1;
	}
	if (cli_find_preload_dir(b->preload, sizeof(b->preload)) < 0) {
		fprintf(stderr, "phos-fn: the preload libraries were not found (set PHOS_PRELOAD_DIR)\n");
		return 1;
	}
	if (phos_criu_find(b->criu, sizeof(b->criu), err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn: %s\n", err);
		return 1;
	}
	p->executor = b->executor;
	p->preload_dir = b->preload;
	p->criu = b->criu;
	if (!strcmp(p->device, "sim") && cli_find_sim_twins(b->twins, sizeof(b->twins)) == 0)
		p->sim_twins = b->twins;
	return 0;
}

static FILE *open_stats(const char *path)
{
	FILE *f = path ? fopen(path, "we") : NULL;

	if (path && !f)
		fprintf(stderr, "phos-fn: cannot write %s: %s\n", path, strerror(errno));
	return f;
}

int cli_snapshot(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "output", required_argument, NULL, 'o' },
		{ "stats", required_argument, NULL, 's' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *device = "auto", *out = NULL, *stats = NULL;
	struct phos_runtime_paths paths;
	struct phos_snapshot_stats st;
	struct paths_buf pb;
	unsigned timeout = 600;
	char err[1024];
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'd': device = optarg; break;
		case 'g': setenv("PHOS_GPU", optarg, 1); break;   /* the executor checks it */
		case 'o': out = optarg; break;
		case 's': stats = optarg; break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end || v < 1 || v > 86400) {
				fprintf(stderr, "phos-fn: --timeout takes 1..86400 seconds\n");
				return 2;
			}
			timeout = (unsigned)v;
			break;
		}
		case 'h':
			printf("usage: phos-fn snapshot [--device auto|cuda|sim] [--gpu N] [--stats FILE] [--timeout S] -o DIR -- PROGRAM [ARGS...]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (!out || optind >= argc) {
		fprintf(stderr, "usage: phos-fn snapshot [--device auto|cuda|sim] [--gpu N] [--stats FILE] [--timeout S] -o DIR -- PROGRAM [ARGS...]\n");
		return 2;
	}
	r = resolve_paths(device, &pb, &paths);
	if (r)
		return r;
	signal(SIGPIPE, SIG_IGN);
	r = phos_snapshot_take(&paths, argv + optind, out, STDERR_FILENO, timeout, &st, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "phos-fn: snapshot failed: %s\n", err);
		return 1;
	}
	fprintf(stderr, "phos-fn: snapshot of %s in %s: %.1f MiB of GPU data, %.3f s (init %.3f s, GPU dump %.3f s, CPU dump %.3f s)\n",
		argv[optind], out, (double)st.data_bytes / (1 << 20), st.total_s, st.init_s, st.gpu_dump_s,
		st.cpu_dump_s);
	FILE *f = open_stats(stats);

	if (f) {
		fprintf(f, "{\"total_s\":%.6f,\"init_s\":%.6f,\"gpu_dump_s\":%.6f,\"cpu_dump_s\":%.6f,"
			   "\"commit_s\":%.6f,\"gpu_bytes\":%llu,\"data_bytes\":%llu}\n",
			st.total_s, st.init_s, st.gpu_dump_s, st.cpu_dump_s, st.commit_s,
			(unsigned long long)st.gpu_bytes, (unsigned long long)st.data_bytes);
		fclose(f);
	}
	return 0;
}

/* A program restored from a checkpoint may be checkpointed again, as under
 * `phos-fn run --checkpointable` (cli_checkpoint.c), with this process's pid:
 * serves requests until the program ends (the caller then reaps it). */
static void serve_checkpoints(const struct phos_instance *inst, const char *criu, const char *name)
{
	const struct phos_checkpoint_target t = { .fn_pid = inst->fn_pid, .channel_fd = 3,
						  .control_fd = inst->control_fd,
						  .executor_pid = inst->executor_pid, .criu = criu,
						  .function = name };
	int pidfd = (int)syscall(SYS_pidfd_open, inst->fn_pid, 0);
	char path[PATH_MAX];
	int lfd = cli_run_listen(path, sizeof(path));

	if (lfd < 0 || pidfd < 0) {
		if (lfd >= 0) {
			close(lfd);
			unlink(path);
		}
		if (pidfd >= 0)
			close(pidfd);
		return;   /* the program runs on, without checkpoints */
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = pidfd, .events = POLLIN }, { .fd = lfd, .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;   /* it ended */
		if (p[1].revents)
			cli_run_serve_checkpoint(lfd, &t);
	}
	close(lfd);
	unlink(path);
	close(pidfd);
}

int cli_restore(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "stats", required_argument, NULL, 's' },
		{ "on-demand", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *device = "auto", *stats = NULL;
	bool on_demand = false, checkpoint = false;
	const char *dir_name;
	struct phos_runtime_paths paths;
	struct phos_restore_stats st;
	struct phos_instance inst;
	struct paths_buf pb;
	char err[1024];
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': device = optarg; break;
		case 'g': setenv("PHOS_GPU", optarg, 1); break;   /* the executor checks it */
		case 's': stats = optarg; break;
		case 'o': on_demand = true; break;
		case 'h': printf("usage: phos-fn restore [--device auto|cuda|sim] [--gpu N] [--stats FILE] [--on-demand] DIR\n"); return 0;
		default: return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: phos-fn restore [--device auto|cuda|sim] [--gpu N] [--stats FILE] [--on-demand] DIR\n");
		return 2;
	}
	r = resolve_paths(device, &pb, &paths);
	if (r)
		return r;
	signal(SIGPIPE, SIG_IGN);
	dir_name = argv[optind];
	{
		struct phos_image *img = NULL;

		/* (phos_restore_start reads it again, and refuses it with its reason) */
		checkpoint = phos_image_read(dir_name, &img, err, sizeof(err)) == 0 && img->checkpoint.present;
		phos_image_free(img);
	}
	r = phos_restore_start(&paths, argv[optind], STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, on_demand, &inst, &st,
			       err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "phos-fn: restore refused: %s\n", err);
		return 1;
	}
	FILE *f = open_stats(stats);

	if (f) {
		fprintf(f, "{\"gpu_restore_s\":%.6f,\"open_s\":%.6f,\"load_s\":%.6f,\"data_s\":%.6f,"
			   "\"cpu_restore_s\":%.6f,\"ready_s\":%.6f,\"gpu_bytes\":%llu,\"on_demand\":%s}\n",
			st.gpu_restore_s, st.open_s, st.load_s, st.data_s, st.cpu_restore_s, st.ready_s,
			(unsigned long long)st.gpu_bytes, st.on_demand ? "true" : "false");
		fclose(f);
	}
	/* The restored function has our stdin and stdout now. */
	signal(SIGINT, SIG_IGN);
	if (checkpoint)
		serve_checkpoints(&inst, pb.criu, dir_name);
	return phos_instance_wait(&inst);
}
