/* SPDX-License-Identifier: MIT */
/*
 * Membership and placement on etcd (cluster.h has the picture).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cluster.h"
#include "etcd.h"
#include "forward.h"
#include "log.h"
#include "token.h"
#include "transfer.h"

/* A forwarded call's limit: the longest timeout_ms a function may have, and
 * the member's own answer time (it enforces the function's limit itself). */
#define FORWARD_TIMEOUT_MS (3600000L + 10000L)

static struct {
	char *etcd, *self, *key, *token;
	pthread_t thread;
	bool on, started;
	pthread_mutex_t lock;   /* everything below */
	pthread_cond_t cond;
	bool stopping, kick;    /* kick: a round now (our record changed) */
	bool draining;          /* POST /system/cluster/drain: members place nothing here */
	int64_t lease;
	json_t *members;        /* the last range read, parsed once (parse_view), never changed in place */
	double members_at;      /* when it was read (0: never) */
	char last_error[256];   /* etcd's, "" while it answers */
} cl = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static atomic_uint forwarding;   /* calls being forwarded now (our load) */

bool inv_cluster_on(void)
{
	return cl.on;
}

bool inv_cluster_token_ok(const char *given)
{
	return cl.on && inv_token_equal(given, cl.token);
}

bool inv_cluster_url_ok(const char *u)
{
	const char *host = !strncmp(u, "http://", 7) ? u + 7 : !strncmp(u, "https://", 8) ? u + 8 : NULL;
	size_t n = strlen(u);

	if (!host || !*host || n > 255 || u[n - 1] == '/')
		return false;
	for (const char *p = host; *p; p++)
		if (*p <= ' ' || *p >= 127 || strchr("/?#@\\", *p))
			return false;
	return true;
}

/* ---- our record ---- */

struct tally {
	json_t *functions;
	unsigned busy;
	/* the ready ones' snapshots, digested outside the registry's lock */
	struct snap { char name[INV_NAME_MAX + 1]; char *dir; unsigned generation; } *snaps;
	size_t n, cap;
};

/* The XXH3-128 of each function's snapshot manifest, as canonical JSON
 * (it names every buffer's and CPU file's checksum: equal digests, equal
 * snapshots), kept per name, generation and folder. The cluster's thread
 * alone uses it. */
static struct digest {
	char name[INV_NAME_MAX + 1];
	unsigned generation;
	char *dir;
	char hex[33];
} digests[256];
static size_t n_digests, next_digest;

static int manifest_digest(const char *dir, char hex[33])
{
	char path[PATH_MAX], *text;
	XXH128_hash_t h;
	json_t *m;

	if ((size_t)snprintf(path, sizeof(path), "%s/manifest.json", dir) >= sizeof(path) ||
	    !(m = json_load_file(path, 0, NULL)))
		return -1;
	/* its content, not its bytes: a pulled copy is written anew */
	text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(m);
	if (!text)
		return -1;
	h = XXH3_128bits(text, strlen(text));
	free(text);
	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
	return 0;
}

static const char *digest_of(const struct snap *sn)
{
	struct digest *d;

	for (size_t i = 0; i < n_digests; i++)
		if (!strcmp(digests[i].name, sn->name) && digests[i].generation == sn->generation &&
		    !strcmp(digests[i].dir, sn->dir))
			return digests[i].hex;
	d = &digests[n_digests < 256 ? n_digests++ : next_digest++ % 256];   /* the oldest goes */
	free(d->dir);
	*d = (struct digest){ .generation = sn->generation, .dir = strdup(sn->dir) };
	snprintf(d->name, sizeof(d->name), "%s", sn->name);
	if (!d->dir || manifest_digest(sn->dir, d->hex) < 0) {
		d->name[0] = '\0';   /* tried again next time */
		return NULL;
	}
	return d->hex;
}

static void tally_one(struct inv_function *f, void *arg)
{
	struct tally *t = arg;
	unsigned c[4] = { 0 };
	bool ready, standby;
	unsigned generation;

	bool hot = f->hot;   /* (the registry's lock, held here) */

	pthread_mutex_lock(&f->lock);
	ready = f->ready && !f->removed && !f->moved_to;
	standby = f->standby.valid;
	generation = f->generation;
	for (struct inv_instance *in = f->instances; in; in = in->next)
		c[in->state]++;
	t->busy += c[INV_INST_BUSY] + f->waiting;
	if (ready && f->snapshot_dir && t->n < t->cap) {
		struct snap *sn = &t->snaps[t->n];

		snprintf(sn->name, sizeof(sn->name), "%s", f->name);
		sn->generation = generation;
		if ((sn->dir = strdup(f->snapshot_dir)))
			t->n++;
	}
	pthread_mutex_unlock(&f->lock);
	json_object_set_new(t->functions, f->name,
			    json_pack("{s:b,s:i,s:i,s:b,s:b,s:i}", "ready", ready, "idle", c[INV_INST_IDLE], "busy",
				      c[INV_INST_BUSY], "standby", standby, "hot", hot, "generation", generation));
}

/* This host's GPUs and their free memory (cuda only), read with
 * nvidia-smi every 10 s (the invoker opens no GPU itself): a JSON array of
 * {"index", "name", "memory_total_mib", "memory_free_mib"}, [] without. The
 * cluster's thread alone uses it. */
static json_t *gpus_now(void)
{
	static json_t *gpus;
	static double at;
	char line[512];
	FILE *p;

	if (gpus && phos_now() - at < 10)
		return json_incref(gpus);
	json_decref(gpus);
	gpus = json_array();
	at = phos_now();
	if (strcmp(inv_cfg.device, "cuda") ||
	    !(p = popen("timeout 5 nvidia-smi --query-gpu=index,name,memory.total,memory.free "
			"--format=csv,noheader,nounits 2>/dev/null", "re")))
		return json_incref(gpus);
	while (fgets(line, sizeof(line), p) && json_array_size(gpus) < 64) {
		char name[256];
		unsigned idx;
		unsigned long long total, free_mib;

		if (sscanf(line, "%u, %255[^,], %llu, %llu", &idx, name, &total, &free_mib) == 4)
			json_array_append_new(gpus, json_pack("{s:i,s:s,s:I,s:I}", "index", idx, "name", name,
							      "memory_total_mib", (json_int_t)total,
							      "memory_free_mib", (json_int_t)free_mib));
	}
	pclose(p);
	return json_incref(gpus);
}

static char *record(void)
{
	struct tally t = { .functions = json_object(), .cap = 4096 };
	bool draining;
	json_t *j;
	char *s;

	t.snaps = calloc(t.cap, sizeof(*t.snaps));
	if (!t.snaps)
		t.cap = 0;
	inv_function_foreach(tally_one, &t);
	for (size_t i = 0; i < t.n; i++) {
		const char *d = digest_of(&t.snaps[i]);

		if (d)
			json_object_set_new(json_object_get(t.functions, t.snaps[i].name), "digest", json_string(d));
		free(t.snaps[i].dir);
	}
	free(t.snaps);
	pthread_mutex_lock(&cl.lock);
	draining = cl.draining;
	pthread_mutex_unlock(&cl.lock);
	j = json_pack("{s:s,s:s,s:b,s:i,s:o,s:o}", "url", cl.self, "device", inv_cfg.device,
		      "draining", inv_draining != 0 || draining,
		      "load", t.busy + atomic_load(&forwarding), "functions", t.functions, "gpus", gpus_now());
	s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	return s;
}

/* ---- the thread: lease, record, view ---- */

static void note_error(const char *err)
{
	pthread_mutex_lock(&cl.lock);
	if (strcmp(cl.last_error, err)) {
		if (*err)
			phos_warn("cluster: %s", err);
		else
			phos_info("cluster: etcd answers again");
		snprintf(cl.last_error, sizeof(cl.last_error), "%s", err);
	}
	pthread_mutex_unlock(&cl.lock);
}

/* etcd's [{"key", "value"}] as the view every reader walks, each record
 * parsed here once rather than at every call placed: [{"url": the key's
 * (the key names the member: its record cannot say otherwise), "self",
 * "record": the value's object}]; values that are not objects left out. */
static json_t *parse_view(json_t *kvs)
{
	json_t *view = json_array(), *kv;
	size_t i;

	json_array_foreach(kvs, i, kv) {
		const char *key = json_string_value(json_object_get(kv, "key"));
		json_t *rec = json_loads(json_string_value(json_object_get(kv, "value")) ?: "", 0, NULL);

		if (key && !strncmp(key, INV_CLUSTER_PREFIX, strlen(INV_CLUSTER_PREFIX)) && json_is_object(rec))
			json_array_append_new(view, json_pack("{s:s,s:b,s:O}", "url", key + strlen(INV_CLUSTER_PREFIX),
							      "self", !strcmp(key, cl.key), "record", rec));
		json_decref(rec);
	}
	return view;
}

/* The view now, a reference the caller drops (NULL before etcd first answered). */
static json_t *view_take(void)
{
	json_t *v;

	pthread_mutex_lock(&cl.lock);
	v = json_incref(cl.members);
	pthread_mutex_unlock(&cl.lock);
	return v;
}

/* m's record when m is another member at a usable URL (into *ret_url), else NULL. */
static json_t *other(json_t *m, const char **ret_url)
{
	*ret_url = json_string_value(json_object_get(m, "url"));
	if (json_is_true(json_object_get(m, "self")) || !*ret_url || !inv_cluster_url_ok(*ret_url))
		return NULL;
	return json_object_get(m, "record");
}

/* One round: the lease renewed (or a new one), our record put when it
 * changed or a new lease needs it, every member's read. */
static void round_once(char **last_put, double *put_at)
{
	char err[512] = "";
	int64_t ttl = 0;
	json_t *members = NULL;
	char *rec = record();
	bool fresh = false;

	if (cl.lease) {
		int r = inv_etcd_keepalive(cl.etcd, cl.lease, &ttl, err, sizeof(err));

		/* expired, or an etcd that lost it (its data gone): another lease */
		if ((r == 0 && ttl == 0) || (r < 0 && strstr(err, "lease not found"))) {
			phos_warn("cluster: our lease is gone (etcd unreachable for %d s, or restarted empty?): "
				  "registering again", INV_CLUSTER_TTL_S);
			cl.lease = 0;
			*err = '\0';
		}
	}
	if (!*err && !cl.lease) {
		if (inv_etcd_grant(cl.etcd, INV_CLUSTER_TTL_S, &cl.lease, err, sizeof(err)) == 0)
			fresh = true;
	}
	/* the record again when it changed, and every TTL/2 whatever it says */
	if (!*err && rec &&
	    (fresh || !*last_put || strcmp(*last_put, rec) || phos_now() - *put_at > INV_CLUSTER_TTL_S / 2.0)) {
		if (inv_etcd_put(cl.etcd, cl.key, rec, cl.lease, err, sizeof(err)) == 0) {
			free(*last_put);
			*last_put = rec;
			rec = NULL;
			*put_at = phos_now();
		}
	}
	if (!*err && inv_etcd_range(cl.etcd, INV_CLUSTER_PREFIX, &members, err, sizeof(err)) == 0) {
		json_t *view = parse_view(members);

		json_decref(members);
		pthread_mutex_lock(&cl.lock);
		json_decref(cl.members);
		cl.members = view;
		cl.members_at = phos_now();
		pthread_mutex_unlock(&cl.lock);
	}
	note_error(err);
	free(rec);
}

static void *run(void *arg)
{
	char *last_put = NULL;
	double put_at = 0;

	(void)arg;
	pthread_mutex_lock(&cl.lock);
	while (!cl.stopping) {
		struct timespec until;

		pthread_mutex_unlock(&cl.lock);
		round_once(&last_put, &put_at);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_mutex_lock(&cl.lock);
		while (!cl.stopping && !cl.kick && pthread_cond_timedwait(&cl.cond, &cl.lock, &until) == 0)
			;
		cl.kick = false;
	}
	pthread_mutex_unlock(&cl.lock);
	free(last_put);
	return NULL;
}

int inv_cluster_start(const char *etcd_url, const char *advertise, const char *token, char *err, size_t errlen)
{
	char *put = NULL;
	double put_at = 0;

	if (!inv_cluster_url_ok(etcd_url) || !inv_cluster_url_ok(advertise)) {
		snprintf(err, errlen, "--cluster and --advertise take http[s]://HOST[:PORT] (no path, user, query "
				      "or trailing slash)");
		return -EINVAL;
	}
	cl.etcd = strdup(etcd_url);
	cl.self = strdup(advertise);
	cl.token = strdup(token);
	if (!cl.etcd || !cl.self || !cl.token || asprintf(&cl.key, "%s%s", INV_CLUSTER_PREFIX, advertise) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	cl.on = true;
	round_once(&put, &put_at);   /* registered at once when etcd answers (the thread puts it again) */
	free(put);
	if (pthread_create(&cl.thread, NULL, run, NULL)) {
		snprintf(err, errlen, "cannot start the cluster thread");
		cl.on = false;
		return -EAGAIN;
	}
	cl.started = true;
	return 0;
}

void inv_cluster_stop(void)
{
	char err[512];

	if (!cl.started)
		return;
	pthread_mutex_lock(&cl.lock);
	cl.stopping = true;
	pthread_cond_broadcast(&cl.cond);
	pthread_mutex_unlock(&cl.lock);
	pthread_join(cl.thread, NULL);
	cl.started = false;
	if (cl.lease && inv_etcd_revoke(cl.etcd, cl.lease, err, sizeof(err)) < 0)
		phos_warn("cluster: leaving: %s (our key goes when its lease runs out)", err);
	cl.lease = 0;
	/* the view, the token and our URL stay: calls may still be forwarded
	 * while we drain (they go with the process) */
}

/* ---- placement ---- */

struct candidate {
	const char *url;
	int rank;        /* 0: an idle instance, 1: a parked process, 2: a hot snapshot, 3: none, 4: draining */
	json_int_t load;
};

static int by_rank(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;

	if (x->rank != y->rank)
		return x->rank - y->rank;
	return (x->load > y->load) - (x->load < y->load);
}

/* The members other than us that have name ready, best first, into c
 * (pointing into the view's strings). */
static size_t candidates(json_t *view, const char *name, struct candidate *c, size_t max)
{
	size_t n = 0, i;
	const char *url;
	json_t *m, *rec;

	json_array_foreach(view, i, m) {
		json_t *fn;

		if (n == max || !(rec = other(m, &url)))
			continue;
		fn = json_object_get(json_object_get(rec, "functions"), name);
		if (json_is_true(json_object_get(fn, "ready"))) {
			c[n].url = url;
			c[n].rank = json_is_true(json_object_get(rec, "draining")) ? 4 :   /* only when no other has it */
				    json_integer_value(json_object_get(fn, "idle")) > 0 ? 0 :
				    json_is_true(json_object_get(fn, "standby")) ? 1 :
				    json_is_true(json_object_get(fn, "hot")) ? 2 : 3;
			c[n].load = json_integer_value(json_object_get(rec, "load"));
			n++;
		}
	}
	qsort(c, n, sizeof(*c), by_rank);
	return n;
}

void inv_cluster_invoke(const char *name, const char *body, size_t len, const char *ctype, struct inv_result *res,
			char **ret_member)
{
	struct candidate c[INV_CLUSTER_MAX_MEMBERS];
	char err[256];
	json_t *members;
	size_t n, tried = 0;
	bool answered = false;

	memset(res, 0, sizeof(*res));
	*ret_member = NULL;
	members = view_take();
	n = members ? candidates(members, name, c, INV_CLUSTER_MAX_MEMBERS) : 0;
	atomic_fetch_add(&forwarding, 1);
	for (size_t i = 0; i < n; i++) {
		tried++;
		if (inv_peer_forward(c[i].url, name, cl.token, cl.self, body, len, ctype, FORWARD_TIMEOUT_MS, res, err,
				     sizeof(err)) < 0) {
			phos_warn("cluster: a call of %s: member %s: %s; trying the next", name, c[i].url, err);
			continue;
		}
		answered = true;
		/* it lost the function, is draining or full: another may take it */
		if ((res->http == 404 || res->http == 429 || res->http == 503) && i + 1 < n) {
			phos_info("cluster: a call of %s: member %s answered %d; trying the next", name, c[i].url,
				  res->http);
			continue;
		}
		*ret_member = strdup(c[i].url);
		break;
	}
	atomic_fetch_sub(&forwarding, 1);
	json_decref(members);
	if (!answered && !n)
		inv_result_error(res, 404, "no function %s here or on another member of the cluster", name);
	else if (!answered)
		inv_result_error(res, 502, "no member of the cluster that has %s answered (%zu tried)", name, tried);
}

json_t *inv_cluster_describe(void)
{
	json_t *out = json_array(), *m;
	size_t i;
	json_t *j;

	pthread_mutex_lock(&cl.lock);
	json_array_foreach(cl.members, i, m) {
		json_t *rec = json_deep_copy(json_object_get(m, "record"));

		json_object_set(rec, "self", json_object_get(m, "self"));
		json_array_append_new(out, rec);
	}
	j = json_pack("{s:s,s:s,s:b,s:s?,s:f,s:o}", "self", cl.self, "etcd", cl.etcd, "etcd_ok", !*cl.last_error,
		      "etcd_error", *cl.last_error ? cl.last_error : NULL, "view_age_s",
		      cl.members_at ? phos_now() - cl.members_at : -1.0, "members", out);
	pthread_mutex_unlock(&cl.lock);
	return j;
}

/* ---- drain ---- */

/* The member a session of name moves to: not us, not draining, of our
 * device; one that has name ready first, then the least loaded. NULL: none
 * (a malloc'ed URL otherwise). */
static char *drain_target(const char *name)
{
	char *best = NULL;
	int best_rank = 0;
	json_int_t best_load = 0;
	json_t *members = view_take(), *m, *rec;
	const char *url;
	size_t i;

	json_array_foreach(members, i, m) {
		json_t *fn;
		int rank;
		json_int_t load;

		if (!(rec = other(m, &url)) || json_is_true(json_object_get(rec, "draining")) ||
		    strcmp(json_string_value(json_object_get(rec, "device")) ?: "", inv_cfg.device))
			continue;
		fn = json_object_get(json_object_get(rec, "functions"), name);
		rank = json_is_true(json_object_get(fn, "ready")) ? 0 : 1;
		load = json_integer_value(json_object_get(rec, "load"));
		if (!best || rank < best_rank || (rank == best_rank && load < best_load)) {
			free(best);
			best = strdup(url);
			best_rank = rank;
			best_load = load;
		}
	}
	json_decref(members);
	return best;
}

struct names {
	char (*v)[INV_NAME_MAX + 1];
	size_t n, cap;
};

/* Functions of one instance (sessions: their state is theirs alone). */
static void session_name(struct inv_function *f, void *arg)
{
	struct names *ns = arg;

	if (f->limits.max_instances == 1 && ns->n < ns->cap)
		snprintf(ns->v[ns->n++], INV_NAME_MAX + 1, "%s", f->name);
}

/* The others, ready here (a drain places each where no other member has it). */
static void stateless_name(struct inv_function *f, void *arg)
{
	struct names *ns = arg;

	pthread_mutex_lock(&f->lock);
	if (f->limits.max_instances != 1 && f->ready && !f->removed && ns->n < ns->cap)
		snprintf(ns->v[ns->n++], INV_NAME_MAX + 1, "%s", f->name);
	pthread_mutex_unlock(&f->lock);
}

/* Another member that is not draining has name ready. */
static bool held_elsewhere(const char *name)
{
	json_t *members = view_take(), *m, *rec;
	bool held = false;
	const char *url;
	size_t i;

	json_array_foreach(members, i, m)
		held |= (rec = other(m, &url)) && !json_is_true(json_object_get(rec, "draining")) &&
			json_is_true(json_object_get(json_object_get(json_object_get(rec, "functions"), name), "ready"));
	json_decref(members);
	return held;
}

/* Moves the live instance of session name to a member (recopy: it serves
 * on until its last moment here); its outcome appended to out. */
static void drain_session(const char *name, json_t *out)
{
	struct inv_function *f = inv_function_get(name);
	unsigned ids[64], n = 0;   /* (a session has one) */
	char *to;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	for (struct inv_instance *in = f->instances; in && n < 64; in = in->next)
		if (in->state == INV_INST_IDLE || in->state == INV_INST_BUSY)
			ids[n++] = in->id;
	pthread_mutex_unlock(&f->lock);
	inv_function_unref(f);
	for (unsigned i = 0; i < n; i++) {
		json_t *body = NULL, *req;
		char *text;
		int code = 503;

		if (!(to = drain_target(name))) {
			json_array_append_new(out, json_pack("{s:s,s:i,s:i,s:s}", "function", name, "instance", ids[i],
							     "status", 503, "error", "no member to move it to"));
			continue;
		}
		req = json_pack("{s:s,s:s,s:s,s:s}", "to", to, "to_token", cl.token, "mode", "recopy", "advertise",
				cl.self);
		text = req ? json_dumps(req, JSON_COMPACT) : NULL;
		json_decref(req);
		if (text)
			code = inv_migrate_request(name, ids[i], text, strlen(text), &body);
		if (text)
			explicit_bzero(text, strlen(text));
		free(text);
		phos_info("cluster: drain: %s instance %u to %s: %d", name, ids[i], to, code);
		json_array_append_new(out, json_pack("{s:s,s:i,s:s,s:i,s:o*}", "function", name, "instance", ids[i], "to",
						     to, "status", code, "result", body));
		free(to);
	}
}

int inv_cluster_drain(const char *body, size_t len, json_t **ret_body)
{
	json_t *req = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL), *v, *moved, *placed;
	struct names ns = { .cap = 4096 };
	const char *key;
	bool drain = true;

	if (!json_is_object(req)) {
		json_decref(req);
		*ret_body = inv_err_json("the body must be a JSON object {\"drain\": true|false}");
		return 400;
	}
	json_object_foreach(req, key, v) {
		if (strcmp(key, "drain") || !json_is_boolean(v)) {
			json_decref(req);
			*ret_body = inv_err_json("the body takes one field, \"drain\": true or false");
			return 400;
		}
		drain = json_is_true(v);
	}
	json_decref(req);
	pthread_mutex_lock(&cl.lock);
	cl.draining = drain;
	cl.kick = true;   /* members see it within a round trip of etcd */
	pthread_cond_broadcast(&cl.cond);
	pthread_mutex_unlock(&cl.lock);
	moved = json_array();
	placed = json_array();
	if (drain && (ns.v = calloc(ns.cap, sizeof(*ns.v)))) {
		inv_function_foreach(session_name, &ns);
		for (size_t i = 0; i < ns.n; i++)
			drain_session(ns.v[i], moved);
		/* the rest: a copy on a member wherever we held the only one */
		ns.n = 0;
		inv_function_foreach(stateless_name, &ns);
		for (size_t i = 0; i < ns.n; i++)
			if (!held_elsewhere(ns.v[i]))
				json_array_append_new(placed, json_pack("{s:s,s:o}", "function", ns.v[i], "replicas",
									inv_cluster_replicate(ns.v[i], 2)));
	}
	free(ns.v);
	*ret_body = json_pack("{s:b,s:o,s:o}", "draining", drain, "sessions", moved, "placed", placed);
	return 200;
}

/* ---- replicas ---- */

/* url is a member in our view (not us). */
static bool is_member(const char *url)
{
	json_t *members = view_take(), *m;
	bool found = false;
	const char *u;
	size_t i;

	json_array_foreach(members, i, m)
		found |= other(m, &u) && !strcmp(u, url);
	json_decref(members);
	return found;
}

int inv_cluster_replicate_receive(const char *body, size_t len, json_t **ret_body)
{
	json_t *req = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL), *pull;
	const char *name = json_string_value(json_object_get(req, "name"));
	const char *from = json_string_value(json_object_get(req, "from"));
	int code;

	if (!json_is_object(req) || json_object_size(req) != 2 || !name || !from || !inv_name_valid(name) ||
	    !inv_cluster_url_ok(from)) {
		json_decref(req);
		*ret_body = inv_err_json("the body must be {\"name\": a function name, \"from\": a member's URL}");
		return 400;
	}
	if (!is_member(from)) {   /* the cluster token pulls from members only, never from any URL */
		*ret_body = inv_err_json("%s is not a member of the cluster", from);
		json_decref(req);
		return 403;
	}
	pull = json_pack("{s:s,s:s,s:s}", "name", name, "from", from, "from_token", cl.token);
	json_decref(req);
	if (!pull)
		return *ret_body = inv_err_json("out of memory"), 500;
	code = inv_pull_deploy(pull, ret_body);
	json_object_del(pull, "from_token");
	json_decref(pull);
	return code;
}

struct replica {
	pthread_t t;
	char *member, *name;
	long status;
	json_t *answer;
	char err[256];
};

static void *replicate_one(void *arg)
{
	struct replica *r = arg;

	if (inv_peer_post_json(r->member, "/system/cluster/replicate", cl.token,
			       json_pack("{s:s,s:s}", "name", r->name, "from", cl.self), INV_PULL_TIMEOUT_MS + 10000L,
			       &r->status, &r->answer, r->err, sizeof(r->err)) < 0)
		r->status = 0;
	return NULL;
}

json_t *inv_cluster_replicate(const char *name, unsigned replicas)
{
	struct candidate c[INV_CLUSTER_MAX_MEMBERS];
	struct replica r[INV_CLUSTER_MAX_REPLICAS];
	json_t *members = view_take(), *m, *rec, *out = json_array();
	const char *url;
	size_t n = 0, i;

	/* members of our device, not draining, that lack it: the least loaded */
	json_array_foreach(members, i, m)
		if ((rec = other(m, &url)) && n < INV_CLUSTER_MAX_MEMBERS &&
		    !json_is_true(json_object_get(rec, "draining")) &&
		    !json_is_true(json_object_get(json_object_get(json_object_get(rec, "functions"), name), "ready")) &&
		    !strcmp(json_string_value(json_object_get(rec, "device")) ?: "", inv_cfg.device))
			c[n++] = (struct candidate){ url, 2, json_integer_value(json_object_get(rec, "load")) };
	qsort(c, n, sizeof(*c), by_rank);
	if (n > replicas - 1)
		n = replicas - 1;
	for (i = 0; i < n; i++) {
		r[i] = (struct replica){ .member = strdup(c[i].url), .name = strdup(name) };
		if (!r[i].member || !r[i].name || pthread_create(&r[i].t, NULL, replicate_one, &r[i])) {
			snprintf(r[i].err, sizeof(r[i].err), "cannot start its pull");
			r[i].t = 0;
		}
	}
	for (i = 0; i < n; i++) {
		if (r[i].t)
			pthread_join(r[i].t, NULL);
		json_array_append_new(out, json_pack("{s:s?,s:i,s:o*,s:s?}", "member", r[i].member, "status",
						     (int)r[i].status, "answer", r[i].answer,
						     "error", r[i].status ? NULL : r[i].err));
		if (r[i].status != 201)
			phos_warn("cluster: %s: a replica on %s: %ld %s", name, r[i].member ?: "?", r[i].status,
				  r[i].status ? "" : r[i].err);
		free(r[i].member);
		free(r[i].name);
	}
	json_decref(members);
	return out;
}
