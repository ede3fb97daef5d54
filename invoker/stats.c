/* SPDX-License-Identifier: MIT */
/*
 * The invoker's counters, kept as calls and restores happen (instances.c
 * records them; http/metrics.c renders them). Below both: recording calls
 * nothing up.
 */
#include <pthread.h>
#include <string.h>

#include "invoker.h"

const double inv_metrics_bucket_le[INV_BUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120 };

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t restore_bytes;
static double restore_seconds;

void inv_metrics_record(struct inv_function *f, int http, double seconds, bool cold)
{
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < INV_CODES; i++)
		if (f->codes[i].code == http || f->codes[i].code == 0) {
			f->codes[i].code = http;
			f->codes[i].n++;
			break;
		}
	for (unsigned i = 0; i < INV_BUCKETS; i++)
		if (seconds <= inv_metrics_bucket_le[i])
			f->buckets[i]++;
	f->count++;
	f->sum_s += seconds;
	if (cold)
		f->cold_starts++;
	pthread_mutex_unlock(&f->lock);
}

static uint64_t restores_standby;

void inv_metrics_fallbacks(struct inv_function *f, struct inv_instance *in)
{
	struct phos_spec_fallbacks now;

	if (in->fb_done || pthread_mutex_trylock(&in->ctl_lock) != 0)   /* (busy: a move's checkpoint) */
		return;
	int r = phos_instance_fallbacks(&in->proc, &now);
	pthread_mutex_unlock(&in->ctl_lock);
	if (r < 0)
		return;
	pthread_mutex_lock(&f->lock);
	/* counts only grow within one function process */
	f->fallbacks[INV_FB_OPAQUE] += now.opaque - in->fb_seen.opaque;
	f->fallbacks[INV_FB_OVERFLOW] += now.overflow - in->fb_seen.overflow;
	f->fallbacks[INV_FB_VALIDATE] += now.validate_miss - in->fb_seen.validate_miss;
	f->cow_bytes += now.cow_bytes - in->fb_seen.cow_bytes;
	f->shared_mapped += now.shared_bytes - in->fb_seen.shared_bytes;
	pthread_mutex_unlock(&f->lock);
	in->fb_seen = now;
	/* (shared buffers left: a later call may still copy one) */
	in->fb_done = !now.restoring && !now.shared_bytes && strcmp(inv_cfg.validate_spec, "always") != 0;
}

void inv_metrics_instance_failed(struct inv_function *f, const char *why)
{
	if (strncmp(why, "validation:", 11) != 0)
		return;
	pthread_mutex_lock(&f->lock);
	f->fallbacks[INV_FB_VALIDATE]++;
	pthread_mutex_unlock(&f->lock);
}

void inv_metrics_restore(uint64_t bytes, double seconds, bool standby)
{
	pthread_mutex_lock(&global_lock);
	restore_bytes += bytes;
	restore_seconds += seconds;
	restores_standby += standby;
	pthread_mutex_unlock(&global_lock);
}

void inv_metrics_restore_totals(uint64_t *ret_bytes, double *ret_seconds, uint64_t *ret_standby)
{
	pthread_mutex_lock(&global_lock);
	*ret_bytes = restore_bytes;
	*ret_seconds = restore_seconds;
	*ret_standby = restores_standby;
	pthread_mutex_unlock(&global_lock);
}
