/* SPDX-License-Identifier: MIT */
/*
 * Moving an instance, with its state, to another invoker (issue 13; see
 * invoker.h, "migrate.c", and docs/peers.md). This file is the source's
 * side, with the file route the target fetches from; B's side is
 * migrate_target.c.
 *
 *   source A                                   target B
 *   POST .../instances/ID/migrate {"to","to_token","mode","async"}: a record
 *   (GET/DELETE /system/migrations/M), then:
 *
 *   recopy (live): the instance is borrowed (it serves on), its control
 *   socket held; CHECKPOINT recopy wait_stop
 *   ... PRECOPIED (rounds converged; the executor keeps gpu.data current)
 *   POST B/.../instances {"phase":"precopy"} ──▶ room? disk? gpu.data as it is
 *                                                 ◀── GET .../checkpoint/file?snapshot=M
 *                                                     into checkpoints/pre-M.tmp-precopy
 *                                                 ◀── GET /system/migrations/M, every few
 *                                                     seconds until the final phase: A quiet
 *                                                     for 30 s, the pre-copy is reclaimed
 *   hold at its next idle moment (calls wait); STOP; CHECKPOINTED; CRIU dump;
 *   committed as checkpoints/NAME-ID
 *   POST B {"phase":"final","manifest"} ───────▶ instance reserved; each buffer of the
 *                                                 pre-copy hashed against the manifest,
 *                                                 the changed ones fetched again, then
 *                                                 modules and CRIU files (verified);
 *                                                 committed as checkpoints/NAME-ID';
 *                                                 restored (stop-the-world) ◀── 201
 *
 *   stw, cow: the instance is held from the start; its checkpoint, then one
 *   POST B {"manifest"} in which B fetches every file.
 *
 *   201: A's instance is stopped (one live copy: B's); a function of one
 *   instance forwards its calls to B from then on.
 *   Anything else: A's instance is given back and serves on (one live copy:
 *   A's), and B drops a pre-copy ({"phase":"abort"}; its restart too).
 *
 * The file route serves only the checkpoint of the instance being moved by M,
 * and only until M ends or is aborted.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <curl/curl.h>
#include <microhttpd.h>

#include "control.h"
#include "fault.h"
#include "image.h"
#include "invoker.h"
#include "log.h"
#include "forward.h"
#include "pull.h"
#include "transfer.h"
#include "migrate.h"


/* What a target checks of its source before it takes an instance: the
 * stand-ins' build (CRIU's image names their files), the NVIDIA driver and
 * the GPU models ("" where there are none: sim). */
static json_t *host_facts(void)
{
	char models[2048], driver[64];

	inv_gpu_models(models, sizeof(models));
	inv_driver_version(driver, sizeof(driver));
	return json_pack("{s:s,s:s,s:s}", "standin", inv_standin_build(), "driver", driver, "gpus", models);
}

/* Reads a whole small file (at most max bytes) into a NUL-terminated buffer. */
static char *read_small(const char *path, size_t max, size_t *ret_len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t n = 0;
	long size;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && (size_t)size <= max && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)size + 1)))
		n = fread(buf, 1, (size_t)size, f);
	fclose(f);
	if (buf && n != (size_t)size) {
		free(buf);
		return NULL;
	}
	if (buf) {
		buf[n] = '\0';
		*ret_len = n;
	}
	return buf;
}

/* ---- the source ---- */

size_t mig_on_answer(char *data, size_t size, size_t nmemb, void *arg)
{
	struct mig_answer *a = arg;
	size_t n = size * nmemb;

	if (a->len + n > MIGRATE_ANSWER_MAX)
		return n;   /* keep the start */
	char *b = realloc(a->buf, a->len + n + 1);
	if (!b)
		return 0;
	memcpy(b + a->len, data, n);
	a->buf = b;
	a->len += n;
	a->buf[a->len] = '\0';
	return n;
}

/* POSTs body to url with the bearer token: the HTTP status (0: unreachable,
 * with the reason in err) and the parsed answer. */
static long post_json(const char *url, const char *token, const char *body, long timeout_s, json_t **ret, char *err,
		      size_t errlen)
{
	struct mig_answer a = { 0 };
	struct curl_slist *h = NULL;
	char auth[PULL_TOKEN_MAX + 32];
	CURL *c = curl_easy_init();
	long status = 0;
	CURLcode cr;

	*ret = NULL;
	if (!c) {
		phos_errf(err, errlen, "out of memory");
		return 0;
	}
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	h = curl_slist_append(h, auth);
	h = curl_slist_append(h, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	pull_curl_keepalive(c);   /* a cut link fails the wait in ~20 s, not timeout_s */
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mig_on_answer);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	cr = curl_easy_perform(c);
	if (cr == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	else
		phos_errf(err, errlen, "cannot reach the target: %s", curl_easy_strerror(cr));
	if (a.buf)
		*ret = json_loadb(a.buf, a.len, 0, NULL);
	free(a.buf);
	explicit_bzero(auth, sizeof(auth));
	for (struct curl_slist *x = h; x; x = x->next)
		explicit_bzero(x->data, strlen(x->data));
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return status;
}

/* The migration's id: 32 hex digits. */
static int new_id(char ret[33])
{
	unsigned char b[16];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -EIO;
	for (int i = 0; i < 16; i++)
		snprintf(ret + 2 * i, 3, "%02x", b[i]);
	return 0;
}

/* A URL as the pull takes it (http(s)://HOST[:PORT], nothing else): 0 or -EINVAL with err. */
static int url_ok(const char *what, const char *url, char *err, size_t errlen)
{
	struct pull p = { .cancel_fd = -1 };
	char why[512];
	int r = pull_url_check(&p, url, why, sizeof(why));

	if (r < 0)
		phos_errf(err, errlen, "%s: %s", what, strncmp(why, "from: ", 6) ? why : why + 6);
	curl_url_cleanup(p.base);
	return r;
}

/* The file route serves in's checkpoint files from dir for migration mid:
 * those img lists, or without one (a pre-copy) gpu.data up to data_end. */
static void mig_serve(struct inv_function *f, struct inv_instance *in, const char *mid, const char *dir,
		      struct phos_image *img, uint64_t data_end)
{
	char *d = strdup(dir);

	pthread_mutex_lock(&f->lock);
	snprintf(in->migration, sizeof(in->migration), "%s", mid);
	free(in->mig_dir);
	in->mig_dir = d;   /* (NULL when out of memory: nothing is served) */
	in->mig_img = img;
	in->mig_data_end = data_end;
	pthread_mutex_unlock(&f->lock);
}

/* A committed checkpoint read back: its manifest's text and parsed image.
 * 0, or -errno with err. */
static int checkpoint_read(const char *dir, char **ret_text, size_t *ret_len, struct phos_image **ret_img,
			   char *err, size_t errlen)
{
	char path[PATH_MAX + 16];
	int r;

	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	*ret_text = read_small(path, PHOS_IMAGE_MAX_MANIFEST, ret_len);
	if (!*ret_text) {
		phos_errf(err, errlen, "the checkpoint's manifest does not read back");
		return -EIO;
	}
	r = phos_image_read(dir, ret_img, err, errlen);
	if (r < 0) {
		free(*ret_text);
		*ret_text = NULL;
	}
	return r;
}

/* in is no longer being moved: the file route serves it no more. */
static void mig_clear(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	in->migration[0] = '\0';
	in->mig_img = NULL;
	free(in->mig_dir);
	in->mig_dir = NULL;
	in->mig_data_end = 0;
	pthread_mutex_unlock(&f->lock);
}

/* f's instance went to `to`: a function of one instance (a session) forwards
 * its calls there from now on, those waiting for the held instance first
 * (set before the instance goes, which wakes them), after a restart too. */
static void moved_away(struct inv_function *f, const char *to, const char *token)
{
	char *dst, *tok;

	if (f->limits.max_instances != 1)
		return;
	dst = strdup(to);
	tok = strdup(token);
	pthread_mutex_lock(&f->lock);
	free(f->moved_to);
	if (f->moved_token)
		explicit_bzero(f->moved_token, strlen(f->moved_token));
	free(f->moved_token);
	f->moved_to = dst && tok ? dst : NULL;
	f->moved_token = dst && tok ? tok : NULL;
	pthread_mutex_unlock(&f->lock);
	if (dst && tok)
		inv_move_note(f->name, to, token);
	if (!dst || !tok) {
		free(dst);
		free(tok);
		phos_err("%s: out of memory: calls are not forwarded to %s", f->name, to);
	}
}

/* The target's URL for NAME's instances. */
static void instances_url(char *buf, size_t len, const char *to, const char *name)
{
	snprintf(buf, len, "%.*s/system/functions/%s/instances", (int)strlen(to) - (to[strlen(to) - 1] == '/'), to,
		 name);
}

/* ---- migration records: GET /system/migrations/ID, DELETE (abort) ---- */

#define MIG_KEEP 256   /* ended records kept, newest first */

struct mig {
	struct mig *next;
	char id[33];                  /* the migration id the file route checks too */
	char function[INV_NAME_MAX + 1];
	unsigned instance;
	char to[PULL_URL_MAX + 1], token[PULL_TOKEN_MAX + 1], self[PULL_URL_MAX + 1];
	enum phos_ckpt_mode mode;
	const char *state;            /* starting, precopy, stopping, transferring, done, failed, aborted */
	double started, ended;
	atomic_bool abort;
	int code;                     /* when ended */
	json_t *result;               /* when ended: the answer */
	struct inv_function *f;       /* a reference while it runs */
};

static pthread_mutex_t migs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mig *migs;


static void mig_state(struct mig *m, const char *state)
{
	pthread_mutex_lock(&migs_lock);
	m->state = state;
	pthread_mutex_unlock(&migs_lock);
}

static bool mig_aborted(struct mig *m)
{
	return m && atomic_load(&m->abort);
}

/* Records m's end and drops the oldest ended records beyond MIG_KEEP. */
static void mig_end(struct mig *m, int code, json_t *body)
{
	unsigned ended = 0;

	pthread_mutex_lock(&migs_lock);
	m->code = code;
	m->result = json_deep_copy(body);
	m->ended = phos_now();
	m->state = code == 200 ? "done" : atomic_load(&m->abort) ? "aborted" : "failed";
	explicit_bzero(m->token, sizeof(m->token));
	for (struct mig **pp = &migs; *pp;) {
		struct mig *x = *pp;

		if (x != m && x->ended && ++ended > MIG_KEEP) {
			*pp = x->next;
			json_decref(x->result);
			free(x);
			continue;
		}
		pp = &x->next;
	}
	pthread_mutex_unlock(&migs_lock);
}

/* Whether migration mid of f's instance was aborted (the file route then fails). */
static bool mig_id_aborted(const char *mid)
{
	bool a = false;

	pthread_mutex_lock(&migs_lock);
	for (struct mig *m = migs; m; m = m->next)
		if (!strcmp(m->id, mid))
			a = atomic_load(&m->abort);
	pthread_mutex_unlock(&migs_lock);
	return a;
}

static json_t *mig_json(const struct mig *m)
{
	double now = phos_now();

	return json_pack("{s:s,s:s,s:i,s:s,s:s,s:s,s:f,s:O?}", "migration", m->id, "function", m->function, "instance",
			 (int)m->instance, "to", m->to, "mode", phos_ckpt_mode_name(m->mode), "state", m->state,
			 "elapsed_s", (m->ended ? m->ended : now) - m->started, "result", m->result);
}

int inv_migration_get(const char *id, bool abort, json_t **ret_body)
{
	int code = 404;

	pthread_mutex_lock(&migs_lock);
	for (struct mig *m = migs; m; m = m->next) {
		if (strcmp(m->id, id))
			continue;
		if (abort && m->ended) {
			*ret_body = inv_err_json("migration %s has ended (%s)", id, m->state);
			code = 409;
		} else {
			if (abort)
				atomic_store(&m->abort, true);
			*ret_body = mig_json(m);
			code = abort ? 202 : 200;
		}
		break;
	}
	pthread_mutex_unlock(&migs_lock);
	if (code == 404)
		*ret_body = inv_err_json("no migration %.40s (or it is too old)", id);
	return code;
}

/* ---- live: pre-copy while the instance serves, then a short stop ---- */

struct live {
	struct mig *job;
	struct inv_function *f;
	unsigned id;
	const char *to, *token, *self;
	const char *mid;
	char url[PULL_URL_MAX + 256];
	struct inv_instance *held;    /* from the stop on */
	double t_stop;                /* the stop: calls wait from here */
	double pre_fetch_s;
	uint64_t pre_bytes, pre_reused;   /* fetched, and taken from the target's own snapshot */
	double t_final;           /* the checkpoint committed, the final phase asked */
	double t_posted, t_answered;   /* the final phase's request sent, its answer come (CLOCK_MONOTONIC) */
	char err[1024];
};

/* The size of a pre-copy's item places (ctxpool/state/exec_recopy.c), or -ENOENT. */
static int64_t layout_size(const char *dir)
{
	char path[PATH_MAX + 32];
	struct stat st;

	snprintf(path, sizeof(path), "%s/precopy.layout", dir);
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -ENOENT;
}

static void *writeback_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;

	(void)fdatasync(fd);   /* (best effort: the commit fsyncs anyway) */
	close(fd);
	return NULL;
}

/* Starts writing path's dirty pages to disk on a thread of its own, so that
 * the commit at the stop, which fsyncs every file of the checkpoint, finds
 * them written: the pre-copy's gigabytes otherwise hit the disk inside the
 * downtime (both sides: the source's checkpoint, the target's copy). */
void mig_writeback_start(const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	pthread_attr_t a;
	pthread_t t;

	if (fd < 0)
		return;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, writeback_thread, (void *)(intptr_t)fd) != 0)
		close(fd);
	pthread_attr_destroy(&a);
}

/* The pre-copy converged: the target fetches gpu.data as it is while the
 * instance serves on (the executor keeps it current), then the instance is
 * held (calls wait) and the executor told to stop. */
static int on_precopied(void *arg, const char *tmp, const struct phos_ctl_msg *m)
{
	struct live *L = arg;
	struct inv_function *f = L->f;
	struct inv_instance *in = NULL;
	json_t *ans = NULL;
	int64_t layout;
	char *body;
	long status;
	int r;

	pthread_mutex_lock(&f->lock);
	for (struct inv_instance *x = f->instances; x; x = x->next)   /* (borrowed: it stays) */
		if (x->id == L->id)
			in = x;
	pthread_mutex_unlock(&f->lock);
	mig_serve(f, in, L->mid, tmp, NULL, m->precopied.data_end);
	{
		char data[PATH_MAX + 16];

		snprintf(data, sizeof(data), "%s/gpu.data", tmp);
		mig_writeback_start(data);   /* while the target fetches it */
	}
	layout = layout_size(tmp);
	body = json_dumps(json_pack("{s:s,s:s,s:s,s:i,s:s,s:I,s:I,s:o}", "phase", "precopy", "from", L->self,
				    "from_token", inv_cfg.peer_token, "instance", (int)L->id, "migration", L->mid, "data_bytes",
				    (json_int_t)m->precopied.data_end, "layout_bytes", (json_int_t)(layout > 0 ? layout : 0),
				    "host", host_facts()),
			  JSON_COMPACT);
	status = body ? post_json(L->url, L->token, body, MIGRATE_TIMEOUT_S, &ans, L->err, sizeof(L->err)) : 0;
	if (body)
		explicit_bzero(body, strlen(body));
	free(body);
	if (status != 200) {
		const char *why = mig_str_of(ans, "error");

		if (why || status)
			snprintf(L->err, sizeof(L->err), "the target %s the pre-copy (%ld: %s)", status ? "refused" : "failed",
				 status, why ? why : "no answer");
		json_decref(ans);
		return -EIO;
	}
	if (mig_aborted(L->job)) {
		snprintf(L->err, sizeof(L->err), "aborted");
		json_decref(ans);
		return -ECANCELED;
	}
	L->pre_bytes = (uint64_t)json_integer_value(json_object_get(ans, "bytes"));
	L->pre_reused = (uint64_t)json_integer_value(json_object_get(ans, "reused_bytes"));
	L->pre_fetch_s = json_real_value(json_object_get(ans, "fetch_s"));
	json_decref(ans);
	phos_info("%s: instance %u pre-copied to %s: %.1f MiB in %.1f ms (%u rounds, %.1f MiB dirty now)", f->name,
		  L->id, L->to, (double)L->pre_bytes / (1 << 20), L->pre_fetch_s * 1e3, m->precopied.rounds,
		  (double)m->precopied.dirty_bytes / (1 << 20));
	/* the stop: its next idle moment is ours */
	mig_state(L->job, "stopping");
	r = inv_instance_hold(f, L->id, f->limits.timeout_ms, &L->held, L->err, sizeof(L->err));
	if (r < 0)
		return r;
	L->t_stop = phos_now();
	{
		int a = 0, b = 0;

		if (ioctl(L->held->in_fd, FIONREAD, &a) < 0 || ioctl(L->held->out_fd, FIONREAD, &b) < 0 || a || b) {
			snprintf(L->err, sizeof(L->err), "the instance is between a request and its answer");
			return -EAGAIN;
		}
	}
	return 0;
}

/* The recopy checkpoint of a borrowed instance, into its checkpoint folder;
 * on_precopied posts the pre-copy on the way. 0 or -errno (L->err). */
static int live_checkpoint(struct live *L, struct inv_instance *in, struct phos_checkpoint_stats *st)
{
	const int stdio[3] = { in->in_fd, in->out_fd, in->err_fd };
	struct phos_checkpoint_target t = {
		.fn_pid = in->proc.fn_pid, .channel_fd = 3, .control_fd = in->proc.control_fd,
		.executor_pid = in->proc.executor_pid, .criu = inv_cfg.paths.criu, .function = L->f->name,
		.stdio_fds = stdio, .precopied = on_precopied, .precopied_arg = L,
	};
	int r;

	pthread_mutex_lock(&in->ctl_lock);   /* (waits out a fallbacks query or a checkpoint) */
	if (!in->ckpt_dir &&
	    asprintf(&in->ckpt_dir, "%s/checkpoints/%s-%u", inv_cfg.state_dir, L->f->name, L->id) < 0)
		in->ckpt_dir = NULL;
	r = in->ckpt_dir ? phos_checkpoint_take(&t, PHOS_CKPT_RECOPY, in->ckpt_dir, st, L->err, sizeof(L->err))
			 : -ENOMEM;
	pthread_mutex_unlock(&in->ctl_lock);
	return r;
}

/* A live move that failed (r < 0) or was refused (status): the target drops
 * its pre-copy, the instance serves on here. Returns the error body. */
static json_t *live_failed(struct live *L, struct inv_instance *in, int r, long status, json_t *ans)
{
	const char *why = mig_str_of(ans, "error");
	char *abort_body = json_dumps(json_pack("{s:s,s:s}", "phase", "abort", "migration", L->mid), JSON_COMPACT);
	json_t *ignored = NULL;
	char e2[256];

	if (abort_body)   /* (the target may hold a pre-copy: dropped) */
		post_json(L->url, L->token, abort_body, 10, &ignored, e2, sizeof(e2));
	free(abort_body);
	json_decref(ignored);
	if (L->held)
		inv_instance_release(L->f, L->held);
	inv_instance_unborrow(L->f, in);
	phos_warn("%s: moving instance %u to %s failed: %s", L->f->name, L->id, L->to,
		  r < 0 ? L->err : why ? why : L->err);
	return inv_err_json("the move %s (%ld: %s); instance %u serves on here", r < 0 ? "failed" : "was refused",
			    status, r < 0 ? L->err : why ? why : L->err[0] ? L->err : "no answer", L->id);
}

/* The answer of a live move done at now (started at t0): its phases' times
 * here and the target's figures (ans). */
static json_t *live_done_json(const struct live *L, const struct phos_checkpoint_stats *st, json_t *ans, double now,
			      double t0)
{
	return json_pack("{s:s,s:s,s:s,s:i,s:O?,s:s,s:f,s:f,s:f,s:I,s:I,s:f,s:f,s:I,s:I,s:i,s:O?,s:O?,s:O?,"
			 "s:O?,s:O?,s:O?,s:O?}",
			 "state", "done", "migration", L->mid, "to", L->to, "instance", (int)L->id, "target_instance",
			 json_object_get(ans, "instance"), "mode", "recopy", "downtime_s", now - L->t_stop, "total_s",
			 now - t0, "precopy_fetch_s", L->pre_fetch_s, "precopy_bytes", (json_int_t)L->pre_bytes,
			 "precopy_reused_bytes", (json_int_t)L->pre_reused, "stop_stall_s", st->stall_s,
			 "source_stop_s", L->t_final - L->t_stop, "stop_bytes", (json_int_t)st->stop_bytes, "bytes",
			 (json_int_t)json_integer_value(json_object_get(ans, "bytes")), "rounds", (int)st->rounds,
			 "fetch_s", json_object_get(ans, "fetch_s"), "restore_s", json_object_get(ans, "restore_s"),
			 "verify_s", json_object_get(ans, "verify_s"), "commit_s", json_object_get(ans, "commit_s"),
			 "refetched_bytes", json_object_get(ans, "refetched_bytes"), "prehashed_items",
			 json_object_get(ans, "prehashed_items"), "target_executor", json_object_get(ans, "executor"));
}

/* Moves a job's instance with a pre-copy (recopy mode): 200 or an error, the
 * instance serving on here on any failure. */
static int move_live(struct mig *job, json_t **ret_body)
{
	struct inv_function *f = job->f;
	unsigned id = job->instance;
	const char *to = job->to, *token = job->token, *self = job->self;
	struct live L = { .job = job, .f = f, .id = id, .to = to, .token = token, .self = self, .mid = job->id };
	struct phos_checkpoint_stats st = { 0 };
	struct phos_image *img = NULL;
	struct inv_instance *in;
	char *manifest = NULL, *body = NULL;
	json_t *ans = NULL;
	size_t mlen = 0;
	double t0 = phos_now();
	long status = 0;
	int r, code;

	in = inv_instance_borrow(f, id, L.err, sizeof(L.err));
	if (!in)
		return *ret_body = inv_err_json("%s", L.err), 404;
	mig_state(job, "precopy");
	instances_url(L.url, sizeof(L.url), to, f->name);
	r = live_checkpoint(&L, in, &st);
	if (r == 0)
		r = checkpoint_read(in->ckpt_dir, &manifest, &mlen, &img, L.err, sizeof(L.err));
	if (r == 0 && mig_aborted(job)) {
		r = -ECANCELED;
		snprintf(L.err, sizeof(L.err), "aborted");
	}
	if (r == 0) {
		L.t_final = phos_now();   /* the source's part of the stop ends here */
		mig_state(job, "transferring");
		mig_serve(f, in, L.mid, in->ckpt_dir, img, 0);
		body = json_dumps(json_pack("{s:s,s:s,s:s,s:i,s:s,s:s%,s:o}", "phase", "final", "from", self,
					    "from_token", inv_cfg.peer_token, "instance", (int)id, "migration", L.mid, "manifest",
					    manifest, mlen, "host", host_facts()), JSON_COMPACT);
		L.t_posted = phos_now();
		status = body ? post_json(L.url, token, body, MIGRATE_TIMEOUT_S, &ans, L.err, sizeof(L.err)) : 0;
		L.t_answered = phos_now();
		if (body)
			explicit_bzero(body, strlen(body));
	}
	mig_clear(f, in);
	if (r < 0 || status != 201) {
		*ret_body = live_failed(&L, in, r, status, ans);
		code = r == -EBUSY || mig_aborted(job) ? 409 : 502;
		goto out;
	}
	if (phos_fault("migrate_source_kill"))
		raise(SIGKILL);   /* tests: the source dies after the switch, before its copy goes */
	moved_away(f, to, token);
	double now = phos_now();   /* the target serves: the stop ends here, before our copy goes */
	inv_instance_unborrow(f, in);
	inv_instance_retire(f, L.held);
	*ret_body = live_done_json(&L, &st, ans, now, t0);
	phos_info("%s: instance %u moved live to %s: downtime %.1f ms, total %.1f ms (from the stop: checkpoint "
		  "%.1f, final phase asked %.1f, answered %.1f, switched %.1f ms; the stop at %.6f)", f->name, id, to,
		  (now - L.t_stop) * 1e3, (now - t0) * 1e3, (L.t_final - L.t_stop) * 1e3, (L.t_posted - L.t_stop) * 1e3,
		  (L.t_answered - L.t_stop) * 1e3, (now - L.t_stop) * 1e3, L.t_stop);
	code = 200;
out:
	free(body);
	free(manifest);
	phos_image_free(img);
	json_decref(ans);
	return code;
}

/* ---- moving a held instance: stw and cow ---- */

static int move_held(struct mig *j, json_t **ret_body)
{
	struct inv_function *f = j->f;
	struct phos_checkpoint_stats st = { 0 };
	struct phos_image *img = NULL;
	struct inv_instance *in = NULL;
	char err[1024], url[PULL_URL_MAX + 256];
	json_t *ans = NULL;
	char *manifest = NULL, *out = NULL;
	size_t mlen = 0;
	double t0 = phos_now(), t_ckpt;
	long status;
	int code = 500, r;

	mig_state(j, "stopping");
	r = inv_instance_hold(f, j->instance, f->limits.timeout_ms, &in, err, sizeof(err));
	if (r < 0) {
		*ret_body = inv_err_json("%s", err);
		return r == -ENOENT ? 404 : r == -ESHUTDOWN ? 503 : 409;
	}
	/* from here on: held; given back unless the target took it */
	r = mig_aborted(j) ? -ECANCELED : inv_checkpoint_take(f, in, j->mode, &st, err, sizeof(err));
	t_ckpt = phos_now();
	if (r == 0)
		r = checkpoint_read(in->ckpt_dir, &manifest, &mlen, &img, err, sizeof(err));
	if (r == 0 && mig_aborted(j))
		r = -ECANCELED;
	if (r < 0) {
		inv_instance_release(f, in);
		*ret_body = inv_err_json("%s of instance %u %s; it serves on here", r == -ECANCELED ? "the move" : "checkpoint",
				     j->instance, r == -ECANCELED ? "was aborted" : err);
		code = r == -ENOSPC ? 507 : r == -ECANCELED ? 409 : 500;
		goto out;
	}
	mig_serve(f, in, j->id, in->ckpt_dir, img, 0);

	mig_state(j, "transferring");
	out = json_dumps(json_pack("{s:s,s:s,s:i,s:s,s:s%,s:o}", "from", j->self, "from_token", inv_cfg.peer_token,
				   "instance", (int)j->instance, "migration", j->id, "manifest", manifest, mlen, "host",
				   host_facts()),
			 JSON_COMPACT);
	instances_url(url, sizeof(url), j->to, f->name);   /* (to: checked, not empty) */
	phos_info("%s: moving instance %u to %s (%s checkpoint, %.1f MiB of GPU data)", f->name, j->instance, j->to,
		  phos_ckpt_mode_name(j->mode), (double)st.gpu_bytes / (1 << 20));
	err[0] = '\0';
	status = out ? post_json(url, j->token, out, MIGRATE_TIMEOUT_S, &ans, err, sizeof(err)) : 0;
	if (out)
		explicit_bzero(out, strlen(out));   /* it held our peer token */
	mig_clear(f, in);
	if (status != 201) {
		const char *why = mig_str_of(ans, "error");

		inv_instance_release(f, in);
		phos_warn("%s: moving instance %u to %s failed (%ld): %s", f->name, j->instance, j->to, status,
			  why ? why : err[0] ? err : "no answer");
		*ret_body = inv_err_json("the target %s the move (%ld: %s); instance %u serves on here",
				     status ? "refused" : "did not take", status, why ? why : err[0] ? err : "no answer",
				     j->instance);
		code = mig_aborted(j) ? 409 : 502;
		goto out;
	}
	/* B holds the instance now: ours goes, its checkpoint with it */
	moved_away(f, j->to, j->token);
	double total = phos_now() - t0;   /* the target serves: before our copy goes */
	inv_instance_retire(f, in);
	json_t *at = json_object_get(ans, "instance");
	*ret_body = json_pack("{s:s,s:s,s:s,s:i,s:O?,s:s,s:f,s:f,s:I,s:O?,s:O?,s:O?}", "state", "done", "migration",
			      j->id, "to", j->to, "instance", (int)j->instance, "target_instance", at, "mode",
			      phos_ckpt_mode_name(j->mode), "downtime_s", total, "checkpoint_s", t_ckpt - t0, "bytes",
			      (json_int_t)json_integer_value(json_object_get(ans, "bytes")), "fetch_s",
			      json_object_get(ans, "fetch_s"), "restore_s", json_object_get(ans, "restore_s"),
			      "target_executor", json_object_get(ans, "executor"));
	phos_info("%s: instance %u moved to %s in %.1f ms", f->name, j->instance, j->to, total * 1e3);
	code = 200;
out:
	if (out)
		free(out);
	free(manifest);
	phos_image_free(img);
	json_decref(ans);
	return code;
}

/* Runs migration j to its end, with its record. */
static int move(struct mig *j, json_t **ret_body)
{
	int code = j->mode == PHOS_CKPT_RECOPY ? move_live(j, ret_body) : move_held(j, ret_body);
	struct inv_function *f = j->f;

	j->f = NULL;
	mig_end(j, code, *ret_body);   /* (j may go with a later record's end: not used after) */
	inv_function_unref(f);
	return code;
}

static void *move_thread(void *arg)
{
	json_t *body = NULL;

	move(arg, &body);
	json_decref(body);
	return NULL;
}

/* A move request's fields, checked: the target's URL and token, the mode,
 * the URL we advertise (ours when absent) and whether to answer at once. */
struct move_args {
	const char *to, *token, *self;
	enum phos_ckpt_mode mode;
	bool async;
	char self_buf[300];
};

/* Parses and checks req into a; NULL, or the 400 answer's body. */
static json_t *move_args_parse(json_t *req, struct move_args *a)
{
	const char *key, *mode_s;
	json_t *val, *async;
	char err[1024];

	json_object_foreach(req, key, val)
		if (strcmp(key, "to") && strcmp(key, "to_token") && strcmp(key, "mode") && strcmp(key, "advertise") &&
		    strcmp(key, "async"))
			return inv_err_json("unknown field '%.64s'", key);
	a->to = mig_str_of(req, "to");
	a->token = mig_str_of(req, "to_token");
	mode_s = mig_str_of(req, "mode");
	a->self = mig_str_of(req, "advertise");
	async = json_object_get(req, "async");
	a->mode = PHOS_CKPT_RECOPY;
	if (!a->to || url_ok("to", a->to, err, sizeof(err)) < 0)
		return inv_err_json("%s", a->to ? err : "to must be the target invoker's URL");
	if (!a->token || !pull_token_valid(a->token))
		return inv_err_json("to_token must be the target's peer token (phos-fn peer-token there; 16..%d "
				    "printable characters)",
				    PULL_TOKEN_MAX);
	if ((mode_s && phos_ckpt_mode_parse(mode_s, &a->mode) < 0) || (json_object_get(req, "mode") && !mode_s))
		return inv_err_json("mode must be \"stw\", \"cow\" or \"recopy\"");
	if (a->self && url_ok("advertise", a->self, err, sizeof(err)) < 0)
		return inv_err_json("%s", err);
	if (async && !json_is_boolean(async))
		return inv_err_json("async must be true or false");
	a->async = json_is_true(async);
	if (!a->self)
		a->self = inv_http_self_url(a->self_buf, sizeof(a->self_buf));
	return NULL;
}

/* Runs j on a thread of its own; true when it started (the 202's body in
 * ret_body). */
static bool move_detached(struct mig *j, json_t **ret_body)
{
	pthread_t th;
	pthread_attr_t a;
	bool started;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	started = pthread_create(&th, &a, move_thread, j) == 0;
	pthread_attr_destroy(&a);
	if (started) {
		pthread_mutex_lock(&migs_lock);
		*ret_body = mig_json(j);
		pthread_mutex_unlock(&migs_lock);
	}
	return started;
}

int inv_migrate_request(const char *name, unsigned id, const char *body, size_t len, json_t **ret_body)
{
	struct move_args a = { 0 };
	struct inv_function *f = NULL;
	struct mig *j = NULL;
	json_t *req;
	int code = 500;

	req = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(req)) {
		json_decref(req);
		return *ret_body = inv_err_json("the body must be a JSON object {\"to\",\"to_token\",\"mode\",\"advertise\","
					    "\"async\"}"), 400;
	}
	*ret_body = move_args_parse(req, &a);
	if (*ret_body) {
		code = 400;
		goto out;
	}
	f = inv_function_get(name);
	if (!f) {
		*ret_body = inv_err_json("no function %s", name);
		code = 404;
		goto out;
	}
	j = calloc(1, sizeof(*j));
	if (!j || new_id(j->id) < 0) {
		free(j);
		*ret_body = inv_err_json("out of memory");
		goto out;
	}
	snprintf(j->function, sizeof(j->function), "%s", name);
	snprintf(j->to, sizeof(j->to), "%s", a.to);
	snprintf(j->token, sizeof(j->token), "%s", a.token);
	snprintf(j->self, sizeof(j->self), "%s", a.self);
	j->instance = id;
	j->mode = a.mode;
	j->state = "starting";
	j->started = phos_now();
	j->f = f;
	f = NULL;   /* the job's reference */
	pthread_mutex_lock(&migs_lock);
	j->next = migs;
	migs = j;
	pthread_mutex_unlock(&migs_lock);
	if (a.async && move_detached(j, ret_body))
		code = 202;
	else
		code = move(j, ret_body);
out:
	json_decref(req);
	inv_function_unref(f);
	return code;
}

int inv_migrate_file(const char *name, unsigned id, const char *mid, const char *path, const char *offset,
		     const char *length, struct MHD_Response **ret_resp, json_t **ret_body)
{
	struct inv_function *f;
	uint64_t off, len;
	int64_t size = -1;
	int fd = -1, code;

	if (!mid)
		return *ret_body = inv_err_json("snapshot= (the migration) and path= are needed"), 400;
	if ((code = inv_range_args(path, offset, length, &off, &len, ret_body)))
		return code;
	if (phos_fault("migrate_file_cut"))
		return *ret_body = inv_err_json("injected fault: migrate_file_cut"), 500;
	f = inv_function_get(name);
	if (!f)
		return *ret_body = inv_err_json("no function %s", name), 404;
	pthread_mutex_lock(&f->lock);
	struct inv_instance *in = f->instances;
	while (in && in->id != id)
		in = in->next;
	/* only the files of a checkpoint being moved, while it is (the instance
	 * is held: nothing writes them) */
	if (!in || !in->mig_dir || strcmp(in->migration, mid) || mig_id_aborted(mid)) {
		code = 409;
		*ret_body = inv_err_json("instance %u of %s is not being moved by migration %.40s", id, name, mid);
	} else if ((size = in->mig_img ? inv_image_file_size(in->mig_img, path)
			   : !strcmp(path, "gpu.data") ? (int64_t)in->mig_data_end
			   : !strcmp(path, "precopy.layout") ? layout_size(in->mig_dir) : -ENOENT) < 0) {
		code = 404;
		*ret_body = inv_err_json("%s is not a file of the checkpoint", path);
	} else {
		code = inv_range_open(in->mig_dir, path, size, off, len, &fd, ret_body);
	}
	pthread_mutex_unlock(&f->lock);
	inv_function_unref(f);
	if (code != 200)
		return code;
	return inv_range_response(fd, off, len, ret_resp, ret_body);
}

/* ---- forwarding calls of a moved session ---- */

/* A call of f, whose instance moved away, forwarded to where it went. */
void inv_migrate_forward(struct inv_function *f, const char *body, size_t len, const char *ctype,
			 struct inv_result *res)
{
	char *to = NULL, *token = NULL, err[256];

	pthread_mutex_lock(&f->lock);
	if (f->moved_to) {
		to = strdup(f->moved_to);
		token = strdup(f->moved_token);
	}
	pthread_mutex_unlock(&f->lock);
	if (!to || !token)   /* it came back meanwhile: the caller's next try finds it */
		inv_result_error(res, 503, "the function's instance is moving; retry");
	else if (inv_peer_forward(to, f->name, token, NULL, body, len, ctype, (long)f->limits.timeout_ms + 10000L,
				  res, err, sizeof(err)) < 0)
		inv_result_error(res, 502, "the function's instance moved to %s, which %s%s", to,
				 strcmp(err, "answered too much") ? "cannot be reached: " : "", err);
	if (token)
		explicit_bzero(token, strlen(token));
	free(token);
	free(to);
}
