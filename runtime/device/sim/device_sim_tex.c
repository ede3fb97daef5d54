/* SPDX-License-Identifier: MIT */
/*
 * CUDA arrays, texture and surface objects of the sim device (issue 12).
 *
 * An array is host memory with its rows packed (pitch = width * element
 * bytes, slice = height * pitch). A texture or surface object is a struct
 * phos_sim_tex (sim_tex.h) in one table for the process (an executor has one
 * device); its handle is its index there, the lowest free one from 1, shared
 * by textures and surfaces: what a GPU hands out, so a restore that makes the
 * same objects in the same order gets the same handles here as there. Twins
 * read the table through phos_sim_tex_lookup, bound into their plugin when it
 * is loaded (device_sim.c).
 *
 * Freeing an array leaves the objects made on it without memory (their
 * lookup gives NULL), where a GPU would read freed memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device_sim.h"
#include "sim_tex.h"

#define SIM_MAX_TEX 4096u

struct sim_array {
	struct phos_sim_obj obj;
	uint8_t *data;
	uint64_t dims[3];          /* elements; 1 where the array has no such dimension */
	uint64_t pitch, slice, bytes;
	uint32_t elem_bytes, channels, channel_bytes;
	int32_t kind;
	uint32_t flags;
	int ndims;                 /* 1, 2 or 3 (a layered array: of one layer) */
	bool layered;
};

struct sim_texobj {
	struct phos_sim_tex t;
	struct sim_array *array;   /* PHOS_RES_ARRAY, while it lives */
};

static pthread_mutex_t tex_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_texobj *texes[SIM_MAX_TEX];

const struct phos_sim_tex *phos_sim_tex_lookup(uint64_t handle)
{
	const struct phos_sim_tex *t = NULL;

	pthread_mutex_lock(&tex_lock);
	if (handle > 0 && handle < SIM_MAX_TEX && texes[handle] && texes[handle]->t.base)
		t = &texes[handle]->t;
	pthread_mutex_unlock(&tex_lock);
	return t;
}

static void array_release(struct phos_sim_obj *o)
{
	struct sim_array *a = (struct sim_array *)o;

	pthread_mutex_lock(&tex_lock);
	for (uint32_t i = 1; i < SIM_MAX_TEX; i++)
		if (texes[i] && texes[i]->array == a) {
			texes[i]->array = NULL;
			texes[i]->t.base = NULL;
		}
	pthread_mutex_unlock(&tex_lock);
	free(a->data);
}

int phos_sim_array_create(struct phos_device *dev, const struct phos_array_create *d, void **ret_array)
{
	struct sim_array *a;
	uint32_t channels, cbytes;

	if (phos_channel_format(d->bits, d->kind, &channels, &cbytes) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	if (d->flags & ~0x0fu)   /* layered, surface load/store, cubemap, gather */
		return -PHOS_CUDA_NOT_SUPPORTED;
	a = phos_sim_obj_new(dev, PHOS_SIM_ARRAY, sizeof(*a));
	if (!a)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	a->obj.release = array_release;
	a->channels = channels;
	a->channel_bytes = cbytes;
	a->elem_bytes = channels * cbytes;
	a->kind = d->kind;
	a->flags = d->flags;
	a->layered = d->flags & 0x01;
	if (!phos_array_extent(d, a->elem_bytes, a->dims, &a->bytes) || !(a->data = calloc(1, a->bytes))) {
		phos_sim_obj_free(dev, a);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	a->ndims = a->layered ? (d->height ? 2 : 1) : d->depth ? 3 : d->height ? 2 : 1;
	a->pitch = a->dims[0] * a->elem_bytes;
	a->slice = a->dims[1] * a->pitch;
	*ret_array = a;
	return 0;
}

int phos_sim_array_destroy(struct phos_device *dev, void *array)
{
	struct sim_array *a = phos_sim_obj_get(dev, array, PHOS_SIM_ARRAY);

	if (!a)
		return -PHOS_CUDA_INVALID_VALUE;
	phos_sim_obj_free(dev, a);
	return 0;
}

/* Where row y of slice z of a side starts, or NULL when that row of width
 * bytes is outside it. */
static uint8_t *side_row(struct phos_device *dev, const struct phos_copy_side *s, uint64_t width, uint64_t y,
			 uint64_t z)
{
	if (s->array) {
		const struct sim_array *a = s->array;

		if (s->x > a->pitch || width > a->pitch - s->x || s->y + y >= a->dims[1] || s->z + z >= a->dims[2])
			return NULL;
		return a->data + (s->z + z) * a->slice + (s->y + y) * a->pitch + s->x;
	}
	if (s->host)
		return (uint8_t *)s->host + z * s->slice + y * s->pitch;
	if (!phos_sim_range_ok(dev, s->addr + z * s->slice + y * s->pitch, width))
		return NULL;
	return (uint8_t *)(uintptr_t)(s->addr + z * s->slice + y * s->pitch);
}

int phos_sim_array_copy(struct phos_device *dev, const struct phos_copy_side *dst, const struct phos_copy_side *src,
			uint64_t width, uint64_t height, uint64_t depth, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if ((dst->array && !phos_sim_obj_get(dev, dst->array, PHOS_SIM_ARRAY)) ||
	    (src->array && !phos_sim_obj_get(dev, src->array, PHOS_SIM_ARRAY)))
		return -PHOS_CUDA_INVALID_VALUE;
	/* every row is checked before one is written: nothing half-done */
	for (uint64_t z = 0; z < depth; z++)
		for (uint64_t y = 0; y < height; y++)
			if (!side_row(dev, dst, width, y, z) || !side_row(dev, src, width, y, z))
				return -PHOS_CUDA_INVALID_VALUE;
	for (uint64_t z = 0; z < depth; z++)
		for (uint64_t y = 0; y < height; y++)
			memmove(side_row(dev, dst, width, y, z), side_row(dev, src, width, y, z), width);
	return 0;
}

static void array_view(const struct sim_array *a, struct phos_sim_tex *t)
{
	t->res_type = PHOS_SIM_RES_ARRAY;
	t->dims = a->ndims;
	t->layered = a->layered;
	t->base = a->data;
	t->pitch = a->pitch;
	t->slice = a->slice;
	t->width = a->dims[0];
	t->height = a->dims[1];
	t->depth = a->dims[2];
	if (a->layered && a->ndims == 1) {   /* 1D layered: y is the layer */
		t->height = a->dims[2];
		t->depth = 1;
		t->pitch = a->slice;
	}
	t->channels = a->channels;
	t->channel_bytes = a->channel_bytes;
	t->kind = a->kind;
}

int phos_sim_tex_create(struct phos_device *dev, const struct phos_tex_create *d, void *array, uint64_t *ret_handle)
{
	struct sim_texobj *o = calloc(1, sizeof(*o));
	struct phos_sim_tex *t;
	uint32_t channels = 0, cbytes = 0, h;

	if (!o)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	t = &o->t;
	t->surface = d->surface;
	if (d->res_type == PHOS_RES_ARRAY) {
		struct sim_array *a = phos_sim_obj_get(dev, array, PHOS_SIM_ARRAY);

		/* a GPU makes a surface even on an array without
		 * cudaArraySurfaceLoadStore (an H200, 2026-11-26) */
		if (!a) {
			free(o);
			return -PHOS_CUDA_INVALID_VALUE;
		}
		o->array = a;
		array_view(a, t);
	} else if (!d->surface && (d->res_type == PHOS_RES_LINEAR || d->res_type == PHOS_RES_PITCH2D) &&
		   phos_channel_format(d->bits, d->kind, &channels, &cbytes) == 0) {
		uint64_t elem = (uint64_t)channels * cbytes, ext = 0;
		bool linear = d->res_type == PHOS_RES_LINEAR;

		t->res_type = (int)d->res_type;
		t->dims = linear ? 1 : 2;
		t->channels = channels;
		t->channel_bytes = cbytes;
		t->kind = d->kind;
		t->width = linear ? d->size / elem : d->width;
		t->height = linear ? 1 : d->height;
		t->depth = 1;
		t->pitch = linear ? d->size : d->pitch;
		ext = linear ? d->size : t->height ? (t->height - 1) * d->pitch + t->width * elem : 0;
		if (!d->ptr || !t->width || !t->height || (!linear && d->pitch < t->width * elem) ||
		    !phos_sim_range_ok(dev, d->ptr, ext)) {
			free(o);
			return -PHOS_CUDA_INVALID_VALUE;
		}
		t->base = (uint8_t *)(uintptr_t)d->ptr;
	} else {
		free(o);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	t->elem_bytes = t->channels * t->channel_bytes;
	for (int i = 0; i < 3; i++)
		t->address[i] = d->address[i];
	t->filter = d->filter;
	t->read_mode = d->read_mode;
	t->normalized_coords = d->normalized_coords;
	memcpy(t->border, d->border, sizeof(t->border));
	pthread_mutex_lock(&tex_lock);
	for (h = 1; h < SIM_MAX_TEX && texes[h]; h++)
		;
	if (h < SIM_MAX_TEX)
		texes[h] = o;
	pthread_mutex_unlock(&tex_lock);
	if (h == SIM_MAX_TEX) {
		free(o);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	*ret_handle = h;
	return 0;
}

int phos_sim_tex_destroy(struct phos_device *dev, uint64_t handle, bool surface)
{
	struct sim_texobj *o = NULL;

	(void)dev;
	pthread_mutex_lock(&tex_lock);
	if (handle > 0 && handle < SIM_MAX_TEX && texes[handle] && texes[handle]->t.surface == surface) {
		o = texes[handle];
		texes[handle] = NULL;
	}
	pthread_mutex_unlock(&tex_lock);
	if (!o)
		return -PHOS_CUDA_INVALID_VALUE;
	free(o);
	return 0;
}

void phos_sim_tex_clear(void)
{
	pthread_mutex_lock(&tex_lock);
	for (uint32_t i = 1; i < SIM_MAX_TEX; i++) {
		free(texes[i]);
		texes[i] = NULL;
	}
	pthread_mutex_unlock(&tex_lock);
}
