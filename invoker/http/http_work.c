/* SPDX-License-Identifier: MIT */
/*
 * Worker lanes for the HTTP handlers that may block (http_server.h): a FIFO
 * of jobs per lane, and up to `cap` threads per lane, started when a job
 * finds none idle and ended after IDLE_EXIT_S without work (a burst's threads
 * go soon after it: a thread costs tens of microseconds to start). The thread count is
 * thus bounded by the caps whatever clients do; the queue by the connection
 * limit (a connection has at most one request in a lane).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "http_server.h"

#define IDLE_EXIT_S 3

struct lane {
	unsigned cap, threads, idle, queued;
	struct inv_job *head, *tail;
	pthread_cond_t cond;
};

static struct lane lanes[INV_LANES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned pending;

void inv_work_init(unsigned calls_cap, unsigned admin_cap)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (unsigned i = 0; i < INV_LANES; i++)
		pthread_cond_init(&lanes[i].cond, &ca);
	pthread_condattr_destroy(&ca);
	lanes[INV_LANE_CALLS].cap = calls_cap ? calls_cap : 1;
	lanes[INV_LANE_ADMIN].cap = admin_cap ? admin_cap : 1;
}

static void *worker(void *arg)
{
	struct lane *l = arg;

	pthread_setname_np(pthread_self(), l == &lanes[INV_LANE_CALLS] ? "http-calls" : "http-admin");
	pthread_mutex_lock(&lock);
	for (;;) {
		struct inv_job *job = l->head;

		if (!job) {
			struct timespec until;

			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += IDLE_EXIT_S;
			l->idle++;
			int r = pthread_cond_timedwait(&l->cond, &lock, &until);
			l->idle--;
			if (r == ETIMEDOUT && !l->head)
				break;
			continue;
		}
		l->head = job->next;
		l->queued--;
		if (!l->head)
			l->tail = NULL;
		pthread_mutex_unlock(&lock);
		job->run(job);          /* may free job */
		pthread_mutex_lock(&lock);
		pending--;
	}
	l->threads--;
	pthread_mutex_unlock(&lock);
	return NULL;
}

int inv_work_submit(enum inv_lane lane, struct inv_job *job)
{
	struct lane *l = &lanes[lane];
	int r = 0;

	job->next = NULL;
	pthread_mutex_lock(&lock);
	/* a thread for it unless one is idle (and not yet claimed by an earlier job) */
	if (l->idle <= l->queued && l->threads < l->cap) {
		pthread_attr_t a;
		pthread_t t;

		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 1u << 20);
		r = -pthread_create(&t, &a, worker, l);
		pthread_attr_destroy(&a);
		if (r == 0)
			l->threads++;
		else if (l->threads > 0)
			r = 0;          /* one of the running ones takes it later */
	}
	if (r == 0) {
		if (l->tail)
			l->tail->next = job;
		else
			l->head = job;
		l->tail = job;
		l->queued++;
		pending++;
		pthread_cond_signal(&l->cond);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

unsigned inv_work_pending(void)
{
	pthread_mutex_lock(&lock);
	unsigned n = pending;
	pthread_mutex_unlock(&lock);
	return n;
}

unsigned inv_work_threads(void)
{
	pthread_mutex_lock(&lock);
	unsigned n = lanes[INV_LANE_CALLS].threads + lanes[INV_LANE_ADMIN].threads;
	pthread_mutex_unlock(&lock);
	return n;
}
