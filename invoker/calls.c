/* SPDX-License-Identifier: MIT */
/*
 * Call records and the asynchronous queue.
 *
 *   POST /async-function/F ──▶ queue (FIFO, ≤ --async-queue calls and
 *        │                     ≤ ASYNC_QUEUE_BYTES of bodies; full: 429 at once)
 *        202 {"call_id"}       │
 *                              ▼ ASYNC_WORKERS threads; at most max_instances
 *                                (and ASYNC_PER_FUNCTION) running calls per
 *                                function (queue room stays for sync callers)
 *                              inv_invoke ── refused before reaching an instance
 *                                │           (the function at capacity)? back in
 *                                │           the queue after a pause, for at most
 *                                ▼           ASYNC_WAIT_S, then that status is final
 *                              record: done / failed
 *
 * Accepted async calls are on disk too (calls_store.c): a restarted invoker
 * runs those still queued and answers for those finished. While draining, no
 * queued call is started: it waits on disk for the next start.
 *
 * Records live in a hash by id. A queued or running record is never evicted.
 * Finished async records are kept for --async-retention seconds, at most
 * ASYNC_KEPT of them and ASYNC_KEPT_BYTES of their bodies (oldest first);
 * finished sync records, which only serve GET /system/calls/ID after the fact,
 * are kept SYNC_KEPT deep. All of it under calls_lock.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "image.h"
#include "invoker.h"
#include "log.h"

#define BODY_KEPT (256u << 10)           /* of an answer, per record */
#define SYNC_KEPT 1024
#define ASYNC_KEPT 16384
#define ASYNC_KEPT_BYTES (128ull << 20)
#define ASYNC_QUEUE_BYTES (256ull << 20)
#define ASYNC_WORKERS 64
#define ASYNC_PER_FUNCTION (ASYNC_WORKERS * 3 / 4) /* the rest stays for other functions */
#define ASYNC_WAIT_S 600.0               /* admission retries of one call */
#define HASH_BUCKETS 8192

enum call_status { CALL_QUEUED, CALL_RUNNING, CALL_DONE, CALL_FAILED };

struct call {
	struct call *hnext;      /* hash chain */
	struct call *fnext;      /* finished FIFO, oldest first */
	char id[33];
	char function[INV_NAME_MAX + 1];
	enum call_status status;
	bool async;
	int code;
	char *body;
	size_t len;
	bool truncated;
	double finished;         /* phos_now() */
};

struct call_fifo {
	struct call *head, *tail;
	unsigned n;
	unsigned long long bytes;
};

struct async_job {
	struct async_job *next;
	struct inv_function *f;
	unsigned resumes;        /* > 0: resumed from STATE/checkpoints/resume-ID (its resumes-th time) */
	char id[33];
	char ctype[128];
	double submitted, not_before;
	size_t len;
	char body[];
};

static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static struct call *buckets[HASH_BUCKETS];
static struct call_fifo sync_done, async_done;
static struct async_job *queue_head, *queue_tail;
static unsigned queued, running;          /* async calls */
static unsigned resuming;                 /* of the queued at start: resumed from checkpoints */
static unsigned long long queued_bytes;
static pthread_t workers[ASYNC_WORKERS];
static unsigned nworkers;
static bool stopping;

static unsigned bucket_of(const char *id)
{
	unsigned h = 2166136261u;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % HASH_BUCKETS;
}

static struct call *find(const char *id)
{
	for (struct call *c = buckets[bucket_of(id)]; c; c = c->hnext)
		if (!strcmp(c->id, id))
			return c;
	return NULL;
}

static void call_drop(struct call *c)
{
	for (struct call **p = &buckets[bucket_of(c->id)]; *p; p = &(*p)->hnext)
		if (*p == c) {
			*p = c->hnext;
			break;
		}
	free(c->body);
	free(c);
}

static void fifo_pop_free(struct call_fifo *q)
{
	struct call *c = q->head;

	if (c->async && !stopping)
		inv_calls_store_drop(c->id);   /* evicted (at stop: kept for the next start) */
	q->head = c->fnext;
	if (!q->head)
		q->tail = NULL;
	q->n--;
	q->bytes -= c->len;
	call_drop(c);
}

/* Evicts finished records past their limits (calls_lock held). */
static void evict(double now)
{
	while (sync_done.n > SYNC_KEPT)
		fifo_pop_free(&sync_done);
	while (async_done.head && (async_done.n > ASYNC_KEPT || async_done.bytes > ASYNC_KEPT_BYTES ||
				   async_done.head->finished + inv_cfg.async_retention_s < now))
		fifo_pop_free(&async_done);
}

/* Makes a record in the queued state (calls_lock held), with a new id or,
 * when reuse is set, the one in id: the record, or NULL (out of memory). */
static struct call *call_add(const char *function, bool async, bool reuse, char id[33])
{
	unsigned char rnd[16];
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	while (!reuse) {
		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
			for (unsigned i = 0; i < sizeof(rnd); i++)
				rnd[i] = (unsigned char)random();
		for (unsigned i = 0; i < 16; i++)
			sprintf(id + 2 * i, "%02x", rnd[i]);
		if (!find(id))
			break;
	}
	memcpy(c->id, id, 33);
	snprintf(c->function, sizeof(c->function), "%s", function);
	c->status = CALL_QUEUED;
	c->async = async;
	c->hnext = buckets[bucket_of(id)];
	buckets[bucket_of(id)] = c;
	evict(inv_wall_now());
	return c;
}

void inv_call_new(const char *function, char id[33])
{
	pthread_mutex_lock(&calls_lock);
	if (!call_add(function, false, false, id))
		id[0] = '\0';   /* no record: GET /system/calls/ID says 404 */
	pthread_mutex_unlock(&calls_lock);
}

void inv_call_set_running(const char *id)
{
	pthread_mutex_lock(&calls_lock);
	struct call *c = find(id);
	if (c)
		c->status = CALL_RUNNING;
	pthread_mutex_unlock(&calls_lock);
}

/* Ends record c (calls_lock held) with the first len bytes of the answer. */
static void call_end(struct call *c, bool ok, int code, bool truncated, double finished, const char *body, size_t len)
{
	struct call_fifo *q = c->async ? &async_done : &sync_done;

	c->status = ok ? CALL_DONE : CALL_FAILED;
	c->code = code;
	c->body = malloc(len + 1);
	if (c->body) {
		memcpy(c->body, body, len);
		c->body[len] = '\0';
		c->len = len;
	}
	c->truncated = truncated;
	c->finished = finished;
	if (q->tail)
		q->tail->fnext = c;
	else
		q->head = c;
	q->tail = c;
	q->n++;
	q->bytes += c->len;
}

void inv_call_finish(const char *id, const struct inv_result *res)
{
	size_t n = res->len < BODY_KEPT ? res->len : BODY_KEPT;
	double now = inv_wall_now();
	char function[INV_NAME_MAX + 1] = "";
	struct call *c;

	pthread_mutex_lock(&calls_lock);
	c = find(id);
	if (c && c->async && c->status < CALL_DONE)
		memcpy(function, c->function, sizeof(function));
	pthread_mutex_unlock(&calls_lock);
	/* on disk first: once the record says done, it may be evicted (and its
	 * file removed) at any time */
	if (function[0])
		inv_calls_store_finish(id, function, res->http == 200, res->http, n < res->len, now, res->body, n);
	pthread_mutex_lock(&calls_lock);
	c = find(id);
	if (c && c->status < CALL_DONE) {
		call_end(c, res->http == 200, res->http, n < res->len, now, res->body, n);
		evict(now);
	}
	pthread_mutex_unlock(&calls_lock);
}

json_t *inv_call_get(const char *id)
{
	static const char *const names[] = { "queued", "running", "done", "failed" };
	json_t *j = NULL;

	pthread_mutex_lock(&calls_lock);
	evict(inv_wall_now());
	struct call *c = find(id);
	if (c) {
		j = json_pack("{s:s,s:s,s:s}", "call_id", c->id, "function", c->function, "status", names[c->status]);
		if (c->status >= CALL_DONE) {
			json_object_set_new(j, "code", json_integer(c->code));
			json_object_set_new(j, "body", c->body ? json_stringn(c->body, c->len) : json_null());
			if (!json_is_string(json_object_get(j, "body")))
				json_object_set_new(j, "body", json_null()); /* not UTF-8 */
			if (c->truncated)
				json_object_set_new(j, "truncated", json_true());
		}
	}
	pthread_mutex_unlock(&calls_lock);
	return j;
}

/* True when inv_invoke refused the call before it reached an instance because
 * the function (or the host) was at capacity: 429 from the function's queue,
 * or 503 when no instance could be had. Such a call is safe to run again. */
static bool refused_at_capacity(struct inv_function *f, const struct inv_result *res)
{
	bool gone;

	pthread_mutex_lock(&f->lock);
	gone = f->removed;
	pthread_mutex_unlock(&f->lock);
	return !gone && !inv_draining && res->run_s == 0 && !res->cold && (res->http == 429 || res->http == 503);
}

/* The first queued job whose function has an async slot free and whose pause
 * is over (calls_lock held); unlinked. *ret_wait: seconds until a paused one
 * may run, when none can now. */
static struct async_job *queue_take(double now, double *ret_wait)
{
	*ret_wait = 0.1;
	if (inv_draining)
		return NULL;   /* queued calls wait on disk for the next start */
	for (struct async_job **p = &queue_head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
		struct async_job *job = *p;

		if (job->f->async_running >= job->f->limits.max_instances ||
		    job->f->async_running >= ASYNC_PER_FUNCTION)
			continue;
		if (job->not_before > now) {
			if (job->not_before - now < *ret_wait)
				*ret_wait = job->not_before - now;
			continue;
		}
		*p = job->next;
		if (queue_tail == job)
			queue_tail = prev;
		job->next = NULL;
		return job;
	}
	return NULL;
}

static void queue_push(struct async_job *job)
{
	if (queue_tail)
		queue_tail->next = job;
	else
		queue_head = job;
	queue_tail = job;
}

static void *async_worker(void *arg)
{
	pthread_mutex_lock(&calls_lock);
	for (;;) {
		double now = phos_now(), wait;
		struct async_job *job = queue_take(now, &wait);
		struct inv_result res;

		if (!job) {
			struct timespec abs;

			if (stopping)
				break;
			if (!queue_head) {
				pthread_cond_wait(&queue_cond, &calls_lock);
				continue;
			}
			/* jobs wait on their function's slots or their pause */
			clock_gettime(CLOCK_REALTIME, &abs);
			long long ns = abs.tv_nsec + (long long)(wait * 1e9) + 1000000;
			abs.tv_sec += ns / 1000000000LL;
			abs.tv_nsec = ns % 1000000000LL;
			pthread_cond_timedwait(&queue_cond, &calls_lock, &abs);
			continue;
		}
		job->f->async_running++;
		running++;
		pthread_mutex_unlock(&calls_lock);

		if (!job->resumes)
			inv_calls_store_mark(job->id, true);   /* (a resumed one is .run already) */
		inv_call_set_running(job->id);
		inv_async_ctx = (struct inv_async_ctx){ .id = job->id, .resumes = job->resumes };
		if (job->resumes) {
			char dir[PATH_MAX];

			snprintf(dir, sizeof(dir), "%s/checkpoints/resume-%s", inv_cfg.state_dir, job->id);
			inv_invoke_resume(job->f, dir, &res);
		} else {
			inv_invoke(job->f, job->body, job->len, job->ctype, &res);
		}
		inv_async_ctx = (struct inv_async_ctx){ 0 };
		bool again = refused_at_capacity(job->f, &res) && inv_wall_now() - job->submitted < ASYNC_WAIT_S;
		if (!again)
			inv_call_finish(job->id, &res);   /* its result can be fetched from here */
		inv_invoke_done(&res.after);
		free(res.body);

		pthread_mutex_lock(&calls_lock);
		job->f->async_running--;
		running--;
		if (again) {
			struct call *c = find(job->id);

			if (c)
				c->status = CALL_QUEUED;
			job->not_before = phos_now() + 0.05;
			if (!job->resumes)
				inv_calls_store_mark(job->id, false);   /* it never ran */
			queue_push(job);
		} else {
			queued--;
			queued_bytes -= job->len;
			pthread_mutex_unlock(&calls_lock);
			inv_function_unref(job->f);
			free(job);
			pthread_mutex_lock(&calls_lock);
		}
		/* the slot freed is this worker's: it takes the next job itself */
	}
	pthread_mutex_unlock(&calls_lock);
	return NULL;
}

static struct async_job *job_new(struct inv_function *f, const char *id, const char *ctype, double submitted,
				  const char *body, size_t len)
{
	struct async_job *job = malloc(sizeof(*job) + len + 1);

	if (!job)
		return NULL;
	memcpy(job->body, body, len);
	job->body[len] = '\0';
	job->len = len;
	job->next = NULL;
	job->submitted = submitted;
	job->not_before = 0;
	job->resumes = 0;
	job->f = f;
	memcpy(job->id, id, 33);
	snprintf(job->ctype, sizeof(job->ctype), "%s", ctype);
	return job;
}

/* Start-up: a call of an earlier run queued again: accepted and not started,
 * or (resumes > 0) running, to resume from STATE/checkpoints/resume-ID. */
static void load_job(const char *id, const char *function, const char *ctype, double accepted, const char *body,
		     size_t len, unsigned resumes)
{
	struct inv_function *f = inv_function_get(function);
	struct async_job *job = f ? job_new(f, id, ctype, accepted, body, len) : NULL;
	char cid[33];
	struct call *c;

	memcpy(cid, id, 33);
	pthread_mutex_lock(&calls_lock);
	c = find(id) ? NULL : call_add(function, true, true, cid);
	if (c && job) {
		job->resumes = resumes;
		queued++;
		queued_bytes += len;
		resuming += resumes > 0;
		queue_push(job);
		pthread_mutex_unlock(&calls_lock);
		return;
	}
	pthread_mutex_unlock(&calls_lock);
	free(job);
	inv_function_unref(f);
	if (c) {   /* its function is gone */
		char msg[160], dir[PATH_MAX];
		struct inv_result res = { .http = 404, .body = msg };

		if (resumes) {
			snprintf(dir, sizeof(dir), "%s/checkpoints/resume-%s", inv_cfg.state_dir, id);
			phos_image_dir_remove(dir);
		}
		res.len = (size_t)snprintf(msg, sizeof(msg), "{\"error\":\"no function %s\"}", function);
		inv_call_finish(id, &res);
	}
}

static void load_queued(const char *id, const char *function, const char *ctype, double accepted, const char *body,
			size_t len)
{
	load_job(id, function, ctype, accepted, body, len, 0);
}

/* Start-up: a finished call of an earlier run (in no particular order: they
 * are sorted into the FIFO afterwards). */
static struct call **loaded;
static size_t nloaded, loaded_cap;

static void load_finished(const char *id, const char *function, bool ok, int code, bool truncated, double finished,
			  const char *body, size_t len)
{
	char cid[33];
	struct call *c;

	if (finished + inv_cfg.async_retention_s < inv_wall_now() || len > BODY_KEPT) {
		inv_calls_store_drop(id);
		return;
	}
	if (nloaded == loaded_cap) {
		struct call **n = realloc(loaded, (loaded_cap * 2 + 64) * sizeof(*n));

		if (!n)
			return;
		loaded = n;
		loaded_cap = loaded_cap * 2 + 64;
	}
	memcpy(cid, id, 33);
	pthread_mutex_lock(&calls_lock);
	c = find(id) ? NULL : call_add(function, true, true, cid);
	if (c) {
		c->status = ok ? CALL_DONE : CALL_FAILED;
		c->code = code;
		c->truncated = truncated;
		c->finished = finished;
		if ((c->body = malloc(len + 1))) {
			memcpy(c->body, body, len);
			c->body[len] = '\0';
			c->len = len;
		}
		loaded[nloaded++] = c;
	}
	pthread_mutex_unlock(&calls_lock);
}

static int by_finished(const void *a, const void *b)
{
	double x = (*(struct call *const *)a)->finished, y = (*(struct call *const *)b)->finished;

	return x < y ? -1 : x > y;
}

/* Loads what an earlier run left in STATE/calls/. */
static void calls_load(void)
{
	static const struct inv_calls_store_visitor v = { load_queued, load_job, load_finished };
	unsigned nq;

	inv_calls_store_load(&v);
	if (nloaded)
		qsort(loaded, nloaded, sizeof(*loaded), by_finished);
	pthread_mutex_lock(&calls_lock);
	for (size_t i = 0; i < nloaded; i++) {
		struct call *c = loaded[i];

		c->fnext = NULL;
		if (async_done.tail)
			async_done.tail->fnext = c;
		else
			async_done.head = c;
		async_done.tail = c;
		async_done.n++;
		async_done.bytes += c->len;
	}
	evict(inv_wall_now());
	nq = queued;
	pthread_mutex_unlock(&calls_lock);
	if (nq || nloaded)
		phos_warn("async calls of the last run: %u queued again (%u of them resumed from checkpoints), %zu "
			  "results kept", nq, resuming, nloaded);
	free(loaded);
	loaded = NULL;
	nloaded = loaded_cap = 0;
}

int inv_calls_start(void)
{
	int r = inv_calls_store_init();

	if (r < 0) {
		phos_err("%s/calls: %s", inv_cfg.state_dir, strerror(-r));
		return r;
	}
	pthread_mutex_lock(&calls_lock);
	stopping = false;
	pthread_mutex_unlock(&calls_lock);
	calls_load();
	for (nworkers = 0; nworkers < ASYNC_WORKERS; nworkers++) {
		r = pthread_create(&workers[nworkers], NULL, async_worker, NULL);
		if (r) {
			phos_err("cannot start the async workers: %s", strerror(r));
			inv_calls_stop();
			return -r;
		}
	}
	return 0;
}

void inv_calls_stop(void)
{
	pthread_mutex_lock(&calls_lock);
	stopping = true;
	pthread_cond_broadcast(&queue_cond);
	pthread_mutex_unlock(&calls_lock);
	for (unsigned i = 0; i < nworkers; i++)
		pthread_join(workers[i], NULL);
	nworkers = 0;
	/* Memory back; the files stay for the next start (queued calls run then). */
	inv_calls_store_exit();
	pthread_mutex_lock(&calls_lock);
	while (queue_head) {
		struct async_job *job = queue_head;

		queue_head = job->next;
		pthread_mutex_unlock(&calls_lock);
		inv_function_unref(job->f);
		free(job);
		pthread_mutex_lock(&calls_lock);
	}
	queue_tail = NULL;
	queued = 0;
	queued_bytes = 0;
	while (sync_done.head)
		fifo_pop_free(&sync_done);
	while (async_done.head)
		fifo_pop_free(&async_done);
	pthread_mutex_unlock(&calls_lock);
}

int inv_call_async(struct inv_function *f, const char *body, size_t len, const char *ctype, char id[33])
{
	struct async_job *job;
	struct call *c;
	int r;

	pthread_mutex_lock(&calls_lock);
	if (stopping || nworkers == 0 || queued >= inv_cfg.async_queue || queued_bytes + len > ASYNC_QUEUE_BYTES) {
		pthread_mutex_unlock(&calls_lock);
		return -EAGAIN;
	}
	c = call_add(f->name, true, false, id);
	if (!c) {
		pthread_mutex_unlock(&calls_lock);
		return -ENOMEM;
	}
	queued++;   /* the room is ours while the call is written down */
	queued_bytes += len;
	pthread_mutex_unlock(&calls_lock);

	double now = inv_wall_now();
	job = job_new(f, id, ctype, now, body, len);
	r = job ? inv_calls_store_accept(id, f->name, job->ctype, now, body, len) : -ENOMEM;
	pthread_mutex_lock(&calls_lock);
	if (r < 0) {
		queued--;
		queued_bytes -= len;
		call_drop(c);
		pthread_mutex_unlock(&calls_lock);
		free(job);
		return r;
	}
	pthread_mutex_lock(&f->lock);
	f->refs++;
	pthread_mutex_unlock(&f->lock);
	queue_push(job);
	pthread_cond_signal(&queue_cond);
	pthread_mutex_unlock(&calls_lock);
	return 0;
}

unsigned inv_calls_inflight(void)
{
	unsigned n;

	pthread_mutex_lock(&calls_lock);
	n = running;
	pthread_mutex_unlock(&calls_lock);
	return n;
}
