/* SPDX-License-Identifier: MIT */
/*
 * Snapshots of an executor's device state, and rebuilding it from one.
 *
 *   SERVE ──▶ exec_serve_point
 *               ├─ normal:    phos_channel_resume(): the function goes on
 *               └─ snapshot:  drain the device, exec_image_dump(), tell phos-fn
 *                             DUMPED, keep the function parked until phos-fn has
 *                             taken the CPU dump (control socket closes), exit
 *
 *   --restore-from DIR ──▶ exec_image_load(): modules, kernels, variables,
 *                          streams, events, cuBLAS handles with their ids, every
 *                          buffer at its address, contents through the staging
 *                          pipeline with checksums, then the new channel.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "fault.h"
#include "image.h"
#include "fdio.h"
#include "log.h"
#include "engine.h"
#include "staging.h"

/* --- dump --- */

struct dump_ctx {
	struct phos_image *img;
	struct stage_item *items;
	size_t n, cap;
	uint64_t off;                    /* where the next new item goes */
	const struct stage_item *prior;  /* already in gpu.data, by dev (exec_image_plan_over) */
	size_t nprior;
	uint64_t *scratch;               /* device copies of the arrays (collect_arrays) */
	size_t nscratch;
};

static int by_dev(const void *a, const void *b)
{
	const struct stage_item *x = a, *y = b;

	return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* An item of dev and len at its prior offset when gpu.data already holds one
 * of exactly that place and size, else at the end; *ret_off says where. */
static int add_item(struct dump_ctx *c, uint64_t dev, uint64_t len, uint64_t *ret_off)
{
	const struct stage_item key = { .dev = dev }, *p = NULL;
	uint64_t off = c->off;

	if (c->nprior)
		p = bsearch(&key, c->prior, c->nprior, sizeof(*p), by_dev);
	if (p && p->len == len)
		off = p->off;
	else
		c->off = phos_image_next_offset(c->off, len);
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct stage_item *it = realloc(c->items, cap * sizeof(*it));

		if (!it)
			return -ENOMEM;
		c->items = it;
		c->cap = cap;
	}
	c->items[c->n++] = (struct stage_item){ .dev = dev, .len = len, .off = off };
	*ret_off = off;
	return 0;
}

static int collect_buf(const struct phos_buf *b, void *ctx)
{
	struct dump_ctx *c = ctx;
	struct phos_image_buf ib = { .addr = b->addr, .size = b->size, .id = b->id };

	if (b->is_extern)
		return 0; /* variables are saved with their modules */
	c->img->gpu_bytes += b->size;
	return add_item(c, b->addr, b->size, &ib.offset) ?: phos_image_add_buf(c->img, &ib);
}

static int write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	const uint8_t *p = data;
	int r = 0;

	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			break;
		}
		p += w;
		len -= (size_t)w;
	}
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

/* Device objects: modules (their fatbins stored once by hash), kernels, variables,
 * streams, events, cuBLAS handles. Variables become data items too. */
static int collect_objects(struct executor *ex, const char *dir, struct dump_ctx *c, char *err, size_t errlen)
{
	struct phos_image *img = c->img;
	char path[4096];
	int r;

	for (uint32_t id = 0; id < ex->modules.cap; id++) {
		struct exec_module *m = ex->modules.slot[id];
		struct phos_image_module im = { .id = id };

		if (!m)
			continue;
		im.size = m->image_len;
		phos_image_module_hash(m->image, m->image_len, im.hash);
		snprintf(path, sizeof(path), "%s/modules/%s.fatbin", dir, im.hash);
		if (access(path, F_OK) != 0 && (r = write_file(path, m->image, m->image_len)) < 0) {
			phos_errf(err, errlen, "writing %s: %s", path, strerror(-r));
			return r;
		}
		TRY(phos_image_add_module(img, &im));
	}
	for (uint32_t id = 0; id < ex->funcs.cap; id++) {
		struct exec_func *f = ex->funcs.slot[id];

		if (f)
			TRY(phos_image_add_func(img, id, f->module, f->name));
	}
	for (uint32_t id = 0; id < ex->vars.cap; id++) {
		struct exec_var *v = ex->vars.slot[id];
		struct phos_image_var iv = { .id = id };

		if (!v)
			continue;
		iv.module = v->module;
		iv.name = v->name;
		iv.constant = v->constant;
		iv.given = v->given;
		/* one entry per device: each has its own copy */
		for (int d = 0; d < ex->ndevs; d++) {
			iv.device = (uint32_t)d;
			if (!v->error) {
				iv.addr = d ? v->peer_addr[d] : v->addr;
				iv.size = v->size;
				TRY(add_item(c, iv.addr, v->size, &iv.offset));
			}
			TRY(phos_image_add_var(img, &iv));
		}
	}
	img->devices = (uint32_t)ex->ndevs;
	for (uint32_t id = 0; id < ex->streams.cap; id++) {
		struct exec_stream_obj *s = ex->streams.slot[id];
		struct phos_image_stream is = { .id = id };

		if (!s)
			continue;
		is.flags = s->flags;
		is.priority = s->priority;
		is.device = (uint32_t)s->device;
		TRY(phos_image_add_stream(img, &is));
	}
	for (uint32_t id = 0; id < ex->events.cap; id++) {
		struct exec_event_obj *e = ex->events.slot[id];
		struct phos_image_event ie = { .id = id };

		if (!e)
			continue;
		ie.flags = e->flags;
		ie.device = (uint32_t)e->device;
		TRY(phos_image_add_event(img, &ie));
	}
	for (uint32_t id = 0; id < ex->regions.cap; id++) {
		struct exec_region *g = ex->regions.slot[id];
		struct phos_image_region ig = { .id = id };

		if (!g)
			continue;
		ig.size = g->size;
		ig.addr = g->fn_addr;
		ig.exec_addr = (uint64_t)(uintptr_t)g->ptr;
		TRY(phos_image_add_region(img, &ig));
	}
	for (uint32_t id = 0; id < ex->blas.cap; id++) {
		struct exec_blas *b = ex->blas.slot[id];
		struct phos_image_blas ib = { .id = id };

		if (!b)
			continue;
		ib.stream = b->stream;
		ib.math_mode = b->math_mode;
		ib.workspace = b->workspace;
		ib.workspace_size = b->workspace_size;
		ib.device = (uint32_t)b->device;
		TRY(phos_image_add_blas(img, &ib));
	}
	return 0;
}

/* Array scratch lives on device 0 (collect_arrays). */
static void scratch_free_all(struct executor *ex, uint64_t *scratch, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ex->dev_ops->scratch_free(ex->devs[0], scratch[i]);
	free(scratch);
}

/* Array a's contents into scratch, on device 0 (read back like a buffer):
 * straight from an array of device 0 (queued: the caller synchronises); from
 * an array of another device through host memory, as that device's scratch
 * would be out of device 0's reach. */
static int array_out(struct executor *ex, const struct exec_array *a, uint64_t scratch)
{
	struct phos_copy_side dst = { 0 }, src = { .array = a->dev };
	uint64_t pitch = a->dims[0] * a->elem_bytes;
	void *host;
	int r;

	dst.pitch = pitch;
	dst.slice = pitch * a->dims[1];
	if (a->device == 0) {
		dst.addr = scratch;
		return ex->dev_ops->array_copy(ex->devs[0], &dst, &src, pitch, a->dims[1], a->dims[2], NULL);
	}
	host = malloc(a->bytes ? a->bytes : 1);
	if (!host)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	dst.host = host;
	r = ex->dev_ops->array_copy(ex->devs[a->device], &dst, &src, pitch, a->dims[1], a->dims[2], NULL);
	if (r == 0)
		r = ex->dev_ops->synchronize(ex->devs[a->device]);
	if (r == 0)
		r = ex->dev_ops->memcpy_h2d(ex->devs[0], scratch, host, a->bytes, NULL);
	free(host);
	return r;
}

/* Arrays (after every variable: their items come last) and texture and
 * surface objects. Each array is copied now into device scratch memory, so
 * that the dump holds it as it is at this moment whatever the function does
 * next (a cow or recopy checkpoint lets it run on), and that copy is the
 * array's item (exec_array.c). Over several GPUs each array keeps its device;
 * texture and surface objects must all be on one (their handles are one
 * table: exec_array.c). */
static int collect_arrays(struct executor *ex, struct dump_ctx *c, char *err, size_t errlen)
{
	struct phos_image *img = c->img;
	uint32_t narrays = 0;
	int tex_dev = -1, r;

	for (uint32_t id = 0; id < ex->arrays.cap; id++)
		narrays += ex->arrays.slot[id] != NULL;
	for (uint32_t h = 0; h < ex->texes.cap; h++) {
		const struct exec_tex *t = ex->texes.slot[h];

		if (t && tex_dev >= 0 && t->device != tex_dev) {
			phos_errf(err, errlen, "texture or surface objects on several GPUs (%d and %d) in one snapshot are "
				  "not supported", tex_dev, t->device);
			return -EOPNOTSUPP;
		}
		if (t)
			tex_dev = t->device;
	}
	if (narrays && !(c->scratch = calloc(narrays, sizeof(*c->scratch))))
		return -ENOMEM;
	for (uint32_t id = 0; id < ex->arrays.cap; id++) {
		struct exec_array *a = ex->arrays.slot[id];
		struct phos_image_array ia = { .size = a ? a->bytes : 0 };
		uint64_t scratch = 0;

		if (!a)
			continue;
		ia.desc = a->desc;
		ia.device = (uint32_t)a->device;
		r = ex->dev_ops->scratch_alloc(ex->devs[0], a->bytes, &scratch);
		if (r < 0) {
			phos_errf(err, errlen, "no device memory to copy array %u (%llu bytes) out (cuda error %d)", id,
				  (unsigned long long)a->bytes, -r);
			return r;
		}
		c->scratch[c->nscratch++] = scratch;
		r = array_out(ex, a, scratch);
		if (r < 0) {
			phos_errf(err, errlen, "copying array %u out failed (cuda error %d)", id, -r);
			return r;
		}
		TRY(add_item(c, scratch, a->bytes, &ia.offset));
		TRY(phos_image_add_array(img, &ia));
	}
	if (narrays && (r = ex->dev_ops->synchronize(ex->devs[0])) < 0) {
		phos_errf(err, errlen, "copying the arrays out failed (cuda error %d)", -r);
		return r;
	}
	for (uint32_t h = 0; h < ex->texes.cap; h++) {
		struct exec_tex *t = ex->texes.slot[h];
		struct phos_image_tex it = { .handle = h };

		if (!t)
			continue;
		it.desc = t->desc;
		it.dangling = t->dangling;
		it.device = (uint32_t)t->device;
		TRY(phos_image_add_tex(img, &it));
	}
	return 0;
}

int exec_image_open_data(const char *dir, bool truncate, char *err, size_t errlen)
{
	char path[4096];
	int flags = O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), fd;

	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	/* Straight to the disk where the file system allows (staging.h); read
	 * too: staging.c maps a file that takes no O_DIRECT (or lives in tmpfs). */
	fd = open(path, flags | O_DIRECT, 0644);
	if (fd < 0 && errno == EINVAL)
		fd = open(path, flags, 0644);
	if (fd < 0) {
		fd = -errno;
		phos_errf(err, errlen, "creating %s: %s", path, strerror(errno));
	}
	return fd;
}

int exec_image_reserve(int fd, uint64_t from, uint64_t end, char *err, size_t errlen)
{
	struct statfs fs;
	int r;

	if (end <= from)
		return 0;
	if (phos_fault("gpu_data_alloc")) {
		r = ENOSPC;
	} else if (fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
		/* tmpfs: fallocate would allocate and zero every page on this thread,
		 * in the program's stall; the staging workers populate them in
		 * parallel instead (staging.c), and a shortfall fails there. */
		struct statvfs vfs;

		r = ftruncate(fd, (off_t)end) < 0 ? errno : 0;
		if (r == 0 && fstatvfs(fd, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < end - from)
			r = ENOSPC;
	} else {
		r = posix_fallocate(fd, (off_t)from, (off_t)(end - from));
	}
	if (r) {
		phos_errf(err, errlen, "allocating %llu bytes for gpu.data: %s", (unsigned long long)(end - from),
			  strerror(r));
		return -r;
	}
	return 0;
}

int exec_image_plan(struct executor *ex, const char *dir, struct exec_dump **ret, char *err, size_t errlen)
{
	return exec_image_plan_over(ex, dir, NULL, 0, 0, ret, err, errlen);
}

int exec_image_plan_over(struct executor *ex, const char *dir, const struct stage_item *prior, size_t nprior,
			 uint64_t prior_end, struct exec_dump **ret, char *err, size_t errlen)
{
	struct exec_dump *d = calloc(1, sizeof(*d));
	struct phos_image *img = phos_image_new();
	struct dump_ctx c = { .img = img, .prior = prior, .nprior = nprior, .off = nprior ? prior_end : 0 };
	struct phos_reply_device info;
	char path[4096];
	int fd = -1, r;

	if (!img || !d) {
		phos_image_free(img);
		free(d);
		return -ENOMEM;
	}
	snprintf(img->device, sizeof(img->device), "%s", ex->dev_ops->name);
	if (ex->dev_ops->info(ex->dev, &info) == 0)
		snprintf(img->gpu_name, sizeof(img->gpu_name), "%s", info.name);
	img->arena_base = ex->arena_base;
	img->arena_size = ex->arena_size;
	img->created = (int64_t)time(NULL);
	snprintf(img->criu_dir, sizeof(img->criu_dir), "cpu");

	snprintf(path, sizeof(path), "%s/modules", dir);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		r = -errno;
		phos_errf(err, errlen, "mkdir %s: %s", path, strerror(errno));
		goto fail;
	}
	r = phos_bufmap_foreach(ex->bufs, collect_buf, &c);
	if (r == 0)
		r = collect_objects(ex, dir, &c, err, errlen);
	if (r == 0 && (r = exec_pool_to_image(ex, img)) < 0)
		phos_errf(err, errlen, "listing the memory pools: %s", strerror(-r));
	if (r == 0 && (r = exec_context_to_image(ex, img)) < 0)
		phos_errf(err, errlen, "reading the limits and stream attributes set (%d)", r);
	for (size_t i = 0; r == 0 && i < phos_bufmap_reservations(ex->bufs); i++) {
		struct phos_image_resv v;

		r = phos_bufmap_reservation_nth(ex->bufs, i, &v.addr, &v.size);
		if (r == 0 && (r = phos_image_add_resv(img, &v)) < 0)
			phos_errf(err, errlen, "listing the reserved ranges: %s", strerror(-r));
	}
	if (r == 0)
		r = collect_arrays(ex, &c, err, errlen);
	if (r < 0) {
		if (!*err)
			phos_errf(err, errlen, "collecting the device state: %s", strerror(-r));
		goto fail;
	}
	img->data_bytes = c.off;

	/* The space is taken up front, so that a full disk is one clear error. */
	fd = r = exec_image_open_data(dir, !nprior, err, errlen);
	if (fd < 0)
		goto fail;
	/* Over prior copies only the new end: the holes of freed buffers stay holes. */
	r = exec_image_reserve(fd, nprior ? prior_end : 0, c.off, err, errlen);
	if (r < 0)
		goto fail;
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	d->img = img;
	d->items = c.items;
	d->n = c.n;
	d->fd = fd;
	d->ex = ex;
	d->scratch = c.scratch;
	d->nscratch = c.nscratch;
	*ret = d;
	return 0;

fail:
	if (fd >= 0)
		close(fd);
	scratch_free_all(ex, c.scratch, c.nscratch);
	free(c.items);
	phos_image_free(img);
	free(d);
	return r;
}

int exec_image_copy(struct executor *ex, struct exec_dump *d, size_t first, size_t n, char *err, size_t errlen)
{
	/* Durability is the commit's job (it fsyncs the whole directory before the
	 * rename), so that the GPU is not held while the disk catches up. */
	return n ? stage_dump(ex, d->fd, d->items + first, n, err, errlen) : 0;
}

int exec_image_finish(struct exec_dump *d, uint64_t *ret_bytes, char *err, size_t errlen)
{
	struct phos_image *img = d->img;
	int r;

	/* Hashes back into the manifest: buffers first, then variables, in item order. */
	for (uint32_t i = 0; i < img->nbufs; i++)
		img->bufs[i].hash = d->items[i].hash;
	uint32_t k = img->nbufs;

	for (uint32_t i = 0; i < img->nvars; i++)
		if (img->vars[i].size)
			img->vars[i].hash = d->items[k++].hash;
	for (uint32_t i = 0; i < img->narrays; i++)
		img->arrays[i].hash = d->items[k++].hash;
	r = phos_image_write_manifest(d->dir, img);
	if (r < 0)
		phos_errf(err, errlen, "writing the manifest: %s", strerror(-r));
	else
		*ret_bytes = img->data_bytes;
	return r;
}

void exec_image_drop_scratch(struct exec_dump *d)
{
	if (d->ex)
		scratch_free_all(d->ex, d->scratch, d->nscratch);
	d->scratch = NULL;
	d->nscratch = 0;
}

void exec_image_dump_free(struct exec_dump *d)
{
	if (!d)
		return;
	if (d->fd >= 0)
		close(d->fd);
	if (d->ex)
		scratch_free_all(d->ex, d->scratch, d->nscratch);
	free(d->items);
	phos_image_free(d->img);
	free(d);
}

int exec_image_dump(struct executor *ex, const char *dir, uint64_t *ret_bytes, char *err, size_t errlen)
{
	struct exec_dump *d;
	int r = exec_image_plan(ex, dir, &d, err, errlen);

	if (r < 0)
		return r;
	r = exec_image_copy(ex, d, 0, d->n, err, errlen);
	if (r == 0)
		r = exec_image_finish(d, ret_bytes, err, errlen);
	exec_image_dump_free(d);
	return r;
}

int exec_serve_point(struct executor *ex)
{
	char err[512] = "";
	uint64_t bytes = 0;
	double t0;
	int r = 0;

	if (!ex->snapshot_dir)
		return phos_channel_resume(ex->ch) < 0 ? -PHOS_CUDA_UNKNOWN : 0;
	t0 = phos_now();
	/* every device drained; the dump reads through device 0, which reaches
	 * the others' memory */
	for (int d = ex->ndevs - 1; d >= 0; d--) {
		exec_use_device(ex, d);
		r = ex->dev_ops->synchronize(ex->dev);
		if (r < 0)
			break;
	}
	if (r < 0) {
		phos_errf(err, sizeof(err), "the device failed while draining (cuda error %d)", -r);
	} else if (ex->pending_error) {
		r = ex->pending_error;
		phos_errf(err, sizeof(err), "the function left an error of asynchronous work (cuda error %d)", -r);
	} else if (ex->ndevs > 1 && !ex->peers) {
		r = -PHOS_CUDA_NOT_SUPPORTED;
		phos_errf(err, sizeof(err), "the executor's %d GPUs do not reach each other's memory: its dump "
			  "cannot read them all", ex->ndevs);
	} else {
		exec_pool_release_all(ex);   /* cached pool blocks are not state: live ones are */
		r = exec_image_dump(ex, ex->snapshot_dir, &bytes, err, sizeof(err));
	}
	if (r < 0)
		exec_control_error(ex, "%s", err);
	else
		exec_control_send(ex, &(struct phos_ctl_msg){ .type = PHOS_CTL_DUMPED, .fd = -1,
							      .dumped = { .gpu_dump_s = phos_now() - t0,
									  .data_bytes = bytes } });
	/* The function stays parked in phos_channel_await while phos-fn dumps it;
	 * phos-fn closes the control socket when it is done. */
	phos_ctl_wait_close(ex->control_fd);
	ex->goodbye = true;
	return 0;
}

/* --- load --- */

static int load_objects(struct executor *ex, const char *dir, const struct phos_image *img, char *err,
			size_t errlen)
{
	char path[4096], hash[33];
	int r;

	for (uint32_t i = 0; i < img->nmodules; i++) {
		const struct phos_image_module *m = &img->modules[i];
		void *data = NULL;

		/* loaded already (a pooled executor's cache): no need to read it again */
		r = exec_module_make_restored(ex, m->id, NULL, m->size, m->hash);
		if (r != -ENOENT) {
			if (r < 0) {
				phos_errf(err, errlen, "module %u could not be taken from the cache (%d)", m->id, r);
				return -EIO;
			}
			continue;
		}
		snprintf(path, sizeof(path), "%s/modules/%s.fatbin", dir, m->hash);
		r = phos_read_file(path, m->size, &data);
		if (r < 0) {
			phos_errf(err, errlen, "reading %s: %s", path, strerror(-r));
			return r;
		}
		phos_image_module_hash(data, m->size, hash);
		if (strcmp(hash, m->hash) != 0) {
			free(data);
			phos_errf(err, errlen, "%s does not match its hash", path);
			return -EBADMSG;
		}
		r = exec_module_make_restored(ex, m->id, data, m->size, m->hash);
		free(data);
		if (r < 0) {
			phos_errf(err, errlen, "module %u could not be loaded (cuda error %d)", m->id, -r);
			return -EIO;
		}
	}
	for (uint32_t i = 0; i < img->nfuncs; i++) {
		r = exec_func_make(ex, img->funcs[i].id, img->funcs[i].module, img->funcs[i].name);
		if (r < 0) {
			phos_errf(err, errlen, "kernel %s could not be registered (cuda error %d)", img->funcs[i].name, -r);
			return -EIO;
		}
	}
	for (uint32_t i = 0; i < img->nvars; i++) {
		const struct phos_image_var *v = &img->vars[i];
		struct exec_var *ev;

		/* made once (on every device), then each device's entry is checked */
		r = v->device == 0 ? exec_var_make(ex, v->id, v->module, v->name, v->size, v->constant) : 0;
		ev = handle_get(&ex->vars, v->id);
		if (ev && v->given)
			ev->given = true;   /* the program still holds the address it was given */
		if (r < 0 || !ev) {
			phos_errf(err, errlen, "variable %s could not be registered (cuda error %d)", v->name, -r);
			return -EIO;
		}
		/* The driver places module variables itself (the cuda backend gets a
		 * different address in every process): the contents go to where the
		 * variable is now, and the function's runtime asks again after the
		 * restore (preload: phos_var_forget). Only the size must agree. */
		if (v->size && (ev->error || ev->size != v->size)) {
			phos_errf(err, errlen, "variable %s has %llu bytes here, not %llu as in the snapshot", v->name,
			     (unsigned long long)ev->size, (unsigned long long)v->size);
			return -EBADMSG;
		}
		if (v->size && (v->device ? ev->peer_addr[v->device] : ev->addr) != v->addr)
			phos_debug("variable %s (device %u) moved from %#llx", v->name, v->device,
				   (unsigned long long)v->addr);
	}
	for (uint32_t i = 0; i < img->nstreams; i++) {
		exec_use_device(ex, (int)img->streams[i].device);
		r = exec_stream_make(ex, img->streams[i].id, img->streams[i].flags, img->streams[i].priority);
		if (r < 0) {
			phos_errf(err, errlen, "stream %u could not be made (cuda error %d)", img->streams[i].id, -r);
			return -EIO;
		}
	}
	for (uint32_t i = 0; i < img->nevents; i++) {
		exec_use_device(ex, (int)img->events[i].device);
		r = exec_event_make(ex, img->events[i].id, img->events[i].flags);
		if (r < 0) {
			phos_errf(err, errlen, "event %u could not be made (cuda error %d)", img->events[i].id, -r);
			return -EIO;
		}
	}
	exec_use_device(ex, ex->cur);
	/* A checkpoint's limits and stream attributes, which no restore at
	 * phos_fn_serve sets again (a snapshot's are the function's runtime's) */
	if (img->checkpoint.present && (r = exec_context_from_image(ex, img, err, errlen)) < 0)
		return r;
	return 0;
}

/* size bytes of fd at off into data: 0, or -errno (-ENODATA: the file ends first). */
static int read_at(int fd, uint8_t *data, uint64_t size, uint64_t off)
{
	uint64_t got = 0;

	while (got < size) {
		ssize_t n = pread(fd, data + got, size - got, (off_t)(off + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		got += (uint64_t)n;
	}
	return 0;
}

/* Makes the snapshot's arrays and fills them from gpu.data (checked against
 * their checksums), before the function runs. */
static int load_array_data(struct executor *ex, const char *dir, const struct phos_image *img, char *err,
			   size_t errlen)
{
	char path[4096];
	int fd, r = 0, saved = ex->dev_index;

	if (!img->narrays)
		return 0;
	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		phos_errf(err, errlen, "opening %s: %s", path, strerror(errno));
		return -errno;
	}
	for (uint32_t i = 0; i < img->narrays && r == 0; i++) {
		const struct phos_image_array *ia = &img->arrays[i];
		struct phos_copy_side dst = { 0 }, src = { 0 };
		struct exec_array *a;
		uint8_t *data = malloc(ia->size);

		if (!data) {
			r = -ENOMEM;
			phos_errf(err, errlen, "out of memory for array %u", ia->desc.id);
			break;
		}
		r = read_at(fd, data, ia->size, ia->offset);
		if (r < 0) {
			phos_errf(err, errlen, "reading array %u from gpu.data: %s", ia->desc.id, strerror(-r));
		} else if (phos_image_hash(data, ia->size) != ia->hash) {
			r = -EBADMSG;
			phos_errf(err, errlen, "checksum mismatch in gpu.data at offset %llu (%llu bytes for array %u)",
				  (unsigned long long)ia->offset, (unsigned long long)ia->size, ia->desc.id);
		} else if ((int)ia->device >= ex->ndevs) {
			r = -EINVAL;
			phos_errf(err, errlen, "array %u is of GPU %u; this executor owns %d", ia->desc.id, ia->device,
				  ex->ndevs);
		} else if (exec_use_device(ex, (int)ia->device), (r = exec_array_make(ex, &ia->desc, &a)) < 0) {
			phos_errf(err, errlen, "array %u could not be made (cuda error %d)", ia->desc.id, -r);
			r = -EIO;
		} else {
			src.host = data;
			src.pitch = a->dims[0] * a->elem_bytes;
			src.slice = src.pitch * a->dims[1];
			dst.array = a->dev;
			r = ex->dev_ops->array_copy(ex->dev, &dst, &src, src.pitch, a->dims[1], a->dims[2], NULL);
			if (r < 0) {
				phos_errf(err, errlen, "array %u could not be filled (cuda error %d)", ia->desc.id, -r);
				r = -EIO;
			}
		}
		free(data);
	}
	close(fd);
	exec_use_device(ex, saved);
	return r;
}

/* Makes the texture and surface objects again under their own handles:
 * every handle below the highest is taken in order, by its object or by a
 * stand-in destroyed at the end, so that the device's lowest-free choice
 * lands on each recorded handle (exec_array.c). */
static int load_texes(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	const struct phos_array_create tiny_desc = { .bits = { 32 }, .kind = 2, .width = 1 };
	const struct phos_tex_create stand_in = { .res_type = PHOS_RES_ARRAY };
	uint64_t *stand_ins = NULL, top = 0;
	size_t nstand = 0;
	void *tiny = NULL;
	int r = 0, saved = ex->dev_index;

	if (!img->ntexes)
		return 0;
	if (!ex->dev_ops->tex_create) {
		phos_errf(err, errlen, "the %s device has no texture objects", ex->dev_ops->name);
		return -EIO;
	}
	/* all on one device (collect_arrays): made there */
	for (uint32_t i = 1; i < img->ntexes; i++) {
		if (img->texes[i].device != img->texes[0].device) {
			phos_errf(err, errlen, "texture objects of GPUs %u and %u in one snapshot", img->texes[0].device,
				  img->texes[i].device);
			return -EINVAL;
		}
	}
	if ((int)img->texes[0].device >= ex->ndevs) {
		phos_errf(err, errlen, "texture objects of GPU %u; this executor owns %d", img->texes[0].device,
			  ex->ndevs);
		return -EINVAL;
	}
	exec_use_device(ex, (int)img->texes[0].device);
	for (uint32_t i = 0; i < img->ntexes; i++)
		top = img->texes[i].handle > top ? img->texes[i].handle : top;
	stand_ins = calloc(top, sizeof(*stand_ins));
	r = stand_ins ? ex->dev_ops->array_create(ex->dev, &tiny_desc, &tiny) : -ENOMEM;
	for (uint64_t h = 1; h <= top && r == 0; h++) {
		const struct phos_image_tex *it = NULL;
		struct exec_tex *t;
		uint64_t got = 0;

		for (uint32_t i = 0; i < img->ntexes && !it; i++)
			if (img->texes[i].handle == h)
				it = &img->texes[i];
		if (it && !it->dangling) {
			r = exec_tex_make(ex, &it->desc, &t);
			got = r == 0 ? t->handle : 0;
		} else {
			r = ex->dev_ops->tex_create(ex->dev, &stand_in, tiny, &got);
			if (r == 0 && it && (t = calloc(1, sizeof(*t)))) {
				/* a dangling object: its handle stays taken, by the stand-in */
				t->desc = it->desc;
				t->handle = got;
				t->live = t->dangling = true;
				if (got != h || handle_put(&ex->texes, (uint32_t)got, t) < 0) {
					exec_tex_free(ex, t);
					r = -EIO;
				}
			} else if (r == 0 && it) {
				ex->dev_ops->tex_destroy(ex->dev, got, false);
				r = -ENOMEM;
			} else if (r == 0) {
				stand_ins[nstand++] = got;
			}
		}
		if (r == 0 && got != h) {
			phos_errf(err, errlen, "texture object %llu came back as %llu on this device: the snapshot's "
				  "texture and surface handles cannot be reproduced", (unsigned long long)h,
				  (unsigned long long)got);
			r = -EIO;
		} else if (r < 0 && !*err) {
			phos_errf(err, errlen, "texture object %llu could not be made (cuda error %d)",
				  (unsigned long long)h, -r);
			r = -EIO;
		}
	}
	for (size_t i = 0; i < nstand; i++)
		ex->dev_ops->tex_destroy(ex->dev, stand_ins[i], false);
	if (tiny)
		ex->dev_ops->array_destroy(ex->dev, tiny);
	free(stand_ins);
	exec_use_device(ex, saved);
	if (r < 0 && !*err)
		phos_errf(err, errlen, "texture objects could not be made (error %d)", -r);
	return r;
}

static int load_blas(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	int r;

	for (uint32_t i = 0; i < img->nblas; i++) {
		const struct phos_image_blas *b = &img->blas[i];
		struct exec_blas *eb;
		void *stream;

		exec_use_device(ex, (int)b->device);   /* made on its device, as the function made it */
		r = exec_blas_make(ex, b->id);
		eb = handle_get(&ex->blas, b->id);
		if (r == 0 && (r = exec_stream(ex, b->stream, &stream)) == 0 &&
		    (r = ex->dev_ops->blas_set_stream(ex->dev, eb->dev_handle, stream)) == 0 &&
		    (r = ex->dev_ops->blas_set_math(ex->dev, eb->dev_handle, b->math_mode)) == 0 &&
		    (!b->workspace_size ||
		     (r = ex->dev_ops->blas_set_workspace(ex->dev, eb->dev_handle, b->workspace, b->workspace_size)) ==
			     0)) {
			eb->stream = b->stream;
			eb->math_mode = b->math_mode;
			eb->workspace = b->workspace;
			eb->workspace_size = b->workspace_size;
			continue;
		}
		phos_errf(err, errlen, "cuBLAS handle %u could not be made (cuda error %d)", b->id, -r);
		return -EIO;
	}
	exec_use_device(ex, ex->cur);
	return 0;
}

/* Fills the module variables from gpu.data (checked against their checksums),
 * once their modules are loaded: kernels reach them by symbol, so they are
 * in before the function runs. Synchronous copies on the legacy stream,
 * which the restore engine's non-blocking streams do not wait for. */
static int load_var_data(struct executor *ex, const char *dir, const struct phos_image *img, char *err,
			 size_t errlen)
{
	char path[4096];
	int fd = -1, r = 0;
	uint8_t *data = NULL;
	uint64_t cap = 0;

	for (uint32_t i = 0; i < img->nvars && r == 0; i++) {
		const struct phos_image_var *v = &img->vars[i];
		const struct exec_var *ev = handle_get(&ex->vars, v->id);

		if (!v->size)
			continue;
		if (!ev || (int)v->device >= ex->ndevs) {
			phos_errf(err, errlen, "variable %s is not registered on GPU %u", v->name, v->device);
			r = -EINVAL;
			break;
		}
		if (fd < 0) {
			snprintf(path, sizeof(path), "%s/gpu.data", dir);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0) {
				r = -errno;
				phos_errf(err, errlen, "opening %s: %s", path, strerror(errno));
				break;
			}
		}
		if (v->size > cap) {
			uint8_t *p = realloc(data, v->size);

			if (!p) {
				r = -ENOMEM;
				phos_errf(err, errlen, "out of memory for variable %s", v->name);
				break;
			}
			data = p;
			cap = v->size;
		}
		r = read_at(fd, data, v->size, v->offset);
		if (r < 0) {
			phos_errf(err, errlen, "reading variable %s from gpu.data: %s", v->name, strerror(-r));
		} else if (phos_image_hash(data, v->size) != v->hash) {
			r = -EBADMSG;
			phos_errf(err, errlen, "checksum mismatch in gpu.data at offset %llu (%llu bytes for variable %s)",
				  (unsigned long long)v->offset, (unsigned long long)v->size, v->name);
		} else {
			r = ex->dev_ops->memcpy_h2d(ex->devs[v->device], v->device ? ev->peer_addr[v->device] : ev->addr,
						    data, v->size, NULL);
			if (r < 0)
				phos_errf(err, errlen, "variable %s could not be filled (cuda error %d)", v->name, -r);
		}
	}
	free(data);
	if (fd >= 0)
		close(fd);
	return r;
}

static void *warm_main(void *arg)
{
	struct executor *ex = arg;

	return (void *)(intptr_t)ex->dev_ops->warm(ex->dev);
}

/* The background order: the snapshot's prefetch (first-touch) order, then the
 * other buffers by address; cuBLAS workspaces go first of all, as no
 * read/write set names them (cuBLAS reaches its workspace by handle).
 * Returns how many of the items are such eager ones. Variables are not
 * items: their modules load while the buffers stream in, and then
 * load_var_data copies them. */
static struct loader_item buf_item(const struct executor *ex, const struct phos_image_buf *b)
{
	return (struct loader_item){ b->addr, b->size, b->offset, b->hash, b->id, exec_device_at(ex, b->addr) };
}

static size_t plan_items(struct executor *ex, const struct phos_image *img, struct loader_item *items, size_t *ret_n)
{
	size_t n = 0, eager;
	bool *taken = calloc(img->nbufs ? img->nbufs : 1, sizeof(*taken));

	for (uint32_t i = 0; i < img->nbufs; i++) {
		const struct phos_image_buf *b = &img->bufs[i];
		if (phos_image_buf_holds_workspace(img, b) && taken) {
			taken[i] = true;
			items[n++] = buf_item(ex, b);
		}
	}
	eager = n;
	for (uint32_t p = 0; p < img->nprefetch && taken; p++) {
		for (uint32_t i = 0; i < img->nbufs; i++) {
			const struct phos_image_buf *b = &img->bufs[i];

			if (b->id == img->prefetch[p] && !taken[i] && !exec_share_is_shared(ex, b->addr, b->size)) {
				taken[i] = true;
				items[n++] = buf_item(ex, b);
			}
		}
	}
	for (uint32_t i = 0; i < img->nbufs; i++) {   /* bufs are sorted by address */
		const struct phos_image_buf *b = &img->bufs[i];

		if ((!taken || !taken[i]) && !exec_share_is_shared(ex, b->addr, b->size))
			items[n++] = buf_item(ex, b);
	}
	free(taken);
	*ret_n = n;
	return eager;
}

/* Whether most of what the n items read of the file (size bytes) is in the
 * page cache: mincore of one page at up to 256 points spread evenly over
 * the items' bytes. (mincore of the whole file took 145 ms at 16 GiB, most
 * of a restore that reads one small buffer of it.) */
static bool cached(int fd, uint64_t size, const struct loader_item *items, size_t n)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t total = 0, samples, in = 0, seen = 0, acc = 0;
	size_t i = 0;
	uint8_t *map;

	for (size_t k = 0; k < n; k++)
		total += items[k].len;
	if (!size || !total)
		return true;
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return true;
	samples = total / page < 256 ? total / page + 1 : 256;
	for (uint64_t s = 0; s < samples; s++) {
		uint64_t pos = total / samples * s, off;
		unsigned char v;

		while (i < n && pos >= acc + items[i].len)
			acc += items[i++].len;
		if (i == n)
			break;
		off = (items[i].off + (pos - acc)) / page * page;
		if (off < size && mincore(map + off, page, &v) == 0) {
			in += v & 1;
			seen++;
		}
	}
	munmap(map, size);
	return seen == 0 || in * 2 >= seen;
}

/* Buffer b at its address, not yet filled; *next_id past its id. */
static int place_buffer(struct executor *ex, const struct phos_image_buf *b, uint64_t *next_id, char *err,
			size_t errlen)
{
	int r = phos_fault("buffer_place") ? -ENOMEM : phos_bufmap_alloc_at(ex->bufs, b->addr, b->size, b->id);

	if (r < 0) {
		phos_errf(err, errlen, "buffer %#llx+%llu cannot be placed (%s)", (unsigned long long)b->addr,
			  (unsigned long long)b->size, strerror(-r));
		return r;
	}
	if (b->id >= *next_id)
		*next_id = b->id + 1;
	return 0;
}

/* A checkpoint's pools and reserved ranges, which no restore at
 * phos_fn_serve makes again (a snapshot's are the function's runtime's to
 * make: phos_pool_resend, the VMM restore hook); the buffers mapped inside a
 * reservation are placed already, wholly inside it. */
static int place_checkpoint_ranges(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	int r;

	if (!img->checkpoint.present)
		return 0;
	if ((r = exec_pool_from_image(ex, img, err, errlen)) < 0)
		return r;
	for (uint32_t i = 0; i < img->nresvs; i++) {
		r = phos_bufmap_reserve_at(ex->bufs, img->resvs[i].addr, img->resvs[i].size);
		if (r < 0) {
			phos_errf(err, errlen, "the reserved range %#llx+%llu cannot be reserved again (%s)",
				  (unsigned long long)img->resvs[i].addr, (unsigned long long)img->resvs[i].size,
				  strerror(-r));
			return r;
		}
	}
	return 0;
}

/* Every buffer of img at its address (and a checkpoint's pools and reserved
 * ranges), not yet filled. */
static int place_buffers(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	uint64_t next_id = 1;
	int r;

	for (uint32_t i = 0; i < img->nbufs; i++) {
		if ((r = place_buffer(ex, &img->bufs[i], &next_id, err, errlen)) < 0)
			return r;
	}
	phos_bufmap_set_next_id(ex->bufs, next_id);
	return place_checkpoint_ranges(ex, img, err, errlen);
}

/* place_buffers while the engine already streams: the items' buffers in
 * the engine's order, each released to it once mapped (loader_placed), then
 * any other buffer. No checkpoint and no shared buffer here (the plan came
 * before the placement; exec_image_load). */
static int place_streaming(struct executor *ex, const struct phos_image *img, const struct loader_item *items,
			   size_t n, char *err, size_t errlen)
{
	bool *done = calloc(img->nbufs ? img->nbufs : 1, sizeof(*done));
	uint64_t next_id = 1;
	int r = 0;

	if (!done) {
		phos_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t k = 0; k < n && r == 0; k++) {
		uint32_t i = phos_image_buf_at(img, items[k].dev);

		if (i < img->nbufs && !done[i]) {
			r = place_buffer(ex, &img->bufs[i], &next_id, err, errlen);
			done[i] = true;
		}
		if (r == 0)
			loader_placed(ex->loader, k + 1);
	}
	for (uint32_t i = 0; i < img->nbufs && r == 0; i++) {
		if (!done[i])
			r = place_buffer(ex, &img->bufs[i], &next_id, err, errlen);
	}
	free(done);
	if (r == 0)
		phos_bufmap_set_next_id(ex->bufs, next_id);
	return r;
}

/* dir's gpu.data as the restore engine's source for the n items: hot
 * (straight from the pinned page cache), or cold and what the items read not
 * cached (O_DIRECT, so that a cold image does not also pass through the page
 * cache), or buffered. */
static int open_source(struct executor *ex, const char *dir, const struct phos_image *img,
		       const struct loader_item *items, size_t n, struct loader_source *src, char *err, size_t errlen)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/gpu.data", dir);
	src->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (src->fd < 0) {
		int r = -errno;

		phos_errf(err, errlen, "opening %s: %s", path, strerror(errno));
		return r;
	}
	src->map = exec_hot_find(ex, src->fd, img->data_bytes, &src->zeros, &src->nzeros);
	if (!src->map && !cached(src->fd, img->data_bytes, items, n)) {
		int dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);

		if (dfd >= 0) {
			close(src->fd);
			src->fd = dfd;
			src->direct = true;
		}
	}
	return 0;
}

/* Where a restore's time went, in the log (and the trace's timeline): what
 * runs before the first byte moves delays an on-demand restore's first call. */
enum phase { PH_PLACEMENT, PH_ARRAYS, PH_PLAN, PH_MODULES, PH_VARS, PH_DATA, PH_WARM, PH_BLAS, PHASES };

/* The time since *t to phase p; *t now. */
static void lap(double *t, double dur[PHASES], enum phase p)
{
	double now = phos_now();

	dur[p] += now - *t;
	*t = now;
}

static void phase_log(struct executor *ex, double t0, const double dur[PHASES])
{
	/* (placement, modules and vars go on while the data streams in:
	 * "data" is what is left of it after them) */
	static const char *const names[PHASES] = { "placement", "arrays", "plan", "modules", "vars", "data", "warm",
						   "blas" };
	char line[256];
	size_t at = (size_t)snprintf(line, sizeof(line), "manifest %.1f, ", ex->image_read_s * 1e3);

	for (int i = 0; i < PHASES && at < sizeof(line); i++)
		at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s %.1f", i ? ", " : "", names[i],
				       dur[i] * 1e3);
	phos_info("restore phases (ms): %s", line);
	if (ex->trace)
		fprintf(ex->trace, "{\"op\":\"restore_phases\",\"t_ms\":%.3f,\"phases\":\"%s\"}\n", t0 * 1e3,
			line);
}

/* Whether img can be restored here: its arena and GPU count this
 * executor's, and room on the GPU for what it does not map shared (the
 * SHAREs that are its buffers are marked then). 0, or the error in err. */
static int load_check(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	uint64_t free_b = 0, total_b = 0, shared = 0, need;

	if (img->arena_base != ex->arena_base || img->arena_size != ex->arena_size) {
		phos_errf(err, errlen, "the snapshot's arena %#llx+%#llx differs from this executor's",
		     (unsigned long long)img->arena_base, (unsigned long long)img->arena_size);
		return -EINVAL;
	}
	if (img->devices != (uint32_t)ex->ndevs) {
		phos_errf(err, errlen, "the snapshot was taken over %u GPU%s; this executor owns %d (--gpus)",
			  img->devices, img->devices == 1 ? "" : "s", ex->ndevs);
		return -EINVAL;
	}
	exec_use_device(ex, 0);
	/* buffers mapped from the snapshot's other instances take no memory of ours */
	if (ex->share_mode == EXEC_SHARE_USE)
		shared = exec_share_match(ex, img);
	need = img->gpu_bytes > shared ? img->gpu_bytes - shared : 0;
	if (ex->dev_ops->mem_info(ex->dev, &free_b, &total_b) == 0 && free_b < need) {
		phos_errf(err, errlen, "the GPU has %llu MiB free, the snapshot needs %llu MiB",
		     (unsigned long long)(free_b >> 20), (unsigned long long)(need >> 20));
		exec_share_pending_clear(ex);
		return -ENOSPC;
	}
	return 0;
}

/* The cuBLAS warm-up thread's end: 0, or its error in err. */
static int warm_join(pthread_t thread, char *err, size_t errlen)
{
	void *res;

	pthread_join(thread, &res);
	if ((intptr_t)res < 0) {
		phos_errf(err, errlen, "warming up cuBLAS failed (cuda error %d)", (int)-(intptr_t)res);
		return (int)(intptr_t)res;
	}
	return 0;
}

/* Plans the items, opens the source and starts the engine on them. */
static int start_engine(struct executor *ex, const char *dir, const struct phos_image *img, bool unplaced,
			struct loader_source *src, struct loader_item *items, size_t *n, size_t *eager, char *err,
			size_t errlen)
{
	int r;

	*eager = plan_items(ex, img, items, n);
	r = open_source(ex, dir, img, items, *n, src, err, errlen);
	if (r < 0)
		return r;
	phos_info("restoring %s: %zu items, %s source%s%s", dir, *n, src->map ? "hot (pinned page cache)" : "cold",
		  src->direct ? " (O_DIRECT)" : "", unplaced ? ", placed while it streams" : "");
	src->unplaced = unplaced;
	return loader_start(ex, items, *n, src, &ex->loader, err, errlen);
}

int exec_image_load(struct executor *ex, const char *dir, const struct phos_image *img, bool on_demand,
		    char *err, size_t errlen)
{
	struct loader_item *items = NULL;
	struct loader_source src = { .fd = -1 };
	size_t n = 0, eager = 0;
	pthread_t warm_thread;
	bool warming = false, streaming;
	double t0, t, t_data, dur[PHASES] = { 0 };
	int r = load_check(ex, img, err, errlen);

	if (r < 0)
		return r;
	if (ex->share_mode == EXEC_SHARE_FILL)
		on_demand = false;   /* every buffer in before it is shared (exec_share_publish) */
	src.background = on_demand;
	/* The buffers are mapped while the engine streams into those mapped
	 * already (what comes before the first byte moves delays the whole
	 * restore; mapping 16 GiB took 19-50 ms on an H100), unless the plan
	 * depends on the placement: buffers mapped from the snapshot's other
	 * instances, which the engine leaves out, or a checkpoint's ranges. */
	streaming = !img->checkpoint.present && ex->nshare_pending == 0 && ex->nshared == 0;
	t0 = t = phos_now();
	/* cuBLAS warms up (lazy module loading, ~0.2 s on H100) beside the load. */
	warming = pthread_create(&warm_thread, NULL, warm_main, ex) == 0;
	if (!warming && (r = ex->dev_ops->warm(ex->dev)) < 0) {
		phos_errf(err, errlen, "warming up cuBLAS failed (cuda error %d)", -r);
		goto fail;
	}
	items = calloc(img->nbufs + 1, sizeof(*items));
	if (!items) {
		r = -ENOMEM;
		phos_errf(err, errlen, "out of memory");
		goto fail;
	}
	if (streaming) {
		r = start_engine(ex, dir, img, true, &src, items, &n, &eager, err, errlen);
		t_data = t;
		lap(&t, dur, PH_PLAN);
		if (r == 0)
			r = place_streaming(ex, img, items, n, err, errlen);
		lap(&t, dur, PH_PLACEMENT);
	} else {
		r = place_buffers(ex, img, err, errlen);
		exec_share_pending_clear(ex);   /* (those mapped are closed; the rest unused) */
		lap(&t, dur, PH_PLACEMENT);
		t_data = t;
		if (r == 0)
			r = start_engine(ex, dir, img, false, &src, items, &n, &eager, err, errlen);
		lap(&t, dur, PH_PLAN);
	}
	if (r < 0)
		goto fail;
	/* arrays and the objects on them and on buffers: before the function runs */
	r = load_array_data(ex, dir, img, err, errlen);
	if (r == 0)
		r = load_texes(ex, img, err, errlen);
	if (r < 0)
		goto fail;
	lap(&t, dur, PH_ARRAYS);
	/* the modules load while the data streams in */
	r = load_objects(ex, dir, img, err, errlen);
	if (r < 0)
		goto fail;
	/* kernels that validation caught outside their sets stay opaque */
	ex->restore_dir = dir;
	exec_validate_load_opaque(ex, dir);
	lap(&t, dur, PH_MODULES);
	r = load_var_data(ex, dir, img, err, errlen);
	if (r < 0)
		goto fail;
	lap(&t, dur, PH_VARS);
	if (!on_demand) {
		r = loader_wait(ex->loader, err, errlen);
	} else {
		for (size_t i = 0; i < eager && r == 0; i++)
			r = loader_settle(ex->loader, items[i].dev, items[i].len);
	}
	if (r < 0)
		goto fail;
	lap(&t, dur, PH_DATA);
	ex->load_data_s = t - t_data;
	free(items);
	items = NULL;
	if (warming) {
		warming = false;
		if ((r = warm_join(warm_thread, err, errlen)) < 0)
			goto fail;
	}
	lap(&t, dur, PH_WARM);
	r = load_blas(ex, img, err, errlen);
	if (r < 0)
		goto fail;
	lap(&t, dur, PH_BLAS);
	phase_log(ex, t0, dur);
	if (!on_demand) {
		loader_free(ex->loader);
		ex->loader = NULL;
	}
	return 0;

fail:
	free(items);
	if (warming)
		pthread_join(warm_thread, NULL);
	return r;
}

/* --- the parsed manifests of a pooled executor (executor.h) --- */

/* Frees entry i and closes the gap (the order, oldest first, stays). */
static void image_ent_drop(struct executor *ex, unsigned i)
{
	struct exec_image_ent *e = &ex->imgcache[i];

	free(e->dir);
	phos_image_free(e->img);
	memmove(e, e + 1, (--ex->nimgcache - i) * sizeof(*e));
	memset(&ex->imgcache[ex->nimgcache], 0, sizeof(*e));
}

int exec_image_cached(struct executor *ex, const char *dir, const struct phos_image **ret_img, char *err,
		      size_t errlen)
{
	struct phos_image *img = NULL;
	struct exec_image_ent *e;
	char path[4096];
	struct stat st;
	bool known;
	int r;

	/* The key is the manifest as it was before the read: one replaced
	 * meanwhile is another file, read again next time. */
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	known = stat(path, &st) == 0;
	if (known) {
		for (unsigned i = 0; i < ex->nimgcache; i++) {
			e = &ex->imgcache[i];
			if (strcmp(e->dir, dir) == 0 && e->st_dev == st.st_dev && e->st_ino == st.st_ino &&
			    e->st_size == st.st_size && e->st_mtim.tv_sec == st.st_mtim.tv_sec &&
			    e->st_mtim.tv_nsec == st.st_mtim.tv_nsec) {
				*ret_img = e->img;
				return 0;
			}
		}
	}
	r = phos_image_read(dir, &img, err, errlen);
	if (r < 0)
		return r;
	/* the same dir read again: its older image goes (a new manifest) */
	for (unsigned i = 0; i < ex->nimgcache; i++) {
		if (strcmp(ex->imgcache[i].dir, dir) != 0)
			continue;
		image_ent_drop(ex, i);
		break;
	}
	if (ex->nimgcache == EXEC_IMAGE_CACHE)
		image_ent_drop(ex, 0);
	e = &ex->imgcache[ex->nimgcache];
	e->dir = strdup(dir);
	if (!e->dir || !known) {   /* (not kept: read again next time) */
		free(e->dir);
		e->dir = NULL;
		phos_image_free(ex->img_uncached);
		ex->img_uncached = img;
		*ret_img = img;
		return 0;
	}
	e->st_dev = st.st_dev;
	e->st_ino = st.st_ino;
	e->st_size = st.st_size;
	e->st_mtim = st.st_mtim;
	e->img = img;
	ex->nimgcache++;
	*ret_img = img;
	return 0;
}

void exec_image_cache_clear(struct executor *ex)
{
	while (ex->nimgcache)
		image_ent_drop(ex, ex->nimgcache - 1);
	phos_image_free(ex->img_uncached);
	ex->img_uncached = NULL;
}
