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
 * --on-demand: report "ready" once the device objects are made, and bring the
 * buffers in while the function runs (loader.h).
 * --pool: stay warm and serve one function after another (pool_loop below).
 *
 * PHOS_TRACE and PHOS_ARENA_BASE give defaults for --trace ("%p" in it: the
 * executor's pid, one trace per executor of a pool) and --arena-base
 * (sanitizer builds move the arena: ASan's heap sits at 0x600000000000).
 *
 * PHOS_EXECUTOR_PARENT=PID (set by phos_executor_spawn): the executor ends
 * when that process does (parent_watch below), so that a SIGKILLed invoker
 * leaves no executor behind. Not PR_SET_PDEATHSIG: that fires when the
 * parent's *thread* that forked ends, and invokers spawn executors from
 * connection threads that end long before the executor should.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "loader.h"
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
	loader_free(ex->loader);
	ex->loader = NULL;
	if (ex->dev)
		ex->dev_ops->synchronize(ex->dev);
	table_clear(&ex->blas, drop_blas, ex);
	table_clear(&ex->streams, drop_stream, ex);
	table_clear(&ex->events, drop_event, ex);
	table_clear(&ex->funcs, drop_func, ex);
	table_clear(&ex->vars, drop_var, ex);
	table_clear(&ex->modules, drop_module, ex);
	table_clear(&ex->regions, drop_region, ex);
	exec_pool_clear(ex);
	if (ex->bufs)
		phos_bufmap_reset(ex->bufs);
	ex->pending_error = 0;
	ex->restore_dir = NULL;
	for (int i = 0; i < 3; i++)
		atomic_store(&ex->spec_fallbacks[i], 0);
}

/* Answers requests on the control socket while a function is served:
 *   "touched" → "touched ID,ID,..." the snapshot buffers the function has
 *               touched so far, in first-touch order (the invoker stores them
 *               as the snapshot's prefetch order after its first call).
 *   "fallbacks" → "fallbacks OPAQUE OVERFLOW VALIDATE RESTORING": the calls that
 *               took the safe path, by reason (executor.h, enum spec_fallback),
 *               and 1 while an on-demand restore is still moving buffers in.
 * Stops when serve_one writes to stop_fd. */
struct control_thread {
	struct executor *ex;
	int stop_fd;
	pthread_t th;
	bool running;
};

static void reply_touched(struct executor *ex)
{
	enum { MAX_IDS = 65536 };
	uint64_t *ids = ex->loader ? calloc(MAX_IDS, sizeof(*ids)) : NULL;
	size_t n = ids ? loader_touched(ex->loader, ids, MAX_IDS) : 0;
	char *line = malloc(16 + n * 21);
	size_t len = 0;

	if (!line) {
		free(ids);
		return;
	}
	len += (size_t)sprintf(line, "touched ");
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(line + len, "%s%llu", i ? "," : "", (unsigned long long)ids[i]);
	line[len++] = '\n';
	(void)!write(ex->control_fd, line, len);
	free(line);
	free(ids);
}

static void *control_main(void *arg)
{
	struct control_thread *ct = arg;
	char buf[256];
	size_t got = 0;

	for (;;) {
		struct pollfd p[2] = { { ct->ex->control_fd, POLLIN, 0 }, { ct->stop_fd, POLLIN, 0 } };
		ssize_t n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		n = read(ct->ex->control_fd, buf + got, 1);
		if (n <= 0)
			break;
		if (buf[got] != '\n' && got + 1 < sizeof(buf)) {
			got++;
			continue;
		}
		buf[got] = '\0';
		got = 0;
		if (!strcmp(buf, "touched"))
			reply_touched(ct->ex);
		else if (!strcmp(buf, "fallbacks"))
			exec_control(ct->ex, "fallbacks %llu %llu %llu %d",
				     (unsigned long long)atomic_load(&ct->ex->spec_fallbacks[SPEC_FB_OPAQUE]),
				     (unsigned long long)atomic_load(&ct->ex->spec_fallbacks[SPEC_FB_OVERFLOW]),
				     (unsigned long long)atomic_load(&ct->ex->spec_fallbacks[SPEC_FB_VALIDATE]),
				     ct->ex->loader && !loader_done(ct->ex->loader));
		else
			exec_control(ct->ex, "error unknown request while serving '%.100s'", buf);
	}
	return NULL;
}

/* Makes the channel for the next function and pins it, unless there is one.
 * A pooled executor does this while idle: pinning takes milliseconds and holds
 * the driver's lock, which would stall the restore engine's copies if it
 * happened once the cold start is under way (measured on the H100: the first
 * buffers of an on-demand restore landed 8-20 ms late). Failing is not fatal:
 * serve_one makes an unpinned channel then. */
static void channel_prepare(struct executor *ex)
{
	size_t len;
	void *shm;

	if (ex->next_ch || phos_channel_make(PHOS_RING_DEFAULT, &ex->next_ch) < 0)
		return;
	shm = phos_channel_shm(ex->next_ch, &len);
	ex->next_ch_pinned = ex->dev_ops->host_register(ex->dev, shm, len) == 0;
	if (!ex->next_ch_pinned)
		phos_warn("could not pin the channel (records are then copied, not read by DMA)");
}

/* Unpins (when pinned) and frees a channel; accepts NULL. */
static void channel_drop(struct executor *ex, struct phos_channel *ch, bool pinned)
{
	if (ch && pinned)
		ex->dev_ops->host_unregister(ex->dev, phos_channel_shm(ch, NULL));
	phos_channel_free(ch);
}

/* One function: its snapshot loaded first when img is given (on_demand: the
 * buffers stream in while it runs), then its calls until it says goodbye or
 * goes away; the executor is scrubbed afterwards. The channel socket fd is
 * taken over. */
static int serve_one(struct executor *ex, int fd, const char *dir, const struct phos_image *img, bool on_demand,
		     double t_open, double t0)
{
	struct control_thread ct = { .ex = ex, .stop_fd = -1 };
	int stop[2] = { -1, -1 };
	char err[512] = "";
	int r = 0;

	/* Before the restore engine starts (pinning would stall its copies). */
	channel_prepare(ex);
	if (img) {
		r = exec_image_load(ex, dir, img, on_demand, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "phos-executor: restoring %s: %s\n", dir, err);
			exec_control(ex, "error %s", err);
			close(fd);
			return r;
		}
	}
	ex->ch = ex->next_ch;
	ex->ch_pinned = ex->next_ch_pinned;
	ex->next_ch = NULL;
	ex->next_ch_pinned = false;
	r = ex->ch ? phos_channel_attach(ex->ch, fd) : (close(fd), -ENOMEM);
	if (r < 0) {
		channel_drop(ex, ex->ch, ex->ch_pinned);
		ex->ch = NULL;
		exec_control(ex, "error cannot set up the channel: %s", strerror(-r));
		exec_scrub(ex);
		return r;
	}
	if (img)
		exec_control(ex, "ready {\"open_s\":%.6f,\"load_s\":%.6f,\"data_s\":%.6f,\"data_bytes\":%llu,"
			     "\"on_demand\":%s}",
			     t_open, phos_now() - t0 - t_open, ex->load_data_s, (unsigned long long)img->gpu_bytes,
			     on_demand ? "true" : "false");
	if (img && ex->control_fd >= 0 && pipe2(stop, O_CLOEXEC) == 0) {
		ct.stop_fd = stop[0];
		ct.running = pthread_create(&ct.th, NULL, control_main, &ct) == 0;
	}
	/* The channel is pinned (channel_prepare): H2D copies read records by DMA. */
	r = exec_serve(ex);
	if (r < 0)
		phos_err("serving failed: %s", strerror(-r));
	if (ct.running) {
		(void)!write(stop[1], "x", 1);
		pthread_join(ct.th, NULL);
	}
	for (int i = 0; i < 2; i++)
		if (stop[i] >= 0)
			close(stop[i]);
	exec_scrub(ex);
	channel_drop(ex, ex->ch, ex->ch_pinned);
	ex->ch = NULL;
	ex->ch_pinned = false;
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
 * "idle" on the control socket and waits for a job: a descriptor passed with
 * SCM_RIGHTS, then a line:
 *   serve                    the descriptor is a function's channel socket
 *   restore DIR              ... restore DIR stop-the-world, then serve it
 *   restore-on-demand DIR    ... restore DIR on demand (loader.h)
 *   hot N, then N lines DIR  make exactly these snapshots hot (exec_hot.c;
 *                            the descriptor is unused); answers
 *                            "hot <n> <bytes>" or "error <reason>"
 * After the function is gone it is scrubbed (arena mappings released, module
 * cache... kept by the driver; hot snapshots kept) and reports "idle" again.
 * The control socket closing ends it.
 */
static void hot_job(struct executor *ex, const char *count)
{
	char *dirs[PHOS_HOT_MAX] = { 0 }, line[4200], err[512] = "";
	long n = strtol(count, NULL, 10);
	long got = 0;

	if (n < 0 || n > PHOS_HOT_MAX) {
		exec_control(ex, "error hot: at most %d snapshots", PHOS_HOT_MAX);
		return;
	}
	while (got < n && control_line(ex->control_fd, line, sizeof(line)) && (dirs[got] = strdup(line)))
		got++;
	if (got < n)
		exec_control(ex, "error hot: the list ended early");
	else if (exec_hot_set(ex, dirs, (size_t)n, err, sizeof(err)) < 0)
		exec_control(ex, "error hot: %s", err);
	else
		exec_control(ex, "hot %zu %llu", ex->nhot, (unsigned long long)ex->hot_bytes);
	for (long i = 0; i < got; i++)
		free(dirs[i]);
}

static int pool_loop(struct executor *ex)
{
	char line[4200], err[512];

	for (;;) {
		struct phos_image *img = NULL;
		const char *dir = NULL;
		bool on_demand;
		double t0;
		int fd, r;

		channel_prepare(ex);   /* while idle, off the next cold start's path */
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
		on_demand = !strncmp(line, "restore-on-demand ", 18);
		if (!strncmp(line, "hot ", 4)) {
			close(fd);
			hot_job(ex, line + 4);
			continue;
		}
		if (!strncmp(line, "restore ", 8) || on_demand) {
			dir = line + (on_demand ? 18 : 8);
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
		serve_one(ex, fd, dir, img, on_demand, 0, t0);
		phos_image_free(img);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-executor --fd N [--device auto|cuda|sim] [--trace FILE]\n"
		   "                     [--arena-base ADDR] [--arena-size BYTES] [--no-warm]\n"
		   "                     [--control-fd N] [--snapshot-to DIR | --restore-from DIR [--on-demand] | --pool]\n");
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

static void *parent_watch_main(void *arg)
{
	struct pollfd p = { .fd = (int)(intptr_t)arg, .events = POLLIN };

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	/* Nobody is left to serve: not a clean exit (no scrub, no goodbye). */
	_exit(70);
	return NULL;
}

/* Ends this process when PHOS_EXECUTOR_PARENT does (see the top). The pidfd
 * is opened first and checked against getppid() after, so that it is our
 * parent's and not a process that reused its pid; a parent already gone
 * ends us at once. 0, or -errno when the watch cannot be set up. */
static int parent_watch(void)
{
	const char *env = getenv("PHOS_EXECUTOR_PARENT");
	pthread_t th;
	char *end;
	long pid;
	int fd;

	if (!env)
		return 0;
	pid = strtol(env, &end, 10);
	unsetenv("PHOS_EXECUTOR_PARENT");   /* not for anything we start */
	if (*end || pid <= 1)
		return -EINVAL;
	fd = pidfd_open((pid_t)pid, 0);
	if ((fd < 0 && errno == ESRCH) || getppid() != (pid_t)pid)
		_exit(70);   /* the parent is gone already */
	if (fd < 0)
		return -errno;
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || pthread_create(&th, NULL, parent_watch_main, (void *)(intptr_t)fd)) {
		close(fd);
		return -EAGAIN;
	}
	pthread_detach(th);
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
		{ "on-demand", no_argument, NULL, 'O' },
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
	bool pool = false, on_demand = false;
	double t0 = 0, t_open = 0;
	bool warm = true;
	int c, r;

	phos_log_init("phos-executor", PHOS_LOG_WARN);
	r = parent_watch();
	if (r < 0) {
		fprintf(stderr, "phos-executor: cannot watch PHOS_EXECUTOR_PARENT: %s\n", strerror(-r));
		return 2;
	}
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
		case 'O': on_demand = true; break;
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
		char path[4096];
		const char *pid_at = strstr(trace, "%p");

		/* "%p" in the path: one trace per executor (a pool runs several). */
		if (pid_at && snprintf(path, sizeof(path), "%.*s%d%s", (int)(pid_at - trace), trace, (int)getpid(),
				       pid_at + 2) < (int)sizeof(path))
			trace = path;
		ex.trace = fopen(trace, "we");
		if (!ex.trace) {
			fprintf(stderr, "phos-executor: cannot open trace %s: %s\n", trace, strerror(errno));
			return 1;
		}
		/* Line-buffered: an executor usually ends by a signal, and a trace is
		 * read to see where time went. */
		setvbuf(ex.trace, NULL, _IOLBF, 1 << 16);
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
		r = serve_one(&ex, (int)fd, restore_from, img, on_demand, t_open, t0);
	struct handle_table *tables[] = { &ex.streams, &ex.events, &ex.modules, &ex.funcs,
					  &ex.vars, &ex.regions, &ex.blas, &ex.pools };
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		handle_table_exit(tables[i]);
	channel_drop(&ex, ex.ch, ex.ch_pinned);
	channel_drop(&ex, ex.next_ch, ex.next_ch_pinned);
	exec_hot_clear(&ex);
	phos_bufmap_free(ex.bufs);
	ex.dev_ops->close(ex.dev);
	if (ex.trace)
		fclose(ex.trace);
	phos_image_free(img);
	return r < 0 ? 1 : 0;
}
