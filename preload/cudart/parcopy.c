/* SPDX-License-Identifier: MIT */
/*
 * phos_par_memcpy: a memcpy of large blocks split over a few threads of the
 * preload. One thread copies 7-8 GB/s on an H100 host, which held pageable
 * D2H copies (staged through pinned memory, memory.c) at 0.5-0.6x of CUDA's,
 * whose staging copies run faster than one plain memcpy.
 *
 * The helpers are made on first use, at most PARCOPY_MAX_HELPERS and one
 * fewer than the CPUs this process may run on, and wait on a condition
 * variable between copies. One copy at a time (callers hold their own lock or
 * take par_lock here); the caller copies a share itself. A forked child has no
 * helpers and makes its own when it needs them.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "log.h"

#define PARCOPY_MAX_HELPERS 3
#define PARCOPY_MIN (1u << 20)        /* below this one thread is as fast */

static struct {
	pthread_mutex_t lock;         /* one copy at a time */
	pthread_mutex_t mu;           /* the job below */
	pthread_cond_t go, done;
	unsigned helpers;             /* started */
	bool tried;                   /* helpers were made (or could not be) */
	uint64_t gen;                 /* job generation */
	unsigned pending;             /* helper shares not copied yet */
	uint8_t *dst;
	const uint8_t *src;
	size_t share, n;              /* bytes per share, total */
} par = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.go = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
};

struct helper_arg {
	unsigned index;               /* share index, 1.. */
};

static struct helper_arg helper_args[PARCOPY_MAX_HELPERS];

static void *helper_main(void *arg)
{
	unsigned idx = ((struct helper_arg *)arg)->index;
	uint64_t seen = 0;

	pthread_mutex_lock(&par.mu);
	for (;;) {
		size_t off, len;

		while (par.gen == seen)
			pthread_cond_wait(&par.go, &par.mu);
		seen = par.gen;
		off = par.share * idx;
		len = off < par.n ? par.n - off : 0;
		if (len > par.share)
			len = par.share;
		pthread_mutex_unlock(&par.mu);
		if (len)
			memcpy(par.dst + off, par.src + off, len);
		pthread_mutex_lock(&par.mu);
		if (--par.pending == 0)
			pthread_cond_signal(&par.done);
	}
	return NULL;
}

static void atfork_child(void)
{
	pthread_mutex_init(&par.lock, NULL);
	pthread_mutex_init(&par.mu, NULL);
	pthread_cond_init(&par.go, NULL);
	pthread_cond_init(&par.done, NULL);
	par.helpers = 0;
	par.tried = false;
	par.pending = 0;
}

/* Starts the helpers once; with par.lock held. */
static void helpers_start(void)
{
	cpu_set_t cpus;
	unsigned want = 0;

	if (par.tried)
		return;
	par.tried = true;
	pthread_atfork(NULL, NULL, atfork_child);
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 1)
		want = (unsigned)CPU_COUNT(&cpus) - 1;
	if (want > PARCOPY_MAX_HELPERS)
		want = PARCOPY_MAX_HELPERS;
	for (unsigned i = 0; i < want; i++) {
		pthread_attr_t a;
		pthread_t t;
		sigset_t all, old;
		int r;

		helper_args[i].index = i + 1;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 64 << 10);
		/* the program's signals go to its own threads, never to ours */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		r = pthread_create(&t, &a, helper_main, &helper_args[i]);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
		if (r) {
			phos_debug("parallel copy: helper %u not started (%d)", i + 1, r);
			break;
		}
		pthread_setname_np(t, "phos-copy");
		par.helpers++;
	}
}

void phos_par_memcpy(void *dst, const void *src, size_t n)
{
	size_t share;

	if (n < 2 * (size_t)PARCOPY_MIN) {
		memcpy(dst, src, n);
		return;
	}
	pthread_mutex_lock(&par.lock);
	helpers_start();
	if (!par.helpers) {
		pthread_mutex_unlock(&par.lock);
		memcpy(dst, src, n);
		return;
	}
	/* shares of whole cache lines; the caller copies share 0 */
	share = ((n + par.helpers) / (par.helpers + 1) + 63) & ~(size_t)63;   /* shares cover n */
	pthread_mutex_lock(&par.mu);
	par.dst = dst;
	par.src = src;
	par.n = n;
	par.share = share;
	par.pending = par.helpers;
	par.gen++;
	pthread_cond_broadcast(&par.go);
	pthread_mutex_unlock(&par.mu);
	memcpy(dst, src, share < n ? share : n);
	pthread_mutex_lock(&par.mu);
	while (par.pending)
		pthread_cond_wait(&par.done, &par.mu);
	pthread_mutex_unlock(&par.mu);
	pthread_mutex_unlock(&par.lock);
}
