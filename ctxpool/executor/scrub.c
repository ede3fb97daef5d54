/* SPDX-License-Identifier: MIT */
/* The end of a function on this executor: everything it made goes, and the
 * context is as the next function expects it (exec_scrub, executor.h). Called
 * by the executor's main loop, by DEVICE_RESET and when a restore fails. */
#include "executor.h"

#include "engine.h"

static void table_clear(struct handle_table *t, void (*fn)(struct executor *, void *), struct executor *ex)
{
	for (uint32_t i = 0; i < t->cap; i++) {
		if (t->slot[i]) {
			fn(ex, t->slot[i]);
			t->slot[i] = NULL;
		}
	}
}

static void drop_stream(struct executor *ex, void *s) { exec_stream_free(ex, s); }
static void drop_event(struct executor *ex, void *e) { exec_event_free(ex, e); }
static void drop_blas(struct executor *ex, void *b) { exec_blas_free(ex, b); }
static void drop_func(struct executor *ex, void *f) { (void)ex; exec_func_free(f); }
static void drop_var(struct executor *ex, void *v) { (void)ex; exec_var_free(v); }
static void drop_module(struct executor *ex, void *m) { exec_module_release(ex, m); }
static void drop_region(struct executor *ex, void *r) { exec_region_free(ex, r); }
static void drop_tex(struct executor *ex, void *t) { exec_tex_free(ex, t); }
static void drop_array(struct executor *ex, void *a) { exec_array_free(ex, a); }
static void drop_graph(struct executor *ex, void *g) { exec_graph_free(ex, g); }

void exec_scrub(struct executor *ex)
{
	loader_free(ex->loader);
	ex->loader = NULL;
	exec_prep_clear(ex);   /* read by the loader only: its restore is over */
	for (int d = ex->ndevs - 1; d >= 0; d--) {
		exec_use_device(ex, d);
		if (ex->dev)
			ex->dev_ops->synchronize(ex->dev);
	}
	ex->cur = 0;   /* the next function starts on device 0 */
	exec_context_restore(ex);
	exec_nccl_clear(ex);
	exec_dnn_clear(ex);
	exec_fft_clear(ex);
	exec_rand_clear(ex);
	table_clear(&ex->graphs, drop_graph, ex);   /* before the events and kernels they name */
	table_clear(&ex->blas, drop_blas, ex);
	table_clear(&ex->texes, drop_tex, ex);   /* before the arrays they read */
	table_clear(&ex->arrays, drop_array, ex);
	table_clear(&ex->streams, drop_stream, ex);
	table_clear(&ex->events, drop_event, ex);
	table_clear(&ex->funcs, drop_func, ex);
	table_clear(&ex->vars, drop_var, ex);
	table_clear(&ex->modules, drop_module, ex);
	table_clear(&ex->regions, drop_region, ex);
	exec_pool_clear(ex);
	if (ex->bufs) {
		phos_bufmap_reset(ex->bufs);
		phos_bufmap_set_window(ex->bufs, ex->arena_base, ex->dev_span);
	}
	ex->pending_error = 0;
	ex->attrs_set = false;
	ex->nattrs_kept = 0;
	ex->attrs_lost = ex->limits_lost = false;
	ex->restore_dir = NULL;
	for (int i = 0; i < 3; i++)
		atomic_store(&ex->spec_fallbacks[i], 0);
	exec_share_forget(ex);   /* (the bufmap's reset unmapped them) */
}
