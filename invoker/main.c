/* SPDX-License-Identifier: MIT */
/* phos-invoker: options, startup, graceful shutdown. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli.h"
#include "criu.h"
#include "invoker.h"
#include "log.h"

struct inv_config inv_cfg;
volatile int inv_draining;
extern atomic_uint inv_http_active;

static volatile sig_atomic_t stop_signal;
static int stop_fd = -1;   /* eventfd the handler bumps */

/* Any thread may run this (none blocks the signal), so main does not wait in
 * pause(), which only its own thread's signals end: it waits on stop_fd. */
static void on_signal(int sig)
{
	uint64_t one = 1;
	int saved = errno;

	stop_signal = sig;
	if (stop_fd >= 0)
		(void)!write(stop_fd, &one, sizeof(one));
	errno = saved;
}

static void wake(struct inv_function *f, void *arg)
{
	pthread_mutex_lock(&f->lock);
	pthread_cond_broadcast(&f->cond); /* queued calls see inv_draining */
	pthread_mutex_unlock(&f->lock);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: phos-invoker [OPTIONS]\n\n"
		"  --listen ADDR:PORT     where the HTTP API listens (default 127.0.0.1:8080; [::1]:PORT for IPv6).\n"
		"                         Any address but 127.0.0.1, ::1 or localhost needs --token-file.\n"
		"  --state-dir DIR        registry and snapshots. Default: /var/lib/phos-fn when it is writable,\n"
		"                         else $XDG_STATE_HOME/phos-fn, else ~/.local/state/phos-fn.\n"
		"  --device auto|cuda|sim default device of deployed functions (auto: cuda when a GPU is there)\n"
		"  --token-file FILE      bearer token (first line) required by /system/* and /metrics\n"
		"  --protect-invoke       require the token for /function/* and /async-function/* too\n"
		"  --max-body-bytes N     default request body limit of a function (default 16777216)\n"
		"  --pool N               warm executors kept for the default device (default 2, 0: none):\n"
		"                         cold starts then create no GPU context\n"
		"  --restore MODE         on-demand (default): a cold instance runs at once and its GPU buffers\n"
		"                         stream in behind it; stop-the-world: every byte first\n"
		"  --hot-bytes N          snapshots whose gpu.data fits in N bytes together stay pinned in the\n"
		"                         page cache of every pooled executor (default: a quarter of RAM; 0: off)\n"
		"  --standby 0|1          keep one CRIU-restored process of each function parked, so that a cold\n"
		"                         start only restores the GPU side (default 1; needs the pool)\n"
		"  --max-instances N      instances of all functions together (1..4096, default 64): a cold\n"
		"                         start over it is 503\n");
}

/* The default state directory, as --help describes. */
static int default_state_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

	if (access("/var/lib/phos-fn", W_OK) == 0 || (access("/var/lib", W_OK) == 0 && mkdir("/var/lib/phos-fn", 0755) == 0)) {
		snprintf(buf, len, "/var/lib/phos-fn");
		return 0;
	}
	if (xdg && *xdg == '/')
		return snprintf(buf, len, "%s/phos-fn", xdg) < (int)len ? 0 : -ENAMETOOLONG;
	if (home && *home == '/')
		return snprintf(buf, len, "%s/.local/state/phos-fn", home) < (int)len ? 0 : -ENAMETOOLONG;
	return -ENOENT;
}

static char *read_token(const char *path)
{
	char buf[1024];
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (strlen(buf) < 16) {
		fprintf(stderr, "phos-invoker: the token in %s must be 16 characters or more\n", path);
		return NULL;
	}
	return strdup(buf);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },     { "state-dir", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'd' },     { "token-file", required_argument, NULL, 't' },
		{ "protect-invoke", no_argument, NULL, 'p' },   { "max-body-bytes", required_argument, NULL, 'm' },
		{ "pool", required_argument, NULL, 'P' },       { "help", no_argument, NULL, 'h' },
		{ "restore", required_argument, NULL, 'r' },    { "hot-bytes", required_argument, NULL, 'H' },
		{ "standby", required_argument, NULL, 'S' },
		{ "max-instances", required_argument, NULL, 'M' },
		{ 0 },
	};
	static char executor[PATH_MAX], preload[PATH_MAX], twins[PATH_MAX], criu[PATH_MAX], state[PATH_MAX];
	const char *listen = "127.0.0.1:8080", *device = "auto", *token_file = NULL;
	bool hot_set = false;

	inv_cfg.standby = true;
	inv_cfg.max_instances = 64;
	struct MHD_Daemon *d;
	struct sigaction sa = { .sa_handler = on_signal };
	char err[512];
	unsigned pool_size = 2;
	int c;

	phos_log_init("phos-invoker", PHOS_LOG_WARN);
	inv_cfg.max_body_bytes = 16u << 20;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 's': inv_cfg.state_dir = optarg; break;
		case 'd': device = optarg; break;
		case 't': token_file = optarg; break;
		case 'p': inv_cfg.protect_invoke = true; break;
		case 'm': {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			if (*end || v < 1 || v > INV_MAX_BODY_LIMIT) {
				fprintf(stderr, "phos-invoker: --max-body-bytes takes 1..%u\n", INV_MAX_BODY_LIMIT);
				return 2;
			}
			inv_cfg.max_body_bytes = v;
			break;
		}
		case 'P': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end || v < 0 || v > 64) {
				fprintf(stderr, "phos-invoker: --pool takes 0..64\n");
				return 2;
			}
			pool_size = (unsigned)v;
			break;
		}
		case 'r':
			if (strcmp(optarg, "on-demand") && strcmp(optarg, "stop-the-world")) {
				fprintf(stderr, "phos-invoker: --restore takes on-demand or stop-the-world\n");
				return 2;
			}
			inv_cfg.stop_the_world = !strcmp(optarg, "stop-the-world");
			break;
		case 'M': {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 4096) {
				fprintf(stderr, "phos-invoker: --max-instances takes 1..4096\n");
				return 2;
			}
			inv_cfg.max_instances = (unsigned)v;
			break;
		}
		case 'S':
			if (strcmp(optarg, "0") && strcmp(optarg, "1")) {
				fprintf(stderr, "phos-invoker: --standby takes 0 or 1\n");
				return 2;
			}
			inv_cfg.standby = optarg[0] == '1';
			break;
		case 'H': {
			char *end;
			unsigned long long v;

			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-') {
				fprintf(stderr, "phos-invoker: --hot-bytes takes a number of bytes\n");
				return 2;
			}
			inv_cfg.hot_bytes = v;
			hot_set = true;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (token_file && !(inv_cfg.token = read_token(token_file))) {
		fprintf(stderr, "phos-invoker: cannot read a token from %s\n", token_file);
		return 1;
	}
	if (!inv_listen_is_loopback(listen) && !inv_cfg.token) {
		fprintf(stderr, "phos-invoker: refusing to listen on %s without --token-file "
				"(only 127.0.0.1, ::1 and localhost are served without a token)\n", listen);
		return 2;
	}
	if (inv_cfg.protect_invoke && !inv_cfg.token) {
		fprintf(stderr, "phos-invoker: --protect-invoke needs --token-file\n");
		return 2;
	}
	inv_cfg.device = cli_resolve_device(device);
	if (!inv_cfg.device) {
		fprintf(stderr, "phos-invoker: unknown device '%s' (use auto, cuda or sim)\n", device);
		return 2;
	}
	if (!inv_cfg.state_dir) {
		if (default_state_dir(state, sizeof(state)) < 0) {
			fprintf(stderr, "phos-invoker: no state directory (set --state-dir)\n");
			return 2;
		}
		inv_cfg.state_dir = state;
	}
	if (cli_find_executor(executor, sizeof(executor)) < 0 || cli_find_preload_dir(preload, sizeof(preload)) < 0) {
		fprintf(stderr, "phos-invoker: phos-executor or the preload libraries not found "
				"(set PHOS_EXECUTOR, PHOS_PRELOAD_DIR)\n");
		return 1;
	}
	if (phos_criu_find(criu, sizeof(criu), err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	inv_cfg.paths.executor = executor;
	inv_cfg.paths.preload_dir = preload;
	inv_cfg.paths.criu = criu;
	if (cli_find_sim_twins(twins, sizeof(twins)) == 0)
		inv_cfg.paths.sim_twins = twins;
	if (!hot_set) {
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

		inv_cfg.hot_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : 0;
	}
	if (pool_size) {
		struct phos_runtime_paths pp = inv_cfg.paths;

		pp.device = inv_cfg.device;
		if (strcmp(pp.device, "sim"))
			pp.sim_twins = NULL;
		if (phos_pool_new(&pp, pool_size, &inv_cfg.pool) < 0)
			fprintf(stderr, "phos-invoker: no warm pool; every cold start makes its own executor\n");
	}

	signal(SIGPIPE, SIG_IGN);
	stop_fd = eventfd(0, EFD_CLOEXEC);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	int r = inv_registry_init();
	if (r < 0) {
		fprintf(stderr, "phos-invoker: state directory %s: %s\n", inv_cfg.state_dir, strerror(-r));
		return 1;
	}
	if (inv_reaper_start() < 0)
		return 1;
	d = inv_http_start(listen, err, sizeof(err));
	if (!d) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	fprintf(stderr, "phos-invoker: listening on %s, state in %s, device %s\n", listen, inv_cfg.state_dir,
		inv_cfg.device);
	while (!stop_signal) {
		uint64_t n;

		if (stop_fd < 0 || (read(stop_fd, &n, sizeof(n)) < 0 && errno != EINTR))
			sleep(1);   /* no eventfd: look again each second */
	}

	/* Drain: new calls get 503, running ones finish (at most 60 s), then stop. */
	fprintf(stderr, "phos-invoker: %s, draining\n", strsignal(stop_signal));
	inv_draining = 1;
	inv_function_foreach(wake, NULL);
	for (int i = 0; i < 600 && (atomic_load(&inv_http_active) || inv_calls_inflight()); i++)
		usleep(100 * 1000);
	MHD_stop_daemon(d);
	inv_reaper_stop();
	inv_registry_exit();
	phos_pool_free(inv_cfg.pool);
	free(inv_cfg.token);
	fprintf(stderr, "phos-invoker: stopped\n");
	return 0;
}
