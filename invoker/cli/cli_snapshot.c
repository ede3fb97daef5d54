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
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "criu.h"
#include "image.h"
#include "snapshotter.h"

struct paths_buf {
	char executor[PATH_MAX], preload[PATH_MAX], twins[PATH_MAX], criu[PATH_MAX];
};

/* The function was given our stdio (checkpoint keys, snapshotter.h). */
static const int own_stdio[3] = { 0, 1, 2 };

/* --gpu N (one GPU) or --gpus A,B,... (one executor over several): passed to
 * the executors in their environment, which they check. */
static void gpu_option(int c, const char *arg)
{
	setenv(c == 'g' ? "PHOS_GPU" : "PHOS_GPUS", arg, 1);
	unsetenv(c == 'g' ? "PHOS_GPUS" : "PHOS_GPU");
}

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
		{ "gpus", required_argument, NULL, 'G' },
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
		case 'g':
		case 'G':
			gpu_option(c, optarg);
			break;
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

/* A restored program is served until it ends: checkpoint requests (as under
 * `phos-fn run --checkpointable`, with this process's pid) when it came from
 * a checkpoint, per's periodic checkpoints, and with per->restart its
 * executor watched: if that fails (cli_executor_failed) first, the program
 * (cut off from its GPU state) is killed and *ret_exec_died set. */
static void supervise(const struct phos_instance *inst, const char *criu, const char *name, bool checkpoints,
		      struct cli_periodic *per, bool *ret_exec_died)
{
	const struct phos_checkpoint_target t = { .fn_pid = inst->fn_pid, .channel_fd = 3,
						  .control_fd = inst->control_fd,
						  .executor_pid = inst->executor_pid, .criu = criu,
						  .function = name, .stdio_fds = own_stdio };
	int pidfd = (int)syscall(SYS_pidfd_open, inst->fn_pid, 0);
	int exefd = per->restart ? (int)syscall(SYS_pidfd_open, inst->executor_pid, 0) : -1;
	char path[PATH_MAX];
	int lfd = checkpoints ? cli_run_listen(path, sizeof(path)) : -1;

	*ret_exec_died = false;
	if (pidfd < 0 || (!checkpoints && !per->enabled && exefd < 0))
		goto out;   /* nothing to serve: the caller just waits */
	for (;;) {
		struct pollfd p[3] = { { .fd = pidfd, .events = POLLIN }, { .fd = exefd, .events = POLLIN },
				       { .fd = lfd, .events = POLLIN } };

		if (poll(p, 3, cli_periodic_wait_ms(per)) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;   /* it ended */
		if (p[1].revents) {
			close(exefd);
			exefd = -1;
			if (cli_executor_failed(inst->executor_pid)) {
				/* Its GPU state is gone. */
				kill(inst->fn_pid, SIGKILL);
				*ret_exec_died = true;
				break;
			}
			continue;   /* it ended with its program, which is ending */
		}
		if (p[2].revents)
			cli_run_serve_checkpoint(lfd, &t);
		if (checkpoints)
			cli_periodic_tick(per, &t);
	}
out:
	if (lfd >= 0) {
		close(lfd);
		unlink(path);
	}
	if (pidfd >= 0)
		close(pidfd);
	if (exefd >= 0)
		close(exefd);
}

int cli_restore_run(const char *device, const char *dir, bool on_demand, const char *stats, struct cli_periodic *per)
{
	struct phos_runtime_paths paths;
	struct phos_restore_stats st;
	struct phos_instance inst;
	struct paths_buf pb;
	char err[1024], latest[PATH_MAX];
	int code, r;

	r = resolve_paths(device, &pb, &paths);
	if (r)
		return r;
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		struct phos_image *img = NULL;
		bool checkpoint, died;

		/* (phos_restore_start reads it again, and refuses it with its reason) */
		checkpoint = phos_image_read(dir, &img, err, sizeof(err)) == 0 && img->checkpoint.present;
		phos_image_free(img);
		r = phos_restore_start(&paths, dir, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, on_demand, NULL, &inst, &st,
				       err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "phos-fn: restore refused: %s\n", err);
			/* With restarts left, a restart's restore is tried again (its
			 * executor may have died during it, as any executor can). */
			if (!per->restart || per->restarts == 0 ||
			    cli_periodic_restart(per, "the restore failed", latest, sizeof(latest)) < 0)
				return 1;
			dir = latest;
			continue;
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
		supervise(&inst, pb.criu, dir, checkpoint, per, &died);
		code = phos_instance_wait(&inst);
		/* The program may have failed on its own first, its calls cut off. */
		died = died || (per->restart && code != 0 && cli_executor_status_failed(inst.executor_status));
		if (!died || code == 0)
			return code;   /* (0: it got to its end before the failure mattered) */
		if (cli_periodic_restart(per, "the executor died", latest, sizeof(latest)) < 0)
			return code;
		dir = latest;
		stats = NULL;
	}
}

int cli_restore(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "gpus", required_argument, NULL, 'G' },
		{ "stats", required_argument, NULL, 's' },
		{ "on-demand", no_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		CLI_PERIODIC_OPTIONS,
		{ 0 },
	};
	static const char usage[] = "usage: phos-fn restore [--device auto|cuda|sim] [--gpu N] [--stats FILE] "
				    "[--on-demand] [periodic options] DIR\n"
				    "  DIR: a snapshot, a checkpoint, or a --checkpoint-dir (its latest checkpoint)\n"
				    CLI_PERIODIC_USAGE;
	struct cli_periodic per = CLI_PERIODIC_INIT;
	const char *device = "auto", *stats = NULL;
	char manifest[PATH_MAX], latest[PATH_MAX];
	const char *dir;
	bool on_demand = false;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': device = optarg; break;
		case 'g':
		case 'G':
			gpu_option(c, optarg);
			break;
		case 's': stats = optarg; break;
		case 'o': on_demand = true; break;
		case 'h': printf("%s", usage); return 0;
		default:
			if (cli_periodic_option(&per, c, optarg) == 0)
				break;
			if (c < CLI_OPT_CKPT_DIR)
				fprintf(stderr, "%s", usage);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "%s", usage);
		return 2;
	}
	dir = argv[optind];
	/* A --checkpoint-dir: its latest checkpoint. */
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	if (access(manifest, F_OK) != 0 && cli_periodic_latest(dir, latest, sizeof(latest)) == 0)
		dir = latest;
	if (cli_periodic_check(&per) < 0)
		return 2;
	return cli_restore_run(device, dir, on_demand, stats, &per);
}
