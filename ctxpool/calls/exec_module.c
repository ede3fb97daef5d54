/* SPDX-License-Identifier: MIT */
/*
 * Modules, kernels, device variables and launches.
 *
 * A fatbin is parsed here (kparam) for parameter layouts and kinds, and loaded
 * into the device. A fatbin that fails either way is remembered as refused:
 * its kernels report the error at FUNC_INFO / launch, the way CUDA reports a
 * bad image at first use, and nothing crashes.
 *
 * An executor of several devices loads every module on each of them
 * (peer_module: devices 1, 2, ...), so that its kernels and variables exist
 * on whichever device the function selects; a launch takes the kernel of the
 * device it runs on (exec_func_here).
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "image.h"
#include "log.h"

/* Largest fatbin accepted (the preload bounds what it sends as well). */
#define MAX_FATBIN (1ull << 30)

void exec_module_free(struct executor *ex, struct exec_module *m)
{
	if (!m)
		return;
	if (m->dev_module)
		ex->dev_ops->module_unload(ex->devs[0], m->dev_module);
	for (int d = 1; d < ex->ndevs; d++) {
		if (m->peer_module[d])
			ex->dev_ops->module_unload(ex->devs[d], m->peer_module[d]);
	}
	if (m->twin_module)
		ex->dev_ops->module_unload(ex->devs[0], m->twin_module);
	phos_fatbin_free(m->fatbin);
	free(m->image);
	free(m);
}

void exec_var_free(struct exec_var *v)
{
	if (!v)
		return;
	free(v->name);
	free(v);
}

void exec_func_free(struct exec_func *f)
{
	if (!f)
		return;
	phos_kernel_info_exit(&f->info);
	free(f->name);
	free(f);
}

/* A module parsed and loaded on every device (a refused image is
 * remembered as such in m->error), or NULL when out of memory. hash: the
 * image's XXH3-128 when the caller has checked it already, else NULL. */
static struct exec_module *module_new(struct executor *ex, uint32_t id, const void *image, size_t image_len,
				      const char *hash)
{
	struct exec_module *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return NULL;
	/* Kept for snapshots: the fatbin is part of the image. */
	m->image = image_len <= MAX_FATBIN ? malloc(image_len ? image_len : 1) : NULL;
	if (!m->image) {
		free(m);
		return NULL;
	}
	memcpy(m->image, image, image_len);
	m->image_len = image_len;
	if (hash)
		snprintf(m->hash, sizeof(m->hash), "%s", hash);
	else
		phos_image_module_hash(image, image_len, m->hash);
	r = image_len <= MAX_FATBIN ? phos_modimage_parse(image, image_len, &m->fatbin) : -1;
	if (r < 0) {
		phos_warn("module %u: image refused (%d)", id, r);
		m->error = -PHOS_CUDA_INVALID_KERNEL_IMAGE;
	} else {
		r = ex->dev_ops->module_load(ex->devs[0], image, image_len, &m->dev_module);
		for (int d = 1; r == 0 && d < ex->ndevs; d++)
			r = ex->dev_ops->module_load(ex->devs[d], image, image_len, &m->peer_module[d]);
		if (r < 0) {
			phos_warn("module %u: device refused the image (%d)", id, -r);
			m->error = r;
		}
	}
	return m;
}

static int module_put(struct executor *ex, uint32_t id, struct exec_module *m)
{
	int r;

	if (!m)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	r = handle_put(&ex->modules, id, m);
	if (r < 0)
		exec_module_free(ex, m);
	return r;
}

/* Parses and loads a fatbin as module id; a refused image is remembered as such. */
int exec_module_make(struct executor *ex, uint32_t id, const void *image, size_t image_len)
{
	return module_put(ex, id, module_new(ex, id, image, image_len, NULL));
}

/* --- the module cache ---
 *
 * A pooled executor serves function after function, often the same one
 * restored again; loading a big fatbin (PyTorch's) takes tens of ms each.
 * At scrub, a module that loaded fine stays loaded here; a restore whose
 * snapshot has a module of the same hash and size takes it. Only restores
 * do: they write every variable of every module from the snapshot, so no
 * value of the earlier function survives, whereas a live MODULE_LOAD expects
 * the variables' initial values. */

void exec_module_release(struct executor *ex, struct exec_module *m)
{
	if (!m)
		return;
	if (m->error || !m->hash[0] || m->image_len > EXEC_MODCACHE_BYTES) {
		exec_module_free(ex, m);
		return;
	}
	if (m->twin_module) {   /* validation twins are made again when wanted */
		ex->dev_ops->module_unload(ex->devs[0], m->twin_module);
		m->twin_module = NULL;
	}
	m->twin_error = false;
	m->twin_tab = m->twin_arena = m->twin_miss = m->twin_last = 0;
	while (ex->nmodcache && (ex->nmodcache == EXEC_MODCACHE ||
				 ex->modcache_bytes + m->image_len > EXEC_MODCACHE_BYTES)) {
		struct exec_module *old = ex->modcache[0];

		ex->modcache_bytes -= old->image_len;
		memmove(&ex->modcache[0], &ex->modcache[1], --ex->nmodcache * sizeof(ex->modcache[0]));
		exec_module_free(ex, old);
	}
	ex->modcache[ex->nmodcache++] = m;
	ex->modcache_bytes += m->image_len;
}

void exec_modcache_clear(struct executor *ex)
{
	while (ex->nmodcache)
		exec_module_free(ex, ex->modcache[--ex->nmodcache]);
	ex->modcache_bytes = 0;
}

/* The cached module of that image, taken out of the cache, or NULL. */
static struct exec_module *cache_take(struct executor *ex, const void *image, size_t image_len, const char *hash)
{
	for (unsigned i = 0; i < ex->nmodcache; i++) {
		struct exec_module *m = ex->modcache[i];

		if (m->image_len != image_len || strcmp(m->hash, hash) != 0)
			continue;
		ex->modcache_bytes -= m->image_len;
		memmove(&ex->modcache[i], &ex->modcache[i + 1], (--ex->nmodcache - i) * sizeof(ex->modcache[0]));
		return m;
	}
	(void)image;
	return NULL;
}

void exec_module_warm(struct executor *ex, const void *image, size_t image_len, const char *hash)
{
	struct exec_module *m = cache_take(ex, image, image_len, hash);

	if (!m)
		m = module_new(ex, 0, image, image_len, hash);
	exec_module_release(ex, m);   /* (back) into the cache, newest */
}

int exec_module_make_restored(struct executor *ex, uint32_t id, const void *image, size_t image_len,
			      const char *hash)
{
	struct exec_module *m = cache_take(ex, image, image_len, hash);

	if (!m && !image)
		return -ENOENT;
	if (!m)   /* the restore checked the image against this hash */
		return module_put(ex, id, module_new(ex, id, image, image_len, hash));
	phos_debug("module %u: %zu bytes, already loaded (an earlier function's, or a hot snapshot's)", id, image_len);
	return module_put(ex, id, m);
}

/* A fatbin too big for one record arrives in a shared host region. */
static int module_load_shm(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_module_load_shm, ml);
	const struct exec_region *reg = handle_get(&ex->regions, ml->region);

	if (!reg || ml->offset > reg->size || ml->len > reg->size - ml->offset)
		return -PHOS_CUDA_INVALID_VALUE;
	return exec_module_make(ex, ml->module, (const uint8_t *)reg->ptr + ml->offset, ml->len);
}

int exec_func_make(struct executor *ex, uint32_t id, uint32_t module, const char *name)
{
	struct exec_module *m = handle_get(&ex->modules, module);
	struct exec_func *f = NULL;
	int r;

	f = calloc(1, sizeof(*f));
	if (!f || !(f->name = strdup(name))) {
		free(f);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	f->module = module;
	if (!m)
		f->error = -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	else if (m->error)
		f->error = m->error;
	else if (phos_fatbin_kernel(m->fatbin, name, &f->info) < 0)
		f->error = -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	else if ((r = ex->dev_ops->module_function(ex->devs[0], m->dev_module, name, &f->dev_func)) < 0)
		f->error = r;
	for (int d = 1; !f->error && d < ex->ndevs; d++) {
		if ((r = ex->dev_ops->module_function(ex->devs[d], m->peer_module[d], name, &f->peer_func[d])) < 0)
			f->error = r;
	}
	if (!f->error && f->info.access.verdict != PHOS_ACCESS_EXACT)
		phos_debug("kernel %s is opaque: %s", name, f->info.access.why);
	r = handle_put(&ex->funcs, id, f);
	if (r < 0)
		exec_func_free(f);
	return r;
}

static int func_register(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_func_register, fr);
	const char *name = (const char *)(fr + 1);
	size_t name_max = len - sizeof(*fr);

	if (name_max == 0 || strnlen(name, name_max) == name_max)
		return -PHOS_CUDA_INVALID_VALUE;
	return exec_func_make(ex, fr->func, fr->module, name);
}

int exec_var_make(struct executor *ex, uint32_t id, uint32_t module, const char *name, uint64_t size,
		  bool constant)
{
	struct exec_module *m = handle_get(&ex->modules, module);
	struct exec_var *v;
	int r;

	v = calloc(1, sizeof(*v));
	if (!v || !(v->name = strdup(name))) {
		free(v);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	v->module = module;
	v->constant = constant;
	v->size = size; /* a size hint for sim; the cuda backend reports the real one */
	if (!m || m->error) {
		v->error = m ? m->error : -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	} else {
		r = ex->dev_ops->module_global(ex->devs[0], m->dev_module, name, &v->addr, &v->size);
		if (r < 0)
			v->error = -PHOS_CUDA_SYMBOL_NOT_FOUND;
		else if (phos_bufmap_add_extern(ex->bufs, v->addr, v->size) < 0)
			phos_warn("variable %s at %#llx overlaps a known buffer", name, (unsigned long long)v->addr);
		for (int d = 1; !v->error && d < ex->ndevs; d++) {
			uint64_t peer_size = v->size;

			if (ex->dev_ops->module_global(ex->devs[d], m->peer_module[d], name, &v->peer_addr[d], &peer_size) < 0)
				v->error = -PHOS_CUDA_SYMBOL_NOT_FOUND;
			else if (phos_bufmap_add_extern(ex->bufs, v->peer_addr[d], v->size) < 0)
				phos_warn("variable %s at %#llx overlaps a known buffer", name,
					  (unsigned long long)v->peer_addr[d]);
		}
	}
	r = handle_put(&ex->vars, id, v);
	if (r < 0)
		exec_var_free(v);
	return r;
}

static int var_register(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_var_register, vr);
	const char *name = (const char *)(vr + 1);
	size_t name_max = len - sizeof(*vr);

	if (name_max == 0 || strnlen(name, name_max) == name_max)
		return -PHOS_CUDA_INVALID_VALUE;
	return exec_var_make(ex, vr->var, vr->module, name, vr->size, vr->constant != 0);
}

static int func_info(struct executor *ex, const struct exec_func *f, void *out, uint32_t *out_len)
{
	struct phos_reply_func_info *fi = out;

	if (f->error)
		return f->error;
	memset(fi, 0, sizeof(*fi));
	fi->nparams = f->info.nparams;
	fi->param_bytes = f->info.param_bytes;
	for (uint32_t i = 0; i < f->info.nparams && i < PHOS_MAX_PARAMS; i++) {
		fi->offset[i] = f->info.params[i].offset;
		fi->size[i] = f->info.params[i].size;
	}
	TRY(ex->dev_ops->func_attrs(ex->dev, exec_func_here(ex, f), fi));
	*out_len = sizeof(*fi);
	return 0;
}

/* LAUNCH and LAUNCH_EX: ex is NULL for a plain launch. */
static int launch(struct executor *ex, const struct phos_launch *l, uint32_t len, const struct phos_launch_ex *lx)
{
	const uint8_t *params = (const uint8_t *)(lx ? (const void *)(lx + 1) : (const void *)(l + 1));
	uint32_t head = lx ? sizeof(*lx) : sizeof(*l);
	struct exec_func *f = handle_get(&ex->funcs, l->func);
	struct spec_set set;
	void *stream;

	if (!f)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (f->error)
		return f->error;
	if (l->param_bytes != len - head || l->param_bytes != f->info.param_bytes)
		return -PHOS_CUDA_INVALID_VALUE;
	if (lx && (lx->flags & ~(uint32_t)(PHOS_LAUNCH_COOPERATIVE | PHOS_LAUNCH_CLUSTER)))
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(exec_stream(ex, l->stream, &stream));
	spec_clear(&set);
	TRY(spec_launch(ex, f, params, l->param_bytes, &set));
	/* A cooperative or clustered kernel is never run as its validating twin:
	 * the twin is launched plainly, and a grid-wide sync in a plain launch can
	 * hang. Its sets still come from the analysis, as every launch's do. */
	set.validated = !(lx && lx->flags) && exec_validate_wanted(ex, f, &set);
	TRY(spec_commit(ex, "launch", f->name, l->stream, &set));
	if (set.validated)
		return exec_validate_launch(ex, f, &set, l->grid, l->block, l->shared, stream, params, l->param_bytes);
	if (lx && lx->flags)
		return ex->dev_ops->launch_ex(ex->dev, exec_func_here(ex, f), &f->info, l->grid, l->block, l->shared, stream,
					      params, l->param_bytes, lx->flags, lx->cluster);
	return ex->dev_ops->launch(ex->dev, exec_func_here(ex, f), &f->info, l->grid, l->block, l->shared, stream,
				   params, l->param_bytes);
}

/* MODULE_UNLOAD: the module goes; its kernels keep their ids but can no
 * longer launch. */
static int module_unload(struct executor *ex, const void *body, uint32_t len)
{
	const struct phos_handle *h = body;

	if (len < sizeof(*h))
		return -PHOS_CUDA_INVALID_VALUE;
	exec_module_free(ex, handle_take(&ex->modules, h->id));
	for (uint32_t i = 0; i < ex->funcs.cap; i++) {
		struct exec_func *f = ex->funcs.slot[i];

		if (f && f->module == h->id)
			f->error = -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	}
	return 0;
}

/* The kernel with id `id`, when it may be asked about or changed: 0, or
 * cudaErrorInvalidDeviceFunction (no such kernel) or its own error (its
 * module was refused or unloaded). */
static int func_usable(struct executor *ex, uint32_t id, struct exec_func **ret)
{
	struct exec_func *f = handle_get(&ex->funcs, id);

	if (!f)
		return -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	if (f->error)
		return f->error;
	*ret = f;
	return 0;
}

/* OCCUPANCY (blocks per SM) and OCCUPANCY_CLUSTER (clusters): an int32 reply. */
static int occupancy(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	struct exec_func *f = NULL;
	int32_t n = 0;

	if (op == PHOS_OP_OCCUPANCY) {
		BODY(struct phos_occupancy, o);

		TRY(func_usable(ex, o->func, &f));
		if (o->block <= 0)
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(ex->dev_ops->occupancy(ex->dev, exec_func_here(ex, f), o->block, o->dyn_shared, &n));
	} else {
		BODY(struct phos_occupancy_cluster, o);

		TRY(func_usable(ex, o->func, &f));
		TRY(ex->dev_ops->occupancy_cluster(ex->dev, exec_func_here(ex, f), o->grid, o->block, o->shared, o->cluster,
						   o->potential != 0, &n));
	}
	memcpy(out, &n, sizeof(n));
	*out_len = sizeof(n);
	return 0;
}

/* VAR_INFO: where a variable is on the current device (PHOS_VAR_INFO_GIVEN:
 * the program was given its address, which a restore must keep). */
static int var_info(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	const struct phos_handle *h = body;
	struct phos_reply_var_info *vi = out;
	struct exec_var *v;

	if (len < sizeof(*h) || (h->_pad & ~PHOS_VAR_INFO_GIVEN))
		return -PHOS_CUDA_INVALID_VALUE;
	v = handle_get(&ex->vars, h->id);
	if (!v)
		return -PHOS_CUDA_INVALID_VALUE;
	if (v->error)
		return v->error;
	if (h->_pad & PHOS_VAR_INFO_GIVEN)
		v->given = true;
	vi->addr = exec_var_here(ex, v);
	vi->size = v->size;
	*out_len = sizeof(*vi);
	return 0;
}

int exec_module_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	const struct phos_handle *h = body;
	struct exec_func *f = NULL;

	switch (op) {
	case PHOS_OP_MODULE_LOAD: {
		BODY(struct phos_module_load, ml);

		return exec_module_make(ex, ml->module, (const uint8_t *)(ml + 1), len - sizeof(*ml));
	}
	case PHOS_OP_MODULE_LOAD_SHM:
		return module_load_shm(ex, body, len);
	case PHOS_OP_MODULE_STATUS: {
		const struct exec_module *m;

		if (len < sizeof(*h))
			return -PHOS_CUDA_INVALID_VALUE;
		m = handle_get(&ex->modules, h->id);
		return m ? m->error : -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	}
	case PHOS_OP_MODULE_UNLOAD:
		return module_unload(ex, body, len);
	case PHOS_OP_FUNC_REGISTER:
		return func_register(ex, body, len);
	case PHOS_OP_VAR_REGISTER:
		return var_register(ex, body, len);
	case PHOS_OP_FUNC_INFO:
		if (len < sizeof(*h))
			return -PHOS_CUDA_INVALID_VALUE;
		f = handle_get(&ex->funcs, h->id);
		return f ? func_info(ex, f, out, out_len) : -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	case PHOS_OP_FUNC_SET_ATTR: {
		BODY(struct phos_func_attr, a);

		TRY(func_usable(ex, a->func, &f));
		return ex->dev_ops->func_set_attr(ex->dev, exec_func_here(ex, f), a->attr, a->value);
	}
	case PHOS_OP_OCCUPANCY:
	case PHOS_OP_OCCUPANCY_CLUSTER:
		return occupancy(ex, op, body, len, out, out_len);
	case PHOS_OP_VAR_INFO:
		return var_info(ex, body, len, out, out_len);
	case PHOS_OP_LAUNCH: {
		BODY(struct phos_launch, l);

		return launch(ex, l, len, NULL);
	}
	case PHOS_OP_LAUNCH_EX: {
		BODY(struct phos_launch_ex, lx);

		return launch(ex, &lx->l, len, lx);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
