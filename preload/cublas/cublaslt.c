/* SPDX-License-Identifier: MIT */
/*
 * The cuBLASLt stand-in (libcublasLt.so.13): the matmul API that PyTorch,
 * cuBLAS itself and tuned programs use.
 *
 *   descriptors, layouts, preferences ── kept here, in the caller's storage
 *        (Create mallocs one, Init_internal uses the caller's; set and read
 *         back attribute by attribute, with cuBLASLt's size checks)
 *   cublasLtMatmulAlgoGetHeuristic ──── sync BLASLT_HEURISTIC: the problem and
 *        the preference, whole; the executor's cuBLASLt answers (sim: one algo).
 *        Answers are cached here per device, as cuBLASLt caches its own
 *        (cublasLtHeuristicsCacheSetCapacity(0) turns both off): PyTorch asks
 *        once per Linear layer per call, and a round trip each would cost
 *        more than the matmul of a small batch
 *   cublasLtMatmul ──────────────────── BLASLT_MATMUL, stream-ordered: descriptor,
 *        four layouts, addresses, scalars (host mode: their bytes; device
 *        mode: their addresses) and the algo as the heuristic gave it
 *
 * The handle holds nothing of the executor (a cuBLAS handle cast to one, as
 * cuBLAS allows, serves as well): the executor keeps one cublasLtHandle_t per
 * device, so a restored function's handles, descriptors and algos (plain
 * data, valid for the same cuBLASLt build) simply go on working.
 *
 * Attributes that phos cannot give an exact read/write set for (TRANSC,
 * FILL_MODE, alpha vectors, block scale modes, emulation descriptors, planar
 * complex, pointer-array batches, tiled orders) are stored and read back as
 * usual, and a matmul or heuristic that would use them answers
 * CUBLAS_STATUS_NOT_SUPPORTED with one line on stderr naming the attribute.
 * The rest of the API (algo enumeration and configuration, matrix transforms,
 * the internal typed entry points) are stubs that answer NOT_SUPPORTED, named
 * once in the log.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "blas_status.h"
#include "internal.h"
#include "log.h"

#define LT_HANDLE_MAGIC 0x7068544cu   /* "LThp" */
#define LT_LAYOUT_MAGIC 0x7068594cu
#define LT_DESC_MAGIC 0x7068444cu
#define LT_PREF_MAGIC 0x7068504cu

struct cublasLtContext {
	uint32_t magic;
};

/* In a cublasLtMatrixLayoutOpaque_t (64 bytes). */
struct lt_layout {
	uint32_t magic;
	uint32_t type;
	int32_t order;
	int32_t batch;
	uint64_t rows, cols;
	int64_t ld, stride, plane;
	uint32_t batch_mode;
};

/* In a cublasLtMatmulDescOpaque_t (256 bytes). */
struct lt_desc {
	uint32_t magic;
	int32_t compute, scale_type, pointer_mode, transa, transb, transc, fill;
	uint32_t epilogue;
	int32_t sm_count, aux_type, bias_type, d_out_mode;
	int32_t scale_mode[5];        /* A, B, C, D, EPILOGUE_AUX */
	int8_t fast_accum;
	int64_t bias_stride, aux_ld, aux_stride, alpha_stride;
	void *bias, *aux, *scale[4], *amax_d, *aux_scale, *aux_amax, *d_out_scale, *emulation;
};

/* In a cublasLtMatmulPreferenceOpaque_t (64 bytes). */
struct lt_pref {
	uint32_t magic;
	uint32_t search_mode, reduction_mask;
	uint32_t align[4];
	float max_waves;
	uint64_t max_workspace, impl_mask;
};

_Static_assert(sizeof(struct lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
_Static_assert(sizeof(struct lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "descriptor fits");
_Static_assert(sizeof(struct lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference fits");

/* One attribute: its number, its size (as cuBLASLt checks it) and where it is kept. */
struct lt_attr {
	int id;
	uint16_t size, offset;
};

#define ATTR(id, type, field) { id, sizeof(((type *)0)->field), offsetof(type, field) }

static const struct lt_attr layout_attrs[] = {
	ATTR(CUBLASLT_MATRIX_LAYOUT_TYPE, struct lt_layout, type),
	ATTR(CUBLASLT_MATRIX_LAYOUT_ORDER, struct lt_layout, order),
	ATTR(CUBLASLT_MATRIX_LAYOUT_ROWS, struct lt_layout, rows),
	ATTR(CUBLASLT_MATRIX_LAYOUT_COLS, struct lt_layout, cols),
	ATTR(CUBLASLT_MATRIX_LAYOUT_LD, struct lt_layout, ld),
	ATTR(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, struct lt_layout, batch),
	ATTR(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, struct lt_layout, stride),
	ATTR(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, struct lt_layout, plane),
	ATTR(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, struct lt_layout, batch_mode),
};

static const struct lt_attr desc_attrs[] = {
	ATTR(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, struct lt_desc, compute),
	ATTR(CUBLASLT_MATMUL_DESC_SCALE_TYPE, struct lt_desc, scale_type),
	ATTR(CUBLASLT_MATMUL_DESC_POINTER_MODE, struct lt_desc, pointer_mode),
	ATTR(CUBLASLT_MATMUL_DESC_TRANSA, struct lt_desc, transa),
	ATTR(CUBLASLT_MATMUL_DESC_TRANSB, struct lt_desc, transb),
	ATTR(CUBLASLT_MATMUL_DESC_TRANSC, struct lt_desc, transc),
	ATTR(CUBLASLT_MATMUL_DESC_FILL_MODE, struct lt_desc, fill),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE, struct lt_desc, epilogue),
	ATTR(CUBLASLT_MATMUL_DESC_BIAS_POINTER, struct lt_desc, bias),
	ATTR(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, struct lt_desc, bias_stride),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, struct lt_desc, aux),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, struct lt_desc, aux_ld),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, struct lt_desc, aux_stride),
	ATTR(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, struct lt_desc, alpha_stride),
	ATTR(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, struct lt_desc, sm_count),
	ATTR(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, struct lt_desc, scale[0]),
	ATTR(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, struct lt_desc, scale[1]),
	ATTR(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, struct lt_desc, scale[2]),
	ATTR(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, struct lt_desc, scale[3]),
	ATTR(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, struct lt_desc, amax_d),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, struct lt_desc, aux_type),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, struct lt_desc, aux_scale),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, struct lt_desc, aux_amax),
	ATTR(CUBLASLT_MATMUL_DESC_FAST_ACCUM, struct lt_desc, fast_accum),
	ATTR(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, struct lt_desc, bias_type),
	ATTR(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, struct lt_desc, scale_mode[0]),
	ATTR(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, struct lt_desc, scale_mode[1]),
	ATTR(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, struct lt_desc, scale_mode[2]),
	ATTR(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, struct lt_desc, scale_mode[3]),
	ATTR(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, struct lt_desc, scale_mode[4]),
	ATTR(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, struct lt_desc, d_out_scale),
	ATTR(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, struct lt_desc, d_out_mode),
	ATTR(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, struct lt_desc, emulation),
};

static const struct lt_attr pref_attrs[] = {
	ATTR(CUBLASLT_MATMUL_PREF_SEARCH_MODE, struct lt_pref, search_mode),
	ATTR(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, struct lt_pref, max_workspace),
	ATTR(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, struct lt_pref, reduction_mask),
	ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, struct lt_pref, align[0]),
	ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, struct lt_pref, align[1]),
	ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, struct lt_pref, align[2]),
	ATTR(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, struct lt_pref, align[3]),
	ATTR(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, struct lt_pref, max_waves),
	ATTR(CUBLASLT_MATMUL_PREF_IMPL_MASK, struct lt_pref, impl_mask),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const struct lt_attr *attr_find(const struct lt_attr *table, size_t n, int id)
{
	for (size_t i = 0; i < n; i++)
		if (table[i].id == id)
			return &table[i];
	return NULL;
}

/* cuBLASLt's SetAttribute: the size must be the attribute's own. */
static cublasStatus_t attr_set(void *obj, const struct lt_attr *table, size_t n, int id, const void *buf,
			       size_t size)
{
	const struct lt_attr *a = attr_find(table, n, id);

	if (!a || !buf || size != a->size)
		return CUBLAS_STATUS_INVALID_VALUE;
	memcpy((char *)obj + a->offset, buf, size);
	return CUBLAS_STATUS_SUCCESS;
}

/* cuBLASLt's GetAttribute: size 0 asks for the size only; a smaller buffer is refused. */
static cublasStatus_t attr_get(const void *obj, const struct lt_attr *table, size_t n, int id, void *buf,
			       size_t size, size_t *written)
{
	const struct lt_attr *a = attr_find(table, n, id);

	if (!a)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (size == 0 && written) {
		*written = a->size;
		return CUBLAS_STATUS_SUCCESS;
	}
	if (!buf || size < a->size)
		return CUBLAS_STATUS_INVALID_VALUE;
	memcpy(buf, (const char *)obj + a->offset, a->size);
	if (written)
		*written = a->size;
	return CUBLAS_STATUS_SUCCESS;
}

static struct lt_layout *layout_of(cublasLtMatrixLayout_t l)
{
	struct lt_layout *p = (struct lt_layout *)(void *)l;

	return p && p->magic == LT_LAYOUT_MAGIC ? p : NULL;
}

static struct lt_desc *desc_of(cublasLtMatmulDesc_t d)
{
	struct lt_desc *p = (struct lt_desc *)(void *)d;

	return p && p->magic == LT_DESC_MAGIC ? p : NULL;
}

static struct lt_pref *pref_of(cublasLtMatmulPreference_t pr)
{
	struct lt_pref *p = (struct lt_pref *)(void *)pr;

	return p && p->magic == LT_PREF_MAGIC ? p : NULL;
}

/* Ours, or a live cuBLAS handle: cuBLAS documents that a cublasHandle_t may
 * be cast to a cublasLtHandle_t, and PyTorch does exactly that. */
/* Destroy of a Created object: NULL is fine, another kind is refused. */
static cublasStatus_t obj_destroy(void *obj, uint32_t magic)
{
	uint32_t *m = obj;

	if (!obj)
		return CUBLAS_STATUS_SUCCESS;
	if (*m != magic)
		return CUBLAS_STATUS_INVALID_VALUE;
	*m = 0;
	free(obj);
	return CUBLAS_STATUS_SUCCESS;
}

static bool handle_ok(cublasLtHandle_t h)
{
	uint32_t blas = phos_handle_unwrap(h, PHOS_H_BLAS);

	if (blas)
		return phos_ids_get(PHOS_H_BLAS, blas) != NULL;
	return h && h->magic == LT_HANDLE_MAGIC;
}

/* --- the handle, versions, statuses, logging --- */

PHOS_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
	struct cublasLtContext *h;

	if (!handle)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (phos_preload_connect())
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUBLAS_STATUS_ALLOC_FAILED;
	h->magic = LT_HANDLE_MAGIC;
	*handle = h;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
	if (!handle_ok(handle) || phos_handle_unwrap(handle, PHOS_H_BLAS))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	handle->magic = 0;
	free(handle);
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT size_t cublasLtGetVersion(void)
{
	return CUBLAS_VERSION;
}

PHOS_EXPORT size_t cublasLtGetCudartVersion(void)
{
	return CUDART_VERSION;
}

PHOS_EXPORT cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value)
{
	return phos_blas_property(type, value);
}

PHOS_EXPORT const char *cublasLtGetStatusName(cublasStatus_t status)
{
	return phos_blas_status_name(status);
}

PHOS_EXPORT const char *cublasLtGetStatusString(cublasStatus_t status)
{
	return phos_blas_status_string(status);
}

/* cuBLASLt's own logging and heuristics cache: accepted; phos logs through PHOS_LOG. */
static size_t heuristics_capacity = 8192;

PHOS_EXPORT cublasStatus_t cublasLtHeuristicsCacheGetCapacity(size_t *capacity)
{
	if (!capacity)
		return CUBLAS_STATUS_INVALID_VALUE;
	*capacity = heuristics_capacity;
	return CUBLAS_STATUS_SUCCESS;
}

static void hcache_clear(void);

PHOS_EXPORT cublasStatus_t cublasLtHeuristicsCacheSetCapacity(size_t capacity)
{
	heuristics_capacity = capacity;
	if (!capacity)
		hcache_clear();
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t callback)
{
	(void)callback;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtLoggerSetFile(FILE *file)
{
	(void)file;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtLoggerOpenFile(const char *path)
{
	return path ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasLtLoggerSetLevel(int level)
{
	return level < 0 || level > 5 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtLoggerSetMask(int mask)
{
	return mask < 0 || mask > 31 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

/* cublasLt.h declares it without a prototype: () */
PHOS_EXPORT cublasStatus_t cublasLtLoggerForceDisable(void);
PHOS_EXPORT cublasStatus_t cublasLtLoggerForceDisable(void)
{
	return CUBLAS_STATUS_SUCCESS;
}

/* --- matrix layouts --- */

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
							     cudaDataType type, uint64_t rows, uint64_t cols,
							     int64_t ld)
{
	struct lt_layout *l = (struct lt_layout *)(void *)layout;

	if (!l || size < sizeof(cublasLtMatrixLayoutOpaque_t))
		return CUBLAS_STATUS_INVALID_VALUE;
	*l = (struct lt_layout){ .magic = LT_LAYOUT_MAGIC, .type = (uint32_t)type, .order = CUBLASLT_ORDER_COL,
				 .batch = 1, .rows = rows, .cols = cols, .ld = ld };
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
						      uint64_t rows, uint64_t cols, int64_t ld)
{
	cublasLtMatrixLayout_t l;

	if (!layout)
		return CUBLAS_STATUS_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUBLAS_STATUS_ALLOC_FAILED;
	cublasLtMatrixLayoutInit_internal(l, sizeof(*l), type, rows, cols, ld);
	*layout = l;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
	return obj_destroy(layout, LT_LAYOUT_MAGIC);
}

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
							    cublasLtMatrixLayoutAttribute_t attr, const void *buf,
							    size_t size)
{
	struct lt_layout *l = layout_of(layout);

	return l ? attr_set(l, layout_attrs, COUNT(layout_attrs), attr, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
							    cublasLtMatrixLayoutAttribute_t attr, void *buf,
							    size_t size, size_t *written)
{
	struct lt_layout *l = layout_of(layout);

	return l ? attr_get(l, layout_attrs, COUNT(layout_attrs), attr, buf, size, written)
		 : CUBLAS_STATUS_INVALID_VALUE;
}

/* --- matmul descriptors --- */

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
							   cublasComputeType_t compute, cudaDataType_t scale)
{
	struct lt_desc *d = (struct lt_desc *)(void *)desc;

	if (!d || size < sizeof(cublasLtMatmulDescOpaque_t))
		return CUBLAS_STATUS_INVALID_VALUE;
	*d = (struct lt_desc){ .magic = LT_DESC_MAGIC, .compute = compute, .scale_type = scale,
			       .pointer_mode = CUBLASLT_POINTER_MODE_HOST, .transa = CUBLAS_OP_N,
			       .transb = CUBLAS_OP_N, .transc = CUBLAS_OP_N, .fill = CUBLAS_FILL_MODE_FULL,
			       .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .aux_type = -1, .bias_type = -1 };
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
						    cudaDataType_t scale)
{
	cublasLtMatmulDesc_t d;

	if (!desc)
		return CUBLAS_STATUS_INVALID_VALUE;
	d = calloc(1, sizeof(*d));
	if (!d)
		return CUBLAS_STATUS_ALLOC_FAILED;
	cublasLtMatmulDescInit_internal(d, sizeof(*d), compute, scale);
	*desc = d;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
	return obj_destroy(desc, LT_DESC_MAGIC);
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
							  cublasLtMatmulDescAttributes_t attr, const void *buf,
							  size_t size)
{
	struct lt_desc *d = desc_of(desc);

	return d ? attr_set(d, desc_attrs, COUNT(desc_attrs), attr, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
							  cublasLtMatmulDescAttributes_t attr, void *buf, size_t size,
							  size_t *written)
{
	struct lt_desc *d = desc_of(desc);

	return d ? attr_get(d, desc_attrs, COUNT(desc_attrs), attr, buf, size, written)
		 : CUBLAS_STATUS_INVALID_VALUE;
}

/* --- preferences --- */

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size)
{
	struct lt_pref *p = (struct lt_pref *)(void *)pref;

	if (!p || size < sizeof(cublasLtMatmulPreferenceOpaque_t))
		return CUBLAS_STATUS_INVALID_VALUE;
	*p = (struct lt_pref){ .magic = LT_PREF_MAGIC, .search_mode = CUBLASLT_SEARCH_BEST_FIT,
			       .reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK,
			       .align = { 256, 256, 256, 256 }, .impl_mask = ~0ull };
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
	cublasLtMatmulPreference_t p;

	if (!pref)
		return CUBLAS_STATUS_INVALID_VALUE;
	p = calloc(1, sizeof(*p));
	if (!p)
		return CUBLAS_STATUS_ALLOC_FAILED;
	cublasLtMatmulPreferenceInit_internal(p, sizeof(*p));
	*pref = p;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
	return obj_destroy(pref, LT_PREF_MAGIC);
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
								cublasLtMatmulPreferenceAttributes_t attr,
								const void *buf, size_t size)
{
	struct lt_pref *p = pref_of(pref);

	return p ? attr_set(p, pref_attrs, COUNT(pref_attrs), attr, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
								cublasLtMatmulPreferenceAttributes_t attr, void *buf,
								size_t size, size_t *written)
{
	struct lt_pref *p = pref_of(pref);

	return p ? attr_get(p, pref_attrs, COUNT(pref_attrs), attr, buf, size, written)
		 : CUBLAS_STATUS_INVALID_VALUE;
}

/* --- the problem, as the records carry it --- */

/* Refuses, with one stderr line per call site whatever PHOS_LOG says, what
 * phos does not forward: it would have no exact read/write set for it. */
static cublasStatus_t refuse_once(const char *what, int *logged)
{
	if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "phos-fn: cublasLtMatmul with %s is not supported: CUBLAS_STATUS_NOT_SUPPORTED\n",
			what);
	return CUBLAS_STATUS_NOT_SUPPORTED;
}
#define refuse(what) ({ static int logged_; refuse_once(what, &logged_); })

static cublasStatus_t layout_pack(const struct lt_layout *l, struct phos_blaslt_layout *out)
{
	if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
		return refuse("a tiled matrix order (CUBLASLT_MATRIX_LAYOUT_ORDER)");
	if (l->plane)
		return refuse("planar complex matrices (CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET)");
	if (l->batch_mode)
		return refuse("pointer-array batches (CUBLASLT_MATRIX_LAYOUT_BATCH_MODE)");
	if (l->batch < 1 || l->ld < 0 || l->stride < 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	*out = (struct phos_blaslt_layout){ .type = (int32_t)l->type, .order = l->order, .batch = l->batch,
					    .rows = l->rows, .cols = l->cols, .ld = l->ld, .stride = l->stride };
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t desc_pack(const struct lt_desc *d, struct phos_blaslt_desc *out)
{
	if (d->transc != CUBLAS_OP_N)
		return refuse("CUBLASLT_MATMUL_DESC_TRANSC");
	if (d->fill != CUBLAS_FILL_MODE_FULL)
		return refuse("CUBLASLT_MATMUL_DESC_FILL_MODE");
	if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
		return refuse("alpha vectors (CUBLASLT_MATMUL_DESC_POINTER_MODE)");
	if (d->alpha_stride)
		return refuse("CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE");
	for (int i = 0; i < 5; i++)
		if (d->scale_mode[i])
			return refuse("block scaling (CUBLASLT_MATMUL_DESC_*_SCALE_MODE)");
	if (d->d_out_scale || d->d_out_mode)
		return refuse("CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER");
	if (d->aux_scale || d->aux_amax)
		return refuse("CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE/AMAX_POINTER");
	if (d->emulation)
		return refuse("CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR");
	*out = (struct phos_blaslt_desc){
		.compute = d->compute, .scale_type = d->scale_type, .pointer_mode = d->pointer_mode,
		.transa = d->transa, .transb = d->transb, .epilogue = (int32_t)d->epilogue,
		.bias_type = d->bias_type, .aux_type = d->aux_type, .sm_count = d->sm_count,
		.fast_accum = d->fast_accum, .bias_stride = d->bias_stride, .aux_ld = d->aux_ld,
		.aux_stride = d->aux_stride, .bias = (uintptr_t)d->bias, .aux = (uintptr_t)d->aux,
		.amax_d = (uintptr_t)d->amax_d,
	};
	for (int i = 0; i < 4; i++)
		out->scale[i] = (uintptr_t)d->scale[i];
	return CUBLAS_STATUS_SUCCESS;
}

/* Descriptor and the four layouts of a call, packed. */
static cublasStatus_t problem_pack(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
				   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl, struct phos_blaslt_desc *ret_desc,
				   struct phos_blaslt_layout ret_layouts[4])
{
	const struct lt_layout *l[4] = { layout_of(a), layout_of(b), layout_of(c), layout_of(dl) };
	const struct lt_desc *d = desc_of(desc);
	cublasStatus_t s;

	if (!d || !l[0] || !l[1] || !l[2] || !l[3])
		return CUBLAS_STATUS_INVALID_VALUE;
	s = desc_pack(d, ret_desc);
	for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
		s = layout_pack(l[i], &ret_layouts[i]);
	return s;
}

/* Bytes of one scalar of a scale type, 0 for types alpha/beta cannot have. */
static size_t scalar_bytes(int type)
{
	switch (type) {
	case CUDA_R_16F: case CUDA_R_16BF: return 2;
	case CUDA_R_32F: case CUDA_R_32I: return 4;
	case CUDA_R_64F: case CUDA_C_32F: return 8;
	case CUDA_C_64F: return 16;
	default: return 0;
	}
}

/* --- the heuristics cache: the executor's answers, by device and query --- */

#define HCACHE_SLOTS 512

struct hcache_entry {
	int device;
	struct phos_blaslt_heuristic q;
	int n;
	struct phos_blaslt_result res[];   /* q.requested at most */
};

static struct hcache_entry *hcache[HCACHE_SLOTS];
static pthread_mutex_t hcache_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t hcache_slot(const struct phos_blaslt_heuristic *q, int device)
{
	const unsigned char *p = (const unsigned char *)q;
	uint64_t h = 1469598103934665603ull ^ (uint64_t)(unsigned)device;

	for (size_t i = 0; i < sizeof(*q); i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return (size_t)(h % HCACHE_SLOTS);
}

/* Copies a cached answer to out; returns its count, or -1 when none. */
static int hcache_get(const struct phos_blaslt_heuristic *q, int device, struct phos_blaslt_result *out)
{
	size_t slot = hcache_slot(q, device);
	struct hcache_entry *e;
	int n = -1;

	pthread_mutex_lock(&hcache_lock);
	e = hcache[slot];
	if (e && e->device == device && !memcmp(&e->q, q, sizeof(*q))) {
		n = e->n;
		memcpy(out, e->res, (size_t)n * sizeof(*out));
	}
	pthread_mutex_unlock(&hcache_lock);
	return n;
}

static void hcache_put(const struct phos_blaslt_heuristic *q, int device, const struct phos_blaslt_result *res, int n)
{
	size_t slot = hcache_slot(q, device);
	struct hcache_entry *e = malloc(sizeof(*e) + (size_t)n * sizeof(*res)), *old;

	if (!e)
		return;
	e->device = device;
	e->q = *q;
	e->n = n;
	memcpy(e->res, res, (size_t)n * sizeof(*res));
	pthread_mutex_lock(&hcache_lock);
	old = hcache[slot];
	hcache[slot] = e;
	pthread_mutex_unlock(&hcache_lock);
	free(old);
}

static void hcache_clear(void)
{
	pthread_mutex_lock(&hcache_lock);
	for (size_t i = 0; i < HCACHE_SLOTS; i++) {
		free(hcache[i]);
		hcache[i] = NULL;
	}
	pthread_mutex_unlock(&hcache_lock);
}

/* --- the calls --- */

PHOS_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
							  cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
							  cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
							  cublasLtMatmulPreference_t pref, int requested,
							  cublasLtMatmulHeuristicResult_t results[], int *returned)
{
	struct phos_blaslt_heuristic h = { 0 };
	struct phos_blaslt_result out[PHOS_BLASLT_MAX_RESULTS];
	struct phos_blaslt_layout layouts[4];
	const struct lt_pref *p = pref_of(pref);
	size_t len = 0;
	int bs = 0, r, n, device = 0;
	cublasStatus_t s;

	if (!handle_ok(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!p || requested <= 0 || !results || !returned)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudaGetDevice(&device) != cudaSuccess)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	s = problem_pack(desc, a, b, c, d, &h.desc, layouts);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	h.la = layouts[0];
	h.lb = layouts[1];
	h.lc = layouts[2];
	h.ld = layouts[3];
	h.max_workspace = p->max_workspace;
	h.impl_mask = p->impl_mask;
	memcpy(h.align, p->align, sizeof(h.align));
	h.search_mode = (int32_t)p->search_mode;
	h.requested = requested < PHOS_BLASLT_MAX_RESULTS ? requested : PHOS_BLASLT_MAX_RESULTS;
	h.max_waves = p->max_waves;
	n = heuristics_capacity ? hcache_get(&h, device, out) : -1;
	if (n < 0) {
		r = phos_preload_call(PHOS_OP_BLASLT_HEURISTIC, &h, sizeof(h), NULL, 0, out, sizeof(out), &len, &bs);
		if (r != cudaSuccess)
			return bs ? (cublasStatus_t)bs : phos_blas_status_of(r);
		n = (int)(len / sizeof(out[0]));
		if (n > h.requested)
			n = h.requested;
		if (n > 0 && heuristics_capacity)
			hcache_put(&h, device, out, n);
	}
	for (int i = 0; i < n; i++) {
		memset(&results[i], 0, sizeof(results[i]));
		memcpy(results[i].algo.data, out[i].algo, sizeof(results[i].algo.data));
		results[i].workspaceSize = out[i].workspace_size;
		results[i].state = (cublasStatus_t)out[i].state;
		results[i].wavesCount = out[i].waves;
	}
	*returned = n;
	return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
					  const void *a, cublasLtMatrixLayout_t adesc, const void *b,
					  cublasLtMatrixLayout_t bdesc, const void *beta, const void *c,
					  cublasLtMatrixLayout_t cdesc, void *d, cublasLtMatrixLayout_t ddesc,
					  const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_size,
					  cudaStream_t stream)
{
	struct phos_blaslt_matmul m = { 0 };
	struct phos_blaslt_layout layouts[4];
	bool capturing;
	size_t sb;
	cublasStatus_t s;
	int r;

	if (!handle_ok(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha || !beta || (workspace_size && !workspace))
		return CUBLAS_STATUS_INVALID_VALUE;
	s = problem_pack(desc, adesc, bdesc, cdesc, ddesc, &m.desc, layouts);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	sb = scalar_bytes(m.desc.scale_type);
	if (!sb)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	/* on a capturing stream: a node posting it at each launch, on the launch stream */
	capturing = phos_preload_capturing(stream);
	r = capturing ? cudaSuccess : phos_preload_stream_id(stream, &m.stream);
	if (r != cudaSuccess)
		return phos_blas_status_of(r);
	m.la = layouts[0];
	m.lb = layouts[1];
	m.lc = layouts[2];
	m.ld = layouts[3];
	m.a = (uintptr_t)a;
	m.b = (uintptr_t)b;
	m.c = (uintptr_t)c;
	m.d = (uintptr_t)d;
	m.workspace = (uintptr_t)workspace;
	m.workspace_size = workspace_size;
	if (m.desc.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
		m.alpha_addr = (uintptr_t)alpha;
		m.beta_addr = (uintptr_t)beta;
	} else {
		memcpy(m.alpha, alpha, sb);
		memcpy(m.beta, beta, sb);
	}
	if (algo) {
		m.has_algo = 1;
		memcpy(m.algo, algo->data, sizeof(m.algo));
	}
	if (capturing)
		return phos_blas_status_of(phos_graph_capture_record(stream, PHOS_OP_BLASLT_MATMUL, &m, sizeof(m),
								     offsetof(struct phos_blaslt_matmul, stream)));
	return phos_blas_status_of(phos_preload_post(PHOS_OP_BLASLT_MATMUL, &m, sizeof(m), NULL, 0));
}

/* Called by every generated stub (stubs_cublasLt.c). */
int phos_cublaslt_stub(const char *name, int *logged);
int phos_cublaslt_stub(const char *name, int *logged)
{
	phos_log_once("cuBLASLt API", name, logged);
	return CUBLAS_STATUS_NOT_SUPPORTED;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-cublaslt", PHOS_LOG_OFF);
}
