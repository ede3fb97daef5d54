/* SPDX-License-Identifier: MIT */
/*
 * Host callbacks: cudaLaunchHostFunc and cudaStreamAddCallback.
 *
 * The callback runs in this process, on one callback thread of ours (started
 * at the first callback), in stream order (channel.h has the picture): the
 * registering call queues it here and posts HOST_FUNC; once the stream's
 * earlier work is done the executor asks for it (streams' callbacks in the
 * order the device reaches them, not the order they were posted) and the
 * stream's later work waits until it returned. The registering thread does
 * not wait.
 *
 * Callbacks must not call CUDA (as CUDA says); one that does gets
 * cudaErrorNotPermitted rather than a deadlock.
 */
#include <pthread.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

struct callback {
	uint32_t seq;
	cudaHostFn_t fn;                  /* cudaLaunchHostFunc */
	cudaStreamCallback_t stream_fn;   /* cudaStreamAddCallback */
	cudaStream_t stream;
	void *data;
	struct phos_channel *ch;          /* the channel it was posted on */
	struct callback *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct callback *head, *tail;
	uint32_t next_seq;
	bool started;
} q = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* Takes the queued callback seq of channel ch out of the queue (NULL: none). */
static struct callback *take(struct phos_channel *ch, uint32_t seq)
{
	struct callback *c, *prev = NULL;

	pthread_mutex_lock(&q.lock);
	for (c = q.head; c && !(c->ch == ch && c->seq == seq); c = c->next)
		prev = c;
	if (c) {
		if (prev)
			prev->next = c->next;
		else
			q.head = c->next;
		if (q.tail == c)
			q.tail = prev;
	}
	pthread_mutex_unlock(&q.lock);
	return c;
}

/* Drops every queued callback of ch (its executor is gone: never run). */
static void drop_all(struct phos_channel *ch)
{
	struct callback **p;

	pthread_mutex_lock(&q.lock);
	for (p = &q.head; *p;) {
		struct callback *c = *p;

		if (c->ch == ch) {
			*p = c->next;
			free(c);
		} else {
			p = &c->next;
		}
	}
	q.tail = NULL;
	for (struct callback *c = q.head; c; c = c->next)
		q.tail = c;
	pthread_mutex_unlock(&q.lock);
}

static void *callback_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct phos_channel *ch;
		struct callback *c;
		int32_t status = 0;
		uint32_t seq = 0;
		int r;

		pthread_mutex_lock(&q.lock);
		while (!q.head)
			pthread_cond_wait(&q.cond, &q.lock);
		ch = q.head->ch;
		pthread_mutex_unlock(&q.lock);
		/* Wait until the executor asks for one (in its streams' order, not
		 * necessarily ours); never run one if the executor is gone. (Not
		 * under the connection lock: a synchronous call may hold it while its
		 * reply waits for this callback.) */
		r = phos_channel_callback_next(ch, 200, &seq, &status);
		if (r < 0) {
			drop_all(ch);
			continue;
		}
		if (r == 0)
			continue;
		c = take(ch, seq);
		if (c) {
			phos_in_host_callback = true;
			if (c->fn)
				c->fn(c->data);
			else
				c->stream_fn(c->stream, (cudaError_t)status, c->data);
			phos_in_host_callback = false;
		} else {
			phos_warn("host callback %u asked for, but not queued here", seq);
		}
		/* the last touch of this channel: the executor goes on */
		phos_channel_callback_done(ch, seq);
		free(c);
	}
	return NULL;
}

static int callback_add(cudaStream_t stream, cudaHostFn_t fn, cudaStreamCallback_t stream_fn, void *data)
{
	struct phos_host_func hf;
	struct callback *c;
	int r = phos_preload_stream_id(stream, &hf.stream);

	if (r)
		return r;
	if (!fn && !stream_fn)
		return cudaErrorInvalidValue;
	r = phos_preload_connect();
	if (r)
		return r;
	c = calloc(1, sizeof(*c));
	if (!c)
		return cudaErrorMemoryAllocation;
	c->fn = fn;
	c->stream_fn = stream_fn;
	c->stream = stream;
	c->data = data;
	c->ch = phos_preload_channel();
	if (!c->ch) {
		free(c);
		return cudaErrorDevicesUnavailable;
	}
	pthread_mutex_lock(&q.lock);
	if (!q.started) {
		pthread_t th;
		pthread_attr_t attr;

		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		q.started = pthread_create(&th, &attr, callback_main, NULL) == 0;
		pthread_attr_destroy(&attr);
		if (!q.started) {
			pthread_mutex_unlock(&q.lock);
			free(c);
			return cudaErrorMemoryAllocation;
		}
	}
	/* Queued and posted under one lock: queue order is ring order. */
	c->seq = hf.seq = ++q.next_seq;
	r = phos_preload_post(PHOS_OP_HOST_FUNC, &hf, sizeof(hf), NULL, 0);
	if (r == 0) {
		if (q.tail)
			q.tail->next = c;
		else
			q.head = c;
		q.tail = c;
		pthread_cond_signal(&q.cond);
	}
	pthread_mutex_unlock(&q.lock);
	if (r)
		free(c);
	return r;
}

PHOS_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_host(stream, fn, userData));
	if (!fn)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(callback_add(stream, fn, NULL, userData));
}

PHOS_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
					      unsigned int flags)
{
	if (!callback || flags != 0)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(callback_add(stream, NULL, callback, userData));
}
