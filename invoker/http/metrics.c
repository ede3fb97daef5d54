/* SPDX-License-Identifier: MIT */
/* Prometheus text exposition of the invoker's counters (kept by stats.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "invoker.h"
#include "http_server.h"

static void render_one(struct inv_function *f, void *arg)
{
	FILE *o = arg;
	unsigned c[4];

	uint64_t shared = f->share && inv_pool_for(f) ? phos_pool_shared_bytes(inv_pool_for(f), f->snapshot_dir) : 0;

	inv_instances_count(f, c);
	pthread_mutex_lock(&f->lock);
	fprintf(o, "phos_shared_bytes{function=\"%s\"} %llu\n", f->name, (unsigned long long)shared);
	fprintf(o, "phos_shared_cow_bytes_total{function=\"%s\"} %llu\n", f->name, (unsigned long long)f->cow_bytes);
	fprintf(o, "phos_shared_mapped_bytes{function=\"%s\"} %llu\n", f->name, (unsigned long long)f->shared_mapped);
	for (unsigned i = 0; i < INV_CODES && f->codes[i].code; i++)
		fprintf(o, "phos_invocations_total{function=\"%s\",code=\"%d\"} %llu\n", f->name, f->codes[i].code,
			(unsigned long long)f->codes[i].n);
	for (unsigned i = 0; i < INV_BUCKETS; i++)
		fprintf(o, "phos_invocation_duration_seconds_bucket{function=\"%s\",le=\"%g\"} %llu\n", f->name,
			inv_metrics_bucket_le[i], (unsigned long long)f->buckets[i]);
	fprintf(o, "phos_invocation_duration_seconds_bucket{function=\"%s\",le=\"+Inf\"} %llu\n", f->name,
		(unsigned long long)f->count);
	fprintf(o, "phos_invocation_duration_seconds_sum{function=\"%s\"} %.6f\n", f->name, f->sum_s);
	fprintf(o, "phos_invocation_duration_seconds_count{function=\"%s\"} %llu\n", f->name,
		(unsigned long long)f->count);
	fprintf(o, "phos_cold_starts_total{function=\"%s\"} %llu\n", f->name, (unsigned long long)f->cold_starts);
	static const char *const reasons[] = { "opaque_kernel", "overflow", "validate_miss" };
	for (unsigned i = 0; i < 3; i++)
		fprintf(o, "phos_spec_fallbacks_total{function=\"%s\",reason=\"%s\"} %llu\n", f->name, reasons[i],
			(unsigned long long)f->fallbacks[i]);
	fprintf(o, "phos_standby_processes{function=\"%s\"} %d\n", f->name,
		f->standby.valid && f->standby.generation == f->generation);
	pthread_mutex_unlock(&f->lock);
	static const char *const names[] = { "starting", "idle", "busy", "stopping" };
	for (unsigned i = 0; i < 4; i++)
		fprintf(o, "phos_instances{function=\"%s\",state=\"%s\"} %u\n", f->name, names[i], c[i]);
}

/* The host's figures: restores, request bodies' budget, moves and the HTTP
 * server's connections and threads. */
static void render_host(FILE *o)
{
	uint64_t restore_bytes, restores_standby, now, most, total;
	double restore_seconds;
	unsigned held;

	inv_metrics_restore_totals(&restore_bytes, &restore_seconds, &restores_standby);
	fprintf(o, "# HELP phos_restore_bytes_total GPU bytes restored.\n# TYPE phos_restore_bytes_total counter\n"
		   "phos_restore_bytes_total %llu\n"
		   "# HELP phos_restore_seconds_total Time spent restoring instances.\n"
		   "# TYPE phos_restore_seconds_total counter\nphos_restore_seconds_total %.6f\n",
		(unsigned long long)restore_bytes, restore_seconds);
	fprintf(o, "# HELP phos_restores_from_standby_total Cold starts that took a parked (CRIU-restored ahead) process.\n"
		   "# TYPE phos_restores_from_standby_total counter\nphos_restores_from_standby_total %llu\n",
		(unsigned long long)restores_standby);
	inv_bodies_admitted(&now, &most);
	fprintf(o, "# HELP phos_request_bodies Request bodies holding memory or disk budget now.\n"
		   "# TYPE phos_request_bodies gauge\nphos_request_bodies %llu\n"
		   "# HELP phos_request_bodies_max The most request bodies that held budget at once.\n"
		   "# TYPE phos_request_bodies_max gauge\nphos_request_bodies_max %llu\n",
		(unsigned long long)now, (unsigned long long)most);
	inv_migrate_prepared(&held, &total);
	fprintf(o, "# HELP phos_migrate_prepared Warm executors set aside for moves coming here, "
		   "their pre-copies pinned.\n# TYPE phos_migrate_prepared gauge\nphos_migrate_prepared %u\n"
		   "# HELP phos_migrate_prepared_total Warm executors ever set aside for moves.\n"
		   "# TYPE phos_migrate_prepared_total counter\nphos_migrate_prepared_total %llu\n",
		held, (unsigned long long)total);
	inv_migrate_incoming(&held, &total);
	fprintf(o, "# HELP phos_migrate_precopies Pre-copies of moves coming here, waiting for their final "
		   "phase.\n# TYPE phos_migrate_precopies gauge\nphos_migrate_precopies %u\n"
		   "# HELP phos_migrate_precopies_reclaimed_total Pre-copies removed, with their prepared "
		   "executors, after their source went quiet.\n"
		   "# TYPE phos_migrate_precopies_reclaimed_total counter\n"
		   "phos_migrate_precopies_reclaimed_total %llu\n", held, (unsigned long long)total);
	fprintf(o, "# HELP phos_http_connections_cut_total Connections closed for their deadline (--header-timeout, "
		   "--min-body-rate).\n# TYPE phos_http_connections_cut_total counter\n"
		   "phos_http_connections_cut_total %llu\n"
		   "# HELP phos_http_worker_threads Threads running requests that may block.\n"
		   "# TYPE phos_http_worker_threads gauge\nphos_http_worker_threads %u\n"
		   "# HELP phos_http_requests_pending Requests queued or running on those threads.\n"
		   "# TYPE phos_http_requests_pending gauge\nphos_http_requests_pending %u\n",
		(unsigned long long)inv_conns_cut(), inv_work_threads(), inv_work_pending());
}

/* The warm executors of every pool together: the default one, and those
 * over several GPUs. */
static void render_pools(FILE *o)
{
	unsigned idle = 0, busy = 0, starting = 0, pending = 0;

	for (unsigned g = 1; g <= INV_MAX_GPUS; g++) {
		struct phos_pool *p = g == 1 ? inv_cfg.pool : inv_cfg.gpu_pool[g];
		unsigned i, b, s;

		if (!p)
			continue;
		phos_pool_counts(p, &i, &b, &s);
		idle += i;
		busy += b;
		starting += s;
		pending += phos_pool_hot_pending(p);
	}
	fprintf(o, "# HELP phos_pool_executors Warm executors by state.\n# TYPE phos_pool_executors gauge\n"
		   "phos_pool_executors{state=\"idle\"} %u\nphos_pool_executors{state=\"busy\"} %u\n"
		   "phos_pool_executors{state=\"starting\"} %u\n", idle, busy, starting);
	fprintf(o, "# HELP phos_pool_hot_pending Executors that do not hold the current hot snapshots yet.\n"
		   "# TYPE phos_pool_hot_pending gauge\nphos_pool_hot_pending %u\n", pending);
}

/* Function names are [a-z0-9-]: no label escaping needed. The registry lock
 * is held while rendering; render_one takes only function locks. */
char *inv_metrics_render(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *o = open_memstream(&buf, &len);

	if (!o)
		return NULL;
	fputs("# HELP phos_invocations_total Calls by function and HTTP status.\n"
	      "# TYPE phos_invocations_total counter\n"
	      "# HELP phos_invocation_duration_seconds Call time, queueing and cold start included.\n"
	      "# TYPE phos_invocation_duration_seconds histogram\n"
	      "# HELP phos_cold_starts_total Calls that restored a new instance.\n"
	      "# TYPE phos_cold_starts_total counter\n"
	      "# HELP phos_spec_fallbacks_total Calls that took speculation's safe path, by reason (opaque_kernel, "
	      "overflow: waited for a whole on-demand restore; validate_miss: a kernel caught outside its set).\n"
	      "# TYPE phos_spec_fallbacks_total counter\n"
	      "# HELP phos_shared_bytes GPU memory held once per GPU for the instances of a function deployed with "
	      "share, which map it read-only.\n"
	      "# TYPE phos_shared_bytes gauge\n"
	      "# HELP phos_shared_cow_bytes_total Shared buffers an instance copied for itself before writing them.\n"
	      "# TYPE phos_shared_cow_bytes_total counter\n"
	      "# HELP phos_shared_mapped_bytes Shared memory mapped by the function's live instances, summed over "
	      "them (what sharing saves is this less phos_shared_bytes).\n"
	      "# TYPE phos_shared_mapped_bytes gauge\n"
	      "# HELP phos_instances Instances by state.\n"
	      "# TYPE phos_instances gauge\n",
	      o);
	inv_function_foreach(render_one, o);
	render_host(o);
	if (inv_cfg.pool)
		render_pools(o);
	fclose(o);
	return buf;
}
