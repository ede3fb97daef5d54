/* SPDX-License-Identifier: MIT */
/*
 * Reading and validating a snapshot image (see image.h).
 *
 *   manifest.json ─(size limit)─▶ jansson ─▶ typed, ranged fields ─▶ struct phos_image
 *     ─▶ phos_image_validate (image_check.c: limits, overlaps, references)
 *     ─▶ file checks (gpu.data size, module files, CPU image directory)
 *
 * Errors: syntax, missing fields and wrong types give -EBADMSG; values out of
 * range or inconsistent -EINVAL; more entries than PHOS_IMAGE_MAX_* or a
 * manifest over PHOS_IMAGE_MAX_MANIFEST -E2BIG; a newer major
 * -EPROTONOSUPPORT; a missing file -ENOENT; a truncated gpu.data or a module
 * file of the wrong size -EBADMSG. Unknown fields are ignored (minor versions
 * may add some). Checksums of the contents are not verified here: that happens
 * chunk by chunk in the restore pipeline (docs/design.md, "Snapshot image").
 */
#include "image.h"
#include "fdio.h"
#include "image_internal.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parsing state: where the error goes, and the element being read ("buffers[3]"). */
struct rd {
	char *err;
	size_t errlen;
	char where[48];
};

#define RD_FAIL(r, rc, key, fmt, ...)                                                         \
	phos_errf_rc((r)->err, (r)->errlen, (rc), "manifest.json: %s%s%s: " fmt, (r)->where,         \
	     (r)->where[0] ? "." : "", (key), ##__VA_ARGS__)

static int rd_get(struct rd *r, json_t *obj, const char *key, json_t **ret)
{
	*ret = json_object_get(obj, key);
	return *ret ? 0 : RD_FAIL(r, -EBADMSG, key, "missing");
}

static int rd_int(struct rd *r, json_t *obj, const char *key, int64_t min, int64_t max,
		  int64_t *ret)
{
	json_t *v;
	int rc = rd_get(r, obj, key, &v);

	if (rc < 0)
		return rc;
	if (!json_is_integer(v))
		return RD_FAIL(r, -EBADMSG, key, "expected an integer");
	*ret = json_integer_value(v);
	if (*ret < min || *ret > max)
		return RD_FAIL(r, -EINVAL, key, "%lld out of range", (long long)*ret);
	return 0;
}

static int rd_u64(struct rd *r, json_t *obj, const char *key, uint64_t *ret)
{
	int64_t v;
	int rc = rd_int(r, obj, key, 0, INT64_MAX, &v);

	if (rc == 0)
		*ret = (uint64_t)v;
	return rc;
}

static int rd_u32(struct rd *r, json_t *obj, const char *key, uint32_t *ret)
{
	int64_t v;
	int rc = rd_int(r, obj, key, 0, UINT32_MAX, &v);

	if (rc == 0)
		*ret = (uint32_t)v;
	return rc;
}

static int rd_i32(struct rd *r, json_t *obj, const char *key, int32_t *ret)
{
	int64_t v;
	int rc = rd_int(r, obj, key, INT32_MIN, INT32_MAX, &v);

	if (rc == 0)
		*ret = (int32_t)v;
	return rc;
}

/* A string without NUL bytes of fewer than cap bytes. */
static int rd_str(struct rd *r, json_t *obj, const char *key, size_t cap, const char **ret)
{
	json_t *v;
	int rc = rd_get(r, obj, key, &v);

	if (rc < 0)
		return rc;
	if (!json_is_string(v))
		return RD_FAIL(r, -EBADMSG, key, "expected a string");
	*ret = json_string_value(v);
	if (strlen(*ret) != json_string_length(v))
		return RD_FAIL(r, -EINVAL, key, "string contains a NUL byte");
	if (json_string_length(v) >= cap)
		return RD_FAIL(r, -EINVAL, key, "string longer than %zu bytes", cap - 1);
	return 0;
}

static int rd_strcpy(struct rd *r, json_t *obj, const char *key, char *dst, size_t cap)
{
	const char *s;
	int rc = rd_str(r, obj, key, cap, &s);

	if (rc == 0)
		memcpy(dst, s, strlen(s) + 1);
	return rc;
}

static int rd_strdup(struct rd *r, json_t *obj, const char *key, char **ret)
{
	const char *s;
	int rc = rd_str(r, obj, key, PHOS_IMAGE_MAX_NAME + 1, &s);

	if (rc < 0)
		return rc;
	*ret = strdup(s);
	return *ret ? 0 : phos_errf_rc(r->err, r->errlen, -ENOMEM, "out of memory");
}

/* A checksum: 16 lowercase hex digits. */
static int rd_hash(struct rd *r, json_t *obj, const char *key, uint64_t *ret)
{
	const char *s;
	uint64_t h = 0;
	int rc = rd_str(r, obj, key, 17, &s);

	if (rc < 0)
		return rc;
	for (int i = 0; i < 16; i++) {
		char c = s[i];

		if (c >= '0' && c <= '9')
			h = h << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			h = h << 4 | (uint64_t)(c - 'a' + 10);
		else
			return RD_FAIL(r, -EINVAL, key, "expected 16 lowercase hex digits");
	}
	*ret = h;
	return 0;
}

static int rd_bool(struct rd *r, json_t *obj, const char *key, bool *ret)
{
	json_t *v;
	int rc = rd_get(r, obj, key, &v);

	if (rc < 0)
		return rc;
	if (!json_is_boolean(v))
		return RD_FAIL(r, -EBADMSG, key, "expected true or false");
	*ret = json_is_true(v);
	return 0;
}

static int rd_object(struct rd *r, json_t *obj, const char *key, json_t **ret)
{
	int rc = rd_get(r, obj, key, ret);

	if (rc == 0 && !json_is_object(*ret))
		return RD_FAIL(r, -EBADMSG, key, "expected an object");
	return rc;
}

/* An array of at most max entries, and a zeroed C array of as many elements. */
static int rd_array(struct rd *r, json_t *obj, const char *key, size_t max, size_t elem,
		    json_t **ret, void **ret_arr, uint32_t *ret_n)
{
	size_t n;
	int rc = rd_get(r, obj, key, ret);

	if (rc < 0)
		return rc;
	if (!json_is_array(*ret))
		return RD_FAIL(r, -EBADMSG, key, "expected an array");
	n = json_array_size(*ret);
	if (n > max)
		return RD_FAIL(r, -E2BIG, key, "%zu entries, more than the limit of %zu", n, max);
	*ret_n = 0; /* counts grow as elements are filled in, so that freeing works midway */
	*ret_arr = n ? calloc(n, elem) : NULL;
	if (n && !*ret_arr)
		return phos_errf_rc(r->err, r->errlen, -ENOMEM, "out of memory");
	return 0;
}

/* Points r->where at element i of the array key, which must be an object. */
static int rd_elem(struct rd *r, json_t *arr, const char *key, size_t i, json_t **ret)
{
	*ret = json_array_get(arr, i);
	snprintf(r->where, sizeof(r->where), "%s[%zu]", key, i);
	if (!json_is_object(*ret))
		return phos_errf_rc(r->err, r->errlen, -EBADMSG, "manifest.json: %s: expected an object",
			    r->where);
	return 0;
}

#define RD(call)                        \
	do {                            \
		int rc_ = (call);       \
		if (rc_ < 0)            \
			return rc_;     \
	} while (0)

#define RD_ARRAY(r, root, key, max, img, field, n, a)                                        \
	RD(rd_array(r, root, key, max, sizeof(*(img)->field), &(a), (void **)&(img)->field, \
		    &(img)->n))

/* An optional count or index (1.4's devices and device): absent gives dflt;
 * present, it must be an integer in [min, max]. */
static int rd_opt_u32(struct rd *r, json_t *obj, const char *key, uint32_t dflt, uint32_t min, uint32_t max,
		      uint32_t *ret)
{
	int64_t v;

	if (!json_object_get(obj, key)) {
		*ret = dflt;
		return 0;
	}
	RD(rd_int(r, obj, key, min, max, &v));
	*ret = (uint32_t)v;
	return 0;
}

static int rd_header(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *v, *o;
	int64_t major, minor;

	v = json_object_get(root, "magic");
	if (!json_is_string(v) || strcmp(json_string_value(v), PHOS_IMAGE_MAGIC) != 0)
		return phos_errf_rc(r->err, r->errlen, -EBADMSG,
			    "manifest.json: not a phos-fn snapshot (magic is not \"%s\")",
			    PHOS_IMAGE_MAGIC);
	RD(rd_object(r, root, "version", &o));
	strcpy(r->where, "version");
	RD(rd_int(r, o, "major", 0, INT32_MAX, &major));
	if (major > PHOS_IMAGE_MAJOR || major == 0) {
		/* A newer major may define minor differently: name it, don't check it. */
		v = json_object_get(o, "minor");
		minor = json_is_integer(v) ? json_integer_value(v) : 0;
		return phos_errf_rc(r->err, r->errlen, -EPROTONOSUPPORT,
			    "manifest.json: format %lld.%lld is %s than this phos-fn (%d.x)",
			    (long long)major, (long long)minor, major ? "newer" : "older",
			    PHOS_IMAGE_MAJOR);
	}
	RD(rd_int(r, o, "minor", 0, INT32_MAX, &minor));
	img->major = (unsigned)major;
	img->minor = (unsigned)minor;
	r->where[0] = '\0';
	RD(rd_strcpy(r, root, "function", img->function, sizeof(img->function)));
	RD(rd_strcpy(r, root, "device", img->device, sizeof(img->device)));
	RD(rd_strcpy(r, root, "gpu_name", img->gpu_name, sizeof(img->gpu_name)));
	RD(rd_u64(r, root, "gpu_bytes", &img->gpu_bytes));
	RD(rd_u64(r, root, "data_bytes", &img->data_bytes));
	RD(rd_int(r, root, "created", INT64_MIN, INT64_MAX, &img->created));
	RD(rd_opt_u32(r, root, "devices", 1, 1, PHOS_IMAGE_MAX_DEVICES, &img->devices));
	RD(rd_object(r, root, "arena", &o));
	strcpy(r->where, "arena");
	RD(rd_u64(r, o, "base", &img->arena_base));
	RD(rd_u64(r, o, "size", &img->arena_size));
	r->where[0] = '\0';
	return 0;
}

static int rd_buffers(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;

	RD_ARRAY(r, root, "buffers", PHOS_IMAGE_MAX_BUFS, img, bufs, nbufs, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nbufs++) {
		struct phos_image_buf *b = &img->bufs[i];

		RD(rd_elem(r, a, "buffers", i, &o));
		RD(rd_u64(r, o, "addr", &b->addr));
		RD(rd_u64(r, o, "size", &b->size));
		RD(rd_u64(r, o, "id", &b->id));
		RD(rd_u64(r, o, "offset", &b->offset));
		RD(rd_hash(r, o, "hash", &b->hash));
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "prefetch", PHOS_IMAGE_MAX_BUFS, img, prefetch, nprefetch, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nprefetch++) {
		json_t *v = json_array_get(a, i);

		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return phos_errf_rc(r->err, r->errlen, -EBADMSG,
				    "manifest.json: prefetch[%zu]: expected a buffer id", i);
		img->prefetch[i] = (uint64_t)json_integer_value(v);
	}
	return 0;
}

static int rd_code(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;

	RD_ARRAY(r, root, "modules", PHOS_IMAGE_MAX_OBJECTS, img, modules, nmodules, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nmodules++) {
		struct phos_image_module *m = &img->modules[i];

		RD(rd_elem(r, a, "modules", i, &o));
		RD(rd_u32(r, o, "id", &m->id));
		RD(rd_strcpy(r, o, "hash", m->hash, sizeof(m->hash)));
		RD(rd_u64(r, o, "size", &m->size));
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "kernels", PHOS_IMAGE_MAX_OBJECTS, img, funcs, nfuncs, a);
	for (size_t i = 0; i < json_array_size(a); i++) {
		struct phos_image_func *f = &img->funcs[i];

		RD(rd_elem(r, a, "kernels", i, &o));
		RD(rd_u32(r, o, "id", &f->id));
		RD(rd_u32(r, o, "module", &f->module));
		RD(rd_strdup(r, o, "name", &f->name));
		img->nfuncs++;
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "variables", PHOS_IMAGE_MAX_OBJECTS, img, vars, nvars, a);
	for (size_t i = 0; i < json_array_size(a); i++) {
		struct phos_image_var *v = &img->vars[i];

		RD(rd_elem(r, a, "variables", i, &o));
		RD(rd_strdup(r, o, "name", &v->name));
		img->nvars++;
		RD(rd_u32(r, o, "id", &v->id));
		RD(rd_u32(r, o, "module", &v->module));
		RD(rd_u64(r, o, "addr", &v->addr));
		RD(rd_u64(r, o, "size", &v->size));
		RD(rd_u64(r, o, "offset", &v->offset));
		RD(rd_hash(r, o, "hash", &v->hash));
		RD(rd_bool(r, o, "constant", &v->constant));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &v->device));
		if (json_object_get(o, "given"))
			RD(rd_bool(r, o, "given", &v->given));
	}
	r->where[0] = '\0';
	return 0;
}

static int rd_objects(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;

	RD_ARRAY(r, root, "streams", PHOS_IMAGE_MAX_OBJECTS, img, streams, nstreams, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nstreams++) {
		RD(rd_elem(r, a, "streams", i, &o));
		RD(rd_u32(r, o, "id", &img->streams[i].id));
		RD(rd_u32(r, o, "flags", &img->streams[i].flags));
		RD(rd_i32(r, o, "priority", &img->streams[i].priority));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &img->streams[i].device));
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "events", PHOS_IMAGE_MAX_OBJECTS, img, events, nevents, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nevents++) {
		RD(rd_elem(r, a, "events", i, &o));
		RD(rd_u32(r, o, "id", &img->events[i].id));
		RD(rd_u32(r, o, "flags", &img->events[i].flags));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &img->events[i].device));
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "cublas", PHOS_IMAGE_MAX_OBJECTS, img, blas, nblas, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nblas++) {
		struct phos_image_blas *b = &img->blas[i];

		RD(rd_elem(r, a, "cublas", i, &o));
		RD(rd_u32(r, o, "id", &b->id));
		RD(rd_u32(r, o, "stream", &b->stream));
		RD(rd_i32(r, o, "math_mode", &b->math_mode));
		RD(rd_u64(r, o, "workspace", &b->workspace));
		RD(rd_u64(r, o, "workspace_size", &b->workspace_size));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &b->device));
	}
	r->where[0] = '\0';
	return 0;
}

static int rd_cpu(struct rd *r, json_t *root, struct phos_image *img)
{
	const size_t max = sizeof(img->fds) / sizeof(img->fds[0]);
	json_t *cpu, *a, *o;

	RD(rd_object(r, root, "cpu", &cpu));
	strcpy(r->where, "cpu");
	RD(rd_strcpy(r, cpu, "dir", img->criu_dir, sizeof(img->criu_dir)));
	RD(rd_get(r, cpu, "fds", &a));
	if (!json_is_array(a))
		return RD_FAIL(r, -EBADMSG, "fds", "expected an array");
	if (json_array_size(a) > max)
		return RD_FAIL(r, -E2BIG, "fds", "%zu entries, more than the limit of %zu",
			       json_array_size(a), max);
	for (size_t i = 0; i < json_array_size(a); i++, img->nfds++) {
		int64_t fd;

		RD(rd_elem(r, a, "cpu.fds", i, &o));
		RD(rd_int(r, o, "fd", 0, INT32_MAX, &fd));
		img->fds[i].fd = (int)fd;
		RD(rd_strcpy(r, o, "key", img->fds[i].key, sizeof(img->fds[i].key)));
	}
	/* 1.1: checksums of the CRIU image's files; absent before */
	strcpy(r->where, "cpu");
	a = json_object_get(cpu, "files");
	if (!a)
		goto done;
	if (!json_is_array(a))
		return RD_FAIL(r, -EBADMSG, "files", "expected an array");
	if (json_array_size(a) > PHOS_IMAGE_MAX_CPU_FILES)
		return RD_FAIL(r, -E2BIG, "files", "%zu entries, more than the limit of %u", json_array_size(a),
			       PHOS_IMAGE_MAX_CPU_FILES);
	img->cpu_files = calloc(json_array_size(a) + 1, sizeof(*img->cpu_files));
	if (!img->cpu_files)
		return phos_errf_rc(r->err, r->errlen, -ENOMEM, "out of memory");
	for (size_t i = 0; i < json_array_size(a); i++, img->ncpu_files++) {
		struct phos_image_file *f = &img->cpu_files[i];

		RD(rd_elem(r, a, "cpu.files", i, &o));
		RD(rd_strcpy(r, o, "name", f->name, sizeof(f->name)));
		RD(rd_u64(r, o, "size", &f->size));
		RD(rd_hash(r, o, "hash", &f->hash));
		if (!f->name[0] || strchr(f->name, '/') || !strcmp(f->name, ".") || !strcmp(f->name, ".."))
			return RD_FAIL(r, -EINVAL, "name", "must name a file inside cpu/");
	}
done:
	r->where[0] = '\0';
	return 0;
}

/* 1.2: what a checkpoint of a running program adds; absent from snapshots. */
static int rd_checkpoint(struct rd *r, json_t *root, struct phos_image *img)
{
	struct phos_image_checkpoint *c = &img->checkpoint;
	json_t *o = json_object_get(root, "checkpoint"), *v;
	int64_t fd;

	if (!o)
		return 0;
	strcpy(r->where, "checkpoint");
	if (!json_is_object(o))
		return RD_FAIL(r, -EBADMSG, "checkpoint", "expected an object");
	RD(rd_strcpy(r, o, "mode", c->mode, sizeof(c->mode)));
	RD(rd_int(r, o, "channel_fd", 0, 65535, &fd));
	c->channel_fd = (int)fd;
	RD(rd_u64(r, o, "seq", &c->seq));
	v = json_object_get(o, "stall_s");
	c->stall_s = json_is_number(v) ? json_number_value(v) : 0;
	v = json_object_get(o, "total_s");
	c->total_s = json_is_number(v) ? json_number_value(v) : 0;
	v = json_object_get(o, "early_copies");
	c->early = json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(o, "rounds");
	c->rounds = json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= UINT32_MAX ?
			    (uint32_t)json_integer_value(v) : 0;
	v = json_object_get(o, "precopy_bytes");
	c->precopy_bytes = json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(o, "stop_bytes");
	c->stop_bytes = json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(o, "reserve_copies");
	c->reserve_copies = json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(o, "gpu_s");
	c->gpu_s = json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
	v = json_object_get(o, "cpu_s");
	c->cpu_s = json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
	v = json_object_get(o, "copy_s");
	c->copy_s = json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
	c->host_copy = json_is_true(json_object_get(o, "host_copy"));
	c->present = true;
	r->where[0] = '\0';
	return 0;
}

/* 1.2: host-memory regions, absent when there are none. */
static int rd_regions(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;

	if (!json_object_get(root, "host_regions"))
		return 0;
	RD_ARRAY(r, root, "host_regions", PHOS_IMAGE_MAX_OBJECTS, img, regions, nregions, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nregions++) {
		struct phos_image_region *g = &img->regions[i];

		RD(rd_elem(r, a, "host_regions", i, &o));
		RD(rd_u32(r, o, "id", &g->id));
		RD(rd_u64(r, o, "size", &g->size));
		RD(rd_u64(r, o, "addr", &g->addr));
		RD(rd_u64(r, o, "exec_addr", &g->exec_addr));
		if (!g->id || !g->size || !g->addr || !g->exec_addr)
			return RD_FAIL(r, -EBADMSG, "host_regions", "entry %zu: a zero id, size or address", i);
	}
	r->where[0] = '\0';
	return 0;
}

/* n int32 values of the JSON array key. */
static int rd_i32s(struct rd *r, json_t *obj, const char *key, int32_t *ret, size_t n)
{
	json_t *a;
	int rc = rd_get(r, obj, key, &a);

	if (rc < 0)
		return rc;
	if (!json_is_array(a) || json_array_size(a) != n)
		return RD_FAIL(r, -EBADMSG, key, "expected an array of %zu integers", n);
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(a, i);

		if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
			return RD_FAIL(r, -EBADMSG, key, "entry %zu: expected a 32-bit integer", i);
		ret[i] = (int32_t)json_integer_value(v);
	}
	return 0;
}

static int rd_float(struct rd *r, json_t *obj, const char *key, float *ret)
{
	json_t *v;
	int rc = rd_get(r, obj, key, &v);

	if (rc < 0)
		return rc;
	if (!json_is_number(v))
		return RD_FAIL(r, -EBADMSG, key, "expected a number");
	*ret = (float)json_number_value(v);
	return 0;
}

/* 1.3: CUDA arrays, absent when there are none. */
static int rd_arrays(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;
	int32_t ext[3];

	if (!json_object_get(root, "arrays"))
		return 0;
	RD_ARRAY(r, root, "arrays", PHOS_IMAGE_MAX_OBJECTS, img, arrays, narrays, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->narrays++) {
		struct phos_image_array *x = &img->arrays[i];

		RD(rd_elem(r, a, "arrays", i, &o));
		RD(rd_u32(r, o, "id", &x->desc.id));
		RD(rd_u32(r, o, "flags", &x->desc.flags));
		RD(rd_i32s(r, o, "format", x->desc.bits, 4));
		RD(rd_i32(r, o, "kind", &x->desc.kind));
		RD(rd_i32s(r, o, "extent", ext, 3));
		if (ext[0] < 0 || ext[1] < 0 || ext[2] < 0)
			return RD_FAIL(r, -EINVAL, "extent", "negative");
		x->desc.width = (uint64_t)ext[0];
		x->desc.height = (uint64_t)ext[1];
		x->desc.depth = (uint64_t)ext[2];
		RD(rd_u64(r, o, "offset", &x->offset));
		RD(rd_u64(r, o, "size", &x->size));
		RD(rd_hash(r, o, "hash", &x->hash));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &x->device));
	}
	r->where[0] = '\0';
	return 0;
}

/* Element i of the array a (named key) as n integers, integer k in
 * [lo[k], hi[k]]: 0 with out, or -EBADMSG saying it expected want. */
static int rd_tuple(struct rd *r, json_t *a, const char *key, size_t i, size_t n, const int64_t *lo,
		    const int64_t *hi, int64_t *out, const char *want)
{
	json_t *e = json_array_get(a, i);

	snprintf(r->where, sizeof(r->where), "%s[%zu]", key, i);
	if (!json_is_array(e) || json_array_size(e) != n)
		return phos_errf_rc(r->err, r->errlen, -EBADMSG, "manifest.json: %s: expected %s", r->where, want);
	for (size_t k = 0; k < n; k++) {
		json_t *v = json_array_get(e, k);

		if (!json_is_integer(v) || json_integer_value(v) < lo[k] || json_integer_value(v) > hi[k])
			return phos_errf_rc(r->err, r->errlen, -EBADMSG, "manifest.json: %s: expected %s", r->where, want);
		out[k] = json_integer_value(v);
	}
	return 0;
}

/* Memory pools and their live blocks ("pools", "pool_blocks"), absent when
 * there are none (phos_image_validate checks that ids are unique and that
 * each block is of a listed pool and a buffer's start). */
static int rd_pools(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o, *v;

	if (!json_object_get(root, "pools") && !json_object_get(root, "pool_blocks"))
		return 0;
	RD_ARRAY(r, root, "pools", PHOS_IMAGE_MAX_OBJECTS, img, pools, npools, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->npools++) {
		struct phos_image_pool *p = &img->pools[i];

		RD(rd_elem(r, a, "pools", i, &o));
		RD(rd_u32(r, o, "id", &p->id));
		if (p->id == 0)
			return RD_FAIL(r, -EINVAL, "id", "0 is no pool");
		RD(rd_bool(r, o, "gone", &p->gone));
		RD(rd_get(r, o, "reuse", &v));
		if (!json_is_array(v) || json_array_size(v) != 3)
			return RD_FAIL(r, -EBADMSG, "reuse", "expected 3 booleans");
		for (size_t k = 0; k < 3; k++) {
			if (!json_is_boolean(json_array_get(v, k)))
				return RD_FAIL(r, -EBADMSG, "reuse", "expected 3 booleans");
			p->reuse[k] = json_is_true(json_array_get(v, k));
		}
		RD(rd_u64(r, o, "max_size", &p->max_size));
		RD(rd_u64(r, o, "threshold", &p->threshold));
	}
	r->where[0] = '\0';
	RD_ARRAY(r, root, "pool_blocks", PHOS_IMAGE_MAX_BUFS, img, pool_blocks, npool_blocks, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->npool_blocks++) {
		static const int64_t lo[2] = { 1, 1 }, hi[2] = { UINT32_MAX, INT64_MAX };
		int64_t t[2];

		RD(rd_tuple(r, a, "pool_blocks", i, 2, lo, hi, t, "[pool id, address]"));
		img->pool_blocks[i].pool = (uint32_t)t[0];
		img->pool_blocks[i].addr = (uint64_t)t[1];
	}
	r->where[0] = '\0';
	return 0;
}

/* Limits and stream attributes the function set ("limits", "stream_attrs"),
 * absent when there are none: a limit or attribute id in [0, 64), a device
 * of the image, a stream of the image or 0 (phos_image_validate), a value of
 * 64 bytes in hex. */
static int rd_context(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o;

	if (json_object_get(root, "limits")) {
		RD_ARRAY(r, root, "limits", PHOS_IMAGE_MAX_CONTEXT, img, limits, nlimits, a);
		for (size_t i = 0; i < json_array_size(a); i++, img->nlimits++) {
			const int64_t lo[3] = { 0, 0, 0 }, hi[3] = { 63, (int64_t)img->devices - 1, INT64_MAX };
			int64_t v[3];

			RD(rd_tuple(r, a, "limits", i, 3, lo, hi, v, "[limit < 64, device of the image, value]"));
			img->limits[i].limit = (int32_t)v[0];
			img->limits[i].device = (uint32_t)v[1];
			img->limits[i].value = (uint64_t)v[2];
		}
		r->where[0] = '\0';
	}
	if (json_object_get(root, "reservations")) {
		RD_ARRAY(r, root, "reservations", PHOS_IMAGE_MAX_OBJECTS, img, resvs, nresvs, a);
		for (size_t i = 0; i < json_array_size(a); i++, img->nresvs++) {
			static const int64_t lo[2] = { 1, 1 }, hi[2] = { INT64_MAX, INT64_MAX };
			int64_t v[2];

			RD(rd_tuple(r, a, "reservations", i, 2, lo, hi, v, "[address, size]"));
			img->resvs[i].addr = (uint64_t)v[0];
			img->resvs[i].size = (uint64_t)v[1];
		}
		r->where[0] = '\0';
	}
	if (!json_object_get(root, "stream_attrs"))
		return 0;
	RD_ARRAY(r, root, "stream_attrs", PHOS_IMAGE_MAX_CONTEXT, img, stream_attrs, nstream_attrs, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->nstream_attrs++) {
		struct phos_image_stream_attr *x = &img->stream_attrs[i];
		const char *hex;
		int64_t attr;

		RD(rd_elem(r, a, "stream_attrs", i, &o));
		RD(rd_u32(r, o, "stream", &x->stream));
		RD(rd_int(r, o, "attr", 0, 63, &attr));
		x->attr = (int32_t)attr;
		hex = json_string_value(json_object_get(o, "value"));
		if (!hex || strlen(hex) != 2 * sizeof(x->value) || strspn(hex, "0123456789abcdef") != strlen(hex))
			return RD_FAIL(r, -EBADMSG, "value", "expected %zu hex digits", 2 * sizeof(x->value));
		for (size_t k = 0; k < sizeof(x->value); k++) {
			unsigned byte;

			sscanf(hex + 2 * k, "%2x", &byte);
			x->value[k] = (uint8_t)byte;
		}
	}
	r->where[0] = '\0';
	return 0;
}

/* 1.3: texture and surface objects, absent when there are none. */
static int rd_texes(struct rd *r, json_t *root, struct phos_image *img)
{
	json_t *a, *o, *smp, *b;

	if (!json_object_get(root, "textures"))
		return 0;
	RD_ARRAY(r, root, "textures", PHOS_IMAGE_MAX_OBJECTS, img, texes, ntexes, a);
	for (size_t i = 0; i < json_array_size(a); i++, img->ntexes++) {
		struct phos_image_tex *t = &img->texes[i];
		struct phos_tex_create *d = &t->desc;
		bool surface;

		RD(rd_elem(r, a, "textures", i, &o));
		RD(rd_u64(r, o, "handle", &t->handle));
		RD(rd_opt_u32(r, o, "device", 0, 0, img->devices - 1, &t->device));
		RD(rd_bool(r, o, "dangling", &t->dangling));
		RD(rd_bool(r, o, "surface", &surface));
		d->surface = surface;
		RD(rd_u32(r, o, "res_type", &d->res_type));
		RD(rd_u32(r, o, "array", &d->array));
		RD(rd_i32s(r, o, "format", d->bits, 4));
		RD(rd_i32(r, o, "kind", &d->kind));
		RD(rd_u64(r, o, "ptr", &d->ptr));
		RD(rd_u64(r, o, "size", &d->size));
		RD(rd_u64(r, o, "width", &d->width));
		RD(rd_u64(r, o, "height", &d->height));
		RD(rd_u64(r, o, "pitch", &d->pitch));
		RD(rd_i32s(r, o, "address", d->address, 3));
		RD(rd_get(r, o, "border", &b));
		if (!json_is_array(b) || json_array_size(b) != 4)
			return RD_FAIL(r, -EBADMSG, "border", "expected 4 numbers");
		for (size_t k = 0; k < 4; k++) {
			if (!json_is_number(json_array_get(b, k)))
				return RD_FAIL(r, -EBADMSG, "border", "expected 4 numbers");
			d->border[k] = (float)json_number_value(json_array_get(b, k));
		}
		RD(rd_object(r, o, "sampling", &smp));
		RD(rd_i32(r, smp, "filter", &d->filter));
		RD(rd_i32(r, smp, "read_mode", &d->read_mode));
		RD(rd_i32(r, smp, "srgb", &d->srgb));
		RD(rd_i32(r, smp, "normalized_coords", &d->normalized_coords));
		RD(rd_i32(r, smp, "max_anisotropy", &d->max_anisotropy));
		RD(rd_i32(r, smp, "mip_filter", &d->mip_filter));
		RD(rd_i32(r, smp, "no_trilinear_opt", &d->no_trilinear_opt));
		RD(rd_i32(r, smp, "seamless_cubemap", &d->seamless_cubemap));
		RD(rd_float(r, smp, "mip_bias", &d->mip_bias));
		RD(rd_float(r, smp, "min_mip_clamp", &d->min_mip_clamp));
		RD(rd_float(r, smp, "max_mip_clamp", &d->max_mip_clamp));
	}
	r->where[0] = '\0';
	return 0;
}

/* Reads DIR/manifest.json into a NUL-terminated buffer, refusing oversized ones. */
static int manifest_load(int dfd, const char *dir, char **ret_buf, size_t *ret_len, char *err,
			 size_t errlen)
{
	struct stat st;
	size_t len = 0;
	char *buf;
	int fd, r = 0;

	fd = openat(dfd, PHOS_IMAGE_MANIFEST, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return phos_errf_rc(err, errlen, -errno,
			    errno == ENOENT ? "%s: no manifest.json (not a snapshot, or an unfinished one)"
					    : "%s/manifest.json: %m", dir);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return phos_errf_rc(err, errlen, -EINVAL, "manifest.json: not a readable regular file");
	}
	if (st.st_size > PHOS_IMAGE_MAX_MANIFEST) {
		close(fd);
		return phos_errf_rc(err, errlen, -E2BIG, "manifest.json is %lld bytes, more than the limit of %u",
			    (long long)st.st_size, PHOS_IMAGE_MAX_MANIFEST);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return phos_errf_rc(err, errlen, -ENOMEM, "manifest.json: out of memory");
	}
	{
		ssize_t n = phos_read_full(fd, buf, (size_t)st.st_size);

		if (n < 0)
			r = phos_errf_rc(err, errlen, (int)n, "manifest.json: %s", strerror((int)-n));
		else
			len = (size_t)n;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[len] = '\0';
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

/* The files the manifest refers to are there, with their sizes. */
static int check_files(int dfd, const char *dir, const struct phos_image *img, char *err,
		       size_t errlen)
{
	struct stat st;
	char path[64];

	if (fstatat(dfd, "gpu.data", &st, 0) < 0)
		return phos_errf_rc(err, errlen, -errno, "gpu.data: %m");
	if (!S_ISREG(st.st_mode))
		return phos_errf_rc(err, errlen, -EINVAL, "gpu.data is not a regular file");
	if ((uint64_t)st.st_size < img->data_bytes) {
		uint64_t have = (uint64_t)st.st_size;

		for (uint32_t i = 0; i < img->nbufs; i++)
			if (img->bufs[i].offset + img->bufs[i].size > have)
				return phos_errf_rc(err, errlen, -EBADMSG,
					    "gpu.data is truncated: %llu bytes, buffer %llu needs %llu",
					    (unsigned long long)have, (unsigned long long)img->bufs[i].id,
					    (unsigned long long)(img->bufs[i].offset + img->bufs[i].size));
		return phos_errf_rc(err, errlen, -EBADMSG, "gpu.data is truncated: %llu bytes, manifest needs %llu",
			    (unsigned long long)have, (unsigned long long)img->data_bytes);
	}
	for (uint32_t i = 0; i < img->nmodules; i++) {
		const struct phos_image_module *m = &img->modules[i];

		snprintf(path, sizeof(path), "modules/%s.fatbin", m->hash);
		if (fstatat(dfd, path, &st, 0) < 0)
			return phos_errf_rc(err, errlen, -errno, "module %u missing: %s: %m", m->id, path);
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != m->size)
			return phos_errf_rc(err, errlen, -EBADMSG, "%s has %lld bytes, manifest says %llu", path,
				    (long long)st.st_size, (unsigned long long)m->size);
	}
	if (fstatat(dfd, img->criu_dir, &st, 0) < 0 || !S_ISDIR(st.st_mode))
		return phos_errf_rc(err, errlen, -ENOENT, "cpu image missing: %s/%s is not a directory", dir,
			    img->criu_dir);
	return 0;
}

static int image_parse(const char *text, size_t len, struct phos_image *img, char *err,
		       size_t errlen)
{
	struct rd r = { .err = err, .errlen = errlen };
	char why[256];
	json_error_t jerr;
	json_t *root;
	int rc;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root)
		return phos_errf_rc(err, errlen, -EBADMSG, "manifest.json: invalid JSON at line %d, column %d: %s",
			    jerr.line, jerr.column, jerr.text);
	if (!json_is_object(root))
		rc = phos_errf_rc(err, errlen, -EBADMSG, "manifest.json: not a JSON object");
	else if ((rc = rd_header(&r, root, img)) == 0 && (rc = rd_buffers(&r, root, img)) == 0 &&
		 (rc = rd_code(&r, root, img)) == 0 && (rc = rd_objects(&r, root, img)) == 0)
		rc = rd_cpu(&r, root, img);
	if (rc == 0)
		rc = rd_checkpoint(&r, root, img);
	if (rc == 0)
		rc = rd_regions(&r, root, img);
	if (rc == 0)
		rc = rd_arrays(&r, root, img);
	if (rc == 0)
		rc = rd_texes(&r, root, img);
	if (rc == 0)
		rc = rd_pools(&r, root, img);
	if (rc == 0)
		rc = rd_context(&r, root, img);
	json_decref(root);
	if (rc < 0)
		return rc;
	if (img->nbufs)   /* a snapshot may hold none (a function of managed memory only) */
		qsort(img->bufs, img->nbufs, sizeof(*img->bufs), phos_image_buf_cmp);
	rc = phos_image_validate(img, why, sizeof(why));
	if (rc < 0)
		return phos_errf_rc(err, errlen, rc, "manifest.json: %s", why);
	return 0;
}

int phos_image_read(const char *dir, struct phos_image **ret_img, char *err, size_t errlen)
{
	struct phos_image *img;
	char *text = NULL;
	size_t len = 0;
	int dfd, r;

	if (err && errlen)
		err[0] = '\0';
	if (!dir || !ret_img)
		return phos_errf_rc(err, errlen, -EINVAL, "no snapshot directory given");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return phos_errf_rc(err, errlen, -errno,
			    errno == ENOENT ? "%s: no manifest.json (the directory does not exist)" : "%s: %m",
			    dir);
	img = phos_image_new();
	if (!img) {
		r = phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	r = manifest_load(dfd, dir, &text, &len, err, errlen);
	if (r == 0)
		r = image_parse(text, len, img, err, errlen);
	if (r == 0)
		r = check_files(dfd, dir, img, err, errlen);
	free(text);
	if (r == 0) {
		*ret_img = img;
		img = NULL;
	}
	phos_image_free(img);
out:
	close(dfd);
	return r;
}

int phos_image_parse(const char *text, size_t len, struct phos_image **ret_img, char *err, size_t errlen)
{
	struct phos_image *img;
	int r;

	if (err && errlen)
		err[0] = '\0';
	if (!text || !ret_img)
		return phos_errf_rc(err, errlen, -EINVAL, "no manifest given");
	if (len > PHOS_IMAGE_MAX_MANIFEST)
		return phos_errf_rc(err, errlen, -E2BIG, "manifest.json is %zu bytes, more than the limit of %u", len,
			    PHOS_IMAGE_MAX_MANIFEST);
	img = phos_image_new();
	if (!img)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	r = image_parse(text, len, img, err, errlen);
	if (r < 0) {
		phos_image_free(img);
		return r;
	}
	*ret_img = img;
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int phos_image_set_prefetch(const char *dir, const uint64_t *ids, size_t n, char *err, size_t errlen)
{
	struct phos_image *img;
	uint64_t *order, *known;
	bool *seen;
	size_t k = 0;
	int r;

	r = phos_image_read(dir, &img, err, errlen);
	if (r < 0)
		return r;
	order = calloc(img->nbufs + 1, sizeof(*order));
	known = calloc(img->nbufs + 1, sizeof(*known));
	seen = calloc(img->nbufs + 1, sizeof(*seen));
	if (!order || !known || !seen) {
		r = -ENOMEM;
		phos_errf(err, errlen, "out of memory");
		goto out;
	}
	for (uint32_t b = 0; b < img->nbufs; b++)
		known[b] = img->bufs[b].id;
	qsort(known, img->nbufs, sizeof(*known), id_cmp);
	/* Only buffers of the snapshot, each once (variables are not listed). */
	for (size_t i = 0; i < n && k < img->nbufs; i++) {
		const uint64_t *p = bsearch(&ids[i], known, img->nbufs, sizeof(*known), id_cmp);

		if (p && !seen[p - known]) {
			seen[p - known] = true;
			order[k++] = ids[i];
		}
	}
	free(img->prefetch);
	img->prefetch = order;
	order = NULL;
	img->nprefetch = (uint32_t)k;
	r = phos_image_write_manifest(dir, img);
	if (r < 0)
		phos_errf(err, errlen, "writing %s/manifest.json: %s", dir, strerror(-r));
out:
	free(order);
	free(known);
	free(seen);
	phos_image_free(img);
	return r;
}
