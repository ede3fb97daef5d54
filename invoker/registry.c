/* SPDX-License-Identifier: MIT */
/*
 * The function registry: one JSON file per function in STATE/functions/
 * (written atomically), its snapshot in STATE/snapshots/<name>/. Reloaded at
 * start, so a restarted invoker serves the same functions without re-snapshotting.
 *
 * What owns what on disk, so that a crash at any point leaves nothing that a
 * restart cannot tell apart:
 *
 *   deploy:  snapshot committed to snapshots/NAME ─▶ functions/NAME.json written
 *            (a failed write renames the snapshot away and deletes it)
 *   remove:  NAME listed as "being removed" (a deploy of it gets 409)
 *            ─▶ functions/NAME.json unlinked ─▶ under the snapshot's write lock,
 *            snapshots/NAME renamed to NAME.tmp-<pid>-rm<n> ─▶ instances stopped
 *            ─▶ that directory deleted ─▶ NAME free again
 *   start:   STATE/invoker.lock held (one invoker per state dir); every
 *            snapshots/ *.tmp-* deleted (no snapshot is being written yet), then
 *            every snapshots/NAME without functions/NAME.json; a registry file
 *            whose snapshot is missing is deleted too. Each removal is logged.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "image.h"
#include "invoker.h"
#include "log.h"
#include "registry.h"
#include "transfer.h"


static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inv_function *funcs[INV_MAX_FUNCTIONS];
static unsigned nfuncs;
/* Functions being removed: unlisted, their names not free yet (reg_lock). */
static struct inv_function *removing[INV_MAX_FUNCTIONS];
static unsigned nremoving;

bool inv_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n < 1 || n > INV_NAME_MAX || !(islower((unsigned char)name[0]) || isdigit((unsigned char)name[0])))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) || name[i] == '-'))
			return false;
	return true;
}

static bool env_key_valid(const char *k)
{
	if (!*k || strlen(k) > 255 || !(isalpha((unsigned char)*k) || *k == '_'))
		return false;
	for (; *k; k++)
		if (!(isalnum((unsigned char)*k) || *k == '_'))
			return false;
	return true;
}

/* Opens a fresh temporary file beside base in dfd: O_EXCL|O_NOFOLLOW, so
 * that nothing planted in the directory (a symlink, a file) is followed or
 * reused; a random name, retried on a clash. The fd, or -errno. */
static int tmp_open(int dfd, const char *base, char *name, size_t len)
{
	for (int tries = 0; tries < 16; tries++) {
		uint64_t rnd;
		int fd;

		if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return -EIO;
		if ((size_t)snprintf(name, len, ".%s.tmp-%016llx", base, (unsigned long long)rnd) >= len)
			return -ENAMETOOLONG;
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

int inv_write_atomic(const char *path, const char *data, size_t len)
{
	char dir[PATH_MAX], tmp[NAME_MAX + 1];
	const char *base;
	char *slash;
	int dfd, fd, r = 0;

	if ((size_t)snprintf(dir, sizeof(dir), "%s", path) >= sizeof(dir))
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	if (!slash || !slash[1])
		return -EINVAL;
	*slash = '\0';
	base = path + (slash - dir) + 1;
	dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = tmp_open(dfd, base, tmp, sizeof(tmp));
	if (fd < 0) {
		close(dfd);
		return fd;
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			r = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (!r && fsync(fd) < 0)
		r = -errno;
	close(fd);
	/* renameat replaces a symlink at base, never writes through it */
	if (!r && renameat(dfd, tmp, dfd, base) < 0)
		r = -errno;
	if (r)
		unlinkat(dfd, tmp, 0);
	else
		fsync(dfd);
	close(dfd);
	return r;
}

void inv_function_free(struct inv_function *f)
{
	if (!f)
		return;
	if (f->args)
		for (unsigned i = 0; i < f->nargs; i++)
			free(f->args[i]);
	free(f->args);
	free(f->program);
	free(f->snapshot_dir);
	free(f->last_log);
	free(f->moved_to);
	if (f->moved_token)
		explicit_bzero(f->moved_token, strlen(f->moved_token));
	free(f->moved_token);
	inv_ranks_free(&f->ranks);
	json_decref(f->env);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	pthread_rwlock_destroy(&f->snap_lock);
	free(f);
}

void inv_function_unref(struct inv_function *f)
{
	bool last;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	last = --f->refs == 0;
	pthread_mutex_unlock(&f->lock);
	if (last)
		inv_function_free(f);
}

struct inv_function *inv_function_get(const char *name)
{
	struct inv_function *f = NULL;

	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nfuncs; i++)
		if (!strcmp(funcs[i]->name, name)) {
			f = funcs[i];
			pthread_mutex_lock(&f->lock);
			f->refs++;
			pthread_mutex_unlock(&f->lock);
			break;
		}
	pthread_mutex_unlock(&reg_lock);
	return f;
}

void inv_function_foreach(void (*fn)(struct inv_function *f, void *arg), void *arg)
{
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nfuncs; i++)
		fn(funcs[i], arg);
	pthread_mutex_unlock(&reg_lock);
}

/* Reads an unsigned limit from lim[key] into *v, within [lo, hi]. */
static int limit_get(json_t *lim, const char *key, unsigned long long lo, unsigned long long hi,
		     unsigned long long *v, char *err, size_t errlen)
{
	json_t *j = lim ? json_object_get(lim, key) : NULL;

	if (!j)
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 0 || (unsigned long long)json_integer_value(j) < lo ||
	    (unsigned long long)json_integer_value(j) > hi) {
		phos_errf(err, errlen, "limits.%s must be an integer in %llu..%llu", key, lo, hi);
		return -EINVAL;
	}
	*v = (unsigned long long)json_integer_value(j);
	return 0;
}

const char *inv_gpu_list(const struct inv_function *f, char *buf, size_t len)
{
	size_t at = 0;

	if (f->gpus <= 1 || len == 0)
		return NULL;
	buf[0] = '\0';
	for (unsigned g = 0; g < f->gpus && at < len; g++)
		at += (size_t)snprintf(buf + at, len - at, "%s%u", g ? "," : "", g);
	return at < len ? buf : NULL;
}

/* Builds a function from its JSON description (a deploy request or a registry
 * file); NULL with the reason in err. */
/* The fields of a deploy (or a stored function: deploying false) that say
 * what runs: no unknown field, the name, the program (an executable file
 * when deploying), its args and env. 0, or -EINVAL with err. */
static int what_runs_check(json_t *j, bool deploying, char *err, size_t errlen)
{
	json_t *name = json_object_get(j, "name"), *prog = json_object_get(j, "program");
	json_t *args = json_object_get(j, "args"), *env = json_object_get(j, "env");
	const char *key;
	json_t *val;
	struct stat st;

	if (!json_is_object(j))
		return phos_errf(err, errlen, "the request must be a JSON object"), -EINVAL;
	json_object_foreach(j, key, val)
		if (strcmp(key, "name") && strcmp(key, "program") && strcmp(key, "args") && strcmp(key, "env") &&
		    strcmp(key, "device") && strcmp(key, "limits") && strcmp(key, "gpus") && strcmp(key, "ranks") &&
		    strcmp(key, "share") && (deploying || strcmp(key, "created")))
			return phos_errf(err, errlen, "unknown field '%.64s'", key), -EINVAL;
	if (!json_is_string(name) || !inv_name_valid(json_string_value(name)))
		return phos_errf(err, errlen, "name must match [a-z0-9][a-z0-9-]{0,62}"), -EINVAL;
	if (!json_is_string(prog) || json_string_value(prog)[0] != '/' ||
	    strlen(json_string_value(prog)) >= PATH_MAX || strchr(json_string_value(prog), '='))
		return phos_errf(err, errlen, "program must be an absolute path (without '=')"), -EINVAL;
	/* at reload the snapshot is what runs: the program may be gone */
	if (deploying && (stat(json_string_value(prog), &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0111) ||
	    access(json_string_value(prog), X_OK) < 0))
		return phos_errf(err, errlen, "program %.256s is not an executable file", json_string_value(prog)),
		       -EINVAL;
	if (args && (!json_is_array(args) || json_array_size(args) > INV_MAX_ARGS))
		return phos_errf(err, errlen, "args must be an array of at most %d strings", INV_MAX_ARGS), -EINVAL;
	for (size_t i = 0; args && i < json_array_size(args); i++) {
		json_t *a = json_array_get(args, i);

		if (!json_is_string(a) || json_string_length(a) > INV_MAX_ARG_LEN ||
		    strlen(json_string_value(a)) != json_string_length(a))
			return phos_errf(err, errlen, "args[%zu] must be a string of at most %d bytes without NUL", i,
					INV_MAX_ARG_LEN), -EINVAL;
	}
	if (env && (!json_is_object(env) || json_object_size(env) > INV_MAX_ENV))
		return phos_errf(err, errlen, "env must be an object of at most %d strings", INV_MAX_ENV), -EINVAL;
	json_object_foreach(env, key, val)
		if (!env_key_valid(key) || !json_is_string(val) || json_string_length(val) > INV_MAX_ARG_LEN ||
		    strlen(json_string_value(val)) != json_string_length(val))
			return phos_errf(err, errlen, "env key '%.64s' must be an identifier with a string value", key),
			       -EINVAL;
	return 0;
}

struct inv_function *inv_function_parse(json_t *j, bool deploying, char *err, size_t errlen)
{
	json_t *name = json_object_get(j, "name"), *prog = json_object_get(j, "program");
	json_t *args = json_object_get(j, "args"), *env = json_object_get(j, "env");
	json_t *dev = json_object_get(j, "device"), *lim = json_object_get(j, "limits");
	unsigned long long v;
	struct inv_function *f;
	const char *key;
	json_t *val;

	if (what_runs_check(j, deploying, err, errlen) < 0)
		return NULL;
	const char *device = inv_cfg.device;
	if (dev && (!json_is_string(dev) || (strcmp(json_string_value(dev), "auto") &&
					     strcmp(json_string_value(dev), "cuda") && strcmp(json_string_value(dev), "sim"))))
		return phos_errf(err, errlen, "device must be auto, cuda or sim"), NULL;
	if (dev && strcmp(json_string_value(dev), "auto"))
		device = json_string_value(dev);
	json_t *gpus = json_object_get(j, "gpus");
	if (gpus && (!json_is_integer(gpus) || json_integer_value(gpus) < 1 || json_integer_value(gpus) > INV_MAX_GPUS))
		return phos_errf(err, errlen, "gpus must be an integer in 1..%d", INV_MAX_GPUS), NULL;
	json_t *share = json_object_get(j, "share");
	if (share && !json_is_boolean(share))
		return phos_errf(err, errlen, "share must be true or false"), NULL;
	if (json_is_true(share) && ((gpus && json_integer_value(gpus) > 1) || json_object_get(j, "ranks")))
		return phos_errf(err, errlen, "share is for functions of one GPU (not with gpus > 1 or ranks)"), NULL;
	if (lim && !json_is_object(lim))
		return phos_errf(err, errlen, "limits must be an object"), NULL;
	json_object_foreach(lim, key, val)
		if (strcmp(key, "max_instances") && strcmp(key, "max_inflight") && strcmp(key, "timeout_ms") &&
		    strcmp(key, "idle_ms") && strcmp(key, "max_body_bytes") && strcmp(key, "deploy_timeout_ms") &&
		    strcmp(key, "checkpoint_ms"))
			return phos_errf(err, errlen, "unknown limit '%.64s'", key), NULL;

	f = calloc(1, sizeof(*f));
	if (!f)
		return phos_errf(err, errlen, "out of memory"), NULL;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	{
		/* Writers first: a remove or re-snapshot must not wait behind an
		 * endless overlap of cold starts (glibc prefers readers by default). */
		pthread_rwlockattr_t ra;

		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&f->snap_lock, &ra);
		pthread_rwlockattr_destroy(&ra);
	}
	f->refs = 1;
	f->snap_cancel_fd = -1;
	f->limits = (struct inv_limits){ 4, 8, 30000, 300000, inv_cfg.max_body_bytes, INV_DEPLOY_TIMEOUT_MS, 0 };
#define LIMIT(key, lo, hi, field)                                                     \
	do {                                                                          \
		v = f->limits.field;                                                  \
		if (limit_get(lim, key, lo, hi, &v, err, errlen) < 0)                 \
			goto fail;                                                    \
		f->limits.field = v;                                                  \
	} while (0)
	LIMIT("max_instances", 1, 64, max_instances);
	LIMIT("max_inflight", 0, 1024, max_inflight);
	LIMIT("timeout_ms", 10, 3600000, timeout_ms);
	LIMIT("idle_ms", 10, 86400000, idle_ms);
	LIMIT("max_body_bytes", 1, INV_MAX_BODY_LIMIT, max_body_bytes);
	LIMIT("deploy_timeout_ms", 100, 3600000, deploy_timeout_ms);
	LIMIT("checkpoint_ms", 0, 86400000, checkpoint_ms);
#undef LIMIT
	if (f->limits.checkpoint_ms && f->limits.checkpoint_ms < 100) {
		phos_errf(err, errlen, "limits.checkpoint_ms must be 0 (off) or 100..86400000");
		goto fail;
	}
	if (json_object_get(j, "ranks") && inv_ranks_parse(json_object_get(j, "ranks"), &f->ranks, err, errlen) < 0)
		goto fail;
	f->gpus = gpus ? (unsigned)json_integer_value(gpus) : 1;
	f->share = json_is_true(json_object_get(j, "share"));
	snprintf(f->name, sizeof(f->name), "%s", json_string_value(name));
	snprintf(f->device, sizeof(f->device), "%s", device);
	f->program = strdup(json_string_value(prog));
	f->nargs = args ? (unsigned)json_array_size(args) : 0;
	f->args = calloc(f->nargs + 1, sizeof(char *));
	f->env = env ? json_deep_copy(env) : json_object();
	if (asprintf(&f->snapshot_dir, "%s/snapshots/%s", inv_cfg.state_dir, f->name) < 0)
		f->snapshot_dir = NULL;
	if (!f->program || !f->args || !f->env || !f->snapshot_dir)
		goto oom;
	for (unsigned i = 0; i < f->nargs; i++)
		if (!(f->args[i] = strdup(json_string_value(json_array_get(args, i)))))
			goto oom;
	f->created = json_is_number(json_object_get(j, "created")) ? json_number_value(json_object_get(j, "created"))
								    : (double)time(NULL);
	return f;
oom:
	phos_errf(err, errlen, "out of memory");
fail:
	inv_function_free(f);
	return NULL;
}

static json_t *limits_json(const struct inv_limits *l)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "max_instances", (json_int_t)l->max_instances,
			 "max_inflight", (json_int_t)l->max_inflight, "timeout_ms", (json_int_t)l->timeout_ms, "idle_ms",
			 (json_int_t)l->idle_ms, "max_body_bytes", (json_int_t)l->max_body_bytes, "deploy_timeout_ms",
			 (json_int_t)l->deploy_timeout_ms, "checkpoint_ms", (json_int_t)l->checkpoint_ms);
}

/* What is stored on disk (with_token: a rank's leader token too). */
static json_t *function_json(struct inv_function *f, bool with_token)
{
	json_t *args = json_array(), *j;

	for (unsigned i = 0; i < f->nargs; i++)
		json_array_append_new(args, json_string(f->args[i]));
	j = json_pack("{s:s,s:s,s:o,s:O,s:s,s:I,s:o,s:f}", "name", f->name, "program", f->program, "args", args,
		      "env", f->env, "device", f->device, "gpus", (json_int_t)f->gpus, "limits", limits_json(&f->limits),
		      "created", f->created);
	if (j && f->ranks.on)
		json_object_set_new(j, "ranks", inv_ranks_json(&f->ranks, with_token));
	if (j && f->share)
		json_object_set_new(j, "share", json_true());
	return j;
}

/* A list of buffer ids asked of in's executor (ask: phos_instance_touched or
 * _copied, at most max) into *ret; empty when it has none or does not answer
 * (what: for the log). */
static void ids_take(const struct inv_function *f, struct inv_instance *in, size_t max,
		     int (*ask)(struct phos_instance *, uint64_t *, size_t, size_t *), const char *what,
		     struct inv_prefetch *ret)
{
	int r;

	*ret = (struct inv_prefetch){ .generation = in->generation };
	if (!(ret->ids = calloc(max, sizeof(*ret->ids))))
		return;
	r = ask(&in->proc, ret->ids, max, &ret->n);
	if (r < 0 || ret->n == 0) {
		if (r < 0)
			phos_debug("%s: no %s from the instance (%s)", f->name, what, strerror(-r));
		free(ret->ids);
		*ret = (struct inv_prefetch){ 0 };
	}
}

void inv_prefetch_take(struct inv_function *f, struct inv_instance *in, struct inv_prefetch *ret)
{
	bool pending;

	*ret = (struct inv_prefetch){ 0 };
	pthread_mutex_lock(&f->lock);
	pending = f->prefetch_pending && in->generation == f->generation;
	f->prefetch_pending &= !pending;   /* one call records it */
	pthread_mutex_unlock(&f->lock);
	if (pending)
		ids_take(f, in, 65536, phos_instance_touched, "touch order", ret);
}

void inv_prefetch_store(struct inv_function *f, struct inv_prefetch *p)
{
	char err[512];
	int r = 0;

	if (!p->ids)
		return;
	/* A re-snapshot replaces the directory under the write lock. */
	pthread_rwlock_rdlock(&f->snap_lock);
	if (p->generation == f->generation)
		r = phos_image_set_prefetch(f->snapshot_dir, p->ids, p->n, err, sizeof(err));
	pthread_rwlock_unlock(&f->snap_lock);
	if (r < 0)
		phos_warn("%s: cannot store the prefetch order: %s", f->name, err);
	else
		phos_info("%s: prefetch order of %zu buffers recorded", f->name, p->n);
	free(p->ids);
	*p = (struct inv_prefetch){ 0 };
}

void inv_share_copied_take(struct inv_function *f, struct inv_instance *in, struct inv_prefetch *ret)
{
	*ret = (struct inv_prefetch){ 0 };
	if (f->share && inv_pool_for(f))
		ids_take(f, in, PHOS_POOL_SHARE_IDS_MAX, phos_instance_copied, "copied buffers", ret);
}

void inv_share_learn(struct inv_function *f, struct inv_prefetch *c)
{
	int n = 0;

	if (!c->ids)
		return;
	pthread_rwlock_rdlock(&f->snap_lock);
	if (c->generation == f->generation && inv_pool_for(f))
		n = phos_pool_share_private(inv_pool_for(f), f->snapshot_dir, c->ids, c->n);
	pthread_rwlock_unlock(&f->snap_lock);
	if (n > 0) {
		phos_info("%s: %d shared buffers written by a first call; restored privately from now on", f->name, n);
		inv_hot_update();   /* nothing shared left: its gpu.data is worth pinning again */
	}
	free(c->ids);
	*c = (struct inv_prefetch){ 0 };
}

struct hot_ctx {
	const char *dirs[PHOS_POOL_HOT_MAX];
	size_t n;
	uint64_t bytes;
	unsigned gpus;   /* the pool's GPU count */
	struct phos_pool *pool;
};

static void hot_pick(struct inv_function *f, void *arg)
{
	struct hot_ctx *h = arg;
	char path[PATH_MAX + 16];
	struct stat sb;

	if (!f->ready || f->removed || strcmp(f->device, inv_cfg.device) || h->n == PHOS_POOL_HOT_MAX ||
	    (f->gpus > 1 ? f->gpus : 1) != h->gpus)
		return;
	/* shared and filled: its restores read none of gpu.data's shared bytes
	 * (issue 42), so pinning it in every executor only costs */
	if (f->share && h->pool && phos_pool_shared_bytes(h->pool, f->snapshot_dir) > 0)
		return;
	snprintf(path, sizeof(path), "%s/gpu.data", f->snapshot_dir);
	if (stat(path, &sb) < 0 || h->bytes + (uint64_t)sb.st_size > inv_cfg.hot_bytes)
		return;
	h->bytes += (uint64_t)sb.st_size;
	h->dirs[h->n++] = f->snapshot_dir;
	f->hot = true;
}

static pthread_mutex_t gpu_pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool over GPUs 0..gpus-1 (gpus >= 2), made now when there is none. */
static struct phos_pool *gpu_pool(unsigned gpus)
{
	struct phos_runtime_paths pp = inv_cfg.paths;
	struct inv_function probe = { .gpus = gpus };
	char list[64];
	struct phos_pool *p;

	pthread_mutex_lock(&gpu_pool_lock);
	p = inv_cfg.gpu_pool[gpus];
	if (!p) {
		pp.device = inv_cfg.device;
		if (strcmp(pp.device, "sim"))
			pp.sim_twins = NULL;
		pp.gpus = inv_gpu_list(&probe, list, sizeof(list));
		/* one executor: each holds a context on every GPU of the set */
		if (phos_pool_new(&pp, 1, &inv_cfg.gpu_pool[gpus]) < 0)
			phos_warn("no warm pool over %u GPUs: such cold starts make their own executor", gpus);
		p = inv_cfg.gpu_pool[gpus];
	}
	pthread_mutex_unlock(&gpu_pool_lock);
	return p;
}

struct phos_pool *inv_pool_for(const struct inv_function *f)
{
	if (!inv_cfg.pool || strcmp(f->device, inv_cfg.device))
		return NULL;
	return f->gpus <= 1 ? inv_cfg.pool : gpu_pool(f->gpus);
}

void inv_hot_update(void)
{
	bool used[INV_MAX_GPUS + 1] = { false };

	if (!inv_cfg.pool)
		return;
	/* every GPU count in use has its pool (made outside the registry lock) */
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nfuncs; i++)
		if (funcs[i]->ready && !funcs[i]->removed && funcs[i]->gpus > 1)
			used[funcs[i]->gpus] = true;
	pthread_mutex_unlock(&reg_lock);
	for (unsigned g = 2; g <= INV_MAX_GPUS; g++)
		if (used[g])
			gpu_pool(g);
	/* Paths stay valid: phos_pool_hot copies them under the registry lock. */
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nfuncs; i++)
		funcs[i]->hot = false;
	for (unsigned g = 1; g <= INV_MAX_GPUS; g++) {
		struct phos_pool *p = g == 1 ? inv_cfg.pool : inv_cfg.gpu_pool[g];
		struct hot_ctx h = { .n = 0, .gpus = g, .pool = p };

		if (!p)
			continue;
		for (unsigned i = 0; i < nfuncs; i++)
			hot_pick(funcs[i], &h);
		phos_pool_hot(p, h.dirs, h.n);
	}
	pthread_mutex_unlock(&reg_lock);
}

int inv_function_save(struct inv_function *f)
{
	char path[PATH_MAX];
	json_t *j = function_json(f, true);   /* a registry file is the invoker's alone */
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	int r;

	json_decref(j);
	if (!s)
		return -ENOMEM;
	if (phos_fault("registry_write")) {
		free(s);
		return -EIO;
	}
	snprintf(path, sizeof(path), "%s/functions/%s.json", inv_cfg.state_dir, f->name);
	r = inv_write_atomic(path, s, strlen(s));
	free(s);
	return r;
}

/* Drops f from list (reg_lock held): true when it was there. */
static bool list_drop(struct inv_function **list, unsigned *n, struct inv_function *f)
{
	for (unsigned i = 0; i < *n; i++)
		if (list[i] == f) {
			list[i] = list[--*n];
			return true;
		}
	return false;
}

void inv_registry_unlist(struct inv_function *f)
{
	pthread_mutex_lock(&reg_lock);
	list_drop(funcs, &nfuncs, f);
	pthread_mutex_unlock(&reg_lock);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 ? -1 : 0;
}

int inv_remove_tree(const char *path)
{
	return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT ? -errno : 0;
}

/* Renames f's snapshot to a temporary name beside it, under the snapshot's
 * write lock (so no restore or re-snapshot is using the path): 0 with that
 * name in ret_tmp, -ENOENT when there is none, or -errno. */
int inv_snapshot_rename_away(struct inv_function *f, char *ret_tmp, size_t len)
{
	static atomic_uint seq;
	int r = 0;

	if ((size_t)snprintf(ret_tmp, len, "%s.tmp-%d-rm%u", f->snapshot_dir, (int)getpid(),
			     atomic_fetch_add(&seq, 1)) >= len)
		return -ENAMETOOLONG;
	pthread_rwlock_wrlock(&f->snap_lock);
	if (renameat2(AT_FDCWD, f->snapshot_dir, AT_FDCWD, ret_tmp, RENAME_NOREPLACE) < 0)
		r = -errno;
	pthread_rwlock_unlock(&f->snap_lock);
	return r;
}

/* Deletes f's snapshot: renamed away first, so that a crash halfway leaves a
 * temporary the next start sweeps, never a half-deleted snapshot at its name. */
int inv_snapshot_discard(struct inv_function *f)
{
	char tmp[PATH_MAX];
	int r = inv_snapshot_rename_away(f, tmp, sizeof(tmp));

	if (r == -ENOENT)
		return 0;
	return r < 0 ? r : inv_remove_tree(tmp);
}

json_t *inv_function_entry(struct inv_function *f)
{
	return function_json(f, false);   /* a peer's copy: no leader token */
}

int inv_function_fill(struct inv_function *f, json_t *entry, char *err, size_t errlen)
{
	struct inv_function *g = inv_function_parse(entry, false, err, errlen);

	if (!g)
		return -EINVAL;
	if (strcmp(g->name, f->name)) {
		phos_errf(err, errlen, "it names another function");
		inv_function_free(g);
		return -EINVAL;
	}
#define SWAP(x) do { __typeof__(f->x) t_ = f->x; f->x = g->x; g->x = t_; } while (0)
	pthread_mutex_lock(&f->lock);
	SWAP(program);
	SWAP(args);
	SWAP(nargs);
	SWAP(env);
	SWAP(gpus);
	SWAP(limits);
	SWAP(created);
	SWAP(ranks);   /* (rank 0 only: a rank > 0's entry has no leader token, function_from_json refuses it) */
	memcpy(f->device, g->device, sizeof(f->device));
	f->entry_pending = false;
	pthread_mutex_unlock(&f->lock);
#undef SWAP
	inv_function_free(g);   /* (with the stand-in's fields) */
	return 0;
}

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* chmod 0700 of a directory we own (never through a symlink). */
static int restrict_dir(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || ((st.st_mode & 0777) != 0700 && fchmod(fd, 0700) < 0))
		r = -errno;
	if (!r && st.st_uid != geteuid()) {
		phos_err("%s belongs to uid %u, not to the invoker's %u", path, (unsigned)st.st_uid, (unsigned)geteuid());
		r = -EPERM;
	}
	close(fd);
	return r;
}

/* Bytes under path (for the sweep's log). */
static uint64_t tree_bytes_sum;
static int tree_bytes_add(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_F)
		tree_bytes_sum += (uint64_t)st->st_size;
	return 0;
}

/* Removes path, logging why and how much (start-up only: one thread). */
static void sweep_remove(const char *path, const char *why)
{
	struct stat st;
	int r;

	if (lstat(path, &st) < 0 && errno == ENOENT)
		return;
	tree_bytes_sum = 0;
	nftw(path, tree_bytes_add, 16, FTW_PHYS | FTW_MOUNT);
	r = inv_remove_tree(path);
	if (r < 0)
		phos_err("cannot remove %s (%s): %s", path, why, strerror(-r));
	else
		phos_warn("removed %s (%s, %.1f MiB)", path, why, tree_bytes_sum / 1048576.0);
}

/* Holds STATE/invoker.lock for the life of the process: a second invoker on
 * the same state dir would sweep the first one's snapshots. A POSIX record
 * lock, so that children (executors, functions) never hold it; waits up to
 * 2 s for one that is still exiting. */
static int state_lock(void)
{
	char path[PATH_MAX];
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	int fd;

	snprintf(path, sizeof(path), "%s/invoker.lock", inv_cfg.state_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	for (int i = 0; fcntl(fd, F_SETLK, &fl) < 0; i++) {
		if ((errno != EACCES && errno != EAGAIN) || i == 20) {
			int r = errno == EACCES || errno == EAGAIN ? -EBUSY : -errno;

			if (r == -EBUSY && fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
				phos_err("%s is held by another phos-invoker (pid %d)", path, (int)fl.l_pid);
			close(fd);
			return r;
		}
		usleep(100 * 1000);
	}
	return 0;   /* fd stays open: closing it would drop the lock */
}

/* Deletes what the registry cannot own: every temporary snapshot directory
 * (none is being written before start-up is done), and every snapshot whose
 * registry file is gone (a crash between a snapshot commit and its registry
 * write, or inside a removal). */
static void sweep_snapshots(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 300], reg[PATH_MAX + 300];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/snapshots", inv_cfg.state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (strstr(de->d_name, ".tmp-")) {
			sweep_remove(path, "an unfinished snapshot or removal");
			continue;
		}
		if (!inv_name_valid(de->d_name)) {
			phos_warn("%s is not a snapshot of this invoker; left alone", path);
			continue;
		}
		snprintf(reg, sizeof(reg), "%s/functions/%s.json", inv_cfg.state_dir, de->d_name);
		if (access(reg, F_OK) < 0 && errno == ENOENT)
			sweep_remove(path, "a snapshot that no function owns");
	}
	closedir(d);
}

int inv_registry_lock(void)
{
	PHOS_CHECK(mkdir_p(inv_cfg.state_dir));
	return state_lock();
}

int inv_registry_init(void)
{
	char path[PATH_MAX], err[512];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/functions", inv_cfg.state_dir);
	PHOS_CHECK(mkdir_p(path));
	snprintf(path, sizeof(path), "%s/snapshots", inv_cfg.state_dir);
	PHOS_CHECK(mkdir_p(path));
	/* Registry files hold env values, snapshots the function's memory: the
	 * state directory is ours alone, also when an older invoker made it 0755. */
	PHOS_CHECK(restrict_dir(inv_cfg.state_dir));
	snprintf(path, sizeof(path), "%s/functions", inv_cfg.state_dir);
	PHOS_CHECK(restrict_dir(path));
	snprintf(path, sizeof(path), "%s/snapshots", inv_cfg.state_dir);
	PHOS_CHECK(restrict_dir(path));
	snprintf(path, sizeof(path), "%s/functions", inv_cfg.state_dir);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		char file[PATH_MAX + 300], man[PATH_MAX + 100];
		json_error_t je;
		json_t *j;
		struct inv_function *f;

		struct stat sb;

		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		if (strstr(de->d_name, ".json.tmp")) {
			sweep_remove(file, "an unfinished registry write");
			continue;
		}
		if (n < 6 || strcmp(de->d_name + n - 5, ".json"))
			continue;
		/* a registry file is one we wrote: never read through a symlink */
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode)) {
			phos_err("skipping %s: not a regular file", file);
			continue;
		}
		j = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
		f = j ? inv_function_parse(j, false, err, sizeof(err)) : NULL;
		json_decref(j);
		if (!f) {
			/* kept, with its snapshot: it may be repaired by hand */
			phos_err("skipping %s: %s", file, j ? err : je.text);
			continue;
		}
		if (n - 5 != strlen(f->name) || strncmp(de->d_name, f->name, n - 5)) {
			phos_err("skipping %s: it describes function %s", file, f->name);
			inv_function_free(f);
			continue;
		}
		snprintf(man, sizeof(man), "%s/manifest.json", f->snapshot_dir);
		if (access(man, F_OK) < 0) {
			/* Unservable for good: deploy it again. Its snapshot
			 * directory, if any, goes with it. */
			phos_err("%s: its snapshot %s is missing; the function is dropped", file, f->snapshot_dir);
			sweep_remove(file, "a function without a snapshot");
			sweep_remove(f->snapshot_dir, "an incomplete snapshot");
			inv_function_free(f);
			continue;
		}
		if (nfuncs == INV_MAX_FUNCTIONS) {
			phos_err("skipping %s: more than %d functions", file, INV_MAX_FUNCTIONS);
			inv_function_free(f);
			continue;
		}
		f->ready = true;
		{
			struct phos_image *img;

			f->prefetch_pending = phos_image_read(f->snapshot_dir, &img, err, sizeof(err)) == 0 &&
					      img->nprefetch == 0;
			phos_image_free(img);
		}
		funcs[nfuncs++] = f;
		phos_info("loaded %s", f->name);
	}
	closedir(d);
	sweep_snapshots();
	inv_hot_update();
	return 0;
}

/* ---- the list, for deploy.c ---- */

int inv_registry_add(struct inv_function *f, json_t **ret_body)
{
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nfuncs; i++)
		if (!strcmp(funcs[i]->name, f->name)) {
			pthread_mutex_unlock(&reg_lock);
			*ret_body = inv_err_json("function %s exists", f->name);
			inv_function_free(f);
			return 409;
		}
	for (unsigned i = 0; i < nremoving; i++)
		if (!strcmp(removing[i]->name, f->name)) {
			pthread_mutex_unlock(&reg_lock);
			*ret_body = inv_err_json("function %s is being removed; deploy it again when that is done", f->name);
			inv_function_free(f);
			return 409;
		}
	if (nfuncs == INV_MAX_FUNCTIONS) {
		pthread_mutex_unlock(&reg_lock);
		inv_function_free(f);
		*ret_body = inv_err_json("%s", "too many functions");
		return 507;
	}
	funcs[nfuncs++] = f; /* listed as "deploying": a second deploy gets 409 */
	f->refs++;
	pthread_mutex_unlock(&reg_lock);
	return 0;
}

void inv_registry_removing(struct inv_function *f, bool begin)
{
	pthread_mutex_lock(&reg_lock);
	if (begin) {
		list_drop(funcs, &nfuncs, f);
		removing[nremoving++] = f;
	} else {
		list_drop(removing, &nremoving, f);
	}
	pthread_mutex_unlock(&reg_lock);
}

unsigned inv_function_all(struct inv_function **list, unsigned max)
{
	unsigned n;

	pthread_mutex_lock(&reg_lock);
	n = nfuncs < max ? nfuncs : max;
	for (unsigned i = 0; i < n; i++) {
		list[i] = funcs[i];
		pthread_mutex_lock(&list[i]->lock);
		list[i]->refs++;
		pthread_mutex_unlock(&list[i]->lock);
	}
	pthread_mutex_unlock(&reg_lock);
	return n;
}

unsigned inv_registry_exit(struct inv_function **list, unsigned max)
{
	unsigned n;

	pthread_mutex_lock(&reg_lock);
	n = nfuncs < max ? nfuncs : max;
	memcpy(list, funcs, n * sizeof(*list));
	nfuncs = 0;
	pthread_mutex_unlock(&reg_lock);
	return n;
}
