/* SPDX-License-Identifier: MIT */
/*
 * Texture and surface objects of the sim device, as host twins read them
 * (issue 12). The sim device keeps CUDA arrays as host memory and each
 * texture or surface object as a struct phos_sim_tex; a kernel gets the
 * object's handle (its cudaTextureObject_t / cudaSurfaceObject_t value, a
 * small integer as on a GPU) as a parameter, and its twin looks the handle up:
 *
 *   twin plugin ─ exports phos_sim_twins_bind(lookup) ─▶ the sim device calls
 *                 it once at load with its lookup function
 *   twin        ─ t = lookup(handle) ─▶ phos_sim_tex_* helpers below sample it
 *
 * Layout: element (x, y, z) of an object is at base + z * slice + y * pitch +
 * x * elem_bytes, for x < width, y < height, z < depth (height and depth are 1
 * when the object has fewer dimensions; for a layered array, depth counts the
 * layers). An element is `channels` channels of `channel_bytes` bytes each.
 */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* cudaChannelFormatKind values */
enum { PHOS_SIM_KIND_SIGNED = 0, PHOS_SIM_KIND_UNSIGNED = 1, PHOS_SIM_KIND_FLOAT = 2 };
/* cudaTextureAddressMode values */
enum { PHOS_SIM_ADDR_WRAP = 0, PHOS_SIM_ADDR_CLAMP = 1, PHOS_SIM_ADDR_MIRROR = 2, PHOS_SIM_ADDR_BORDER = 3 };
/* cudaTextureFilterMode, cudaTextureReadMode values */
enum { PHOS_SIM_FILTER_POINT = 0, PHOS_SIM_FILTER_LINEAR = 1 };
enum { PHOS_SIM_READ_ELEMENT = 0, PHOS_SIM_READ_NORMALIZED = 1 };
/* cudaResourceType values: what the object reads */
enum { PHOS_SIM_RES_ARRAY = 0, PHOS_SIM_RES_LINEAR = 2, PHOS_SIM_RES_PITCH2D = 3 };

struct phos_sim_tex {
	bool surface;              /* a surface object (always over an array) */
	int res_type;              /* PHOS_SIM_RES_* */
	int dims;                  /* 1, 2 or 3 (an array's; linear: 1; pitch2D: 2) */
	bool layered;              /* an array made with cudaArrayLayered: depth = layers */
	uint8_t *base;
	uint64_t pitch, slice;     /* bytes */
	uint64_t width, height, depth;   /* elements */
	uint32_t channels;         /* 1..4 */
	uint32_t channel_bytes;    /* 1, 2 or 4 */
	uint32_t elem_bytes;       /* channels * channel_bytes */
	int kind;                  /* PHOS_SIM_KIND_*; a 2-byte FLOAT channel is a half */
	/* textures only */
	int address[3];            /* PHOS_SIM_ADDR_* per dimension */
	int filter;                /* PHOS_SIM_FILTER_* */
	int read_mode;             /* PHOS_SIM_READ_* */
	bool normalized_coords;
	float border[4];
};

/* The sim device's lookup: the object of a handle, or NULL for none. */
typedef const struct phos_sim_tex *(*phos_sim_tex_lookup_fn)(uint64_t handle);
/* What a twin plugin may export to be given the lookup at load. */
typedef void (*phos_sim_twins_bind_fn)(phos_sim_tex_lookup_fn lookup);
#define PHOS_SIM_TWINS_BIND "phos_sim_twins_bind"

/*
 * Sampling helpers: CUDA's texture fetch rules (CUDA C++ Programming Guide,
 * appendix "Texture Fetching"), for twins to sample the object a handle names.
 *
 *   coordinate x along a dimension of N elements
 *     normalized: wrap (x - floor(x)) or mirror (the same, reversed when
 *     floor(x) is odd) applied to x itself, then u = x * N; else u = x
 *   point:   i = floor(u)                      T[i]
 *   linear:  i = floor(u - 0.5), a = its frac  (1 - a) T[i] + a T[i + 1],
 *            per filtered dimension (bilinear, trilinear); exact float
 *            weights where the GPU uses 8 fractional bits: compare the two
 *            with a tolerance
 *   each index i then addressed: clamp to [0, N - 1]; border: outside reads
 *   border[] (channels past t's read 0 there too); wrap: i mod N; mirror:
 *   reflected (-1 -> 0, N -> N - 1). With unnormalized coordinates wrap and
 *   mirror act as clamp, as they do on a GPU.
 *
 * Layers are not filtered or addressed: the layer is an integer, and one out
 * of range, negative ones included (taken as unsigned), reads the last layer
 * (as seen on an H200). It is z for a 2D layered array, y for a 1D layered
 * one, whose layers may be kept as rows (depth 1) or as slices. dims counts
 * an array's own dimensions, the layers not included.
 *
 * An element decodes channel by channel: FLOAT of 4 bytes is a float, of 2 a
 * half; SIGNED and UNSIGNED of 1, 2 or 4 bytes are integers, converted to
 * float (the twin converts back for tex2D<int> and the like), except that
 * with read mode NORMALIZED 1- and 2-byte integers map to [0, 1] (unsigned,
 * v / 255, v / 65535) or [-1, 1] (signed, max(v / 127, -1), ...). Channels
 * past `channels` read 0.
 *
 * The helpers call nothing from libm, so that a twin plugin need not link it.
 */

/* floor(x); x itself where it is an integer already (|x| >= 2^23), or NaN. */
static inline float phos_sim_floorf(float x)
{
	float i;

	if (!(x > -8388608.0f && x < 8388608.0f))
		return x;
	i = (float)(int32_t)x;   /* toward zero */
	return i > x ? i - 1.0f : i;
}

/* The float value of an IEEE 754 half. */
static inline float phos_sim_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0) {                     /* zero or subnormal: man * 2^-24 */
		f = (float)man * (1.0f / 16777216.0f);
		return sign ? -f : f;
	}
	if (exp == 0x1f)                    /* infinity or NaN */
		bits = sign | 0x7f800000u | (man << 13);
	else                                /* rebias 15 -> 127 */
		bits = sign | ((exp + 112) << 23) | (man << 13);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* The value of the channel at p, decoded as t's kind and read mode say. */
static inline float phos_sim_tex_channel(const struct phos_sim_tex *t, const uint8_t *p)
{
	bool is_signed = t->kind == PHOS_SIM_KIND_SIGNED;
	float v, max;
	uint16_t u16;
	uint32_t u32;

	if (t->kind == PHOS_SIM_KIND_FLOAT && t->channel_bytes == 2) {
		memcpy(&u16, p, 2);
		return phos_sim_half_to_float(u16);
	}
	if (t->kind == PHOS_SIM_KIND_FLOAT) {
		memcpy(&v, p, 4);
		return v;
	}
	switch (t->channel_bytes) {
	case 1:
		v = is_signed ? (float)(int8_t)p[0] : (float)p[0];
		max = is_signed ? 127.0f : 255.0f;
		break;
	case 2:
		memcpy(&u16, p, 2);
		v = is_signed ? (float)(int16_t)u16 : (float)u16;
		max = is_signed ? 32767.0f : 65535.0f;
		break;
	default:   /* 32-bit integers are never normalized */
		memcpy(&u32, p, 4);
		return is_signed ? (float)(int32_t)u32 : (float)u32;
	}
	if (t->read_mode != PHOS_SIM_READ_NORMALIZED)
		return v;
	return v / max < -1.0f ? -1.0f : v / max;
}

/* Element (x, y, z) of t, in range, decoded into out[0..3]. */
static inline void phos_sim_tex_element(const struct phos_sim_tex *t, uint64_t x, uint64_t y, uint64_t z,
					float out[4])
{
	const uint8_t *p = t->base + z * t->slice + y * t->pitch + x * t->elem_bytes;

	for (uint32_t c = 0; c < 4; c++)
		out[c] = c < t->channels ? phos_sim_tex_channel(t, p + c * t->channel_bytes) : 0.0f;
}

/* Index i along a dimension of n elements under address mode `mode`: in
 * [0, n), or -1 where border mode reads the border color. */
static inline int64_t phos_sim_tex_address(int mode, bool normalized, int64_t i, int64_t n)
{
	if (i >= 0 && i < n)
		return i;
	if (mode == PHOS_SIM_ADDR_BORDER)
		return -1;
	if (normalized && mode == PHOS_SIM_ADDR_WRAP)
		return (i % n + n) % n;
	if (normalized && mode == PHOS_SIM_ADDR_MIRROR) {
		int64_t m = (i % (2 * n) + 2 * n) % (2 * n);

		return m < n ? m : 2 * n - 1 - m;
	}
	return i < 0 ? 0 : n - 1;
}

/* Coordinate x along dimension d of n elements in elements: wrap or mirror
 * applied to a normalized coordinate, then scaled by n. */
static inline float phos_sim_tex_scale(const struct phos_sim_tex *t, int d, float x, uint64_t n)
{
	float f = phos_sim_floorf(x);
	bool odd = f > -16777216.0f && f < 16777216.0f && ((int32_t)f & 1);   /* past 2^24: even */

	if (!t->normalized_coords)
		return x;
	if (t->address[d] == PHOS_SIM_ADDR_WRAP)
		x -= f;
	else if (t->address[d] == PHOS_SIM_ADDR_MIRROR)
		x = odd ? 1.0f - (x - f) : x - f;
	return x * (float)n;
}

/* tex1D, tex2D, tex3D, tex1DLayered (y: the layer), tex2DLayered (z: the
 * layer) on t, into out[0..3] (channels past t's read 0). */
static inline void phos_sim_tex_fetch(const struct phos_sim_tex *t, float x, float y, float z, float out[4])
{
	const float coord[3] = { x, y, z };
	const uint64_t size[3] = { t->width, t->height, t->depth };
	int filtered = t->layered ? (t->dims == 1 ? 1 : 2) : t->dims;
	int64_t first[3] = { 0, 0, 0 };
	float frac[3] = { 0, 0, 0 };
	int taps[3] = { 1, 1, 1 };

	for (int d = 0; d < filtered; d++) {
		float u = phos_sim_tex_scale(t, d, coord[d], size[d]);

		if (t->filter == PHOS_SIM_FILTER_LINEAR) {
			u -= 0.5f;
			taps[d] = 2;
		}
		u = !(u > -1e9f) ? -1e9f : u < 1e9f ? u : 1e9f;   /* NaN, far out: an index that converts */
		first[d] = (int64_t)phos_sim_floorf(u);
		frac[d] = u - phos_sim_floorf(u);
	}
	if (t->layered) {   /* the layer's index, in the dimension that holds the layers */
		int d = t->dims == 1 && t->depth <= 1 ? 1 : 2;
		float layer = phos_sim_floorf(t->dims == 1 ? y : z);

		first[d] = layer >= 0.0f && layer < (float)size[d] ? (int64_t)layer : (int64_t)size[d] - 1;
	}
	memset(out, 0, 4 * sizeof(float));
	for (int k = 0; k < taps[2]; k++)
		for (int j = 0; j < taps[1]; j++)
			for (int i = 0; i < taps[0]; i++) {
				const int tap[3] = { i, j, k };
				int64_t at[3];
				float w = 1.0f, e[4];
				bool border = false;

				for (int d = 0; d < 3; d++) {
					if (taps[d] == 2)
						w *= tap[d] ? frac[d] : 1.0f - frac[d];
					at[d] = first[d] + tap[d];
					if (d < filtered)
						at[d] = phos_sim_tex_address(t->address[d], t->normalized_coords, at[d],
									     (int64_t)size[d]);
					border |= at[d] < 0;
				}
				if (w == 0.0f)
					continue;
				if (border)
					for (uint32_t c = 0; c < 4; c++)
						e[c] = c < t->channels ? t->border[c] : 0.0f;
				else
					phos_sim_tex_element(t, (uint64_t)at[0], (uint64_t)at[1], (uint64_t)at[2], e);
				for (int c = 0; c < 4; c++)
					out[c] += w * e[c];
			}
}

/* tex1Dfetch on t (a LINEAR resource): element i into out[0..3], no filtering
 * or addressing; out of range, zeros and false. */
static inline bool phos_sim_tex1dfetch(const struct phos_sim_tex *t, int64_t i, float out[4])
{
	if (i < 0 || (uint64_t)i >= t->width) {
		memset(out, 0, 4 * sizeof(float));
		return false;
	}
	phos_sim_tex_element(t, (uint64_t)i, 0, 0, out);
	return true;
}

/* The address surf1D/2D/3D/1DLayered/2DLayered read and write at x_bytes
 * (bytes, as CUDA's surface functions take x), y, z (a 1D layered surface:
 * y is the layer); NULL where an element there would not be wholly inside
 * (cudaBoundaryModeZero: reads give 0, writes are dropped). */
static inline void *phos_sim_surf_ptr(const struct phos_sim_tex *t, int64_t x_bytes, int64_t y, int64_t z)
{
	if (t->layered && t->dims == 1 && t->depth > 1) {   /* layers kept as slices */
		z = y;
		y = 0;
	}
	if (x_bytes < 0 || y < 0 || z < 0 || (uint64_t)x_bytes + t->elem_bytes > t->width * t->elem_bytes ||
	    (uint64_t)y >= t->height || (uint64_t)z >= t->depth)
		return NULL;
	return t->base + (uint64_t)z * t->slice + (uint64_t)y * t->pitch + (uint64_t)x_bytes;
}
