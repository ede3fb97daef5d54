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
 * Records live in a hash by id. A queued or running record is never evicted.
 * Finished async records are kept for --async-retention seconds, at most
 * ASYNC_KEPT of them and ASYNC_KEPT_BYTES of their bodies (oldest first);
 * finished sync records, which only serve GET /system/calls/ID after the fact,
 * are kept SYNC_KEPT deep. All of it under calls_lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

/* Makes a record in the queued state (calls_lock held): 0 or -ENOMEM. */
static int call_add(const char *function, bool async, char id[33])
{
	unsigned char rnd[16];
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	do {
		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
			for (unsigned i = 0; i < sizeof(rnd); i++)
				rnd[i] = (unsigned char)random();
		for (unsigned i = 0; i < 16; i++)
			sprintf(id + 2 * i, "%02x", rnd[i]);
	} while (find(id));
	memcpy(c->id, id, 33);
	snprintf(c->function, sizeof(c->function), "%s", function);
	c->status = CALL_QUEUED;
	c->async = async;
	c->hnext = buckets[bucket_of(id)];
	buckets[bucket_of(id)] = c;
	evict(phos_now());
	return 0;
}

void inv_call_new(const char *function, char id[33])
{
	pthread_mutex_lock(&calls_lock);
	if (call_add(function, false, id) < 0)
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

void inv_call_finish(const char *id, const struct inv_result *res)
{
	pthread_mutex_lock(&calls_lock);
	struct call *c = find(id);
	if (c && c->status < CALL_DONE) {
		size_t n = res->len < BODY_KEPT ? res->len : BODY_KEPT;
		struct call_fifo *q = c->async ? &async_done : &sync_done;

		c->status = res->http == 200 ? CALL_DONE : CALL_FAILED;
		c->code = res->http;
		c->body = malloc(n + 1);
		if (c->body) {
			memcpy(c->body, res->body, n);
			c->body[n] = '\0';
			c->len = n;
		}
		c->truncated = n < res->len;
		c->finished = phos_now();
		if (q->tail)
			q->tail->fnext = c;
		else
			q->head = c;
		q->tail = c;
		q->n++;
		q->bytes += c->len;
		evict(c->finished);
	}
	pthread_mutex_unlock(&calls_lock);
}

json_t *inv_call_get(const char *id)
{
	static const char *const names[] = { "queued", "running", "done", "failed" };
	json_t *j = NULL;

	pthread_mutex_lock(&calls_lock);
	evict(phos_now());
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

		inv_call_set_running(job->id);
		inv_invoke(job->f, job->body, job->len, job->ctype, &res);
		bool again = refused_at_capacity(job->f, &res) && phos_now() - job->submitted < ASYNC_WAIT_S;
		if (!again)
			inv_call_finish(job->id, &res);
		free(res.body);

		pthread_mutex_lock(&calls_lock);
		job->f->async_running--;
		running--;
		if (again) {
			struct call *c = find(job->id);

			if (c)
				c->status = CALL_QUEUED;
			job->not_before = phos_now() + 0.05;
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

int inv_calls_start(void)
{
	pthread_mutex_lock(&calls_lock);
	stopping = false;
	pthread_mutex_unlock(&calls_lock);
	for (nworkers = 0; nworkers < ASYNC_WORKERS; nworkers++) {
		int r = pthread_create(&workers[nworkers], NULL, async_worker, NULL);

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
	/* Calls still queued (past the drain): failed, and their memory back. */
	pthread_mutex_lock(&calls_lock);
	while (queue_head) {
		struct async_job *job = queue_head;
		struct inv_result res = { .http = 503, .body = (char *)"{\"error\":\"shutting down\"}" };

		res.len = strlen(res.body);
		queue_head = job->next;
		pthread_mutex_unlock(&calls_lock);
		inv_call_finish(job->id, &res);
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
	struct async_job *job = malloc(sizeof(*job) + len + 1);
	int r;

	if (!job)
		return -ENOMEM;
	memcpy(job->body, body, len);
	job->body[len] = '\0';
	job->len = len;
	job->next = NULL;
	job->submitted = phos_now();
	job->not_before = 0;
	snprintf(job->ctype, sizeof(job->ctype), "%s", ctype);
	pthread_mutex_lock(&calls_lock);
	if (stopping || nworkers == 0 || queued >= inv_cfg.async_queue || queued_bytes + len > ASYNC_QUEUE_BYTES) {
		pthread_mutex_unlock(&calls_lock);
		free(job);
		return -EAGAIN;
	}
	r = call_add(f->name, true, id);
	if (r < 0) {
		pthread_mutex_unlock(&calls_lock);
		free(job);
		return r;
	}
	memcpy(job->id, id, 33);
	pthread_mutex_lock(&f->lock);
	f->refs++;
	pthread_mutex_unlock(&f->lock);
	job->f = f;
	queued++;
	queued_bytes += len;
	queue_push(job);
	pthread_cond_signal(&queue_cond);
	pthread_mutex_unlock(&calls_lock);
	return 0;
}

unsigned inv_calls_inflight(void)
{
	unsigned n;

	pthread_mutex_lock(&calls_lock);
	n = queued;
	pthread_mutex_unlock(&calls_lock);
	return n;
}
