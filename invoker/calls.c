/* SPDX-License-Identifier: MIT */
/*
 * Call records: a ring of the last CALLS_KEPT calls (sync and async), looked
 * up by id for GET /system/calls/{id}; async calls run on their own detached
 * thread, at most ASYNC_MAX at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "invoker.h"
#include "log.h"

#define CALLS_KEPT 1024
#define BODY_KEPT (256u << 10)  /* of an answer, per record */
#define ASYNC_MAX 256

enum call_status { CALL_QUEUED, CALL_RUNNING, CALL_DONE, CALL_FAILED };

struct call {
	char id[33];
	char function[INV_NAME_MAX + 1];
	enum call_status status;
	int code;
	char *body;
	size_t len;
	bool truncated;
};

static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct call ring[CALLS_KEPT];
static unsigned long long next_slot;
static unsigned async_inflight;

static struct call *find(const char *id)
{
	for (unsigned i = 0; i < CALLS_KEPT; i++)
		if (ring[i].id[0] && !strcmp(ring[i].id, id))
			return &ring[i];
	return NULL;
}

void inv_call_new(const char *function, char id[33])
{
	unsigned char rnd[16];
	struct call *c;

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		for (unsigned i = 0; i < sizeof(rnd); i++)
			rnd[i] = (unsigned char)random();
	for (unsigned i = 0; i < 16; i++)
		sprintf(id + 2 * i, "%02x", rnd[i]);
	pthread_mutex_lock(&calls_lock);
	c = &ring[next_slot++ % CALLS_KEPT];
	free(c->body);
	memset(c, 0, sizeof(*c));
	memcpy(c->id, id, 33);
	snprintf(c->function, sizeof(c->function), "%s", function);
	c->status = CALL_QUEUED;
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
	if (c) {
		size_t n = res->len < BODY_KEPT ? res->len : BODY_KEPT;

		c->status = res->http == 200 ? CALL_DONE : CALL_FAILED;
		c->code = res->http;
		c->body = malloc(n + 1);
		if (c->body) {
			memcpy(c->body, res->body, n);
			c->body[n] = '\0';
			c->len = n;
		}
		c->truncated = n < res->len;
	}
	pthread_mutex_unlock(&calls_lock);
}

json_t *inv_call_get(const char *id)
{
	static const char *const names[] = { "queued", "running", "done", "failed" };
	json_t *j = NULL;

	pthread_mutex_lock(&calls_lock);
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

struct async_job {
	struct inv_function *f;
	char id[33];
	char ctype[128];
	size_t len;
	char body[];
};

static void *async_main(void *arg)
{
	struct async_job *job = arg;
	struct inv_result res;

	inv_call_set_running(job->id);
	inv_invoke(job->f, job->body, job->len, job->ctype, &res);
	inv_call_finish(job->id, &res);
	free(res.body);
	inv_function_unref(job->f);
	free(job);
	pthread_mutex_lock(&calls_lock);
	async_inflight--;
	pthread_mutex_unlock(&calls_lock);
	return NULL;
}

int inv_call_async(struct inv_function *f, const char *body, size_t len, const char *ctype, char id[33])
{
	struct async_job *job;
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_mutex_lock(&calls_lock);
	if (async_inflight >= ASYNC_MAX) {
		pthread_mutex_unlock(&calls_lock);
		return -EAGAIN;
	}
	async_inflight++;
	pthread_mutex_unlock(&calls_lock);
	job = malloc(sizeof(*job) + len + 1);
	if (!job) {
		r = -ENOMEM;
		goto fail;
	}
	memcpy(job->body, body, len);
	job->body[len] = '\0';
	job->len = len;
	snprintf(job->ctype, sizeof(job->ctype), "%s", ctype);
	inv_call_new(f->name, id);
	memcpy(job->id, id, 33);
	pthread_mutex_lock(&f->lock);
	f->refs++;
	pthread_mutex_unlock(&f->lock);
	job->f = f;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = -pthread_create(&t, &attr, async_main, job);
	pthread_attr_destroy(&attr);
	if (r == 0)
		return 0;
	inv_function_unref(f);
	free(job);
fail:
	pthread_mutex_lock(&calls_lock);
	async_inflight--;
	pthread_mutex_unlock(&calls_lock);
	return r;
}

unsigned inv_calls_inflight(void)
{
	unsigned n;

	pthread_mutex_lock(&calls_lock);
	n = async_inflight;
	pthread_mutex_unlock(&calls_lock);
	return n;
}
