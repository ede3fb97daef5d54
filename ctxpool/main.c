/* SPDX-License-Identifier: MIT */
/*
 * phos-executor: opens a device context, reserves the fixed arena, and serves
 * one function process on the channel socket it is given.
 *
 *   phos-executor --fd N [--device auto|cuda|sim] [--trace FILE]
 *                 [--arena-base ADDR] [--arena-size BYTES] [--no-warm]
 *                 [--control-fd N] [--snapshot-to DIR | --restore-from DIR]
 *
 * --snapshot-to: when the function reaches phos_fn_serve, dump the device state
 * into DIR and report "dumped {...}" on the control descriptor (exec_image.c).
 * --restore-from: rebuild the device state of the snapshot in DIR before
 * serving (its arena is used), then report "ready"; "error <reason>" otherwise.
 * --pool: stay warm and serve one function after another (pool_loop below).
 *
 * PHOS_TRACE and PHOS_ARENA_BASE give defaults for --trace and --arena-base
 * (sanitizer builds move the arena: ASan's heap sits at 0x600000000000).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "log.h"

static int map_chunks(void *ctx, uint64_t addr, uint64_t len)
{
	struct executor *ex = ctx;

	return ex->dev_ops->map(ex->dev, addr, len);
}

static void unmap_chunks(void *ctx, uint64_t addr, uint64_t len)
{
	struct executor *ex = ctx;

	ex->dev_ops->unmap(ex->dev, addr, len);
}

static void table_clear(struct handle_table *t, void (*fn)(struct executor *, void *), struct executor *ex)
{
	for (uint32_t i = 0; i < t->cap; i++) {
		if (t->slot[i]) {
			fn(ex, t->slot[i]);
			t->slot[i] = NULL;
		}
	}
}

static void drop_stream(struct executor *ex, void *s) { exec_stream_free(ex, s); }
static void drop_event(struct executor *ex, void *e) { exec_event_free(ex, e); }
static void drop_blas(struct executor *ex, void *b) { exec_blas_free(ex, b); }
static void drop_func(struct executor *ex, void *f) { (void)ex; exec_func_free(f); }
static void drop_var(struct executor *ex, void *v) { (void)ex; exec_var_free(v); }
static void drop_module(struct executor *ex, void *m) { exec_module_free(ex, m); }
static void drop_region(struct executor *ex, void *r) { exec_region_free(ex, r); }

void exec_scrub(struct executor *ex)
{
	if (ex->dev)
		ex->dev_ops->synchronize(ex->dev);
	table_clear(&ex->blas, drop_blas, ex);
	table_clear(&ex->streams, drop_stream, ex);
	table_clear(&ex->events, drop_event, ex);
	table_clear(&ex->funcs, drop_func, ex);
	table_clear(&ex->vars, drop_var, ex);
	table_clear(&ex->modules, drop_module, ex);
	table_clear(&ex->regions, drop_region, ex);
	if (ex->bufs)
		phos_bufmap_reset(ex->bufs);
	ex->pending_error = 0;
}

/* One function: its snapshot loaded first when img is given, then its calls
 * until it says goodbye or goes away; the executor is scrubbed afterwards.
 * The channel socket fd is taken over. */
static int serve_one(struct executor *ex, int fd, const char *dir, const struct phos_image *img, double t_open,
		     double t0)
{
	char err[512] = "";
	int r = 0;

	if (img) {
		r = exec_image_load(ex, dir, img, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "phos-executor: restoring %s: %s\n", dir, err);
			exec_control(ex, "error %s", err);
			close(fd);
			return r;
		}
	}
	r = phos_channel_serve_new(fd, PHOS_RING_DEFAULT, &ex->ch);
	if (r < 0) {
		close(fd);
		exec_control(ex, "error cannot set up the channel: %s", strerror(-r));
		exec_scrub(ex);
		return r;
	}
	if (img)
		exec_control(ex, "ready {\"open_s\":%.6f,\"load_s\":%.6f,\"data_s\":%.6f,\"data_bytes\":%llu}",
			     t_open, phos_now() - t0 - t_open, ex->load_data_s, (unsigned long long)img->gpu_bytes);
	{
		/* Pinning the channel lets H2D copies read records by DMA. */
		size_t shm_len;
		void *shm = phos_channel_shm(ex->ch, &shm_len);

		if (ex->dev_ops->host_register(ex->dev, shm, shm_len) < 0)
			phos_warn("could not pin the channel");
		r = exec_serve(ex);
		ex->dev_ops->host_unregister(ex->dev, shm);
		if (r < 0)
			phos_err("serving failed: %s", strerror(-r));
	}
	exec_scrub(ex);
	phos_channel_free(ex->ch);
	ex->ch = NULL;
	ex->goodbye = false;
	return r;
}

/* Reads one line (without its newline) from the control socket; false at EOF. */
static bool control_line(int fd, char *line, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		ssize_t n = read(fd, line + got, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		if (line[got] == '\n')
			break;
		got++;
	}
	line[got] = '\0';
	return true;
}

/*
 * --pool: a warm executor that serves one function after another. It reports
 * "idle" on the control socket and waits for a job: a channel socket passed
 * with SCM_RIGHTS, then "serve" or "restore DIR". After the function is gone it
 * is scrubbed (arena mappings released, module cache... kept by the driver) and
 * reports "idle" again. The control socket closing ends it.
 */
static int pool_loop(struct executor *ex)
{
	char line[4200], err[512];

	for (;;) {
		struct phos_image *img = NULL;
		const char *dir = NULL;
		double t0;
		int fd, r;

		exec_control(ex, "idle");
		r = phos_recv_fd(ex->control_fd, &fd);
		if (r == -EPIPE)
			return 0;
		if (r < 0 || !control_line(ex->control_fd, line, sizeof(line))) {
			if (r == 0)
				close(fd);
			return r < 0 ? r : 0;
		}
		t0 = phos_now();
		if (!strncmp(line, "restore ", 8)) {
			dir = line + 8;
			r = phos_image_read(dir, &img, err, sizeof(err));
			if (r == 0 && (img->arena_base != ex->arena_base || img->arena_size != ex->arena_size)) {
				snprintf(err, sizeof(err), "the snapshot's arena differs from this pool's");
				r = -EINVAL;
			}
			if (r < 0) {
				exec_control(ex, "error %s: %s", dir, err);
				phos_image_free(img);
				close(fd);
				continue;
			}
		} else if (strcmp(line, "serve") != 0) {
			exec_control(ex, "error unknown job '%.100s'", line);
			close(fd);
			continue;
		}
		serve_one(ex, fd, dir, img, 0, t0);
		phos_image_free(img);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-executor --fd N [--device auto|cuda|sim] [--trace FILE]\n"
		   "                     [--arena-base ADDR] [--arena-size BYTES] [--no-warm]\n"
		   "                     [--control-fd N] [--snapshot-to DIR | --restore-from DIR | --pool]\n");
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "fd", required_argument, NULL, 'f' },
		{ "device", required_argument, NULL, 'd' },
		{ "trace", required_argument, NULL, 't' },
		{ "arena-base", required_argument, NULL, 'b' },
		{ "arena-size", required_argument, NULL, 's' },
		{ "no-warm", no_argument, NULL, 'n' },
		{ "control-fd", required_argument, NULL, 'c' },
		{ "snapshot-to", required_argument, NULL, 'S' },
		{ "restore-from", required_argument, NULL, 'R' },
		{ "pool", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct executor ex = { .arena_base = PHOS_ARENA_BASE_DEFAULT, .arena_size = PHOS_ARENA_SIZE_DEFAULT,
			       .control_fd = -1 };
	const char *restore_from = NULL;
	struct phos_image *img = NULL;
	char err[512] = "";
	uint64_t cfd;
	const char *device = "auto", *trace = getenv("PHOS_TRACE");
	struct phos_bufmap_ops ops = { .map = map_chunks, .unmap = unmap_chunks, .ctx = &ex };
	uint64_t fd = UINT64_MAX;
	bool pool = false;
	double t0 = 0, t_open = 0;
	bool warm = true;
	int c, r;

	phos_log_init("phos-executor", PHOS_LOG_WARN);
	if (getenv("PHOS_ARENA_BASE") && parse_u64(getenv("PHOS_ARENA_BASE"), &ex.arena_base) < 0) {
		fprintf(stderr, "phos-executor: bad PHOS_ARENA_BASE\n");
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			if (parse_u64(optarg, &fd) < 0 || fd > 65535) {
				fprintf(stderr, "phos-executor: bad --fd '%s'\n", optarg);
				return 2;
			}
			break;
		case 'd': device = optarg; break;
		case 't': trace = optarg; break;
		case 'b':
		case 's':
			if (parse_u64(optarg, c == 'b' ? &ex.arena_base : &ex.arena_size) < 0) {
				fprintf(stderr, "phos-executor: bad --%s '%s'\n",
					c == 'b' ? "arena-base" : "arena-size", optarg);
				return 2;
			}
			break;
		case 'n': warm = false; break;
		case 'c':
			if (parse_u64(optarg, &cfd) < 0 || cfd > 65535) {
				fprintf(stderr, "phos-executor: bad --control-fd '%s'\n", optarg);
				return 2;
			}
			ex.control_fd = (int)cfd;
			break;
		case 'S': ex.snapshot_dir = optarg; break;
		case 'R': restore_from = optarg; break;
		case 'P': pool = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (pool && (ex.control_fd < 0 || restore_from || ex.snapshot_dir)) {
		fprintf(stderr, "phos-executor: --pool needs --control-fd and takes its jobs there\n");
		return 2;
	}
	if ((fd == UINT64_MAX && !pool) || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (ex.snapshot_dir && restore_from) {
		fprintf(stderr, "phos-executor: --snapshot-to and --restore-from exclude each other\n");
		return 2;
	}
	if (ex.snapshot_dir && ex.control_fd < 0) {
		fprintf(stderr, "phos-executor: --snapshot-to needs --control-fd\n");
		return 2;
	}
	if (restore_from) {
		r = phos_image_read(restore_from, &img, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "phos-executor: %s: %s\n", restore_from, err);
			exec_control(&ex, "error %s", err);
			return 1;
		}
		ex.arena_base = img->arena_base;
		ex.arena_size = img->arena_size;
	}
	if (ex.arena_base % PHOS_CHUNK || ex.arena_size % PHOS_CHUNK || !ex.arena_size) {
		fprintf(stderr, "phos-executor: the arena base and size must be multiples of 2 MiB\n");
		return 2;
	}
	ex.dev_ops = phos_device_pick(device);
	if (!ex.dev_ops) {
		fprintf(stderr, "phos-executor: unknown device '%s' (auto, cuda or sim)\n", device);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (trace && *trace) {
		ex.trace = fopen(trace, "we");
		if (!ex.trace) {
			fprintf(stderr, "phos-executor: cannot open trace %s: %s\n", trace, strerror(errno));
			return 1;
		}
		setvbuf(ex.trace, NULL, _IOFBF, 1 << 20);
	}
	t0 = phos_now();
	/* A restore warms cuBLAS up beside loading the snapshot (exec_image_load). */
	r = ex.dev_ops->open(0, ex.arena_base, ex.arena_size, warm && !img, &ex.dev);
	t_open = phos_now() - t0;
	if (r < 0) {
		fprintf(stderr, "phos-executor: cannot open the %s device (cuda error %d)\n", ex.dev_ops->name, -r);
		exec_control(&ex, "error cannot open the %s device (cuda error %d)", ex.dev_ops->name, -r);
		phos_image_free(img);
		return 1;
	}
	r = phos_bufmap_new(ex.arena_base, ex.arena_size, &ops, &ex.bufs);
	if (r == 0 && pool)
		r = pool_loop(&ex);
	else if (r == 0)
		r = serve_one(&ex, (int)fd, restore_from, img, t_open, t0);
	struct handle_table *tables[] = { &ex.streams, &ex.events, &ex.modules, &ex.funcs,
					  &ex.vars, &ex.regions, &ex.blas };
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		handle_table_exit(tables[i]);
	phos_channel_free(ex.ch);
	phos_bufmap_free(ex.bufs);
	ex.dev_ops->close(ex.dev);
	if (ex.trace)
		fclose(ex.trace);
	phos_image_free(img);
	return r < 0 ? 1 : 0;
}
