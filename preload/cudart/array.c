/* SPDX-License-Identifier: MIT */
/*
 * CUDA arrays, texture and surface objects (issue 12): cudaMallocArray,
 * cudaMalloc3DArray, cudaFreeArray, cudaArrayGetInfo, cudaGetChannelDesc, the
 * copies to, from and between arrays (2D, the deprecated 1D forms, and
 * cudaMemcpy3D with an array side), cudaCreateTextureObject and
 * cudaCreateSurfaceObject with their getters and destructors.
 *
 * An array is a wrapped handle (internal.h) of kind PHOS_H_ARRAY whose id the
 * executor knows it by; what it was made with is kept here, so that the
 * getters and the checks of every copy need no round trip. A texture or
 * surface object is the executor's device handle (a small integer the
 * program passes to kernels); its descriptors are kept here for the getters.
 *
 * Copies are checked here as CUDA checks them before any record is sent (a
 * box outside the array, an unknown array, a host pointer where the kind
 * says device: cudaErrorInvalidValue), then go as PHOS_OP_ARRAY_COPY records:
 * host rows packed, at most PHOS_REC_MAX_PAYLOAD per record into an array
 * and PHOS_REPLY_MAX per reply out of one, in whole rows or pieces of a row.
 *
 * Not supported, refused with cudaErrorNotSupported and named once in the
 * log: mipmapped arrays, resource views, sparse and deferred-mapping arrays,
 * the packed and block-compressed channel formats.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

struct phos_arr {
	struct cudaChannelFormatDesc desc;
	struct cudaExtent extent;      /* as given: height 0 for 1D, depth 0 for 2D */
	unsigned flags;
	uint32_t elem;                 /* bytes per element */
	uint64_t dims[3];              /* elements, at least 1 each */
};

static const struct phos_arr *array_get(cudaArray_const_t a, uint32_t *ret_id)
{
	uint32_t id = phos_handle_unwrap(a, PHOS_H_ARRAY);
	const struct phos_arr *arr = id ? phos_ids_get(PHOS_H_ARRAY, id) : NULL;

	if (arr && ret_id)
		*ret_id = id;
	return arr;
}

static void desc_bits(const struct cudaChannelFormatDesc *d, int32_t bits[4], int32_t *kind)
{
	bits[0] = d->x;
	bits[1] = d->y;
	bits[2] = d->z;
	bits[3] = d->w;
	*kind = (int32_t)d->f;
}

/* cudaErrorInvalidValue for a format CUDA refuses too, NotSupported for
 * those CUDA has and phos-fn does not (kinds past Float). */
static int format_check(const struct cudaChannelFormatDesc *d, uint32_t *ret_elem)
{
	int32_t bits[4], kind;
	uint32_t channels, cbytes;
	static int logged;

	desc_bits(d, bits, &kind);
	if (kind > cudaChannelFormatKindNone) {
		phos_log_once("channel format", "(packed, NV12 or block-compressed)", &logged);
		return cudaErrorNotSupported;
	}
	if (phos_channel_format(bits, kind, &channels, &cbytes) < 0)
		return cudaErrorInvalidValue;
	*ret_elem = channels * cbytes;
	return cudaSuccess;
}

static int array_make(cudaArray_t *ret, const struct cudaChannelFormatDesc *desc, struct cudaExtent e,
		      unsigned flags)
{
	struct phos_array_create c = { .flags = flags, .width = e.width, .height = e.height, .depth = e.depth };
	struct phos_arr *a;
	uint32_t id;
	int r = phos_preload_connect();
	static int logged;

	if (r)
		return r;
	if (!ret || !desc)
		return cudaErrorInvalidValue;
	if (flags & ~(unsigned)(cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayCubemap |
				cudaArrayTextureGather)) {
		phos_log_once("array flag", "(sparse, deferred mapping, color attachment)", &logged);
		return cudaErrorNotSupported;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return cudaErrorMemoryAllocation;
	a->desc = *desc;
	a->extent = e;
	a->flags = flags;
	r = format_check(desc, &a->elem);
	desc_bits(desc, c.bits, &c.kind);
	if (r == cudaSuccess && !phos_array_extent(&c, a->elem, a->dims, &(uint64_t){ 0 }))
		r = cudaErrorInvalidValue;
	if (r == cudaSuccess && (r = phos_ids_add(PHOS_H_ARRAY, a, &id)) == cudaSuccess) {
		c.id = id;
		r = phos_preload_call(PHOS_OP_ARRAY_CREATE, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
		if (r) {
			phos_ids_take(PHOS_H_ARRAY, id);
		} else {
			*ret = phos_handle_wrap(PHOS_H_ARRAY, id);
			return cudaSuccess;
		}
	}
	free(a);
	return r;
}

PHOS_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
					size_t height, unsigned int flags)
{
	return phos_set_error(array_make(array, desc, (struct cudaExtent){ .width = width, .height = height }, flags));
}

PHOS_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
					  struct cudaExtent extent, unsigned int flags)
{
	return phos_set_error(array_make(array, desc, extent, flags));
}

PHOS_EXPORT cudaError_t cudaFreeArray(cudaArray_t array)
{
	struct phos_handle h = { 0 };
	int r = phos_preload_connect();

	if (r)
		return phos_set_error(r);
	if (!array)
		return cudaSuccess;
	if (!array_get(array, &h.id))
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_call(PHOS_OP_ARRAY_DESTROY, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
	if (r == cudaSuccess)
		free(phos_ids_take(PHOS_H_ARRAY, h.id));
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent,
					 unsigned int *flags, cudaArray_t array)
{
	const struct phos_arr *a = array_get(array, NULL);

	if (!a)
		return phos_set_error(cudaErrorInvalidValue);
	if (desc)
		*desc = a->desc;
	if (extent)
		*extent = a->extent;
	if (flags)
		*flags = a->flags;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array)
{
	const struct phos_arr *a = array_get(array, NULL);

	if (!a || !desc)
		return phos_set_error(cudaErrorInvalidValue);
	*desc = a->desc;
	return cudaSuccess;
}

/* --- copies --- */

enum side_type { S_HOST, S_DEVICE, S_ARRAY };

/* One side of an array copy: an array and a position (x in bytes), or memory
 * with its first row, pitch and slice stride. */
struct aside {
	enum side_type type;
	uint32_t array;
	uint64_t pos[3];
	uint8_t *ptr;
	uint64_t pitch, slice;
};

/* An array side, its box checked against the array. */
static int array_side(cudaArray_const_t array, uint64_t x_bytes, uint64_t y, uint64_t z, uint64_t width,
		      uint64_t height, uint64_t depth, struct aside *ret)
{
	const struct phos_arr *a = array_get(array, &ret->array);
	uint64_t row = a ? a->dims[0] * a->elem : 0;

	if (!a || x_bytes > row || width > row - x_bytes || y > a->dims[1] || height > a->dims[1] - y ||
	    z > a->dims[2] || depth > a->dims[2] - z)
		return cudaErrorInvalidValue;
	ret->type = S_ARRAY;
	ret->pos[0] = x_bytes;
	ret->pos[1] = y;
	ret->pos[2] = z;
	return cudaSuccess;
}

/* A memory side: host or device by kind (cudaMemcpyDefault: by where the
 * pointer is), in_array_kind the direction's letter for this side. */
static int memory_side(const void *ptr, uint64_t pitch, uint64_t slice, uint64_t width, uint64_t height,
		       uint64_t depth, enum cudaMemcpyKind kind, bool is_dst, struct aside *ret)
{
	uint64_t ext;
	bool dev;

	if (!ptr)
		return cudaErrorInvalidValue;
	if (height > 1 && pitch < width)
		return cudaErrorInvalidPitchValue;
	if (!phos_pitched_extent(pitch, slice, width, height, depth, &ext))
		return cudaErrorInvalidValue;
	dev = phos_mem_is_device(ptr, ext);
	switch (kind) {
	case cudaMemcpyDefault:
		break;
	case cudaMemcpyHostToDevice:
		if (dev != is_dst)
			return cudaErrorInvalidValue;
		break;
	case cudaMemcpyDeviceToHost:
		if (dev == is_dst)
			return cudaErrorInvalidValue;
		break;
	case cudaMemcpyDeviceToDevice:
		if (!dev)
			return cudaErrorInvalidValue;
		break;
	case cudaMemcpyHostToHost:
		return cudaErrorInvalidValue;   /* an array is on the device */
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
	ret->type = dev ? S_DEVICE : S_HOST;
	ret->ptr = (uint8_t *)(uintptr_t)ptr;
	ret->pitch = height > 1 ? pitch : pitch < width ? width : pitch;
	ret->slice = slice;
	return cudaSuccess;
}

static void side_into(const struct aside *s, uint64_t x, uint64_t y, uint64_t z, uint32_t *array, uint64_t pos[3],
		      uint64_t *addr, uint64_t *pitch, uint64_t *slice)
{
	if (s->type == S_ARRAY) {
		*array = s->array;
		pos[0] = s->pos[0] + x;
		pos[1] = s->pos[1] + y;
		pos[2] = s->pos[2] + z;
	} else if (s->type == S_DEVICE) {
		*addr = (uint64_t)(uintptr_t)(s->ptr + z * s->slice + y * s->pitch + x);
		*pitch = s->pitch;
		*slice = s->slice;
	}
}

/* One record: rows [y, y+n) of slices [z, z+nz), columns [x, x+w). */
static int send_piece(const struct aside *dst, const struct aside *src, uint32_t stream, uint64_t z, uint64_t nz,
		      uint64_t y, uint64_t n, uint64_t x, uint64_t w, uint8_t *buf, bool sync)
{
	struct phos_array_copy c = { .width = w, .height = n, .depth = nz, .stream = stream };
	uint64_t bytes = w * n * nz;
	size_t got = 0;
	int r;

	c.dir = src->type == S_HOST ? PHOS_COPY_H2D : dst->type == S_HOST ? PHOS_COPY_D2H : PHOS_COPY_D2D;
	side_into(dst, x, y, z, &c.darray, c.dpos, &c.dst, &c.dpitch, &c.dslice);
	side_into(src, x, y, z, &c.sarray, c.spos, &c.src, &c.spitch, &c.sslice);
	switch (c.dir) {
	case PHOS_COPY_H2D:
		for (uint64_t k = 0; k < nz; k++)
			for (uint64_t i = 0; i < n; i++)
				memcpy(buf + (k * n + i) * w, src->ptr + (z + k) * src->slice + (y + i) * src->pitch + x, w);
		if (sync)
			return phos_preload_call(PHOS_OP_ARRAY_COPY, &c, sizeof(c), buf, bytes, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_ARRAY_COPY, &c, sizeof(c), buf, bytes);
	case PHOS_COPY_D2H:
		r = phos_preload_call(PHOS_OP_ARRAY_COPY, &c, sizeof(c), NULL, 0, buf, bytes, &got, NULL);
		if (r)
			return r;
		if (got != bytes)
			return cudaErrorUnknown;
		for (uint64_t k = 0; k < nz; k++)
			for (uint64_t i = 0; i < n; i++)
				memcpy(dst->ptr + (z + k) * dst->slice + (y + i) * dst->pitch + x, buf + (k * n + i) * w, w);
		return cudaSuccess;
	default:
		if (sync)
			return phos_preload_call(PHOS_OP_ARRAY_COPY, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_ARRAY_COPY, &c, sizeof(c), NULL, 0);
	}
}

/* The common path of every array copy, once both sides are checked: a host
 * side in records of at most max packed bytes (whole rows, or pieces of one). */
static int copy_sides(const struct aside *dst, const struct aside *src, uint64_t width, uint64_t height,
		      uint64_t depth, const void *stream, bool sync)
{
	size_t max = src->type == S_HOST ? PHOS_REC_MAX_PAYLOAD : PHOS_REPLY_MAX;
	uint32_t sid;
	uint8_t *buf;
	int r;

	if (src->type == S_HOST && dst->type == S_HOST)
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &sid);
	if (r || !width || !height || !depth)
		return r;
	if (src->type != S_HOST && dst->type != S_HOST)
		return send_piece(dst, src, sid, 0, depth, 0, height, 0, width, NULL, sync);
	buf = malloc(width < max ? width * (max / width) : max);
	if (!buf)
		return cudaErrorMemoryAllocation;
	if (width <= max) {
		uint64_t per = max / width;

		for (uint64_t z = 0; z < depth && !r; z++)
			for (uint64_t y = 0; y < height && !r; y += per) {
				uint64_t n = height - y < per ? height - y : per;

				r = send_piece(dst, src, sid, z, 1, y, n, 0, width, buf,
					       sync && z + 1 == depth && y + n == height);
			}
	} else {
		for (uint64_t z = 0; z < depth && !r; z++)
			for (uint64_t y = 0; y < height && !r; y++)
				for (uint64_t x = 0; x < width && !r; x += max) {
					uint64_t w = width - x < max ? width - x : max;

					r = send_piece(dst, src, sid, z, 1, y, 1, x, w, buf,
						       sync && z + 1 == depth && y + 1 == height && x + w == width);
				}
	}
	free(buf);
	return r;
}

static int to_array_2d(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch,
		       size_t width, size_t height, enum cudaMemcpyKind kind, const void *stream, bool sync)
{
	struct aside d = { 0 }, s = { 0 };
	int r = phos_preload_connect();

	if (r == cudaSuccess)
		r = array_side(dst, wOffset, hOffset, 0, width, height, 1, &d);
	if (r == cudaSuccess)
		r = memory_side(src, spitch, 0, width, height, 1, kind, false, &s);
	return r ? r : copy_sides(&d, &s, width, height, 1, stream, sync);
}

static int from_array_2d(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
			 size_t width, size_t height, enum cudaMemcpyKind kind, const void *stream, bool sync)
{
	struct aside d = { 0 }, s = { 0 };
	int r = phos_preload_connect();

	if (r == cudaSuccess)
		r = array_side(src, wOffset, hOffset, 0, width, height, 1, &s);
	if (r == cudaSuccess)
		r = memory_side(dst, dpitch, 0, width, height, 1, kind, true, &d);
	return r ? r : copy_sides(&d, &s, width, height, 1, stream, sync);
}

PHOS_EXPORT cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
					    size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind)
{
	return phos_set_error(to_array_2d(dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
						 size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
						 cudaStream_t stream)
{
	return phos_set_error(to_array_2d(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, false));
}

PHOS_EXPORT cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
					      size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind)
{
	return phos_set_error(from_array_2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
						   size_t hOffset, size_t width, size_t height,
						   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return phos_set_error(from_array_2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, false));
}

PHOS_EXPORT cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
						 cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
						 size_t width, size_t height, enum cudaMemcpyKind kind)
{
	struct aside d = { 0 }, s = { 0 };
	int r = phos_preload_connect();

	if (r == cudaSuccess && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
		r = cudaErrorInvalidMemcpyDirection;
	if (r == cudaSuccess)
		r = array_side(dst, wOffsetDst, hOffsetDst, 0, width, height, 1, &d);
	if (r == cudaSuccess)
		r = array_side(src, wOffsetSrc, hOffsetSrc, 0, width, height, 1, &s);
	if (r == cudaSuccess)
		r = copy_sides(&d, &s, width, height, 1, NULL, false);
	return phos_set_error(r);
}

/* The deprecated 1D forms copy count bytes from (wOffset, hOffset) on through
 * the array's rows in order: a first partial row, whole rows, a last partial
 * row. */
static int linear_array_copy(cudaArray_const_t array, size_t wOffset, size_t hOffset, void *mem, size_t count,
			     enum cudaMemcpyKind kind, bool to_array, const void *stream, bool sync)
{
	const struct phos_arr *a = array_get(array, NULL);
	uint64_t row = a ? a->dims[0] * a->elem : 0, x = wOffset, y = hOffset, done = 0;
	int r = phos_preload_connect();

	if (r)
		return r;
	/* the whole run lies inside the array (a 1D or 2D one): nothing half-done */
	if (!a || a->dims[2] != 1 || wOffset >= row || hOffset >= a->dims[1] ||
	    count > (a->dims[1] - hOffset) * row - wOffset)
		return count ? cudaErrorInvalidValue : (a ? cudaSuccess : cudaErrorInvalidValue);
	while (done < count && r == cudaSuccess) {
		uint64_t n = count - done, h = 1;

		if (x == 0 && n >= row) {   /* whole rows */
			h = n / row;
			n = h * row;
		} else if (n > row - x) {   /* to the end of this row */
			n = row - x;
		}
		if (to_array)
			r = to_array_2d((cudaArray_t)(uintptr_t)array, x, y, (uint8_t *)mem + done, h > 1 ? row : n,
					h > 1 ? row : n, h, kind, stream, sync);
		else
			r = from_array_2d((uint8_t *)mem + done, h > 1 ? row : n, array, x, y, h > 1 ? row : n, h,
					  kind, stream, sync);
		done += n;
		y += h == 1 ? (x + n == row) : h;
		x = h == 1 ? (x + n) % row : 0;
	}
	return r;
}

PHOS_EXPORT cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
					  size_t count, enum cudaMemcpyKind kind)
{
	return phos_set_error(linear_array_copy(dst, wOffset, hOffset, (void *)(uintptr_t)src, count, kind, true, NULL,
						true));
}

PHOS_EXPORT cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
					       size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return phos_set_error(linear_array_copy(dst, wOffset, hOffset, (void *)(uintptr_t)src, count, kind, true,
						stream, false));
}

PHOS_EXPORT cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
					    size_t count, enum cudaMemcpyKind kind)
{
	return phos_set_error(linear_array_copy(src, wOffset, hOffset, dst, count, kind, false, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
						 size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return phos_set_error(linear_array_copy(src, wOffset, hOffset, dst, count, kind, false, stream, false));
}

/* cudaMemcpy3D with an array on one side or both: the extent and both
 * positions are in elements of the array, a pitched pointer's x too (what an
 * H200 does, 2026-11-26; the documentation says bytes for the pointer). */
int phos_array_memcpy_3d(const void *params, const void *stream, bool sync)
{
	const struct cudaMemcpy3DParms *p = params;
	const struct phos_arr *sa = p->srcArray ? array_get(p->srcArray, NULL) : NULL;
	const struct phos_arr *da = p->dstArray ? array_get(p->dstArray, NULL) : NULL;
	uint64_t elem, width, height = p->extent.height, depth = p->extent.depth;
	struct aside d = { 0 }, s = { 0 };
	int r;

	if ((p->srcArray && !sa) || (p->dstArray && !da) || (p->srcArray && p->srcPtr.ptr) ||
	    (p->dstArray && p->dstPtr.ptr))
		return cudaErrorInvalidValue;
	elem = sa ? sa->elem : da->elem;
	if (sa && da && sa->elem != da->elem)
		return cudaErrorInvalidValue;
	if (p->extent.width > UINT64_MAX / elem)
		return cudaErrorInvalidValue;
	width = p->extent.width * elem;
	if (sa)
		r = array_side(p->srcArray, p->srcPos.x * elem, p->srcPos.y, p->srcPos.z, width, height, depth, &s);
	else
		r = memory_side((uint8_t *)p->srcPtr.ptr + p->srcPos.z * p->srcPtr.pitch * p->srcPtr.ysize +
					p->srcPos.y * p->srcPtr.pitch + p->srcPos.x * elem,
				p->srcPtr.pitch, p->srcPtr.pitch * p->srcPtr.ysize, width, height, depth, p->kind, false,
				&s);
	if (r)
		return r;
	if (da)
		r = array_side(p->dstArray, p->dstPos.x * elem, p->dstPos.y, p->dstPos.z, width, height, depth, &d);
	else
		r = memory_side((uint8_t *)p->dstPtr.ptr + p->dstPos.z * p->dstPtr.pitch * p->dstPtr.ysize +
					p->dstPos.y * p->dstPtr.pitch + p->dstPos.x * elem,
				p->dstPtr.pitch, p->dstPtr.pitch * p->dstPtr.ysize, width, height, depth, p->kind, true,
				&d);
	return r ? r : copy_sides(&d, &s, width, height, depth, stream, sync);
}

/* --- texture and surface objects --- */

struct tex_info {
	uint64_t handle;
	bool surface;
	struct cudaResourceDesc res;
	struct cudaTextureDesc tex;
	struct tex_info *next;
};

static pthread_mutex_t tex_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tex_info *texes;

static int tex_make(uint64_t *ret, const struct cudaResourceDesc *res, const struct cudaTextureDesc *tex,
		    const struct cudaResourceViewDesc *view, bool surface)
{
	struct phos_tex_create c = { .surface = surface };
	struct tex_info *info;
	uint64_t handle = 0;
	size_t got = 0;
	int r = phos_preload_connect();
	static int logged_mip, logged_view;

	if (r)
		return r;
	if (!ret || !res || (!surface && !tex))
		return cudaErrorInvalidValue;
	if (view) {
		phos_log_once("resource views in", "cudaCreateTextureObject", &logged_view);
		return cudaErrorNotSupported;
	}
	switch (res->resType) {
	case cudaResourceTypeArray:
		c.res_type = PHOS_RES_ARRAY;
		if (!array_get(res->res.array.array, &c.array))
			return cudaErrorInvalidValue;
		break;
	case cudaResourceTypeLinear:
		c.res_type = PHOS_RES_LINEAR;
		c.ptr = (uint64_t)(uintptr_t)res->res.linear.devPtr;
		c.size = res->res.linear.sizeInBytes;
		desc_bits(&res->res.linear.desc, c.bits, &c.kind);
		break;
	case cudaResourceTypePitch2D:
		c.res_type = PHOS_RES_PITCH2D;
		c.ptr = (uint64_t)(uintptr_t)res->res.pitch2D.devPtr;
		c.width = res->res.pitch2D.width;
		c.height = res->res.pitch2D.height;
		c.pitch = res->res.pitch2D.pitchInBytes;
		desc_bits(&res->res.pitch2D.desc, c.bits, &c.kind);
		break;
	case cudaResourceTypeMipmappedArray:
		phos_log_once("mipmapped arrays in", surface ? "cudaCreateSurfaceObject" : "cudaCreateTextureObject",
			      &logged_mip);
		return cudaErrorNotSupported;
	default:
		return cudaErrorInvalidValue;
	}
	if (surface && c.res_type != PHOS_RES_ARRAY)
		return cudaErrorInvalidValue;
	if (c.res_type != PHOS_RES_ARRAY) {
		uint32_t elem;

		r = format_check(c.res_type == PHOS_RES_LINEAR ? &res->res.linear.desc : &res->res.pitch2D.desc,
				 &elem);
		if (r)
			return r;
	}
	if (tex) {
		for (int i = 0; i < 3; i++)
			c.address[i] = tex->addressMode[i];
		c.filter = tex->filterMode;
		c.read_mode = tex->readMode;
		c.srgb = tex->sRGB;
		c.normalized_coords = tex->normalizedCoords;
		c.max_anisotropy = (int32_t)tex->maxAnisotropy;
		c.mip_filter = tex->mipmapFilterMode;
		c.mip_bias = tex->mipmapLevelBias;
		c.min_mip_clamp = tex->minMipmapLevelClamp;
		c.max_mip_clamp = tex->maxMipmapLevelClamp;
		c.no_trilinear_opt = tex->disableTrilinearOptimization;
		c.seamless_cubemap = tex->seamlessCubemap;
		memcpy(c.border, tex->borderColor, sizeof(c.border));
		for (int i = 0; i < 3; i++)
			if (c.address[i] < cudaAddressModeWrap || c.address[i] > cudaAddressModeBorder)
				return cudaErrorInvalidValue;
		if (c.filter < cudaFilterModePoint || c.filter > cudaFilterModeLinear ||
		    c.read_mode < cudaReadModeElementType || c.read_mode > cudaReadModeNormalizedFloat)
			return cudaErrorInvalidValue;
	}
	info = calloc(1, sizeof(*info));
	if (!info)
		return cudaErrorMemoryAllocation;
	r = phos_preload_call(PHOS_OP_TEX_CREATE, &c, sizeof(c), NULL, 0, &handle, sizeof(handle), &got, NULL);
	if (r == cudaSuccess && got != sizeof(handle))
		r = cudaErrorUnknown;
	if (r) {
		free(info);
		return r;
	}
	info->handle = handle;
	info->surface = surface;
	info->res = *res;
	if (tex)
		info->tex = *tex;
	pthread_mutex_lock(&tex_lock);
	info->next = texes;
	texes = info;
	pthread_mutex_unlock(&tex_lock);
	*ret = handle;
	return cudaSuccess;
}

/* The descriptors of a live object (copied), or false. */
static bool tex_find(uint64_t handle, bool surface, struct tex_info *ret, bool take)
{
	bool found = false;

	pthread_mutex_lock(&tex_lock);
	for (struct tex_info **p = &texes; *p; p = &(*p)->next) {
		struct tex_info *t = *p;

		if (t->handle != handle || t->surface != surface)
			continue;
		found = true;
		if (ret)
			*ret = *t;
		if (take) {
			*p = t->next;
			free(t);
		}
		break;
	}
	pthread_mutex_unlock(&tex_lock);
	return found;
}

static int tex_destroy(uint64_t handle, bool surface)
{
	struct phos_tex_destroy d = { .handle = handle, .surface = surface };
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!tex_find(handle, surface, NULL, false))
		return cudaSuccess;   /* as CUDA answers for a handle that is not one */
	r = phos_preload_call(PHOS_OP_TEX_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0, NULL, NULL);
	if (r == cudaSuccess)
		tex_find(handle, surface, NULL, true);
	return r;
}

PHOS_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject, const struct cudaResourceDesc *pResDesc,
						const struct cudaTextureDesc *pTexDesc,
						const struct cudaResourceViewDesc *pResViewDesc)
{
	return phos_set_error(tex_make((uint64_t *)pTexObject, pResDesc, pTexDesc, pResViewDesc, false));
}

PHOS_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject)
{
	return phos_set_error(tex_destroy(texObject, false));
}

PHOS_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc,
							 cudaTextureObject_t texObject)
{
	struct tex_info t;

	if (!pResDesc || !tex_find(texObject, false, &t, false))
		return phos_set_error(cudaErrorInvalidValue);
	*pResDesc = t.res;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc,
							cudaTextureObject_t texObject)
{
	struct tex_info t;

	if (!pTexDesc || !tex_find(texObject, false, &t, false))
		return phos_set_error(cudaErrorInvalidValue);
	*pTexDesc = t.tex;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject, const struct cudaResourceDesc *pResDesc)
{
	return phos_set_error(tex_make((uint64_t *)pSurfObject, pResDesc, NULL, NULL, true));
}

PHOS_EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject)
{
	return phos_set_error(tex_destroy(surfObject, true));
}

PHOS_EXPORT cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc,
							 cudaSurfaceObject_t surfObject)
{
	struct tex_info t;

	if (!pResDesc || !tex_find(surfObject, true, &t, false))
		return phos_set_error(cudaErrorInvalidValue);
	*pResDesc = t.res;
	return cudaSuccess;
}

/* cudaDeviceReset: the executor dropped every array and object. */
void phos_array_reset(void)
{
	struct tex_info *t;

	phos_ids_clear(PHOS_H_ARRAY, free);
	pthread_mutex_lock(&tex_lock);
	while ((t = texes)) {
		texes = t->next;
		free(t);
	}
	pthread_mutex_unlock(&tex_lock);
}
