/* SPDX-License-Identifier: MIT */
/* phos-invoker: options, startup, graceful shutdown. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "paths.h"
#include "criu.h"
#include "invoker.h"
#include "log.h"
#include "cluster.h"
#include "token.h"

extern atomic_uint inv_http_active, inv_http_open;

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
		"  --state-dir DIR        registry and snapshots (mode 0700). Default: $PHOS_STATE_DIR, else\n"
		"                         /var/lib/phos-fn when it is writable,\n"
		"                         else $XDG_STATE_HOME/phos-fn, else ~/.local/state/phos-fn.\n"
		"  --device auto|cuda|sim default device of deployed functions (auto: cuda when a GPU is there)\n"
		"  --token-file FILE      bearer token (first line, 16+ characters, file mode 0600) required by\n"
		"                         /system/* and /metrics. Default: STATE/admin.token, created at the\n"
		"                         first start (random, 0600), which phos-fn reads by itself. Other\n"
		"                         invokers get STATE/peer.token (phos-fn peer-token), which opens only\n"
		"                         the routes they use (pull, move, rendezvous, forwarded calls)\n"
		"  --protect-invoke       require the token for /function/* and /async-function/* too\n"
		"  --allow-host NAME      a further Host name (or name:port) clients may use (repeatable): other\n"
		"                         Host or Origin headers than the listen address and localhost get 403\n"
		"  --conn-timeout S       close a connection idle for S seconds (a reader that stops; default 10)\n"
		"  --header-timeout S     close a connection whose request headers are not all in S seconds after\n"
		"                         its accept or its previous answer (default 5): bytes that trickle in\n"
		"                         do not extend it\n"
		"  --min-body-rate N      close a connection sending its request body slower than N bytes/s on\n"
		"                         average, counted after a grace of --header-timeout (default 1024)\n"
		"  --max-connections N    open connections in all (default 8192)\n"
		"  --max-connections-per-ip N  open connections of one client address (default 256)\n"
		"  --http-threads N       threads polling the connections (default 4)\n"
		"  --http-workers N       threads running calls at once, the rest queued (default 256); requests\n"
		"                         of token holders have 64 more of their own\n"
		"  --body-memory N        bytes of request bodies held in memory at once, across all requests\n"
		"                         (default 536870912): a body that would go over it is refused with 503\n"
		"  --body-spill N         an invocation body over N bytes is kept in an unlinked file in\n"
		"                         STATE/bodies instead of memory (default 1048576; 0: never)\n"
		"  --body-disk N          bytes of such files at once, across all requests (default 4294967296):\n"
		"                         a body that would go over it is refused with 503\n"
		"  --max-body-bytes N     default request body limit of a function (default 16777216)\n"
		"  --pool N               warm executors kept for the default device (default 2, 0: none):\n"
		"                         cold starts then create no GPU context\n"
		"  --lend-executors 0|1   lend them to `phos-fn run` on this machine through\n"
		"                         STATE/executors.sock, mode 0600 (default 1)\n"
		"  --restore MODE         on-demand (default): a cold instance runs at once and its GPU buffers\n"
		"                         stream in behind it; stop-the-world: every byte first\n"
		"  --hot-bytes N          snapshots whose gpu.data fits in N bytes together stay pinned in the\n"
		"                         page cache of every pooled executor (default: a quarter of RAM; 0: off)\n"
		"  --standby 0|1          keep one CRIU-restored process of each function parked, so that a cold\n"
		"                         start only restores the GPU side (default 1; needs the pool)\n"
		"  --max-instances N      instances of all functions together (1..4096, default 64): a cold\n"
		"                         start over it is 503\n"
		"  --async-queue N        async calls accepted and not finished (1..65536, default 1024): a call\n"
		"                         over it is 429 at submission\n"
		"  --async-retention S    seconds a finished async result stays readable (1..604800, default 600;\n"
		"                         at most 16384 results and 128 MiB of their bodies, oldest first)\n"
		"  --drain-timeout S      on SIGTERM/SIGINT, wait at most S seconds (0..3600, default 30) for\n"
		"                         running calls; those still running then get 503, and it exits\n"
		"  --validate-spec MODE   run exact kernels as their validation twins, which check every access\n"
		"                         against the launch's proven set: restore (while an on-demand restore\n"
		"                         runs), always, or off (default; PHOS_VALIDATE_SPEC sets the default).\n"
		"                         A kernel caught outside its set is opaque from then on\n"
		"  --run-as USER          run functions as USER (a name, UID or UID:GID) in a mount namespace of\n"
		"                         their own; only when the invoker runs as root (default there: nobody,\n"
		"                         or 65534 without one; 'self' runs them as the invoker's own user)\n"
		"  --cluster URL          join the invokers registered in etcd at URL (http://HOST:PORT, its v3\n"
		"                         API): calls of functions this invoker lacks go to a member that has\n"
		"                         them; GET /system/cluster lists the members (docs/cluster.md)\n"
		"  --cluster-token-file FILE  the secret every member shares (first line, 16+ characters, mode\n"
		"                         0600): it opens the peer routes of every member; required by --cluster\n"
		"  --advertise URL        the URL other members reach this invoker at (http[s]://HOST:PORT;\n"
		"                         default: http://LISTEN when --listen names one address)\n");
}

/* --run-as: a user name, UID or UID:GID (a name's group is its primary one). */
static int parse_run_as(const char *s, struct phos_criu_user *ret)
{
	struct passwd *pw = getpwnam(s);
	unsigned long u, g;
	char *end;

	if (pw) {
		ret->uid = pw->pw_uid;
		ret->gid = pw->pw_gid;
		return 0;
	}
	errno = 0;
	u = strtoul(s, &end, 10);
	if (errno || end == s || (*end && *end != ':') || u >= 0xffffffffUL)
		return -EINVAL;
	g = u;
	if (*end == ':') {
		s = end + 1;
		g = strtoul(s, &end, 10);
		if (errno || end == s || *end || g >= 0xffffffffUL)
			return -EINVAL;
	} else if ((pw = getpwuid((uid_t)u))) {
		g = pw->pw_gid;
	}
	ret->uid = (uid_t)u;
	ret->gid = (gid_t)g;
	return 0;
}

/* Every connection holds a descriptor (and instances hold more): raises the
 * soft RLIMIT_NOFILE towards want, within the hard limit. */
static void raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		fprintf(stderr, "phos-invoker: RLIMIT_NOFILE is %llu; --max-connections %u may run out of descriptors\n",
			(unsigned long long)rl.rlim_cur, inv_cfg.max_connections);
}

static void cancel_snapshot(struct inv_function *f, void *arg)
{
	pthread_mutex_lock(&f->lock);
	inv_function_cancel_snapshot(f);
	pthread_mutex_unlock(&f->lock);
}

static bool busy(void)
{
	return atomic_load(&inv_http_active) || inv_calls_inflight();
}

/* Waits (bounded) until cond() is false or timeout_s passed; true when it is false. */
static bool wait_until_not(bool (*cond)(void), double timeout_s)
{
	double end = phos_now() + timeout_s;

	while (cond() && phos_now() < end)
		usleep(20 * 1000);
	return !cond();
}

/* Drain: new calls get 503 (and every answer says Connection: close, so that
 * keep-alive clients do not send into a closing daemon); running ones have
 * drain_s to finish; then the abort eventfd ends those still running, which
 * answer 503. inv_http_stop then lets the answers in flight out. */
static void drain(unsigned drain_s)
{
	fprintf(stderr, "phos-invoker: %s, draining (at most %u s)\n", strsignal(stop_signal), drain_s);
	inv_draining = 1;
	inv_function_foreach(wake, NULL);
	if (!wait_until_not(busy, drain_s)) {
		fprintf(stderr, "phos-invoker: drain limit of %u s ran out: %u HTTP requests and %u async calls still "
				"running get 503\n", drain_s, atomic_load(&inv_http_active), inv_calls_inflight());
		(void)!eventfd_write(inv_drain_abort_fd, 1);
		inv_function_foreach(cancel_snapshot, NULL);   /* deploys and re-snapshots */
		if (!wait_until_not(busy, 10))
			fprintf(stderr, "phos-invoker: calls still running 10 s after the drain limit; stopping anyway\n");
	}
}

/* STATE/listen: where we listen, so that phos-fn sends STATE's admin token to
 * us alone (token.h). Written whole (a temporary file renamed); a failure
 * only costs the CLI its token from STATE. */
static void listen_note(const char *listen)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", inv_cfg.state_dir, INV_LISTEN_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (f) {
		bool ok = fprintf(f, "%s\n", listen) > 0;

		if (fclose(f) == 0 && ok && chmod(tmp, 0644) == 0 && rename(tmp, path) == 0)
			return;
	}
	fprintf(stderr, "phos-invoker: cannot write %s: %s\n", path, strerror(errno));
	unlink(tmp);
}

/* The invoker's own settings from its command line (the rest go to inv_cfg). */
struct opts {
	const char *listen, *device, *token_file;
	const char *cluster, *cluster_token_file, *advertise;   /* cluster.h */
	unsigned pool_size, drain_s;
	bool hot_set, lend;
};

/* Options that take a number: their range, and where it goes. */
static const struct num_opt {
	int opt;
	const char *name;
	unsigned long long lo, hi;
	const char *takes;   /* the refusal's words, when not "LO..HI" */
} num_opts[] = {
	{ 'm', "--max-body-bytes", 1, INV_MAX_BODY_LIMIT, NULL },
	{ 'P', "--pool", 0, 64, NULL },
	{ 'M', "--max-instances", 1, 4096, NULL },
	{ 'D', "--drain-timeout", 0, 3600, "0..3600 (seconds)" },
	{ 'Q', "--async-queue", 1, 65536, NULL },
	{ 'R', "--async-retention", 1, 604800, NULL },
	{ 'H', "--hot-bytes", 0, ULLONG_MAX, "a number of bytes" },
	{ 'T', "--conn-timeout", 1, 3600, NULL },
	{ 'C', "--max-connections", 1, 65536, NULL },
	{ 'I', "--max-connections-per-ip", 1, 65536, NULL },
	{ 'B', "--body-memory", 1u << 20, 1ull << 40, NULL },
	{ 'b', "--body-spill", 0, 1ull << 40, NULL },
	{ 'k', "--body-disk", 1u << 20, 1ull << 50, NULL },
	{ '1', "--header-timeout", 1, 3600, NULL },
	{ '2', "--min-body-rate", 0, 1u << 30, NULL },
	{ '3', "--http-threads", 1, 64, NULL },
	{ '4', "--http-workers", 1, 4096, NULL },
};

/* Sets option c (one of num_opts) to v. */
static void num_set(int c, unsigned long long v, struct opts *o)
{
	switch (c) {
	case 'm': inv_cfg.max_body_bytes = v; break;
	case 'P': o->pool_size = (unsigned)v; break;
	case 'M': inv_cfg.max_instances = (unsigned)v; break;
	case 'D': o->drain_s = (unsigned)v; break;
	case 'Q': inv_cfg.async_queue = (unsigned)v; break;
	case 'R': inv_cfg.async_retention_s = (double)v; break;
	case 'H': inv_cfg.hot_bytes = v; o->hot_set = true; break;
	case 'T': inv_cfg.conn_timeout_s = (unsigned)v; break;
	case 'C': inv_cfg.max_connections = (unsigned)v; break;
	case 'I': inv_cfg.max_connections_per_ip = (unsigned)v; break;
	case 'B': inv_cfg.body_memory = v; break;
	case 'b': inv_cfg.body_spill = v; break;
	case 'k': inv_cfg.body_disk = v; break;
	case '1': inv_cfg.header_timeout_s = (unsigned)v; break;
	case '2': inv_cfg.min_body_rate = (unsigned)v; break;
	case '3': inv_cfg.http_threads = (unsigned)v; break;
	case '4': inv_cfg.http_workers = (unsigned)v; break;
	}
}

/* A number option's argument, checked against its range: 0, or 2 (said why). */
static int num_parse(const struct num_opt *n, const char *arg, struct opts *o)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || arg[0] == '-' || v < n->lo || v > n->hi) {
		if (n->takes)
			fprintf(stderr, "phos-invoker: %s takes %s\n", n->name, n->takes);
		else
			fprintf(stderr, "phos-invoker: %s takes %llu..%llu\n", n->name, n->lo, n->hi);
		return 2;
	}
	num_set(n->opt, v, o);
	return 0;
}

static struct phos_criu_user run_as;
static char *cluster_token;   /* --cluster-token-file's, until the cluster has it */

/* The defaults of everything an option can set. */
static void defaults(struct opts *o)
{
	*o = (struct opts){ .listen = "127.0.0.1:8080", .device = "auto", .pool_size = 2, .drain_s = 30,
			    .lend = true };
	inv_cfg.standby = true;
	inv_cfg.max_instances = 64;
	inv_cfg.async_queue = 1024;
	inv_cfg.async_retention_s = 600;
	inv_cfg.max_body_bytes = 16u << 20;
	inv_cfg.conn_timeout_s = 10;
	inv_cfg.max_connections = 8192;
	inv_cfg.max_connections_per_ip = 256;
	inv_cfg.header_timeout_s = 5;
	inv_cfg.min_body_rate = 1024;
	inv_cfg.http_threads = 4;
	inv_cfg.http_workers = 256;
	inv_cfg.body_memory = 512u << 20;
	inv_cfg.body_spill = 1u << 20;
	inv_cfg.body_disk = 4ull << 30;
	/* a function of a root invoker runs as nobody unless --run-as says otherwise */
	if (geteuid() == 0) {
		if (parse_run_as("nobody", &run_as) < 0)
			run_as = (struct phos_criu_user){ 65534, 65534 };
		inv_cfg.paths.run_as = &run_as;
	}
}

/* An option that takes one of a few words: its index in words, or -1 (said why). */
static int word_opt(const char *name, const char *arg, const char *const *words, const char *takes)
{
	for (int i = 0; words[i]; i++)
		if (!strcmp(arg, words[i]))
			return i;
	fprintf(stderr, "phos-invoker: %s takes %s\n", name, takes);
	return -1;
}

static const struct option long_opts[] = {
	{ "listen", required_argument, NULL, 'l' },     { "state-dir", required_argument, NULL, 's' },
	{ "device", required_argument, NULL, 'd' },     { "token-file", required_argument, NULL, 't' },
	{ "protect-invoke", no_argument, NULL, 'p' },   { "max-body-bytes", required_argument, NULL, 'm' },
	{ "pool", required_argument, NULL, 'P' },       { "help", no_argument, NULL, 'h' },
	{ "restore", required_argument, NULL, 'r' },    { "hot-bytes", required_argument, NULL, 'H' },
	{ "standby", required_argument, NULL, 'S' },
	{ "max-instances", required_argument, NULL, 'M' },
	{ "allow-host", required_argument, NULL, 'A' }, { "conn-timeout", required_argument, NULL, 'T' },
	{ "max-connections", required_argument, NULL, 'C' },
	{ "max-connections-per-ip", required_argument, NULL, 'I' },
	{ "header-timeout", required_argument, NULL, '1' },
	{ "min-body-rate", required_argument, NULL, '2' },
	{ "http-threads", required_argument, NULL, '3' },
	{ "http-workers", required_argument, NULL, '4' },
	{ "body-memory", required_argument, NULL, 'B' },
	{ "body-spill", required_argument, NULL, 'b' },
	{ "body-disk", required_argument, NULL, 'k' },
	{ "async-queue", required_argument, NULL, 'Q' },
	{ "async-retention", required_argument, NULL, 'R' },
	{ "drain-timeout", required_argument, NULL, 'D' },
	{ "validate-spec", required_argument, NULL, 'V' },
	{ "run-as", required_argument, NULL, 'U' },
	{ "lend-executors", required_argument, NULL, 'L' },
	{ "cluster", required_argument, NULL, '5' },
	{ "cluster-token-file", required_argument, NULL, '6' },
	{ "advertise", required_argument, NULL, '7' },
	{ 0 },
};

/* --cluster, --cluster-token-file and --advertise go together; false when
 * they do not (said on stderr). */
static bool cluster_options_ok(const struct opts *o)
{
	if ((o->cluster_token_file || o->advertise) && !o->cluster) {
		fprintf(stderr, "phos-invoker: --cluster-token-file and --advertise go with --cluster\n");
		return false;
	}
	if (o->cluster && !o->cluster_token_file) {
		fprintf(stderr, "phos-invoker: --cluster needs --cluster-token-file (the secret its members share)\n");
		return false;
	}
	if ((o->cluster && !inv_cluster_url_ok(o->cluster)) || (o->advertise && !inv_cluster_url_ok(o->advertise))) {
		fprintf(stderr, "phos-invoker: --cluster and --advertise take http[s]://HOST[:PORT] (no path, user, "
				"query or trailing slash)\n");
		return false;
	}
	if (o->cluster && !o->advertise &&
	    (!strncmp(o->listen, "0.0.0.0:", 8) || !strncmp(o->listen, "[::]:", 5))) {
		fprintf(stderr, "phos-invoker: --cluster with --listen %s needs --advertise (the address other "
				"members reach us at)\n", o->listen);
		return false;
	}
	return true;
}

/* The command line into o and inv_cfg: -1 to go on, or the exit status
 * (0 after --help, 2 for a bad option, said on stderr). */
static int parse_options(int argc, char **argv, struct opts *o)
{
	static const char *const zero_one[] = { "0", "1", NULL };
	int c, w;

	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		const struct num_opt *n = NULL;

		for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++)
			if (num_opts[i].opt == c)
				n = &num_opts[i];
		if (n) {
			if (num_parse(n, optarg, o))
				return 2;
			continue;
		}
		switch (c) {
		case 'l': o->listen = optarg; break;
		case 's': inv_cfg.state_dir = optarg; break;
		case 'd': o->device = optarg; break;
		case 't': o->token_file = optarg; break;
		case 'p': inv_cfg.protect_invoke = true; break;
		case 'V':
			if (word_opt("--validate-spec", optarg, (const char *const[]){ "off", "restore", "always", NULL },
				     "off, restore or always") < 0)
				return 2;
			inv_cfg.validate_spec = optarg;
			break;
		case 'r':
			w = word_opt("--restore", optarg, (const char *const[]){ "on-demand", "stop-the-world", NULL },
				     "on-demand or stop-the-world");
			if (w < 0)
				return 2;
			inv_cfg.stop_the_world = w == 1;
			break;
		case 'L':
			if ((w = word_opt("--lend-executors", optarg, zero_one, "0 or 1")) < 0)
				return 2;
			o->lend = w == 1;
			break;
		case 'S':
			if ((w = word_opt("--standby", optarg, zero_one, "0 or 1")) < 0)
				return 2;
			inv_cfg.standby = w == 1;
			break;
		case 'U':
			if (!strcmp(optarg, "self")) {
				inv_cfg.paths.run_as = NULL;
				break;
			}
			if (parse_run_as(optarg, &run_as) < 0) {
				fprintf(stderr, "phos-invoker: --run-as takes a user name, UID or UID:GID, not '%s'\n",
					optarg);
				return 2;
			}
			if (geteuid() != 0) {
				fprintf(stderr, "phos-invoker: --run-as needs the invoker to run as root\n");
				return 2;
			}
			inv_cfg.paths.run_as = &run_as;
			break;
		case 'A':
			if (inv_cfg.n_allow_hosts == INV_MAX_ALLOW_HOSTS || !*optarg || strlen(optarg) > 255) {
				fprintf(stderr, "phos-invoker: --allow-host takes a name of 1..255 characters, "
						"at most %d times\n", INV_MAX_ALLOW_HOSTS);
				return 2;
			}
			inv_cfg.allow_hosts[inv_cfg.n_allow_hosts++] = optarg;
			break;
		case '5': o->cluster = optarg; break;
		case '6': o->cluster_token_file = optarg; break;
		case '7': o->advertise = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	return cluster_options_ok(o) ? -1 : 2;
}

/* What the invoker needs before it opens its state: the token, the device,
 * the executors' environment, the programs it starts. -1 to go on, or the
 * exit status (said why). */
static int configure(const struct opts *o)
{
	static char executor[PATH_MAX], preload[PATH_MAX], twins[PATH_MAX], criu[PATH_MAX], state[PATH_MAX];
	char err[512];

	/* Nothing the invoker or its children (CRIU, snapshots) write is for others. */
	umask(077);
	raise_nofile(inv_cfg.max_connections + 1024u + 4096u);   /* (+ the pool's shared buffers: phos_pool_share) */
	if (o->token_file && inv_token_read(o->token_file, &inv_cfg.token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	if (o->cluster_token_file && inv_token_read(o->cluster_token_file, &cluster_token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-invoker: --cluster-token-file: %s\n", err);
		return 1;
	}
	if (!inv_listen_is_loopback(o->listen) && !o->token_file) {
		fprintf(stderr, "phos-invoker: refusing to listen on %s without --token-file "
				"(only 127.0.0.1, ::1 and localhost are served with the generated admin token)\n",
			o->listen);
		return 2;
	}
	/* Executors (pooled or not) read the mode from their environment. */
	if (!inv_cfg.validate_spec) {
		const char *env = getenv("PHOS_VALIDATE_SPEC");

		inv_cfg.validate_spec = env && (!strcmp(env, "restore") || !strcmp(env, "always")) ? env : "off";
	}
	/* An instance whose GPU context fails for good (a sticky CUDA error) ends
	 * with its executor and is replaced, or resumes from its checkpoint,
	 * instead of answering every later call with the error. */
	if (setenv("PHOS_EXIT_ON_FATAL", "1", 1) < 0 ||
	    setenv("PHOS_VALIDATE_SPEC", inv_cfg.validate_spec, 1) < 0) {
		fprintf(stderr, "phos-invoker: cannot set the executors' environment: %s\n", strerror(errno));
		return 1;
	}
	inv_cfg.device = cli_resolve_device(o->device);
	if (!inv_cfg.device) {
		fprintf(stderr, "phos-invoker: unknown device '%s' (use auto, cuda or sim)\n", o->device);
		return 2;
	}
	if (!inv_cfg.state_dir) {
		if (inv_state_dir_default(state, sizeof(state), true) < 0) {
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
	if (!o->hot_set) {
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

		inv_cfg.hot_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : 0;
	}
	return -1;
}

/* The state directory ours alone, swept, and read back; the warm pool, the
 * stop signals, the lender, the tokens. -1 to go on, or the exit status (said why). */
static int open_state(const struct opts *o, struct phos_lender **lender)
{
	struct sigaction sa = { .sa_handler = on_signal };
	char err[512];
	/* One invoker per state dir, and nothing of an earlier one left, before
	 * we start anything (the pool's executors are marked as ours). */
	int r = inv_registry_lock();

	if (r == 0)
		r = inv_orphans_sweep(inv_cfg.state_dir);
	if (r < 0) {
		fprintf(stderr, "phos-invoker: state directory %s: %s\n", inv_cfg.state_dir, strerror(-r));
		return 1;
	}
	unsigned swept = phos_criu_sweep();   /* restores cut short by a SIGKILL (ours or another's) */

	if (swept)
		fprintf(stderr, "phos-invoker: removed %u CRIU work directories of restores whose process is gone\n",
			swept);
	if (o->pool_size) {
		struct phos_runtime_paths pp = inv_cfg.paths;

		pp.device = inv_cfg.device;
		if (strcmp(pp.device, "sim"))
			pp.sim_twins = NULL;
		if (phos_pool_new(&pp, o->pool_size, &inv_cfg.pool) < 0)
			fprintf(stderr, "phos-invoker: no warm pool; every cold start makes its own executor\n");
	}
	inv_drain_abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (inv_drain_abort_fd < 0) {
		fprintf(stderr, "phos-invoker: eventfd: %s\n", strerror(errno));
		return 1;
	}
	/* (after the pool: its executors keep the default dispositions) */
	signal(SIGPIPE, SIG_IGN);
	stop_fd = eventfd(0, EFD_CLOEXEC);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* what the instances call above them (invoker.h) */
	inv_instance_hooks = (struct inv_instance_hooks){ .stopping = inv_checkpoint_abandon,
							  .idle = inv_checkpoint_serve,
							  .periodic = inv_checkpoint_periodic,
							  .forward = inv_migrate_forward,
							  .tick = inv_migrate_expire };
	r = inv_registry_init();
	if (r == 0)
		inv_functions_start();
	if (r == 0)
		r = inv_calls_store_init();      /* before the checkpoints: calls to resume keep theirs */
	if (r == 0)
		r = inv_checkpoints_init();
	if (r == 0)
		r = inv_bodies_init();
	if (r < 0) {
		fprintf(stderr, "phos-invoker: state directory %s: %s\n", inv_cfg.state_dir, strerror(-r));
		return 1;
	}
	if (inv_cfg.pool && o->lend) {
		/* phos-fn run on this machine takes a warm executor from here */
		char path[PATH_MAX + 32], why[256];
		const char *gpu = getenv("PHOS_GPU");

		snprintf(path, sizeof(path), "%s/executors.sock", inv_cfg.state_dir);
		if (phos_lender_start(inv_cfg.pool, path, inv_cfg.device, gpu && *gpu ? atoi(gpu) : 0, lender, why,
				      sizeof(why)) < 0)
			fprintf(stderr, "phos-invoker: not lending executors: %s\n", why);
	}
	if (!inv_cfg.token && inv_token_ensure(inv_cfg.state_dir, INV_TOKEN_FILE, &inv_cfg.token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	/* what we give peers: it opens the peer routes alone (token.h) */
	if (inv_token_ensure(inv_cfg.state_dir, INV_PEER_TOKEN_FILE, &inv_cfg.peer_token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	if (!strcmp(inv_cfg.peer_token, inv_cfg.token)) {
		fprintf(stderr, "phos-invoker: STATE/" INV_PEER_TOKEN_FILE " holds the admin token: peers would get "
				"the control plane; remove it (a new one is made at the next start)\n");
		return 1;
	}
	return -1;
}

/* --cluster: our URL, the membership started (cluster.h) with the token
 * configure() read. 0, or -1 (said why). */
static int join_cluster(const struct opts *o)
{
	char err[512], self[300];
	const char *advertise = o->advertise;
	int r = -1;

	if (inv_token_equal(cluster_token, inv_cfg.token) || inv_token_equal(cluster_token, inv_cfg.peer_token)) {
		fprintf(stderr, "phos-invoker: the cluster token is this invoker's admin or peer token: every member "
				"would get it; make another\n");
		goto out;
	}
	if (!advertise) {
		snprintf(self, sizeof(self), "http://%s", o->listen);
		advertise = self;
	}
	r = inv_cluster_start(o->cluster, advertise, cluster_token, err, sizeof(err));
	if (r < 0)
		fprintf(stderr, "phos-invoker: --cluster: %s\n", err);
	else
		fprintf(stderr, "phos-invoker: a member of the cluster at %s as %s\n", o->cluster, advertise);
out:
	explicit_bzero(cluster_token, strlen(cluster_token));
	free(cluster_token);
	cluster_token = NULL;
	return r;
}

/* After a stop signal: the drain, then everything down in order. */
static int shut_down(struct MHD_Daemon *d, const struct opts *o, struct phos_lender *lender)
{
	inv_cluster_stop();   /* first: members stop sending calls here */
	drain(o->drain_s);
	if (!inv_http_stop(d, 2)) {
		fprintf(stderr, "phos-invoker: stopped with requests still running\n");
		_exit(1);
	}
	inv_calls_stop();
	inv_reaper_stop();
	inv_functions_stop();
	phos_lender_stop(lender);
	phos_pool_free(inv_cfg.pool);
	for (unsigned g = 2; g <= INV_MAX_GPUS; g++)
		phos_pool_free(inv_cfg.gpu_pool[g]);
	free(inv_cfg.token);
	free(inv_cfg.peer_token);
	fprintf(stderr, "phos-invoker: stopped\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct phos_lender *lender = NULL;
	struct MHD_Daemon *d;
	struct opts o;
	char err[512];
	int r;

	/* Request bodies (up to --max-body-bytes) are mapped and unmapped whole:
	 * glibc's default threshold grows after each large free until 32 MiB
	 * bodies come from the heap, whose freed pages stay resident (RSS 17 ->
	 * 62 MiB after a burst of 8 MiB uploads in test_body_memory). */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	curl_global_init(CURL_GLOBAL_DEFAULT);   /* once, before any thread: pulls, moves, the cluster */
	phos_log_init("phos-invoker", PHOS_LOG_WARN);
	defaults(&o);
	if ((r = parse_options(argc, argv, &o)) >= 0 || (r = configure(&o)) >= 0)
		return r;
	if ((r = open_state(&o, &lender)) >= 0)
		return r;
	if (inv_reaper_start() < 0 || inv_calls_start() < 0)
		return 1;
	d = inv_http_start(o.listen, err, sizeof(err));
	if (!d) {
		fprintf(stderr, "phos-invoker: %s\n", err);
		return 1;
	}
	if (o.cluster && join_cluster(&o) < 0)
		return 1;
	listen_note(o.listen);
	fprintf(stderr, "phos-invoker: listening on %s, state in %s, device %s, admin token in %s, peer token in "
		"STATE/" INV_PEER_TOKEN_FILE "\n", o.listen, inv_cfg.state_dir, inv_cfg.device,
		o.token_file ? o.token_file : "STATE/" INV_TOKEN_FILE);
	while (!stop_signal) {
		uint64_t n;

		if (stop_fd < 0 || (read(stop_fd, &n, sizeof(n)) < 0 && errno != EINTR))
			sleep(1);   /* no eventfd: look again each second */
	}
	return shut_down(d, &o, lender);
}
