/* SPDX-License-Identifier: MIT */
/*
 * CUDA arrays, texture and surface objects (issue 12).
 *
 *   arrays    ex->arrays: id (chosen by the preload) → struct exec_array,
 *             the device's array and how it was made
 *   objects   ex->texes: handle → struct exec_tex; the handle is the device's
 *             own (a small integer: the lowest free one of the context,
 *             textures and surfaces counted together), which the program
 *             passes to its kernels by value, so it cannot be translated
 *
 * In a snapshot (exec_image.c) each array is copied, at the moment of the
 * dump, into device scratch memory and from there into gpu.data like a
 * buffer; each object is listed with how it was made. A restore makes the
 * arrays again, fills them, and makes the objects again in the order of their
 * handles, with a stand-in object (made on a one-element array, destroyed at
 * the end) for every handle below the highest that was free: the device then
 * hands out exactly the recorded handles, and later creations fill the same
 * holes as they would have in the original process. A handle that comes out
 * different fails the restore, never a kernel's answer.
 *
 * Read/write sets: a copy between an array and device memory has the device
 * side's range; a kernel that reads a texture or touches a surface is opaque
 * (ptx_access.c), so an on-demand restore waits for every buffer before it
 * runs. Arrays themselves are restored before the function runs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "image.h"
#include "log.h"

void exec_array_free(struct executor *ex, struct exec_array *a)
{
	if (!a)
		return;
	if (a->dev)
		ex->dev_ops->array_destroy(ex->devs[a->device], a->dev);
	free(a);
}

void exec_tex_free(struct executor *ex, struct exec_tex *t)
{
	if (!t)
		return;
	if (t->live)
		ex->dev_ops->tex_destroy(ex->devs[t->device], t->handle, t->desc.surface);
	free(t);
}

static bool supported(const struct executor *ex)
{
	return ex->dev_ops->array_create && ex->dev_ops->tex_create;
}

int exec_array_make(struct executor *ex, const struct phos_array_create *d, struct exec_array **ret)
{
	struct exec_array *a;
	uint32_t channels, cbytes;
	int r;

	if (!supported(ex))
		return -PHOS_CUDA_NOT_SUPPORTED;
	if (d->id == 0 || handle_get(&ex->arrays, d->id))
		return -PHOS_CUDA_INVALID_VALUE;
	if (phos_channel_format(d->bits, d->kind, &channels, &cbytes) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	a->desc = *d;
	a->elem_bytes = channels * cbytes;
	if (!phos_array_extent(d, a->elem_bytes, a->dims, &a->bytes)) {
		free(a);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	a->device = ex->dev_index;
	r = ex->dev_ops->array_create(ex->dev, d, &a->dev);
	if (r == 0)
		r = handle_put(&ex->arrays, d->id, a);
	if (r < 0) {
		exec_array_free(ex, a);
		return r;
	}
	*ret = a;
	return 0;
}

/* A side of an array copy, checked: an array's box must lie inside it, a
 * device side inside one live buffer (added to set). */
static int copy_side(struct executor *ex, uint32_t array, const uint64_t pos[3], uint64_t addr, uint64_t pitch,
		     uint64_t slice, const struct phos_array_copy *c, uint8_t access, struct spec_set *set,
		     struct phos_copy_side *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (array) {
		const struct exec_array *a = handle_get(&ex->arrays, array);
		uint64_t row = a ? a->dims[0] * a->elem_bytes : 0;

		if (!a || pos[0] > row || c->width > row - pos[0] || pos[1] > a->dims[1] ||
		    c->height > a->dims[1] - pos[1] || pos[2] > a->dims[2] || c->depth > a->dims[2] - pos[2])
			return -PHOS_CUDA_INVALID_VALUE;
		ret->array = a->dev;
		ret->x = pos[0];
		ret->y = pos[1];
		ret->z = pos[2];
		return 0;
	}
	uint64_t ext;

	if (!phos_pitched_extent(pitch, slice, c->width, c->height, c->depth, &ext))
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(spec_range(ex, set, addr, ext, access));
	ret->addr = addr;
	ret->pitch = pitch;
	ret->slice = slice;
	return 0;
}

static int array_copy(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_array_copy, c);
	struct phos_copy_side dst, src;
	uint64_t packed;
	struct spec_set set;
	void *stream;

	spec_clear(&set);
	if (!supported(ex))
		return -PHOS_CUDA_NOT_SUPPORTED;
	TRY(exec_stream(ex, c->stream, &stream));
	if (c->dir < PHOS_COPY_H2D || c->dir > PHOS_COPY_D2D || (!c->darray && !c->sarray) ||
	    (c->dir == PHOS_COPY_H2D && !c->darray) || (c->dir == PHOS_COPY_D2H && !c->sarray))
		return -PHOS_CUDA_INVALID_VALUE;
	/* every dimension is bounded by an array's (2^20) or a buffer's extent */
	if (c->height && c->width > UINT64_MAX / c->height)
		return -PHOS_CUDA_INVALID_VALUE;
	packed = c->width * c->height;
	if (c->depth && packed > UINT64_MAX / c->depth)
		return -PHOS_CUDA_INVALID_VALUE;
	packed *= c->depth;
	if (c->dir == PHOS_COPY_H2D && packed != len - sizeof(*c))
		return -PHOS_CUDA_INVALID_VALUE;
	if (c->dir == PHOS_COPY_D2H && packed > PHOS_REPLY_MAX)
		return -PHOS_CUDA_INVALID_VALUE;
	if (c->dir == PHOS_COPY_H2D) {
		memset(&src, 0, sizeof(src));
		src.host = (void *)(uintptr_t)(c + 1);
		src.pitch = c->width;
		src.slice = c->width * c->height;
	} else {
		TRY(copy_side(ex, c->sarray, c->spos, c->src, c->spitch, c->sslice, c, SPEC_READ, &set, &src));
	}
	if (c->dir == PHOS_COPY_D2H) {
		memset(&dst, 0, sizeof(dst));
		dst.host = out;
		dst.pitch = c->width;
		dst.slice = c->width * c->height;
	} else {
		TRY(copy_side(ex, c->darray, c->dpos, c->dst, c->dpitch, c->dslice, c, SPEC_WRITE, &set, &dst));
	}
	TRY(spec_commit(ex, "array_copy", NULL, c->stream, &set));
	if (packed)
		TRY(ex->dev_ops->array_copy(ex->dev, &dst, &src, c->width, c->height, c->depth, stream));
	if (c->dir == PHOS_COPY_D2H)
		*out_len = (uint32_t)packed;
	return 0;
}

int exec_tex_make(struct executor *ex, const struct phos_tex_create *d, struct exec_tex **ret)
{
	struct exec_tex *t;
	void *array = NULL;
	int r;

	if (!supported(ex))
		return -PHOS_CUDA_NOT_SUPPORTED;
	if (d->res_type == PHOS_RES_ARRAY) {
		struct exec_array *a = handle_get(&ex->arrays, d->array);

		if (!a)
			return -PHOS_CUDA_INVALID_VALUE;
		array = a->dev;
	} else if (d->res_type == PHOS_RES_LINEAR || d->res_type == PHOS_RES_PITCH2D) {
		uint64_t ext = d->res_type == PHOS_RES_LINEAR ? d->size : 0;

		if (d->surface)
			return -PHOS_CUDA_INVALID_VALUE;
		if (d->res_type == PHOS_RES_PITCH2D) {
			uint32_t channels, cbytes;

			if (phos_channel_format(d->bits, d->kind, &channels, &cbytes) < 0 ||
			    !phos_pitched_extent(d->pitch, 0, d->width * channels * cbytes, d->height, 1, &ext))
				return -PHOS_CUDA_INVALID_VALUE;
		}
		/* the memory read through it lies inside one live buffer */
		if (!d->ptr || !ext || !phos_bufmap_contains(ex->bufs, d->ptr, ext))
			return -PHOS_CUDA_INVALID_VALUE;
	} else {
		return -PHOS_CUDA_INVALID_VALUE;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	t->desc = *d;
	t->device = ex->dev_index;
	r = ex->dev_ops->tex_create(ex->dev, d, array, &t->handle);
	if (r < 0) {
		free(t);
		return r;
	}
	t->live = true;
	if (t->handle == 0 || t->handle >= EXEC_MAX_HANDLES || handle_get(&ex->texes, (uint32_t)t->handle)) {
		phos_warn("the device gave a texture object handle %llu that phos-fn cannot keep",
			  (unsigned long long)t->handle);
		exec_tex_free(ex, t);
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
	r = handle_put(&ex->texes, (uint32_t)t->handle, t);
	if (r < 0) {
		exec_tex_free(ex, t);
		return r;
	}
	*ret = t;
	return 0;
}

int exec_array_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	switch (op) {
	case PHOS_OP_ARRAY_CREATE: {
		BODY(struct phos_array_create, d);
		struct exec_array *a;

		return exec_array_make(ex, d, &a);
	}
	case PHOS_OP_ARRAY_DESTROY: {
		BODY(struct phos_handle, h);
		struct exec_array *a = handle_take(&ex->arrays, h->id);

		if (!a)
			return -PHOS_CUDA_INVALID_VALUE;
		exec_sync_function(ex);   /* cudaFreeArray waits for work that may use it */
		for (uint32_t i = 0; i < ex->texes.cap; i++) {
			struct exec_tex *t = ex->texes.slot[i];

			if (t && t->desc.res_type == PHOS_RES_ARRAY && t->desc.array == h->id)
				t->dangling = true;
		}
		exec_array_free(ex, a);
		return 0;
	}
	case PHOS_OP_ARRAY_COPY:
		return array_copy(ex, body, len, out, out_len);
	case PHOS_OP_TEX_CREATE: {
		BODY(struct phos_tex_create, d);
		struct exec_tex *t;

		TRY(exec_tex_make(ex, d, &t));
		memcpy(out, &t->handle, sizeof(t->handle));
		*out_len = sizeof(t->handle);
		return 0;
	}
	case PHOS_OP_TEX_DESTROY: {
		BODY(struct phos_tex_destroy, d);
		struct exec_tex *t = d->handle < EXEC_MAX_HANDLES ? handle_get(&ex->texes, (uint32_t)d->handle) : NULL;

		if (!t || t->desc.surface != d->surface)
			return -PHOS_CUDA_INVALID_VALUE;
		handle_take(&ex->texes, (uint32_t)d->handle);
		exec_tex_free(ex, t);
		return 0;
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
