/* SPDX-License-Identifier: MIT */
/*
 * Pitched copies and sets: cudaMemcpy2D/3D(Async), cudaMemset2D/3D(Async),
 * cudaMalloc3D. A cudaMemcpy3D with a CUDA array goes to array.c.
 *
 * Every form becomes one geometry (proto.h, struct phos_memcpy_2d): depth
 * slices of height rows of width bytes, each device side with its pitch and
 * slice stride. Arguments are checked here as CUDA checks them, before any
 * record is sent, so bad input never leaves a half-done copy:
 *
 *   pitch < width (2D: always; 3D: with more than a row) cudaErrorInvalidPitchValue
 *     (cudaMemcpy2D(Async) of a single row: cudaErrorInvalidValue)
 *   pitch > cudaDevAttrMaxPitch                         cudaErrorInvalidPitchValue
 *   NULL pointer, a device side outside device memory  cudaErrorInvalidValue
 *   an unknown kind, or one the pointers contradict    cudaErrorInvalidMemcpyDirection
 *
 * Host rows travel packed: an H2D copy sends them in records of at most
 * PHOS_REC_MAX_PAYLOAD bytes, a D2H copy fetches them in synchronous replies of
 * at most PHOS_REPLY_MAX; both in whole rows, or in pieces of a row when one
 * row is bigger than that. A D2D copy or a set is one record whatever its size.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

/* One side of a pitched copy: its first row, pitch and slice stride. */
struct side {
	uint8_t *ptr;
	size_t pitch, slice;
};

/* Bytes from a side's first row to the end of its last row (0 when empty). */
static bool side_extent(const struct side *s, size_t width, size_t height, size_t depth, size_t *ret)
{
	uint64_t e = 0;

	if (!phos_pitched_extent(s->pitch, s->slice, width, height, depth, &e) || e > SIZE_MAX)
		return false;
	*ret = (size_t)e;
	return true;
}

static int check_pitch(size_t pitch, size_t width, size_t height)
{
	int max_pitch = 0;

	if (height > 1 && pitch < width)
		return cudaErrorInvalidPitchValue;
	if (phos_device_attr(cudaDevAttrMaxPitch, &max_pitch) == cudaSuccess && max_pitch > 0 &&
	    pitch > (size_t)max_pitch)
		return cudaErrorInvalidPitchValue;
	return cudaSuccess;
}

/* Host rows [y, y+n) of slice z, columns [x, x+w), packed into or out of buf. */
static void pack(uint8_t *buf, const struct side *h, size_t z, size_t y, size_t x, size_t w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		memcpy(buf + i * w, h->ptr + z * h->slice + (y + i) * h->pitch + x, w);
}

static void unpack(const struct side *h, const uint8_t *buf, size_t z, size_t y, size_t x, size_t w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		memcpy(h->ptr + z * h->slice + (y + i) * h->pitch + x, buf + i * w, w);
}

/* One record: rows [y, y+n) of slices [z, z+nz), columns [x, x+w). */
static int send_piece(const struct phos_memcpy_2d *whole, const struct side *dst, const struct side *src,
		      size_t z, size_t nz, size_t y, size_t n, size_t x, size_t w, uint8_t *buf, bool sync)
{
	struct phos_memcpy_2d c = *whole;
	size_t bytes = w * n * nz, got = 0;
	int r;

	c.width = w;
	c.height = n;
	c.depth = nz;
	if (c.dir != PHOS_COPY_H2D)
		c.src = (uint64_t)(uintptr_t)(src->ptr + z * src->slice + y * src->pitch + x);
	if (c.dir != PHOS_COPY_D2H)
		c.dst = (uint64_t)(uintptr_t)(dst->ptr + z * dst->slice + y * dst->pitch + x);
	switch (c.dir) {
	case PHOS_COPY_H2D:
		for (size_t k = 0; k < nz; k++)
			pack(buf + k * w * n, src, z + k, y, x, w, n);
		if (sync)
			return phos_preload_call(PHOS_OP_MEMCPY_2D, &c, sizeof(c), buf, bytes, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_MEMCPY_2D, &c, sizeof(c), buf, bytes);
	case PHOS_COPY_D2H:
		r = phos_preload_call(PHOS_OP_MEMCPY_2D, &c, sizeof(c), NULL, 0, buf, bytes, &got, NULL);
		if (r)
			return r;
		if (got != bytes)
			return cudaErrorUnknown;
		for (size_t k = 0; k < nz; k++)
			unpack(dst, buf + k * w * n, z + k, y, x, w, n);
		return cudaSuccess;
	default:
		if (sync)
			return phos_preload_call(PHOS_OP_MEMCPY_2D, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_MEMCPY_2D, &c, sizeof(c), NULL, 0);
	}
}

/* Splits a host-side copy into records of at most max packed bytes. */
static int send_split(const struct phos_memcpy_2d *c, const struct side *dst, const struct side *src,
		      size_t width, size_t height, size_t depth, size_t max, bool sync)
{
	uint8_t *buf;
	int r = cudaSuccess;

	buf = malloc(max);
	if (!buf)
		return cudaErrorMemoryAllocation;
	if (width * height <= max / depth) {
		r = send_piece(c, dst, src, 0, depth, 0, height, 0, width, buf, sync);
	} else if (width <= max) {
		size_t per = max / width;

		for (size_t z = 0; z < depth && !r; z++)
			for (size_t y = 0; y < height && !r; y += per) {
				size_t n = height - y < per ? height - y : per;
				bool last = z + 1 == depth && y + n == height;

				r = send_piece(c, dst, src, z, 1, y, n, 0, width, buf, sync && last);
			}
	} else {
		for (size_t z = 0; z < depth && !r; z++)
			for (size_t y = 0; y < height && !r; y++)
				for (size_t x = 0; x < width && !r; x += max) {
					size_t w = width - x < max ? width - x : max;
					bool last = z + 1 == depth && y + 1 == height && x + w == width;

					r = send_piece(c, dst, src, z, 1, y, 1, x, w, buf, sync && last);
				}
	}
	free(buf);
	return r;
}

/* The common path of every pitched copy. */
static int copy_pitched(struct side dst, struct side src, size_t width, size_t height, size_t depth,
			enum cudaMemcpyKind kind, const void *stream, bool sync)
{
	struct phos_memcpy_2d c = { 0 };
	size_t dext, sext;
	bool dd, sd;
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!dst.ptr || !src.ptr)
		return cudaErrorInvalidValue;
	r = check_pitch(dst.pitch, width, height);
	if (r == cudaSuccess)
		r = check_pitch(src.pitch, width, height);
	if (r)
		return r;
	if (!side_extent(&dst, width, height, depth, &dext) || !side_extent(&src, width, height, depth, &sext))
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &c.stream);
	if (r)
		return r;
	if (!width || !height || !depth)
		return cudaSuccess;
	dd = phos_mem_is_device(dst.ptr, dext);
	sd = phos_mem_is_device(src.ptr, sext);
	if (kind == cudaMemcpyDefault)
		kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
			  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
	switch (kind) {
	case cudaMemcpyHostToHost:
		if (dd || sd)
			return cudaErrorInvalidValue;
		for (size_t z = 0; z < depth; z++)
			for (size_t y = 0; y < height; y++)
				memmove(dst.ptr + z * dst.slice + y * dst.pitch, src.ptr + z * src.slice + y * src.pitch,
					width);
		return cudaSuccess;
	case cudaMemcpyHostToDevice:
		if (!dd)
			return cudaErrorInvalidValue;
		c.dir = PHOS_COPY_H2D;
		break;
	case cudaMemcpyDeviceToHost:
		if (!sd)
			return cudaErrorInvalidValue;
		c.dir = PHOS_COPY_D2H;
		break;
	case cudaMemcpyDeviceToDevice:
		if (!dd || !sd)
			return cudaErrorInvalidValue;
		c.dir = PHOS_COPY_D2D;
		break;
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
	c.dpitch = dst.pitch;
	c.spitch = src.pitch;
	c.dslice = dst.slice;
	c.sslice = src.slice;
	switch (c.dir) {
	case PHOS_COPY_H2D:
		return send_split(&c, &dst, &src, width, height, depth, PHOS_REC_MAX_PAYLOAD, sync);
	case PHOS_COPY_D2H:
		return send_split(&c, &dst, &src, width, height, depth, PHOS_REPLY_MAX, sync);
	default:
		return send_piece(&c, &dst, &src, 0, depth, 0, height, 0, width, NULL, sync);
	}
}

/* cudaMemcpy2D wants both pitches >= width even for a single row (its pitch
 * is unused then), and refuses a single row's with cudaErrorInvalidValue, not
 * cudaErrorInvalidPitchValue (as an H100 answered); the 3D forms check their
 * pitched pointers themselves. */
static int copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
		   enum cudaMemcpyKind kind, const void *stream, bool sync)
{
	struct side d = { .ptr = dst, .pitch = dpitch }, s = { .ptr = (uint8_t *)(uintptr_t)src, .pitch = spitch };

	if (height && (dpitch < width || spitch < width)) {
		int r = phos_preload_connect();

		return r ? r : height == 1 ? cudaErrorInvalidValue : cudaErrorInvalidPitchValue;
	}
	return copy_pitched(d, s, width, height, 1, kind, stream, sync);
}

PHOS_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				     size_t height, enum cudaMemcpyKind kind)
{
	return phos_set_error(copy_2d(dst, dpitch, src, spitch, width, height, kind, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
					  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_memcpy2d(stream, dst, dpitch, src, spitch, width, height, kind));
	return phos_set_error(copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false));
}

/* A pitched pointer at a position: its first row and strides. The slice stride
 * is pitch * ysize (the allocation's height in rows). */
static int pitched_side(const struct cudaPitchedPtr *p, const struct cudaPos *pos, const struct cudaExtent *e,
			struct side *ret)
{
	size_t off;

	if (!p->ptr)
		return cudaErrorInvalidValue;
	if (p->pitch < e->width && (e->height > 1 || e->depth > 1))
		return cudaErrorInvalidPitchValue;
	/* the rows copied stay inside the pitch, and the slices inside ysize rows */
	if (pos->x > p->pitch || e->width > p->pitch - pos->x)
		return cudaErrorInvalidValue;
	if (e->depth > 1 && (pos->y > p->ysize || e->height > p->ysize - pos->y))
		return cudaErrorInvalidValue;
	if (p->ysize && p->pitch > SIZE_MAX / p->ysize)
		return cudaErrorInvalidValue;
	ret->slice = p->pitch * p->ysize;
	if ((pos->z && ret->slice > SIZE_MAX / pos->z) || (pos->y && p->pitch > SIZE_MAX / pos->y))
		return cudaErrorInvalidValue;
	off = pos->z * ret->slice;
	if (pos->y * p->pitch > SIZE_MAX - off || pos->x > SIZE_MAX - off - pos->y * p->pitch)
		return cudaErrorInvalidValue;
	off += pos->y * p->pitch + pos->x;
	ret->ptr = (uint8_t *)p->ptr + off;
	ret->pitch = p->pitch;
	return cudaSuccess;
}

static int memcpy_3d(const struct cudaMemcpy3DParms *p, const void *stream, bool sync)
{
	struct side d, s;
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!p)
		return cudaErrorInvalidValue;
	if (p->srcArray || p->dstArray)
		return phos_array_memcpy_3d(p, stream, sync);
	r = pitched_side(&p->dstPtr, &p->dstPos, &p->extent, &d);
	if (r == cudaSuccess)
		r = pitched_side(&p->srcPtr, &p->srcPos, &p->extent, &s);
	if (r)
		return r;
	return copy_pitched(d, s, p->extent.width, p->extent.height, p->extent.depth, p->kind, stream, sync);
}

PHOS_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
	return phos_set_error(memcpy_3d(p, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_memcpy3d(stream, p));
	return phos_set_error(memcpy_3d(p, stream, false));
}

/* --- sets --- */

static int memset_pitched(struct side dst, int value, size_t width, size_t height, size_t depth,
			  const void *stream)
{
	struct phos_memset_2d m = { .dst = (uint64_t)(uintptr_t)dst.ptr, .pitch = dst.pitch, .slice = dst.slice,
				    .width = width, .height = height, .depth = depth,
				    .value = (uint32_t)(value & 0xff) };
	size_t ext;
	int r = phos_preload_connect();

	if (r)
		return r;
	if (height > 1 && dst.pitch < width)
		return cudaErrorInvalidValue;
	if (!side_extent(&dst, width, height, depth, &ext))
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &m.stream);
	if (r)
		return r;
	if (!ext)
		return cudaSuccess;
	if (!dst.ptr || !phos_mem_is_device(dst.ptr, ext))
		return cudaErrorInvalidValue;
	return phos_preload_post(PHOS_OP_MEMSET_2D, &m, sizeof(m), NULL, 0);
}

PHOS_EXPORT cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height)
{
	struct side d = { .ptr = devPtr, .pitch = pitch };

	return phos_set_error(memset_pitched(d, value, width, height, 1, NULL));
}

PHOS_EXPORT cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height,
					  cudaStream_t stream)
{
	struct side d = { .ptr = devPtr, .pitch = pitch };

	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_memset2d(stream, devPtr, pitch, value, width, height));

	return phos_set_error(memset_pitched(d, value, width, height, 1, stream));
}

static int memset_3d(struct cudaPitchedPtr p, int value, struct cudaExtent e, const void *stream)
{
	struct side d = { .ptr = p.ptr, .pitch = p.pitch };

	if (e.depth > 1 && e.height > p.ysize)
		return cudaErrorInvalidValue;
	if (p.ysize && p.pitch > SIZE_MAX / p.ysize)
		return cudaErrorInvalidValue;
	d.slice = p.pitch * p.ysize;
	return memset_pitched(d, value, e.width, e.height, e.depth, stream);
}

PHOS_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent)
{
	return phos_set_error(memset_3d(pitchedDevPtr, value, extent, NULL));
}

PHOS_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
					  cudaStream_t stream)
{
	return phos_set_error(memset_3d(pitchedDevPtr, value, extent, stream));
}

/* Rows padded to 512 bytes, as cudaMallocPitch does here. */
PHOS_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	size_t pitch = 0, rows;
	void *p = NULL;
	cudaError_t r;

	if (!pitchedDevPtr)
		return phos_set_error(cudaErrorInvalidValue);
	if (extent.depth && extent.height > SIZE_MAX / extent.depth)
		return phos_set_error(cudaErrorMemoryAllocation);
	rows = extent.height * extent.depth;
	r = cudaMallocPitch(&p, &pitch, extent.width, rows);
	if (r == cudaSuccess) {
		pitchedDevPtr->ptr = p;
		pitchedDevPtr->pitch = pitch;
		pitchedDevPtr->xsize = extent.width;
		pitchedDevPtr->ysize = extent.height;
	}
	return r;
}
