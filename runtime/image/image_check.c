/* SPDX-License-Identifier: MIT */
/*
 * The rules every image obeys, checked on the struct (image_internal.h): the
 * reader checks what it parsed, the writer refuses to write what a reader
 * would refuse. Limits, ranges (every integer fits JSON's int64), buffers
 * sorted, disjoint and inside the arena, gpu.data ranges aligned, disjoint and
 * inside data_bytes, gpu_bytes the sum of the buffer sizes, ids unique, and
 * kernels, variables and prefetch entries referring to what exists.
 */
#include "image.h"
#include "image_internal.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX ((uint64_t)INT64_MAX)

int phos_image_buf_cmp(const void *a, const void *b)
{
	const struct phos_image_buf *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A range [offset, offset + size) of gpu.data and what it holds. */
struct data_extent {
	uint64_t offset, size, id;
	const char *kind;
};

static int extent_cmp(const void *a, const void *b)
{
	const struct data_extent *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool is_hex32(const char *s)
{
	for (int i = 0; i < 32; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[32] == '\0';
}

/* Checks a gpu.data range: aligned, inside data_bytes. */
static int check_extent(const struct phos_image *img, const char *kind, uint64_t id, uint64_t offset,
			uint64_t size, char *err, size_t errlen)
{
	if (size == 0 || size > JSON_MAX)
		return phos_errf_rc(err, errlen, -EINVAL, "%s %llu: size %llu out of range", kind,
			    (unsigned long long)id, (unsigned long long)size);
	if (offset % PHOS_IMAGE_ALIGN)
		return phos_errf_rc(err, errlen, -EINVAL, "%s %llu: offset %llu in gpu.data is not %u-aligned",
			    kind, (unsigned long long)id, (unsigned long long)offset, PHOS_IMAGE_ALIGN);
	if (offset > img->data_bytes || size > img->data_bytes - offset)
		return phos_errf_rc(err, errlen, -EINVAL,
			    "%s %llu: [%llu, +%llu) lies beyond gpu.data (data_bytes %llu)", kind,
			    (unsigned long long)id, (unsigned long long)offset,
			    (unsigned long long)size, (unsigned long long)img->data_bytes);
	return 0;
}

static int validate_bufs(const struct phos_image *img, uint64_t *ids, char *err, size_t errlen)
{
	uint64_t arena_end = img->arena_base + img->arena_size, sum = 0;
	int r;

	for (uint32_t i = 0; i < img->nbufs; i++) {
		const struct phos_image_buf *b = &img->bufs[i];

		r = check_extent(img, "buffer", b->id, b->offset, b->size, err, errlen);
		if (r < 0)
			return r;
		if (b->id > JSON_MAX || b->addr < img->arena_base || b->addr > arena_end ||
		    b->size > arena_end - b->addr)
			return phos_errf_rc(err, errlen, -EINVAL,
				    "buffer %llu: [0x%llx, +%llu) lies outside the arena [0x%llx, +%llu)",
				    (unsigned long long)b->id, (unsigned long long)b->addr,
				    (unsigned long long)b->size, (unsigned long long)img->arena_base,
				    (unsigned long long)img->arena_size);
		if (i && b->addr < img->bufs[i - 1].addr)
			return phos_errf_rc(err, errlen, -EINVAL, "buffers are not sorted by address");
		if (i && b->addr < img->bufs[i - 1].addr + img->bufs[i - 1].size)
			return phos_errf_rc(err, errlen, -EINVAL, "buffer %llu at 0x%llx overlaps buffer %llu",
				    (unsigned long long)b->id, (unsigned long long)b->addr,
				    (unsigned long long)img->bufs[i - 1].id);
		sum += b->size; /* no overflow: the buffers are disjoint inside the arena */
		ids[i] = b->id;
	}
	if (sum != img->gpu_bytes)
		return phos_errf_rc(err, errlen, -EINVAL, "gpu_bytes is %llu, the buffers hold %llu",
			    (unsigned long long)img->gpu_bytes, (unsigned long long)sum);
	qsort(ids, img->nbufs, sizeof(*ids), u64_cmp);
	for (uint32_t i = 1; i < img->nbufs; i++)
		if (ids[i] == ids[i - 1])
			return phos_errf_rc(err, errlen, -EINVAL, "buffer id %llu appears twice",
				    (unsigned long long)ids[i]);
	return 0;
}

/* Every prefetch entry names a buffer, once. */
static int validate_prefetch(const struct phos_image *img, const uint64_t *ids, char *err,
			     size_t errlen)
{
	uint8_t *seen = calloc(img->nbufs ? img->nbufs : 1, 1);
	int r = 0;

	if (!seen)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < img->nprefetch && r == 0; i++) {
		const uint64_t *p = bsearch(&img->prefetch[i], ids, img->nbufs, sizeof(*ids), u64_cmp);

		if (!p)
			r = phos_errf_rc(err, errlen, -EINVAL, "prefetch[%u]: no buffer %llu", i,
				 (unsigned long long)img->prefetch[i]);
		else if (seen[p - ids]++)
			r = phos_errf_rc(err, errlen, -EINVAL, "prefetch[%u]: buffer %llu listed twice", i,
				 (unsigned long long)img->prefetch[i]);
	}
	free(seen);
	return r;
}

static int validate_modules(const struct phos_image *img, uint64_t *mids, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < img->nmodules; i++) {
		const struct phos_image_module *m = &img->modules[i];

		if (!is_hex32(m->hash))
			return phos_errf_rc(err, errlen, -EINVAL, "module %u: hash is not 32 lowercase hex digits",
				    m->id);
		if (m->size == 0 || m->size > JSON_MAX)
			return phos_errf_rc(err, errlen, -EINVAL, "module %u: size %llu out of range", m->id,
				    (unsigned long long)m->size);
		mids[i] = m->id;
	}
	qsort(mids, img->nmodules, sizeof(*mids), u64_cmp);
	for (uint32_t i = 1; i < img->nmodules; i++)
		if (mids[i] == mids[i - 1])
			return phos_errf_rc(err, errlen, -EINVAL, "module id %llu appears twice",
				    (unsigned long long)mids[i]);
	return 0;
}

static bool module_known(const uint64_t *mids, uint32_t n, uint32_t id)
{
	uint64_t key = id;

	return bsearch(&key, mids, n, sizeof(*mids), u64_cmp) != NULL;
}

static int validate_code(const struct phos_image *img, const uint64_t *mids, char *err,
			 size_t errlen)
{
	int r;

	for (uint32_t i = 0; i < img->nfuncs; i++) {
		const struct phos_image_func *f = &img->funcs[i];

		if (!f->name || strnlen(f->name, PHOS_IMAGE_MAX_NAME + 1) > PHOS_IMAGE_MAX_NAME)
			return phos_errf_rc(err, errlen, -EINVAL, "kernel %u: no name or one too long", f->id);
		if (!module_known(mids, img->nmodules, f->module))
			return phos_errf_rc(err, errlen, -EINVAL, "kernel %u: no module %u", f->id, f->module);
	}
	for (uint32_t i = 0; i < img->nvars; i++) {
		const struct phos_image_var *v = &img->vars[i];

		if (!v->name || strnlen(v->name, PHOS_IMAGE_MAX_NAME + 1) > PHOS_IMAGE_MAX_NAME)
			return phos_errf_rc(err, errlen, -EINVAL, "variable %u: no name or one too long", v->id);
		if (!module_known(mids, img->nmodules, v->module))
			return phos_errf_rc(err, errlen, -EINVAL, "variable %u: no module %u", v->id, v->module);
		if (v->addr > JSON_MAX || v->size > JSON_MAX - v->addr)
			return phos_errf_rc(err, errlen, -EINVAL, "variable %u: address out of range", v->id);
		if (v->size == 0)
			continue; /* registered but never resolved: no contents */
		r = check_extent(img, "variable", v->id, v->offset, v->size, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

/* 1.3: arrays made as CUDA makes them, their contents in gpu.data; objects
 * on arrays that exist (unless dangling), each handle once. */
static int validate_arrays(const struct phos_image *img, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < img->narrays; i++) {
		const struct phos_image_array *a = &img->arrays[i];
		uint32_t channels, cbytes;
		uint64_t dims[3], bytes;
		int r;

		if (!a->desc.id || a->desc.id >= (1u << 20))
			return phos_errf_rc(err, errlen, -EINVAL, "array %u: bad id", a->desc.id);
		for (uint32_t k = 0; k < i; k++)
			if (img->arrays[k].desc.id == a->desc.id)
				return phos_errf_rc(err, errlen, -EINVAL, "array %u: listed twice", a->desc.id);
		if (phos_channel_format(a->desc.bits, a->desc.kind, &channels, &cbytes) < 0 ||
		    (a->desc.flags & ~0x0fu) || !phos_array_extent(&a->desc, channels * cbytes, dims, &bytes) ||
		    bytes != a->size)
			return phos_errf_rc(err, errlen, -EINVAL, "array %u: bad format, flags, extent or size", a->desc.id);
		r = check_extent(img, "array", a->desc.id, a->offset, a->size, err, errlen);
		if (r < 0)
			return r;
	}
	for (uint32_t i = 0; i < img->ntexes; i++) {
		const struct phos_image_tex *t = &img->texes[i];
		const struct phos_tex_create *d = &t->desc;
		uint32_t channels, cbytes;
		bool found = false;

		if (!t->handle || t->handle >= (1u << 20))
			return phos_errf_rc(err, errlen, -EINVAL, "texture %llu: bad handle", (unsigned long long)t->handle);
		for (uint32_t k = 0; k < i; k++)
			if (img->texes[k].handle == t->handle)
				return phos_errf_rc(err, errlen, -EINVAL, "texture %llu: listed twice",
					    (unsigned long long)t->handle);
		for (uint32_t k = 0; k < img->narrays; k++)   /* an array of its own GPU */
			found |= img->arrays[k].desc.id == d->array && img->arrays[k].device == t->device;
		if (d->res_type == PHOS_RES_ARRAY ? !t->dangling && !found
		    : d->surface || (d->res_type != PHOS_RES_LINEAR && d->res_type != PHOS_RES_PITCH2D) ||
		      phos_channel_format(d->bits, d->kind, &channels, &cbytes) < 0)
			return phos_errf_rc(err, errlen, -EINVAL, "texture %llu: bad resource", (unsigned long long)t->handle);
	}
	return 0;
}

/* Buffers, variables and arrays do not share bytes of gpu.data. */
static int validate_extents(const struct phos_image *img, char *err, size_t errlen)
{
	size_t n = (size_t)img->nbufs + img->nvars + img->narrays, k = 0;
	struct data_extent *e;
	int r = 0;

	if (n < 2)
		return 0;
	e = malloc(n * sizeof(*e));
	if (!e)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < img->nbufs; i++)
		e[k++] = (struct data_extent){ img->bufs[i].offset, img->bufs[i].size,
					       img->bufs[i].id, "buffer" };
	for (uint32_t i = 0; i < img->nvars; i++)
		if (img->vars[i].size)
			e[k++] = (struct data_extent){ img->vars[i].offset, img->vars[i].size,
						       img->vars[i].id, "variable" };
	for (uint32_t i = 0; i < img->narrays; i++)
		e[k++] = (struct data_extent){ img->arrays[i].offset, img->arrays[i].size, img->arrays[i].desc.id,
					       "array" };
	n = k;
	qsort(e, n, sizeof(*e), extent_cmp);
	for (size_t i = 1; i < n && r == 0; i++)
		if (e[i].offset < e[i - 1].offset + e[i - 1].size)
			r = phos_errf_rc(err, errlen, -EINVAL, "%s %llu overlaps %s %llu in gpu.data",
				 e[i].kind, (unsigned long long)e[i].id, e[i - 1].kind,
				 (unsigned long long)e[i - 1].id);
	free(e);
	return r;
}

static bool fits(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static int u64_cmp(const void *a, const void *b);

/* Pool ids are unique; each pool block is of a listed pool and a buffer's
 * start, once (img->bufs sorted by address). */
static int validate_pools(const struct phos_image *img, char *err, size_t errlen)
{
	uint64_t *addrs, *ids;
	int r = 0;

	if (!img->npool_blocks && !img->npools)
		return 0;
	addrs = malloc(((size_t)img->npool_blocks + 1) * sizeof(*addrs));
	ids = malloc(((size_t)img->npools + 1) * sizeof(*ids));
	if (!addrs || !ids) {
		free(addrs);
		free(ids);
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < img->npools; i++)
		ids[i] = img->pools[i].id;
	qsort(ids, img->npools, sizeof(*ids), u64_cmp);
	for (uint32_t i = 1; i < img->npools && r == 0; i++)
		if (ids[i] == ids[i - 1])
			r = phos_errf_rc(err, errlen, -EINVAL, "pools: pool %llu listed twice", (unsigned long long)ids[i]);
	for (uint32_t i = 0; i < img->npool_blocks && r == 0; i++) {
		struct phos_image_buf key = { .addr = img->pool_blocks[i].addr };
		uint64_t pool = img->pool_blocks[i].pool;

		if (!bsearch(&pool, ids, img->npools, sizeof(*ids), u64_cmp)) {
			r = phos_errf_rc(err, errlen, -EINVAL, "pool_blocks[%u]: pool %llu is not listed", i,
				 (unsigned long long)pool);
			break;
		}
		addrs[i] = key.addr;
		if (!img->nbufs || !bsearch(&key, img->bufs, img->nbufs, sizeof(key), phos_image_buf_cmp))
			r = phos_errf_rc(err, errlen, -EINVAL, "pool_blocks[%u]: %#llx is no buffer's start", i,
				 (unsigned long long)key.addr);
	}
	if (r == 0) {
		qsort(addrs, img->npool_blocks, sizeof(*addrs), u64_cmp);
		for (uint32_t i = 1; i < img->npool_blocks && r == 0; i++)
			if (addrs[i] == addrs[i - 1])
				r = phos_errf_rc(err, errlen, -EINVAL, "pool_blocks: %#llx listed twice",
					 (unsigned long long)addrs[i]);
	}
	free(addrs);
	free(ids);
	return r;
}

static int validate_misc(const struct phos_image *img, char *err, size_t errlen)
{
	if (!fits(img->function, sizeof(img->function)) || !fits(img->device, sizeof(img->device)) ||
	    !fits(img->gpu_name, sizeof(img->gpu_name)))
		return phos_errf_rc(err, errlen, -EINVAL, "function, device or gpu_name is not terminated");
	if (img->arena_base > JSON_MAX || img->arena_size > JSON_MAX - img->arena_base ||
	    img->gpu_bytes > JSON_MAX || img->data_bytes > JSON_MAX)
		return phos_errf_rc(err, errlen, -EINVAL, "arena, gpu_bytes or data_bytes out of range");
	if (img->nprefetch > PHOS_IMAGE_MAX_BUFS)
		return phos_errf_rc(err, errlen, -E2BIG, "prefetch: more than %u entries", PHOS_IMAGE_MAX_BUFS);
	if (!fits(img->criu_dir, sizeof(img->criu_dir)) || !img->criu_dir[0] ||
	    strchr(img->criu_dir, '/') || !strcmp(img->criu_dir, ".") || !strcmp(img->criu_dir, ".."))
		return phos_errf_rc(err, errlen, -EINVAL, "cpu.dir must name one directory inside the snapshot");
	if (img->nfds > sizeof(img->fds) / sizeof(img->fds[0]))
		return phos_errf_rc(err, errlen, -E2BIG, "cpu.fds: more than %zu entries",
			    sizeof(img->fds) / sizeof(img->fds[0]));
	for (uint32_t i = 0; i < img->nfds; i++)
		if (img->fds[i].fd < 0 || !fits(img->fds[i].key, sizeof(img->fds[i].key)) ||
		    !img->fds[i].key[0])
			return phos_errf_rc(err, errlen, -EINVAL, "cpu.fds[%u]: bad descriptor or key", i);
	for (uint32_t i = 0; i < img->nblas; i++)
		if (img->blas[i].workspace > JSON_MAX || img->blas[i].workspace_size > JSON_MAX)
			return phos_errf_rc(err, errlen, -EINVAL, "cublas %u: workspace out of range",
				    img->blas[i].id);
	return 0;
}

int phos_image_validate(const struct phos_image *img, char *err, size_t errlen)
{
	uint64_t *ids = NULL, *mids = NULL;
	int r;

	if (img->nbufs > PHOS_IMAGE_MAX_BUFS || img->nmodules > PHOS_IMAGE_MAX_OBJECTS ||
	    img->nfuncs > PHOS_IMAGE_MAX_OBJECTS || img->nvars > PHOS_IMAGE_MAX_OBJECTS ||
	    img->nstreams > PHOS_IMAGE_MAX_OBJECTS || img->nevents > PHOS_IMAGE_MAX_OBJECTS ||
	    img->nblas > PHOS_IMAGE_MAX_OBJECTS || img->narrays > PHOS_IMAGE_MAX_OBJECTS ||
	    img->ntexes > PHOS_IMAGE_MAX_OBJECTS || img->npools > PHOS_IMAGE_MAX_OBJECTS ||
	    img->npool_blocks > PHOS_IMAGE_MAX_BUFS || img->nlimits > PHOS_IMAGE_MAX_CONTEXT ||
	    img->nstream_attrs > PHOS_IMAGE_MAX_CONTEXT || img->nresvs > PHOS_IMAGE_MAX_OBJECTS)
		return phos_errf_rc(err, errlen, -E2BIG, "more entries than the limits allow");
	r = validate_misc(img, err, errlen);
	if (r < 0)
		return r;
	ids = malloc(((size_t)img->nbufs + 1) * sizeof(*ids));
	mids = malloc(((size_t)img->nmodules + 1) * sizeof(*mids));
	if (!ids || !mids) {
		r = phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	r = validate_bufs(img, ids, err, errlen);
	if (r == 0)
		r = validate_prefetch(img, ids, err, errlen);
	if (r == 0)
		r = validate_modules(img, mids, err, errlen);
	if (r == 0)
		r = validate_code(img, mids, err, errlen);
	if (r == 0)
		r = validate_arrays(img, err, errlen);
	if (r == 0)
		r = validate_extents(img, err, errlen);
	if (r == 0)
		r = validate_pools(img, err, errlen);
	/* a stream attribute names a stream of the image, or the default one */
	for (uint32_t i = 0; r == 0 && i < img->nstream_attrs; i++) {
		bool known = img->stream_attrs[i].stream == 0;

		for (uint32_t k = 0; k < img->nstreams && !known; k++)
			known = img->streams[k].id == img->stream_attrs[i].stream;
		if (!known || img->stream_attrs[i].attr < 0 || img->stream_attrs[i].attr >= 64)
			r = phos_errf_rc(err, errlen, -EINVAL, "stream_attrs[%u]: stream %u or attribute %d is not the image's", i,
				 img->stream_attrs[i].stream, img->stream_attrs[i].attr);
	}
	/* reservations: whole 2 MiB chunks inside the arena, in address order, disjoint */
	for (uint32_t i = 0; r == 0 && i < img->nresvs; i++) {
		const struct phos_image_resv *v = &img->resvs[i];
		const uint64_t chunk = 2ull << 20;

		if (v->addr % chunk || !v->size || v->size % chunk || v->addr < img->arena_base ||
		    v->size > img->arena_size || v->addr - img->arena_base > img->arena_size - v->size ||
		    (i && v->addr < img->resvs[i - 1].addr + img->resvs[i - 1].size))
			r = phos_errf_rc(err, errlen, -EINVAL, "reservations[%u]: %#llx+%llu is not whole chunks of the arena "
				 "after the one before", i, (unsigned long long)v->addr, (unsigned long long)v->size);
	}
	for (uint32_t i = 0; r == 0 && i < img->nlimits; i++)
		if (img->limits[i].limit < 0 || img->limits[i].limit >= 64 || img->limits[i].device >= img->devices)
			r = phos_errf_rc(err, errlen, -EINVAL, "limits[%u]: limit %d or device %u is not the image's", i,
				 img->limits[i].limit, img->limits[i].device);
out:
	free(ids);
	free(mids);
	return r;
}

