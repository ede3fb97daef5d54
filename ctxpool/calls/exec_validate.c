/* SPDX-License-Identifier: MIT */
/*
 * Validation of speculation (docs/design.md "Kernel metadata and speculation"): an
 * exact kernel runs as its instrumented twin (runtime/kernel/ptx_twin.h), which checks
 * every global access against the launch's set; a miss proves the analysis
 * wrong for that kernel, which is opaque from then on.
 *
 *   launch of an exact kernel, validation on
 *     ├─ spec set ──▶ table {lo, hi, read/write} ──H2D──▶ __phos_vtab (twin module)
 *     ├─ the twin runs instead of the kernel (the same results)
 *     └─ __phos_vmiss read back ── 0: "validated"
 *                                 >0: the kernel is opaque for good: logged once,
 *                                     counted, traced, and written to the snapshot's
 *                                     spec-opaque list (later restores know); during
 *                                     an on-demand restore the instance ends (its
 *                                     answer may have read bytes not restored yet)
 *
 * PHOS_VALIDATE_SPEC=always validates every launch of an exact kernel (one
 * that uses module variables runs on the twin module's copies, synchronized
 * with the module's around the launch);
 * =restore only while an on-demand restore is moving the snapshot in (the
 * window where a wrong set gives a wrong answer); unset: off. Validation is
 * slow by design (the device is synchronized around each validated launch).
 *
 * The sim device cannot run PTX: there the twin module is the original fatbin
 * loaded once more (the kernels' host twins run, nothing is checked), which
 * exercises everything around the check; PHOS_FAULT=validate_miss stands in
 * for a miss in tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "fault.h"
#include "engine.h"
#include "log.h"
#include "ptx_twin.h"

enum validate_mode { VALIDATE_OFF, VALIDATE_RESTORE, VALIDATE_ALWAYS };

static enum validate_mode validate_mode(void)
{
	const char *v = getenv("PHOS_VALIDATE_SPEC");

	if (!v || !*v || !strcmp(v, "off") || !strcmp(v, "0"))
		return VALIDATE_OFF;
	return strcmp(v, "restore") ? VALIDATE_ALWAYS : VALIDATE_RESTORE;
}

/* The twin module of m: made once (PTX rewritten, loaded), with its variables. */
static int twin_module(struct executor *ex, struct exec_module *m)
{
	uint64_t arena[2] = { ex->arena_base, ex->arena_base + ex->arena_size }, size;
	char *ptx = NULL, *twin = NULL;
	size_t ptx_len, twin_len;
	int r;

	if (m->twin_module)
		return 0;
	if (ex->dev_ops == &phos_device_sim) {
		r = ex->dev_ops->module_load(ex->dev, m->image, m->image_len, &m->twin_module);
	} else {
		r = phos_modimage_ptx(m->image, m->image_len, &ptx, &ptx_len);
		if (r == 0)
			r = phos_ptx_twin(ptx, ptx_len, &twin, &twin_len);
		if (r == 0)
			r = ex->dev_ops->module_load(ex->dev, twin, twin_len + 1, &m->twin_module);
		free(ptx);
		free(twin);
	}
	if (r < 0)
		goto fail;
	size = 8 * (1 + 3 * (uint64_t)PHOS_TWIN_MAX_RANGES);
	r = ex->dev_ops->module_global(ex->dev, m->twin_module, PHOS_TWIN_TAB, &m->twin_tab, &size);
	size = sizeof(arena);
	if (r == 0)
		r = ex->dev_ops->module_global(ex->dev, m->twin_module, PHOS_TWIN_ARENA, &m->twin_arena, &size);
	size = 4;
	if (r == 0)
		r = ex->dev_ops->module_global(ex->dev, m->twin_module, PHOS_TWIN_MISS, &m->twin_miss, &size);
	size = 8;
	if (r == 0)
		r = ex->dev_ops->module_global(ex->dev, m->twin_module, PHOS_TWIN_LAST, &m->twin_last, &size);
	if (r == 0)
		r = ex->dev_ops->memcpy_h2d(ex->dev, m->twin_arena, arena, sizeof(arena), NULL);
	if (r == 0)
		r = ex->dev_ops->memset(ex->dev, m->twin_miss, 0, 4, NULL);
	if (r == 0)
		return 0;
fail:
	phos_warn("validation twin of a module could not be made (%d): its kernels run unvalidated", r);
	m->twin_error = true;
	if (m->twin_module)
		ex->dev_ops->module_unload(ex->dev, m->twin_module);
	m->twin_module = NULL;
	return r;
}

bool exec_validate_wanted(struct executor *ex, struct exec_func *f, const struct spec_set *s)
{
	enum validate_mode mode = validate_mode();
	struct exec_module *m;

	/* Twins live on the home device; executors of several devices take no
	 * snapshot, so their sets are never trusted for a restore anyway. */
	if (mode == VALIDATE_OFF || f->info.access.verdict != PHOS_ACCESS_EXACT || f->twin_error || s->overflow ||
	    s->n > PHOS_TWIN_MAX_RANGES || ex->ndevs > 1)
		return false;
	if (mode == VALIDATE_RESTORE && (!ex->loader || loader_done(ex->loader)))
		return false;
	m = handle_get(&ex->modules, f->module);
	if (!m || m->twin_error || twin_module(ex, m) < 0)
		return false;
	if (!f->twin_func && ex->dev_ops->module_function(ex->dev, m->twin_module, f->name, &f->twin_func) < 0) {
		f->twin_error = true;
		return false;
	}
	return true;
}

/* Adds name to DIR/spec-opaque (one mangled name a line), atomically. */
static void persist_opaque(const char *dir, const char *name)
{
	char path[4096], tmp[4096], line[1024];
	FILE *in, *out;
	int fd;

	if (!dir || snprintf(path, sizeof(path), "%s/spec-opaque", dir) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/.spec-opaque.%d", dir, (int)getpid()) >= (int)sizeof(tmp))
		return;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || !(out = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	in = fopen(path, "re");
	while (in && fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\n")] = 0;
		if (*line && strcmp(line, name))
			fprintf(out, "%s\n", line);
	}
	if (in)
		fclose(in);
	fprintf(out, "%s\n", name);
	if (fflush(out) == 0 && fsync(fileno(out)) == 0 && fclose(out) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

void exec_validate_load_opaque(struct executor *ex, const char *dir)
{
	char path[4096], line[1024];
	FILE *in;

	if (snprintf(path, sizeof(path), "%s/spec-opaque", dir) >= (int)sizeof(path) || !(in = fopen(path, "re")))
		return;
	while (fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\n")] = 0;
		for (uint32_t id = 0; *line && id < ex->funcs.cap; id++) {
			struct exec_func *f = ex->funcs.slot[id];

			if (f && !strcmp(f->name, line) && f->info.access.verdict == PHOS_ACCESS_EXACT) {
				f->info.access.verdict = PHOS_ACCESS_OPAQUE;
				snprintf(f->info.access.why, sizeof(f->info.access.why),
					 "validation found an access outside its set (earlier run)");
			}
		}
	}
	fclose(in);
}

/* The twin module has variables of its own: a kernel that uses its module's
 * variables runs on copies of them. in: the module's values into the twin's
 * before the launch; out: the twin's back after it (a kernel that may write
 * them). Variables live outside the arena, where the twin checks nothing. */
static int sync_vars(struct executor *ex, const struct exec_func *f, void *twin_module, bool in)
{
	for (uint32_t id = 0; id < ex->vars.cap; id++) {
		const struct exec_var *v = ex->vars.slot[id];
		uint64_t twin_addr = 0, twin_size = 0;

		if (!v || v->error || v->module != f->module || !v->size)
			continue;
		TRY(ex->dev_ops->module_global(ex->dev, twin_module, v->name, &twin_addr, &twin_size));
		if (twin_size != v->size)
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(in ? ex->dev_ops->memcpy_d2d(ex->dev, twin_addr, v->addr, v->size, NULL)
		       : ex->dev_ops->memcpy_d2d(ex->dev, v->addr, twin_addr, v->size, NULL));
	}
	return 0;
}

int exec_validate_launch(struct executor *ex, struct exec_func *f, const struct spec_set *s, const uint32_t grid[3],
			 const uint32_t block[3], uint32_t shared, void *stream, const void *params,
			 uint32_t param_bytes)
{
	struct exec_module *m = handle_get(&ex->modules, f->module);
	static uint64_t table[1 + 3 * PHOS_TWIN_MAX_RANGES];
	uint64_t last = 0;
	uint32_t n = 0, miss = 0;
	char base[128];

	if (!m || !m->twin_module || !f->twin_func)
		return -PHOS_CUDA_INVALID_VALUE;        /* exec_validate_wanted said no */
	for (uint32_t i = 0; i < s->n && n < PHOS_TWIN_MAX_RANGES; i++) {
		table[1 + 3 * n] = s->r[i].addr;
		table[2 + 3 * n] = s->r[i].addr + s->r[i].len;
		table[3 + 3 * n] = s->r[i].access;
		n++;
	}
	table[0] = n;
	/* the table is read by the twin while it runs: nothing else may be using it */
	TRY(ex->dev_ops->synchronize(ex->dev));
	TRY(ex->dev_ops->memcpy_h2d(ex->dev, m->twin_tab, table, 8 * (1 + 3 * (size_t)n), NULL));
	if (f->info.access.globals)
		TRY(sync_vars(ex, f, m->twin_module, true));
	TRY(ex->dev_ops->synchronize(ex->dev));
	TRY(ex->dev_ops->launch(ex->dev, f->twin_func, &f->info, grid, block, shared, stream, params, param_bytes));
	TRY(ex->dev_ops->synchronize(ex->dev));
	if (f->info.access.globals & PHOS_ACCESS_WRITE) {
		TRY(sync_vars(ex, f, m->twin_module, false));
		TRY(ex->dev_ops->synchronize(ex->dev));
	}
	TRY(ex->dev_ops->memcpy_d2h(ex->dev, &miss, m->twin_miss, 4, NULL));
	if (phos_fault("validate_miss"))
		miss = 1;
	if (!miss)
		return 0;
	TRY(ex->dev_ops->memcpy_d2h(ex->dev, &last, m->twin_last, 8, NULL));
	TRY(ex->dev_ops->memset(ex->dev, m->twin_miss, 0, 4, NULL));
	f->info.access.verdict = PHOS_ACCESS_OPAQUE;
	snprintf(f->info.access.why, sizeof(f->info.access.why), "validation: %u access(es) outside its set, last %#llx",
		 miss, (unsigned long long)last);
	ex->spec_fallbacks[SPEC_FB_VALIDATE]++;
	phos_warn("kernel %s touched memory outside its proven set (%u accesses, last at %#llx): opaque from now on",
		  phos_demangle_basename(f->name, base, sizeof(base)), miss, (unsigned long long)last);
	if (ex->trace) {
		flockfile(ex->trace);
		fprintf(ex->trace, "{\"seq\":%llu,\"op\":\"validate_miss\",\"kernel\":\"%s\",\"misses\":%u,\"last\":%llu}\n",
			(unsigned long long)ex->seq, f->name, miss, (unsigned long long)last);
		funlockfile(ex->trace);
	}
	persist_opaque(ex->restore_dir ? ex->restore_dir : ex->snapshot_dir, f->name);
	if (ex->loader && !loader_done(ex->loader)) {
		/* The launch may have read a buffer that was not restored yet: this
		 * instance must not answer. */
		phos_err("kernel %s touched memory outside its set during the restore: this instance ends",
			 phos_demangle_basename(f->name, base, sizeof(base)));
		exec_control_error(ex, "validation: kernel %s touched memory outside its set during the restore",
			     phos_demangle_basename(f->name, base, sizeof(base)));
		fflush(NULL);
		_exit(70);
	}
	return 0;
}
