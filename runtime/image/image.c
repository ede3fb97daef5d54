/* SPDX-License-Identifier: MIT */
/*
 * The snapshot image in memory, its checksums, and writing manifest.json
 * (see image.h). Reading lives in image_read.c, the rules both sides enforce
 * in image_check.c, the atomic directory commit in image_dir.c.
 *
 * The arrays of an image grow geometrically; their capacities are kept in a
 * private wrapper around struct phos_image, so callers see only the counts.
 */
#include "fdio.h"
#include "image.h"
#include "image_internal.h"
#include "log.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

struct image_priv {
	struct phos_image img;
	uint32_t cap_bufs, cap_modules, cap_funcs, cap_vars, cap_streams, cap_events, cap_blas;
};

#define IMAGE_PRIV(p) ((struct image_priv *)((char *)(p) - offsetof(struct image_priv, img)))

struct phos_image *phos_image_new(void)
{
	struct image_priv *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->img.major = PHOS_IMAGE_MAJOR;
	p->img.minor = PHOS_IMAGE_MINOR;
	p->img.devices = 1;
	return &p->img;
}

void phos_image_free(struct phos_image *img)
{
	if (!img)
		return;
	for (uint32_t i = 0; img->funcs && i < img->nfuncs; i++)
		free(img->funcs[i].name);
	for (uint32_t i = 0; img->vars && i < img->nvars; i++)
		free(img->vars[i].name);
	free(img->bufs);
	free(img->modules);
	free(img->funcs);
	free(img->vars);
	free(img->streams);
	free(img->events);
	free(img->blas);
	free(img->prefetch);
	free(img->regions);
	free(img->arrays);
	free(img->texes);
	free(img->pools);
	free(img->pool_blocks);
	free(img->limits);
	free(img->stream_attrs);
	free(img->resvs);
	free(img->cpu_files);
	free(IMAGE_PRIV(img));
}

/* Makes room for element n of *arr (elem bytes each); -E2BIG at max elements. */
static int image_grow(void **arr, uint32_t n, uint32_t *cap, size_t elem, uint32_t max)
{
	uint32_t ncap;
	void *p;

	if (n >= max)
		return -E2BIG;
	if (*arr && n < *cap)
		return 0;
	ncap = n < 8 ? 16 : (n > max / 2 ? max : n * 2);
	p = realloc(*arr, (size_t)ncap * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

#define IMAGE_APPEND(img, arr, n, capfield, max, val)                                         \
	do {                                                                                  \
		int r_ = image_grow((void **)&(img)->arr, (img)->n, &IMAGE_PRIV(img)->capfield, \
				    sizeof(*(img)->arr), (max));                              \
		if (r_ < 0)                                                                   \
			return r_;                                                            \
		(img)->arr[(img)->n++] = (val);                                               \
	} while (0)

int phos_image_add_buf(struct phos_image *img, const struct phos_image_buf *b)
{
	if (!img || !b)
		return -EINVAL;
	IMAGE_APPEND(img, bufs, nbufs, cap_bufs, PHOS_IMAGE_MAX_BUFS, *b);
	return 0;
}

int phos_image_add_module(struct phos_image *img, const struct phos_image_module *m)
{
	if (!img || !m)
		return -EINVAL;
	IMAGE_APPEND(img, modules, nmodules, cap_modules, PHOS_IMAGE_MAX_OBJECTS, *m);
	img->modules[img->nmodules - 1].hash[32] = '\0';
	return 0;
}

/* Copies a name of at most PHOS_IMAGE_MAX_NAME bytes. */
static int image_name_dup(const char *name, char **ret_copy)
{
	size_t len;

	if (!name)
		return -EINVAL;
	len = strnlen(name, PHOS_IMAGE_MAX_NAME + 1);
	if (len > PHOS_IMAGE_MAX_NAME)
		return -E2BIG;
	*ret_copy = strndup(name, len);
	return *ret_copy ? 0 : -ENOMEM;
}

int phos_image_add_func(struct phos_image *img, uint32_t id, uint32_t module, const char *name)
{
	struct phos_image_func f = { .id = id, .module = module };
	int r;

	if (!img)
		return -EINVAL;
	r = image_name_dup(name, &f.name);
	if (r < 0)
		return r;
	r = image_grow((void **)&img->funcs, img->nfuncs, &IMAGE_PRIV(img)->cap_funcs, sizeof(f),
		       PHOS_IMAGE_MAX_OBJECTS);
	if (r < 0) {
		free(f.name);
		return r;
	}
	img->funcs[img->nfuncs++] = f;
	return 0;
}

int phos_image_add_var(struct phos_image *img, const struct phos_image_var *v)
{
	struct phos_image_var copy;
	int r;

	if (!img || !v)
		return -EINVAL;
	copy = *v;
	r = image_name_dup(v->name, &copy.name);
	if (r < 0)
		return r;
	r = image_grow((void **)&img->vars, img->nvars, &IMAGE_PRIV(img)->cap_vars, sizeof(copy),
		       PHOS_IMAGE_MAX_OBJECTS);
	if (r < 0) {
		free(copy.name);
		return r;
	}
	img->vars[img->nvars++] = copy;
	return 0;
}

int phos_image_add_stream(struct phos_image *img, const struct phos_image_stream *s)
{
	if (!img || !s)
		return -EINVAL;
	IMAGE_APPEND(img, streams, nstreams, cap_streams, PHOS_IMAGE_MAX_OBJECTS, *s);
	return 0;
}

int phos_image_add_event(struct phos_image *img, const struct phos_image_event *e)
{
	if (!img || !e)
		return -EINVAL;
	IMAGE_APPEND(img, events, nevents, cap_events, PHOS_IMAGE_MAX_OBJECTS, *e);
	return 0;
}

int phos_image_add_blas(struct phos_image *img, const struct phos_image_blas *b)
{
	if (!img || !b)
		return -EINVAL;
	IMAGE_APPEND(img, blas, nblas, cap_blas, PHOS_IMAGE_MAX_OBJECTS, *b);
	return 0;
}

/* Appends one element to a rarely used list (no capacity kept). */
#define IMAGE_PUSH(arr, n, v)                                                \
	do {                                                                 \
		__typeof__(arr) grown_;                                      \
		if ((n) >= PHOS_IMAGE_MAX_OBJECTS)                           \
			return -E2BIG;                                       \
		grown_ = realloc((arr), ((size_t)(n) + 1) * sizeof(*(arr))); \
		if (!grown_)                                                 \
			return -ENOMEM;                                      \
		grown_[(n)++] = (v);                                         \
		(arr) = grown_;                                              \
	} while (0)

int phos_image_add_region(struct phos_image *img, const struct phos_image_region *reg)
{
	if (!img || !reg)
		return -EINVAL;
	IMAGE_PUSH(img->regions, img->nregions, *reg);
	return 0;
}

int phos_image_add_array(struct phos_image *img, const struct phos_image_array *a)
{
	if (!img || !a)
		return -EINVAL;
	IMAGE_PUSH(img->arrays, img->narrays, *a);
	return 0;
}

int phos_image_add_tex(struct phos_image *img, const struct phos_image_tex *t)
{
	if (!img || !t)
		return -EINVAL;
	IMAGE_PUSH(img->texes, img->ntexes, *t);
	return 0;
}

int phos_image_add_pool(struct phos_image *img, const struct phos_image_pool *p)
{
	if (!img || !p)
		return -EINVAL;
	IMAGE_PUSH(img->pools, img->npools, *p);
	return 0;
}

int phos_image_add_pool_block(struct phos_image *img, const struct phos_image_pool_block *b)
{
	if (!img || !b)
		return -EINVAL;
	IMAGE_PUSH(img->pool_blocks, img->npool_blocks, *b);
	return 0;
}

int phos_image_add_limit(struct phos_image *img, const struct phos_image_limit *l)
{
	if (!img || !l)
		return -EINVAL;
	if (img->nlimits >= PHOS_IMAGE_MAX_CONTEXT)
		return -E2BIG;
	IMAGE_PUSH(img->limits, img->nlimits, *l);
	return 0;
}

int phos_image_add_stream_attr(struct phos_image *img, const struct phos_image_stream_attr *a)
{
	if (!img || !a)
		return -EINVAL;
	if (img->nstream_attrs >= PHOS_IMAGE_MAX_CONTEXT)
		return -E2BIG;
	IMAGE_PUSH(img->stream_attrs, img->nstream_attrs, *a);
	return 0;
}

int phos_image_add_resv(struct phos_image *img, const struct phos_image_resv *v)
{
	if (!img || !v)
		return -EINVAL;
	IMAGE_PUSH(img->resvs, img->nresvs, *v);
	return 0;
}

uint32_t phos_image_nitems(const struct phos_image *img)
{
	return img->nbufs + img->nvars + img->narrays;
}

void phos_image_item(const struct phos_image *img, uint32_t i, uint64_t *ret_off, uint64_t *ret_len,
		     uint64_t *ret_hash)
{
	if (i < img->nbufs) {
		*ret_off = img->bufs[i].offset;
		*ret_len = img->bufs[i].size;
		*ret_hash = img->bufs[i].hash;
	} else if ((i -= img->nbufs) < img->nvars) {
		*ret_off = img->vars[i].offset;
		*ret_len = img->vars[i].size;
		*ret_hash = img->vars[i].hash;
	} else {
		i -= img->nvars;
		*ret_off = img->arrays[i].offset;
		*ret_len = img->arrays[i].size;
		*ret_hash = img->arrays[i].hash;
	}
}

/* ---- checksums ---- */

uint64_t phos_image_chunk_hash(const void *data, size_t len)
{
	return XXH3_64bits(data, len);
}

/* Streams chunk hashes, little-endian, into one XXH3-64 state. */
struct image_combiner {
	XXH3_state_t state;
	uint64_t batch[64];
	unsigned n;
};

static void combiner_init(struct image_combiner *c)
{
	XXH3_INITSTATE(&c->state);
	XXH3_64bits_reset(&c->state);
	c->n = 0;
}

static void combiner_add(struct image_combiner *c, uint64_t h)
{
	c->batch[c->n++] = htole64(h);
	if (c->n == sizeof(c->batch) / sizeof(c->batch[0])) {
		XXH3_64bits_update(&c->state, c->batch, sizeof(c->batch));
		c->n = 0;
	}
}

static uint64_t combiner_digest(struct image_combiner *c)
{
	if (c->n)
		XXH3_64bits_update(&c->state, c->batch, c->n * sizeof(c->batch[0]));
	return XXH3_64bits_digest(&c->state);
}

uint64_t phos_image_combine(const uint64_t *chunk_hashes, size_t n)
{
	struct image_combiner c;

	combiner_init(&c);
	for (size_t i = 0; i < n; i++)
		combiner_add(&c, chunk_hashes[i]);
	return combiner_digest(&c);
}

uint64_t phos_image_hash(const void *data, size_t len)
{
	const unsigned char *p = data;
	struct image_combiner c;

	combiner_init(&c);
	for (size_t off = 0; off < len; off += PHOS_IMAGE_HASH_CHUNK) {
		size_t n = len - off < PHOS_IMAGE_HASH_CHUNK ? len - off : PHOS_IMAGE_HASH_CHUNK;

		combiner_add(&c, phos_image_chunk_hash(p + off, n));
	}
	return combiner_digest(&c);
}

void phos_image_module_hash(const void *data, size_t len, char ret_hex[33])
{
	XXH128_hash_t h = XXH3_128bits(data, len);

	snprintf(ret_hex, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

/* ---- writing manifest.json ---- */

#define JI(v) ((json_int_t)(v))

static json_t *hash_str(uint64_t h)
{
	char hex[17];

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
	return json_string(hex);
}

/* Sets key of obj to val (stolen, may be NULL); false on failure. */
static bool set(json_t *obj, const char *key, json_t *val)
{
	if (!obj) {
		json_decref(val);
		return false;
	}
	return json_object_set_new(obj, key, val) == 0;
}

/* Appends item (stolen, may be NULL) to arr; false on failure. */
static bool push(json_t *arr, json_t *item)
{
	return json_array_append_new(arr, item) == 0;
}

/* Adds "hash" to o and appends o to arr (o stolen, may be NULL). */
static bool push_hashed(json_t *arr, json_t *o, uint64_t hash)
{
	if (!set(o, "hash", hash_str(hash))) {
		json_decref(o);
		return false;
	}
	return push(arr, o);
}

static json_t *ints_json(const int64_t *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* Adds "device" to o when it is not device 0 (1.4); false (o freed) when out
 * of memory or o is NULL. */
static bool with_device(json_t *o, uint32_t device)
{
	if (!o)
		return false;
	if (device && json_object_set_new(o, "device", json_integer(JI(device))) < 0) {
		json_decref(o);
		return false;
	}
	return true;
}

static json_t *arrays_to_json(const struct phos_image *img)
{
	json_t *a = json_array();
	bool ok = a != NULL;

	for (uint32_t i = 0; ok && i < img->narrays; i++) {
		const struct phos_image_array *x = &img->arrays[i];
		const struct phos_array_create *d = &x->desc;
		int64_t bits[4] = { d->bits[0], d->bits[1], d->bits[2], d->bits[3] };
		int64_t ext[3] = { JI(d->width), JI(d->height), JI(d->depth) };
		json_t *o = json_pack("{s:I,s:I,s:o,s:I,s:o,s:I,s:I}", "id", JI(d->id), "flags", JI(d->flags),
				      "format", ints_json(bits, 4), "kind", JI(d->kind), "extent",
				      ints_json(ext, 3), "offset", JI(x->offset), "size", JI(x->size));

		ok = with_device(o, x->device) && push_hashed(a, o, x->hash);
	}
	if (!ok) {
		json_decref(a);
		return NULL;
	}
	return a;
}

static json_t *texes_to_json(const struct phos_image *img)
{
	json_t *a = json_array();
	bool ok = a != NULL;

	for (uint32_t i = 0; ok && i < img->ntexes; i++) {
		const struct phos_image_tex *t = &img->texes[i];
		const struct phos_tex_create *d = &t->desc;
		int64_t bits[4] = { d->bits[0], d->bits[1], d->bits[2], d->bits[3] };
		int64_t addr[3] = { d->address[0], d->address[1], d->address[2] };
		json_t *border = json_pack("[f,f,f,f]", d->border[0], d->border[1], d->border[2], d->border[3]);
		json_t *o = json_pack("{s:I,s:b,s:b,s:I,s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:I}", "handle", JI(t->handle),
				      "dangling", (int)t->dangling, "surface", (int)d->surface, "res_type",
				      JI(d->res_type), "array", JI(d->array), "format", ints_json(bits, 4), "kind",
				      JI(d->kind), "ptr", JI(d->ptr), "size", JI(d->size), "width", JI(d->width),
				      "height", JI(d->height), "pitch", JI(d->pitch));

		if (!o) {
			json_decref(border);
			ok = false;
			break;
		}
		/* set() takes its value whatever happens: no early exit before the last */
		ok = set(o, "address", ints_json(addr, 3));
		ok = set(o, "border", border) && ok;
		ok = set(o, "sampling", json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f}", "filter", d->filter,
						  "read_mode", d->read_mode, "srgb", d->srgb, "normalized_coords",
						  d->normalized_coords, "max_anisotropy", d->max_anisotropy,
						  "mip_filter", d->mip_filter, "no_trilinear_opt", d->no_trilinear_opt,
						  "seamless_cubemap", d->seamless_cubemap, "mip_bias", d->mip_bias,
						  "min_mip_clamp", d->min_mip_clamp, "max_mip_clamp",
						  d->max_mip_clamp)) && ok;
		if (!ok) {
			json_decref(o);
			break;
		}
		ok = with_device(o, t->device) && push(a, o);
	}
	if (!ok) {
		json_decref(a);
		return NULL;
	}
	return a;
}

/* Builds the manifest; NULL when out of memory or a string is not UTF-8. The
 * version is always this build's: fields of a newer minor that img was read
 * from are not kept, so the result is not that minor. */
/* Into root (and cpu, its "cpu" object): the snapshot's objects, one array
 * each (buffers, modules, kernels, variables, streams, events, cuBLAS
 * handles, the prefetch order; cpu's fds). false when out of memory. */
static bool objects_to_json(const struct phos_image *img, json_t *root, json_t *cpu)
{
	static const char *const keys[9] = { "buffers", "modules", "kernels", "variables",
					     "streams", "events", "cublas", "prefetch", "fds" };
	json_t *a[9], *o;
	bool ok = true;

	for (unsigned i = 0; ok && i < 9; i++) {
		a[i] = json_array();
		ok = set(i == 8 ? cpu : root, keys[i], a[i]);
	}
	for (uint32_t i = 0; ok && i < img->nbufs; i++) {
		const struct phos_image_buf *b = &img->bufs[i];

		o = json_pack("{s:I,s:I,s:I,s:I}", "addr", JI(b->addr), "size", JI(b->size), "id",
			      JI(b->id), "offset", JI(b->offset));
		ok = push_hashed(a[0], o, b->hash);
	}
	for (uint32_t i = 0; ok && i < img->nmodules; i++) {
		const struct phos_image_module *m = &img->modules[i];

		ok = push(a[1], json_pack("{s:I,s:s,s:I}", "id", JI(m->id), "hash", m->hash, "size",
					  JI(m->size)));
	}
	for (uint32_t i = 0; ok && i < img->nfuncs; i++) {
		const struct phos_image_func *f = &img->funcs[i];

		ok = push(a[2], json_pack("{s:I,s:I,s:s}", "id", JI(f->id), "module", JI(f->module),
					  "name", f->name));
	}
	for (uint32_t i = 0; ok && i < img->nvars; i++) {
		const struct phos_image_var *v = &img->vars[i];

		o = json_pack("{s:I,s:I,s:s,s:I,s:I,s:I,s:b}", "id", JI(v->id), "module",
			      JI(v->module), "name", v->name, "addr", JI(v->addr), "size",
			      JI(v->size), "offset", JI(v->offset), "constant", (int)v->constant);
		ok = o && (!v->given || json_object_set_new(o, "given", json_true()) == 0) && with_device(o, v->device) &&
		     push_hashed(a[3], o, v->hash);
	}
	for (uint32_t i = 0; ok && i < img->nstreams; i++) {
		o = json_pack("{s:I,s:I,s:I}", "id", JI(img->streams[i].id), "flags", JI(img->streams[i].flags),
			      "priority", JI(img->streams[i].priority));
		ok = with_device(o, img->streams[i].device) && push(a[4], o);
	}
	for (uint32_t i = 0; ok && i < img->nevents; i++) {
		o = json_pack("{s:I,s:I}", "id", JI(img->events[i].id), "flags", JI(img->events[i].flags));
		ok = with_device(o, img->events[i].device) && push(a[5], o);
	}
	for (uint32_t i = 0; ok && i < img->nblas; i++) {
		const struct phos_image_blas *b = &img->blas[i];

		o = json_pack("{s:I,s:I,s:I,s:I,s:I}", "id", JI(b->id), "stream", JI(b->stream), "math_mode",
			      JI(b->math_mode), "workspace", JI(b->workspace), "workspace_size",
			      JI(b->workspace_size));
		ok = with_device(o, b->device) && push(a[6], o);
	}
	if (ok && img->devices > 1)
		ok = set(root, "devices", json_integer(JI(img->devices)));
	for (uint32_t i = 0; ok && i < img->nprefetch; i++)
		ok = push(a[7], json_integer(JI(img->prefetch[i])));
	for (uint32_t i = 0; ok && i < img->nfds; i++)
		ok = push(a[8], json_pack("{s:i,s:s}", "fd", img->fds[i].fd, "key", img->fds[i].key));
	return ok;
}

/* Into root and cpu: the CRIU image's files, the host regions, the arrays
 * and textures, each only when there are some. */
static bool host_state_to_json(const struct phos_image *img, json_t *root, json_t *cpu)
{
	json_t *o;
	bool ok = true;

	if (ok && img->ncpu_files) {
		json_t *files = json_array();

		ok = set(cpu, "files", files);
		for (uint32_t i = 0; ok && i < img->ncpu_files; i++) {
			const struct phos_image_file *f = &img->cpu_files[i];

			o = json_pack("{s:s,s:I}", "name", f->name, "size", JI(f->size));
			ok = push_hashed(files, o, f->hash);
		}
	}
	if (ok && img->nregions) {
		json_t *regs = json_array();

		ok = set(root, "host_regions", regs);
		for (uint32_t i = 0; ok && i < img->nregions; i++) {
			const struct phos_image_region *g = &img->regions[i];

			ok = push(regs, json_pack("{s:I,s:I,s:I,s:I}", "id", JI(g->id), "size", JI(g->size), "addr",
						  JI(g->addr), "exec_addr", JI(g->exec_addr)));
		}
	}
	if (ok && img->narrays)
		ok = set(root, "arrays", arrays_to_json(img));
	if (ok && img->ntexes)
		ok = set(root, "textures", texes_to_json(img));
	return ok;
}

/* Into root: the context's own state (pools and their blocks, limits, VMM
 * reservations, stream attributes) and a checkpoint's record, each only
 * when there is one. */
static bool context_to_json(const struct phos_image *img, json_t *root)
{
	bool ok = true;

	if (ok && img->npools) {
		json_t *pa = json_array(), *ba = json_array();

		ok = set(root, "pools", pa);
		ok = set(root, "pool_blocks", ba) && ok;
		for (uint32_t i = 0; ok && i < img->npools; i++) {
			const struct phos_image_pool *p = &img->pools[i];

			ok = push(pa, json_pack("{s:I,s:b,s:[b,b,b],s:I,s:I}", "id", JI(p->id), "gone", (int)p->gone,
						"reuse", (int)p->reuse[0], (int)p->reuse[1], (int)p->reuse[2],
						"max_size", JI(p->max_size), "threshold", JI(p->threshold)));
		}
		for (uint32_t i = 0; ok && i < img->npool_blocks; i++)
			ok = push(ba, json_pack("[I,I]", JI(img->pool_blocks[i].pool), JI(img->pool_blocks[i].addr)));
	}
	if (ok && img->nlimits) {
		json_t *la = json_array();

		ok = set(root, "limits", la);
		for (uint32_t i = 0; ok && i < img->nlimits; i++)
			ok = push(la, json_pack("[i,I,I]", (int)img->limits[i].limit, JI(img->limits[i].device),
						JI(img->limits[i].value)));
	}
	if (ok && img->nresvs) {
		json_t *ra = json_array();

		ok = set(root, "reservations", ra);
		for (uint32_t i = 0; ok && i < img->nresvs; i++)
			ok = push(ra, json_pack("[I,I]", JI(img->resvs[i].addr), JI(img->resvs[i].size)));
	}
	if (ok && img->nstream_attrs) {
		json_t *aa = json_array();

		ok = set(root, "stream_attrs", aa);
		for (uint32_t i = 0; ok && i < img->nstream_attrs; i++) {
			const struct phos_image_stream_attr *sa = &img->stream_attrs[i];
			char hex[2 * sizeof(sa->value) + 1];

			for (size_t k = 0; k < sizeof(sa->value); k++)
				snprintf(hex + 2 * k, 3, "%02x", sa->value[k]);
			ok = push(aa, json_pack("{s:I,s:i,s:s}", "stream", JI(sa->stream), "attr", (int)sa->attr, "value",
						hex));
		}
	}
	if (ok && img->checkpoint.present) {
		const struct phos_image_checkpoint *c = &img->checkpoint;

		ok = set(root, "checkpoint", json_pack("{s:s,s:i,s:I,s:f,s:f,s:I,s:I,s:I,s:I,s:f,s:f,s:I,s:f,s:b}", "mode",
						       c->mode, "channel_fd", c->channel_fd, "seq", JI(c->seq),
						       "stall_s", c->stall_s, "total_s", c->total_s, "early_copies",
						       JI(c->early), "rounds", JI(c->rounds), "precopy_bytes",
						       JI(c->precopy_bytes), "stop_bytes", JI(c->stop_bytes), "gpu_s",
						       c->gpu_s, "cpu_s", c->cpu_s, "reserve_copies",
						       JI(c->reserve_copies), "copy_s", c->copy_s, "host_copy",
						       c->host_copy));
	}
	return ok;
}

static json_t *image_to_json(const struct phos_image *img)
{
	json_t *root, *cpu;
	bool ok;

	root = json_pack("{s:s,s:{s:I,s:I},s:s,s:s,s:s,s:{s:I,s:I},s:I,s:I,s:I}", "magic",
			 PHOS_IMAGE_MAGIC, "version", "major", JI(PHOS_IMAGE_MAJOR), "minor",
			 JI(PHOS_IMAGE_MINOR), "function", img->function, "device", img->device,
			 "gpu_name", img->gpu_name, "arena", "base", JI(img->arena_base), "size",
			 JI(img->arena_size), "gpu_bytes", JI(img->gpu_bytes), "data_bytes",
			 JI(img->data_bytes), "created", JI(img->created));
	cpu = json_pack("{s:s}", "dir", img->criu_dir);
	if (!root || !cpu) {
		json_decref(root);
		json_decref(cpu);
		return NULL;
	}
	/* json_object_set_new steals the value even when it fails; once in root,
	 * everything is freed by one decref. */
	ok = set(root, "cpu", cpu) && objects_to_json(img, root, cpu) && host_state_to_json(img, root, cpu) &&
	     context_to_json(img, root);
	if (!ok) {
		json_decref(root);
		return NULL;
	}
	return root;
}

/* Writes text to dir/manifest.json through manifest.json.tmp, fsync, rename. */
static int manifest_store(const char *dir, const char *text, size_t len)
{
	static const char tmp_name[] = PHOS_IMAGE_MANIFEST ".tmp";
	int dfd, fd, r;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, tmp_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		r = -errno;
		goto out_dir;
	}
	r = phos_write_all(fd, text, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(dfd, tmp_name, dfd, PHOS_IMAGE_MANIFEST) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dfd, tmp_name, 0);
out_dir:
	close(dfd);
	return r;
}

int phos_image_write_manifest(const char *dir, const struct phos_image *img)
{
	struct phos_image sorted;
	char err[256];
	json_t *root;
	char *text;
	size_t len;
	int r;

	if (!dir || !img)
		return -EINVAL;
	/* The manifest lists buffers by address: validate and write a sorted copy. */
	sorted = *img;
	if (img->nbufs) {
		sorted.bufs = malloc((size_t)img->nbufs * sizeof(*img->bufs));
		if (!sorted.bufs)
			return -ENOMEM;
		memcpy(sorted.bufs, img->bufs, (size_t)img->nbufs * sizeof(*img->bufs));
		qsort(sorted.bufs, img->nbufs, sizeof(*img->bufs), phos_image_buf_cmp);
	}
	r = phos_image_validate(&sorted, err, sizeof(err));
	if (r < 0) {
		phos_err("not writing %s/%s: %s", dir, PHOS_IMAGE_MANIFEST, err);
		goto out;
	}
	root = image_to_json(&sorted);
	if (!root) {
		r = -ENOMEM; /* validated strings are short; assume memory (or bad UTF-8) */
		phos_err("%s/%s: could not encode (out of memory or a string not UTF-8)", dir,
			 PHOS_IMAGE_MANIFEST);
		goto out;
	}
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text) {
		r = -ENOMEM;
		goto out;
	}
	len = strlen(text);
	if (len > PHOS_IMAGE_MAX_MANIFEST)
		r = -E2BIG;
	else
		r = manifest_store(dir, text, len);
	free(text);
out:
	if (sorted.bufs != img->bufs)
		free(sorted.bufs);
	return r;
}
