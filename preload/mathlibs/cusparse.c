/* SPDX-License-Identifier: MIT */
/*
 * The cuSPARSE stand-in (libcusparse.so.12): the generic API's handles and
 * descriptors kept here, its calls forwarded with their whole description
 * and run by the executor with the real cuSPARSE (the sim device's plain
 * reference in CI).
 *
 *   cusparseCreate ─────────────── a handle here: device, stream, pointer mode
 *   cusparseCreateCsr/Coo/   ───── descriptors here: sizes, types and the
 *   DnMat/DnVec, Set*, Get*         device pointers; nothing is sent
 *   cusparseSpMV, SpMM, SDDMM, ─── SPARSE_EXEC, stream-ordered on the handle's
 *   SparseToDense, Xcoo2csr,        stream: one phos_sparse_call with the
 *   SpMM/SDDMM_preprocess,          operands' descriptions; the executor takes
 *   Xcsrsort, XcoosortByRow,        the read/write set from it (exec_sparse.c)
 *   CreateIdentityPermutation
 *   *_bufferSize ───────────────── sync SPARSE_SIZE: the executor's library
 *                                   answers for this call
 *   cusparseCreateMatDescr ... ─── the legacy descriptor, here only
 *
 * The executor keeps nothing of the program's: its own cuSPARSE handle per
 * device is made at its first call, so after a restore (at phos_fn_serve or
 * of a checkpoint) the new executor makes one again and every handle and
 * descriptor here goes on as it was, with no fenced section needed.
 *
 * Forwarded: float and double values with a compute type of the same,
 * 32- and 64-bit indices, CSR and COO, alpha and beta on the host or (pointer
 * mode device) in device memory, every documented algorithm enum. Refused
 * with CUSPARSE_STATUS_NOT_SUPPORTED, named once on stderr: complex, half and
 * bfloat16 values, 16-bit indices, SpMV of a batched matrix, a batched
 * sparse-to-dense, a call on a capturing stream or on memory other than
 * cudaMalloc's. SpGEMM (CSR, op N, beta 0, host scalars, the default
 * algorithm or ALG1; cuSPARSE's own limits but the last two): its work
 * estimation asks for a small buffer it never touches, compute asks the
 * executor for C's nnz (the whole product done there, on the handle's
 * stream, and waited for), copy writes C's arrays. Every export not
 * implemented here (SpGEMMreuse, SpGEMM_estimateMemory, SpSV, SpSM,
 * DenseToSparse, coosortByColumn, bsr*, csrgeam2, the CSC, BSR and ELL
 * descriptors, ...) is a stub answering NOT_SUPPORTED and named once in the
 * log (stubs_cusparse.c). cusparseGetVersion answers the executor's library.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cusparse.h>

#include "internal.h"
#include "log.h"

#define HANDLE_MAGIC 0x73706831u   /* "sph1" */
#define SPMAT_MAGIC 0x73706d31u    /* "spm1" */
#define DNMAT_MAGIC 0x73646d31u    /* "sdm1" */
#define DNVEC_MAGIC 0x73647631u    /* "sdv1" */
#define MATDESCR_MAGIC 0x736c6431u /* "sld1" */
#define SPGEMM_MAGIC 0x73676d31u   /* "sgm1" */
/* What SpGEMM's work estimation and compute ask of the program: buffers
 * they never touch (the executor's library uses buffers of its own) */
#define SPGEMM_BUFFER 256u

struct cusparseContext {
	uint32_t magic;
	int device;                 /* current at cusparseCreate, as cuSPARSE binds it */
	cudaStream_t stream;
	cusparsePointerMode_t mode;
};

struct cusparseSpMatDescr {
	uint32_t magic;
	struct phos_sparse_spmat m;
	cusparseFillMode_t fill;    /* attributes, kept for SpMatGetAttribute */
	cusparseDiagType_t diag;
};

struct cusparseDnMatDescr {
	uint32_t magic;
	struct phos_sparse_dnmat d;
};

struct cusparseDnVecDescr {
	uint32_t magic;
	struct phos_sparse_dnmat d;   /* a size x 1 column */
};

/* SpGEMM's descriptor: C's nnz once compute counted it (the executor
 * keeps nothing between the phases: it runs them all for compute's count,
 * and again for copy). */
struct cusparseSpGEMMDescr {
	uint32_t magic;
	bool counted;
	int64_t nnz;
};

struct cusparseMatDescr {
	uint32_t magic;
	cusparseMatrixType_t type;
	cusparseFillMode_t fill;
	cusparseDiagType_t diag;
	cusparseIndexBase_t base;
};

/* NOT_SUPPORTED, said once per reason on stderr. */
static cusparseStatus_t refuse(const char *what)
{
	phos_refuse_once("cuSPARSE", what, ": CUSPARSE_STATUS_NOT_SUPPORTED");
	return CUSPARSE_STATUS_NOT_SUPPORTED;
}

/* A call's result: the library status when the executor gave one, else the
 * CUDA error's nearest status. */
static cusparseStatus_t status_of(int r, int st)
{
	if (st)
		return (cusparseStatus_t)st;
	switch (r) {
	case cudaSuccess: return CUSPARSE_STATUS_SUCCESS;
	case cudaErrorNotSupported: return CUSPARSE_STATUS_NOT_SUPPORTED;
	case cudaErrorInvalidValue: return CUSPARSE_STATUS_INVALID_VALUE;
	case cudaErrorMemoryAllocation: return CUSPARSE_STATUS_ALLOC_FAILED;
	case cudaErrorInitializationError: case cudaErrorDevicesUnavailable: return CUSPARSE_STATUS_NOT_INITIALIZED;
	default: return CUSPARSE_STATUS_EXECUTION_FAILED;
	}
}

/* --- errors --- */

static const struct { const char *name, *text; } errors[] = {
	[CUSPARSE_STATUS_SUCCESS] = { "CUSPARSE_STATUS_SUCCESS", "success" },
	[CUSPARSE_STATUS_NOT_INITIALIZED] = { "CUSPARSE_STATUS_NOT_INITIALIZED", "initialization error" },
	[CUSPARSE_STATUS_ALLOC_FAILED] = { "CUSPARSE_STATUS_ALLOC_FAILED", "out of memory" },
	[CUSPARSE_STATUS_INVALID_VALUE] = { "CUSPARSE_STATUS_INVALID_VALUE", "invalid value" },
	[CUSPARSE_STATUS_ARCH_MISMATCH] = { "CUSPARSE_STATUS_ARCH_MISMATCH", "architecture mismatch" },
	[CUSPARSE_STATUS_MAPPING_ERROR] = { "CUSPARSE_STATUS_MAPPING_ERROR", "mapping error" },
	[CUSPARSE_STATUS_EXECUTION_FAILED] = { "CUSPARSE_STATUS_EXECUTION_FAILED", "execution failed" },
	[CUSPARSE_STATUS_INTERNAL_ERROR] = { "CUSPARSE_STATUS_INTERNAL_ERROR", "internal error" },
	[CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED] = { "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
							"matrix type not supported" },
	[CUSPARSE_STATUS_ZERO_PIVOT] = { "CUSPARSE_STATUS_ZERO_PIVOT", "zero pivot" },
	[CUSPARSE_STATUS_NOT_SUPPORTED] = { "CUSPARSE_STATUS_NOT_SUPPORTED", "operation not supported" },
	[CUSPARSE_STATUS_INSUFFICIENT_RESOURCES] = { "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES",
						     "insufficient resources" },
};

PHOS_EXPORT const char *cusparseGetErrorName(cusparseStatus_t status)
{
	if ((unsigned)status < sizeof(errors) / sizeof(errors[0]) && errors[status].name)
		return errors[status].name;
	return "CUSPARSE_STATUS_UNKNOWN";
}

PHOS_EXPORT const char *cusparseGetErrorString(cusparseStatus_t status)
{
	if ((unsigned)status < sizeof(errors) / sizeof(errors[0]) && errors[status].text)
		return errors[status].text;
	return "unknown error";
}

/* --- versions --- */

static struct phos_reply_sparse_version version;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_ask(void)
{
	size_t len = 0;
	int st = 0;

	if (phos_preload_connect() != 0 ||
	    status_of(phos_preload_call(PHOS_OP_SPARSE_VERSION, NULL, 0, NULL, 0, &version, sizeof(version), &len,
					&st),
		      st) != CUSPARSE_STATUS_SUCCESS || len != sizeof(version)) {
		memset(&version, 0, sizeof(version));
		fprintf(stderr, "phos-fn: cuSPARSE: the executor has no cuSPARSE (libcusparse.so.12 not found there: "
				"PHOS_CUSPARSE_LIB): every cuSPARSE call fails\n");
	}
}

static bool handle_ok(const struct cusparseContext *h)
{
	return h && h->magic == HANDLE_MAGIC;
}

PHOS_EXPORT cusparseStatus_t cusparseGetVersion(cusparseHandle_t handle, int *value)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	if (!value)
		return CUSPARSE_STATUS_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	*value = version.version;
	return version.version ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_NOT_INITIALIZED;
}

PHOS_EXPORT cusparseStatus_t cusparseGetProperty(libraryPropertyType type, int *value)
{
	if (!value)
		return CUSPARSE_STATUS_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	if (!version.version)
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	switch (type) {
	case MAJOR_VERSION: *value = version.major; break;
	case MINOR_VERSION: *value = version.minor; break;
	case PATCH_LEVEL: *value = version.patch; break;
	default: return CUSPARSE_STATUS_INVALID_VALUE;
	}
	return CUSPARSE_STATUS_SUCCESS;
}

/* --- handles --- */

PHOS_EXPORT cusparseStatus_t cusparseCreate(cusparseHandle_t *handle)
{
	struct cusparseContext *h;
	int device = 0;

	if (!handle)
		return CUSPARSE_STATUS_INVALID_VALUE;
	if (phos_preload_connect() != 0 || cudaGetDevice(&device) != cudaSuccess)
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	*h = (struct cusparseContext){ .magic = HANDLE_MAGIC, .device = device, .mode = CUSPARSE_POINTER_MODE_HOST };
	*handle = h;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDestroy(cusparseHandle_t handle)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	handle->magic = 0;
	free(handle);
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t streamId)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	handle->stream = streamId;   /* (checked where a call runs on it) */
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t *streamId)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	if (!streamId)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*streamId = handle->stream;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetPointerMode(cusparseHandle_t handle, cusparsePointerMode_t mode)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	if (mode != CUSPARSE_POINTER_MODE_HOST && mode != CUSPARSE_POINTER_MODE_DEVICE)
		return CUSPARSE_STATUS_INVALID_VALUE;
	handle->mode = mode;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseGetPointerMode(cusparseHandle_t handle, cusparsePointerMode_t *mode)
{
	if (!handle_ok(handle))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*mode = handle->mode;
	return CUSPARSE_STATUS_SUCCESS;
}

/* --- the legacy matrix descriptor (host only) --- */

static bool matdescr_ok(const struct cusparseMatDescr *m)
{
	return m && m->magic == MATDESCR_MAGIC;
}

PHOS_EXPORT cusparseStatus_t cusparseCreateMatDescr(cusparseMatDescr_t *descrA)
{
	struct cusparseMatDescr *m;

	if (!descrA)
		return CUSPARSE_STATUS_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	*m = (struct cusparseMatDescr){ .magic = MATDESCR_MAGIC, .type = CUSPARSE_MATRIX_TYPE_GENERAL,
					.fill = CUSPARSE_FILL_MODE_LOWER, .diag = CUSPARSE_DIAG_TYPE_NON_UNIT,
					.base = CUSPARSE_INDEX_BASE_ZERO };
	*descrA = m;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDestroyMatDescr(cusparseMatDescr_t descrA)
{
	if (!descrA)
		return CUSPARSE_STATUS_SUCCESS;
	if (!matdescr_ok(descrA))
		return CUSPARSE_STATUS_INVALID_VALUE;
	descrA->magic = 0;
	free(descrA);
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetMatType(cusparseMatDescr_t descrA, cusparseMatrixType_t type)
{
	if (!matdescr_ok(descrA) || (unsigned)type > CUSPARSE_MATRIX_TYPE_TRIANGULAR)
		return CUSPARSE_STATUS_INVALID_VALUE;
	descrA->type = type;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetMatFillMode(cusparseMatDescr_t descrA, cusparseFillMode_t fillMode)
{
	if (!matdescr_ok(descrA) || (unsigned)fillMode > CUSPARSE_FILL_MODE_UPPER)
		return CUSPARSE_STATUS_INVALID_VALUE;
	descrA->fill = fillMode;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetMatDiagType(cusparseMatDescr_t descrA, cusparseDiagType_t diagType)
{
	if (!matdescr_ok(descrA) || (unsigned)diagType > CUSPARSE_DIAG_TYPE_UNIT)
		return CUSPARSE_STATUS_INVALID_VALUE;
	descrA->diag = diagType;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSetMatIndexBase(cusparseMatDescr_t descrA, cusparseIndexBase_t base)
{
	if (!matdescr_ok(descrA) || (unsigned)base > CUSPARSE_INDEX_BASE_ONE)
		return CUSPARSE_STATUS_INVALID_VALUE;
	descrA->base = base;
	return CUSPARSE_STATUS_SUCCESS;
}

/* (the getters return the value itself; a bad descriptor answers the default) */
PHOS_EXPORT cusparseMatrixType_t cusparseGetMatType(const cusparseMatDescr_t descrA)
{
	return matdescr_ok(descrA) ? descrA->type : CUSPARSE_MATRIX_TYPE_GENERAL;
}

PHOS_EXPORT cusparseFillMode_t cusparseGetMatFillMode(const cusparseMatDescr_t descrA)
{
	return matdescr_ok(descrA) ? descrA->fill : CUSPARSE_FILL_MODE_LOWER;
}

PHOS_EXPORT cusparseDiagType_t cusparseGetMatDiagType(const cusparseMatDescr_t descrA)
{
	return matdescr_ok(descrA) ? descrA->diag : CUSPARSE_DIAG_TYPE_NON_UNIT;
}

PHOS_EXPORT cusparseIndexBase_t cusparseGetMatIndexBase(const cusparseMatDescr_t descrA)
{
	return matdescr_ok(descrA) ? descrA->base : CUSPARSE_INDEX_BASE_ZERO;
}

/* --- descriptors of the generic API: everything kept here --- */

static bool size_ok(int64_t v)
{
	return v >= 0 && v <= PHOS_SPARSE_ELEMS_MAX;
}

/* float or double; the other cudaDataTypes cuSPARSE takes are refused */
static cusparseStatus_t value_type_ok(cudaDataType t)
{
	if (phos_sparse_value_ok((int32_t)t))
		return CUSPARSE_STATUS_SUCCESS;
	return refuse("complex, half or bfloat16 values (only float and double are forwarded)");
}

static cusparseStatus_t index_type_ok(cusparseIndexType_t t)
{
	if (phos_sparse_index_ok((int32_t)t))
		return CUSPARSE_STATUS_SUCCESS;
	if (t == CUSPARSE_INDEX_16U)
		return refuse("16-bit indices (CUSPARSE_INDEX_16U)");
	return CUSPARSE_STATUS_INVALID_VALUE;
}

static bool spmat_ok(const struct cusparseSpMatDescr *s)
{
	return s && s->magic == SPMAT_MAGIC;
}

static bool dnmat_ok(const struct cusparseDnMatDescr *d)
{
	return d && d->magic == DNMAT_MAGIC;
}

static bool dnvec_ok(const struct cusparseDnVecDescr *v)
{
	return v && v->magic == DNVEC_MAGIC;
}

static cusparseStatus_t spmat_new(cusparseSpMatDescr_t *ret, int format, int64_t rows, int64_t cols, int64_t nnz,
				  const void *offsets, const void *columns, const void *values,
				  cusparseIndexType_t offsets_type, cusparseIndexType_t index_type,
				  cusparseIndexBase_t base, cudaDataType value_type)
{
	struct cusparseSpMatDescr *s;
	cusparseStatus_t st;

	if (!ret || !size_ok(rows) || !size_ok(cols) || !size_ok(nnz) ||
	    (base != CUSPARSE_INDEX_BASE_ZERO && base != CUSPARSE_INDEX_BASE_ONE))
		return CUSPARSE_STATUS_INVALID_VALUE;
	if ((st = index_type_ok(offsets_type)) || (st = index_type_ok(index_type)) || (st = value_type_ok(value_type)))
		return st;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	s->magic = SPMAT_MAGIC;
	s->m = (struct phos_sparse_spmat){
		.format = format, .offsets_type = offsets_type, .index_type = index_type, .base = base,
		.value_type = value_type, .batch = 1, .rows = rows, .cols = cols, .nnz = nnz,
		.offsets = (uint64_t)(uintptr_t)offsets, .columns = (uint64_t)(uintptr_t)columns,
		.values = (uint64_t)(uintptr_t)values,
	};
	s->fill = CUSPARSE_FILL_MODE_LOWER;
	s->diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
	*ret = s;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *spMatDescr, int64_t rows, int64_t cols,
					       int64_t nnz, void *csrRowOffsets, void *csrColInd, void *csrValues,
					       cusparseIndexType_t csrRowOffsetsType, cusparseIndexType_t csrColIndType,
					       cusparseIndexBase_t idxBase, cudaDataType valueType)
{
	return spmat_new(spMatDescr, PHOS_SPARSE_FORMAT_CSR, rows, cols, nnz, csrRowOffsets, csrColInd, csrValues,
			 csrRowOffsetsType, csrColIndType, idxBase, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateConstCsr(cusparseConstSpMatDescr_t *spMatDescr, int64_t rows, int64_t cols,
						    int64_t nnz, const void *csrRowOffsets, const void *csrColInd,
						    const void *csrValues, cusparseIndexType_t csrRowOffsetsType,
						    cusparseIndexType_t csrColIndType, cusparseIndexBase_t idxBase,
						    cudaDataType valueType)
{
	return spmat_new((cusparseSpMatDescr_t *)spMatDescr, PHOS_SPARSE_FORMAT_CSR, rows, cols, nnz, csrRowOffsets,
			 csrColInd, csrValues, csrRowOffsetsType, csrColIndType, idxBase, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t *spMatDescr, int64_t rows, int64_t cols,
					       int64_t nnz, void *cooRowInd, void *cooColInd, void *cooValues,
					       cusparseIndexType_t cooIdxType, cusparseIndexBase_t idxBase,
					       cudaDataType valueType)
{
	return spmat_new(spMatDescr, PHOS_SPARSE_FORMAT_COO, rows, cols, nnz, cooRowInd, cooColInd, cooValues,
			 cooIdxType, cooIdxType, idxBase, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateConstCoo(cusparseConstSpMatDescr_t *spMatDescr, int64_t rows, int64_t cols,
						    int64_t nnz, const void *cooRowInd, const void *cooColInd,
						    const void *cooValues, cusparseIndexType_t cooIdxType,
						    cusparseIndexBase_t idxBase, cudaDataType valueType)
{
	return spmat_new((cusparseSpMatDescr_t *)spMatDescr, PHOS_SPARSE_FORMAT_COO, rows, cols, nnz, cooRowInd,
			 cooColInd, cooValues, cooIdxType, cooIdxType, idxBase, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t spMatDescr)
{
	struct cusparseSpMatDescr *s = (struct cusparseSpMatDescr *)spMatDescr;

	if (!s)
		return CUSPARSE_STATUS_SUCCESS;
	if (!spmat_ok(s))
		return CUSPARSE_STATUS_INVALID_VALUE;
	s->magic = 0;
	free(s);
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t spMatDescr, void *csrRowOffsets,
						    void *csrColInd, void *csrValues)
{
	if (!spmat_ok(spMatDescr) || spMatDescr->m.format != PHOS_SPARSE_FORMAT_CSR)
		return CUSPARSE_STATUS_INVALID_VALUE;
	spMatDescr->m.offsets = (uint64_t)(uintptr_t)csrRowOffsets;
	spMatDescr->m.columns = (uint64_t)(uintptr_t)csrColInd;
	spMatDescr->m.values = (uint64_t)(uintptr_t)csrValues;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCooSetPointers(cusparseSpMatDescr_t spMatDescr, void *cooRows, void *cooColumns,
						    void *cooValues)
{
	if (!spmat_ok(spMatDescr) || spMatDescr->m.format != PHOS_SPARSE_FORMAT_COO)
		return CUSPARSE_STATUS_INVALID_VALUE;
	spMatDescr->m.offsets = (uint64_t)(uintptr_t)cooRows;
	spMatDescr->m.columns = (uint64_t)(uintptr_t)cooColumns;
	spMatDescr->m.values = (uint64_t)(uintptr_t)cooValues;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCsrSetStridedBatch(cusparseSpMatDescr_t spMatDescr, int batchCount,
							int64_t offsetsBatchStride, int64_t columnsValuesBatchStride)
{
	if (!spmat_ok(spMatDescr) || spMatDescr->m.format != PHOS_SPARSE_FORMAT_CSR || batchCount < 1 ||
	    batchCount > PHOS_SPARSE_BATCH_MAX || !size_ok(offsetsBatchStride) || !size_ok(columnsValuesBatchStride))
		return CUSPARSE_STATUS_INVALID_VALUE;
	spMatDescr->m.batch = batchCount;
	spMatDescr->m.offsets_stride = offsetsBatchStride;
	spMatDescr->m.values_stride = columnsValuesBatchStride;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCooSetStridedBatch(cusparseSpMatDescr_t spMatDescr, int batchCount,
							int64_t batchStride)
{
	if (!spmat_ok(spMatDescr) || spMatDescr->m.format != PHOS_SPARSE_FORMAT_COO || batchCount < 1 ||
	    batchCount > PHOS_SPARSE_BATCH_MAX || !size_ok(batchStride))
		return CUSPARSE_STATUS_INVALID_VALUE;
	spMatDescr->m.batch = batchCount;
	spMatDescr->m.offsets_stride = batchStride;
	spMatDescr->m.values_stride = batchStride;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetStridedBatch(cusparseConstSpMatDescr_t spMatDescr, int *batchCount)
{
	if (!spmat_ok(spMatDescr) || !batchCount)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*batchCount = spMatDescr->m.batch;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t spMatDescr, int64_t *rows, int64_t *cols,
						  int64_t *nnz)
{
	if (!spmat_ok(spMatDescr) || !rows || !cols || !nnz)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*rows = spMatDescr->m.rows;
	*cols = spMatDescr->m.cols;
	*nnz = spMatDescr->m.nnz;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetFormat(cusparseConstSpMatDescr_t spMatDescr, cusparseFormat_t *format)
{
	if (!spmat_ok(spMatDescr) || !format)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*format = (cusparseFormat_t)spMatDescr->m.format;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetIndexBase(cusparseConstSpMatDescr_t spMatDescr,
						       cusparseIndexBase_t *idxBase)
{
	if (!spmat_ok(spMatDescr) || !idxBase)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*idxBase = (cusparseIndexBase_t)spMatDescr->m.base;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetValues(cusparseSpMatDescr_t spMatDescr, void **values)
{
	if (!spmat_ok(spMatDescr) || !values)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*values = (void *)(uintptr_t)spMatDescr->m.values;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatSetValues(cusparseSpMatDescr_t spMatDescr, void *values)
{
	if (!spmat_ok(spMatDescr))
		return CUSPARSE_STATUS_INVALID_VALUE;
	spMatDescr->m.values = (uint64_t)(uintptr_t)values;
	return CUSPARSE_STATUS_SUCCESS;
}

/* The attributes only matter to the triangular solvers (SpSV, SpSM), which
 * are refused; kept for SpMatGetAttribute. */
PHOS_EXPORT cusparseStatus_t cusparseSpMatSetAttribute(cusparseSpMatDescr_t spMatDescr,
						       cusparseSpMatAttribute_t attribute, void *data, size_t dataSize)
{
	int v;

	if (!spmat_ok(spMatDescr) || !data || dataSize != sizeof(int))
		return CUSPARSE_STATUS_INVALID_VALUE;
	memcpy(&v, data, sizeof(v));
	if (attribute == CUSPARSE_SPMAT_FILL_MODE && (v == CUSPARSE_FILL_MODE_LOWER || v == CUSPARSE_FILL_MODE_UPPER))
		spMatDescr->fill = (cusparseFillMode_t)v;
	else if (attribute == CUSPARSE_SPMAT_DIAG_TYPE && (v == CUSPARSE_DIAG_TYPE_NON_UNIT || v == CUSPARSE_DIAG_TYPE_UNIT))
		spMatDescr->diag = (cusparseDiagType_t)v;
	else
		return CUSPARSE_STATUS_INVALID_VALUE;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpMatGetAttribute(cusparseConstSpMatDescr_t spMatDescr,
						       cusparseSpMatAttribute_t attribute, void *data, size_t dataSize)
{
	int v;

	if (!spmat_ok(spMatDescr) || !data || dataSize != sizeof(int))
		return CUSPARSE_STATUS_INVALID_VALUE;
	if (attribute == CUSPARSE_SPMAT_FILL_MODE)
		v = spMatDescr->fill;
	else if (attribute == CUSPARSE_SPMAT_DIAG_TYPE)
		v = spMatDescr->diag;
	else
		return CUSPARSE_STATUS_INVALID_VALUE;
	memcpy(data, &v, sizeof(v));
	return CUSPARSE_STATUS_SUCCESS;
}

static cusparseStatus_t dnmat_new(cusparseDnMatDescr_t *ret, int64_t rows, int64_t cols, int64_t ld,
				  const void *values, cudaDataType type, cusparseOrder_t order)
{
	struct cusparseDnMatDescr *d;
	int64_t minor = order == CUSPARSE_ORDER_COL ? rows : cols;
	cusparseStatus_t st;

	if (!ret || !size_ok(rows) || !size_ok(cols) || !size_ok(ld) ||
	    (order != CUSPARSE_ORDER_COL && order != CUSPARSE_ORDER_ROW) || ld < (minor > 1 ? minor : 1))
		return CUSPARSE_STATUS_INVALID_VALUE;
	if ((st = value_type_ok(type)))
		return st;
	d = calloc(1, sizeof(*d));
	if (!d)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	d->magic = DNMAT_MAGIC;
	d->d = (struct phos_sparse_dnmat){ .rows = rows, .cols = cols, .ld = ld, .values = (uint64_t)(uintptr_t)values,
					   .value_type = type, .order = order, .batch = 1 };
	*ret = d;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t *dnMatDescr, int64_t rows, int64_t cols,
						 int64_t ld, void *values, cudaDataType valueType, cusparseOrder_t order)
{
	return dnmat_new(dnMatDescr, rows, cols, ld, values, valueType, order);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t *dnMatDescr, int64_t rows,
						      int64_t cols, int64_t ld, const void *values,
						      cudaDataType valueType, cusparseOrder_t order)
{
	return dnmat_new((cusparseDnMatDescr_t *)dnMatDescr, rows, cols, ld, values, valueType, order);
}

PHOS_EXPORT cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t dnMatDescr)
{
	struct cusparseDnMatDescr *d = (struct cusparseDnMatDescr *)dnMatDescr;

	if (!d)
		return CUSPARSE_STATUS_SUCCESS;
	if (!dnmat_ok(d))
		return CUSPARSE_STATUS_INVALID_VALUE;
	d->magic = 0;
	free(d);
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnMatGet(cusparseDnMatDescr_t dnMatDescr, int64_t *rows, int64_t *cols,
					      int64_t *ld, void **values, cudaDataType *type, cusparseOrder_t *order)
{
	if (!dnmat_ok(dnMatDescr) || !rows || !cols || !ld || !values || !type || !order)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*rows = dnMatDescr->d.rows;
	*cols = dnMatDescr->d.cols;
	*ld = dnMatDescr->d.ld;
	*values = (void *)(uintptr_t)dnMatDescr->d.values;
	*type = (cudaDataType)dnMatDescr->d.value_type;
	*order = (cusparseOrder_t)dnMatDescr->d.order;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnMatGetValues(cusparseDnMatDescr_t dnMatDescr, void **values)
{
	if (!dnmat_ok(dnMatDescr) || !values)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*values = (void *)(uintptr_t)dnMatDescr->d.values;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnMatSetValues(cusparseDnMatDescr_t dnMatDescr, void *values)
{
	if (!dnmat_ok(dnMatDescr))
		return CUSPARSE_STATUS_INVALID_VALUE;
	dnMatDescr->d.values = (uint64_t)(uintptr_t)values;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnMatSetStridedBatch(cusparseDnMatDescr_t dnMatDescr, int batchCount,
							  int64_t batchStride)
{
	if (!dnmat_ok(dnMatDescr) || batchCount < 1 || batchCount > PHOS_SPARSE_BATCH_MAX || !size_ok(batchStride))
		return CUSPARSE_STATUS_INVALID_VALUE;
	dnMatDescr->d.batch = batchCount;
	dnMatDescr->d.batch_stride = batchStride;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnMatGetStridedBatch(cusparseConstDnMatDescr_t dnMatDescr, int *batchCount,
							  int64_t *batchStride)
{
	if (!dnmat_ok(dnMatDescr) || !batchCount || !batchStride)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*batchCount = dnMatDescr->d.batch;
	*batchStride = dnMatDescr->d.batch_stride;
	return CUSPARSE_STATUS_SUCCESS;
}

static cusparseStatus_t dnvec_new(cusparseDnVecDescr_t *ret, int64_t size, const void *values, cudaDataType type)
{
	struct cusparseDnVecDescr *v;
	cusparseStatus_t st;

	if (!ret || !size_ok(size))
		return CUSPARSE_STATUS_INVALID_VALUE;
	if ((st = value_type_ok(type)))
		return st;
	v = calloc(1, sizeof(*v));
	if (!v)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	v->magic = DNVEC_MAGIC;
	v->d = (struct phos_sparse_dnmat){ .rows = size, .cols = 1, .ld = size > 1 ? size : 1,
					   .values = (uint64_t)(uintptr_t)values, .value_type = type,
					   .order = PHOS_SPARSE_ORDER_COL, .batch = 1 };
	*ret = v;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t *dnVecDescr, int64_t size, void *values,
						 cudaDataType valueType)
{
	return dnvec_new(dnVecDescr, size, values, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateConstDnVec(cusparseConstDnVecDescr_t *dnVecDescr, int64_t size,
						      const void *values, cudaDataType valueType)
{
	return dnvec_new((cusparseDnVecDescr_t *)dnVecDescr, size, values, valueType);
}

PHOS_EXPORT cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t dnVecDescr)
{
	struct cusparseDnVecDescr *v = (struct cusparseDnVecDescr *)dnVecDescr;

	if (!v)
		return CUSPARSE_STATUS_SUCCESS;
	if (!dnvec_ok(v))
		return CUSPARSE_STATUS_INVALID_VALUE;
	v->magic = 0;
	free(v);
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnVecGet(cusparseDnVecDescr_t dnVecDescr, int64_t *size, void **values,
					      cudaDataType *valueType)
{
	if (!dnvec_ok(dnVecDescr) || !size || !values || !valueType)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*size = dnVecDescr->d.rows;
	*values = (void *)(uintptr_t)dnVecDescr->d.values;
	*valueType = (cudaDataType)dnVecDescr->d.value_type;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnVecGetValues(cusparseDnVecDescr_t dnVecDescr, void **values)
{
	if (!dnvec_ok(dnVecDescr) || !values)
		return CUSPARSE_STATUS_INVALID_VALUE;
	*values = (void *)(uintptr_t)dnVecDescr->d.values;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t dnVecDescr, void *values)
{
	if (!dnvec_ok(dnVecDescr))
		return CUSPARSE_STATUS_INVALID_VALUE;
	dnVecDescr->d.values = (uint64_t)(uintptr_t)values;
	return CUSPARSE_STATUS_SUCCESS;
}

/* --- calls --- */

static bool in_arena(uint64_t a)
{
	const struct phos_reply_hello *h = phos_preload_hello();

	return h && a >= h->arena_base && a < h->arena_base + h->arena_size;
}

/* Refuses a form of call name, naming both once. */
static cusparseStatus_t refuse_call(const char *name, const char *form)
{
	char what[160];

	snprintf(what, sizeof(what), "%s %s", name, form);
	return refuse(what);
}

/* The parts every call shares: handle, compute type, alpha and beta in the
 * handle's pointer mode, the operations and the algorithm. */
static cusparseStatus_t call_init(const char *name, cusparseHandle_t h, enum phos_sparse_kind kind, int op_a,
				  int op_b, const void *alpha, const void *beta, cudaDataType ct, int alg,
				  void *buffer, struct phos_sparse_call *c)
{
	memset(c, 0, sizeof(*c));
	if (!handle_ok(h))
		return CUSPARSE_STATUS_NOT_INITIALIZED;
	c->kind = kind;
	c->device = h->device;
	c->op_a = op_a;
	c->op_b = op_b;
	c->compute_type = ct;
	c->alg = alg;
	c->buffer = (uint64_t)(uintptr_t)buffer;
	c->pointer_mode = h->mode;
	if (kind != PHOS_SPARSE_SPMV && kind != PHOS_SPARSE_SPMM && kind != PHOS_SPARSE_SDDMM &&
	    kind != PHOS_SPARSE_SPGEMM_NNZ && kind != PHOS_SPARSE_SPGEMM)
		return CUSPARSE_STATUS_SUCCESS;   /* (no scalars) */
	if (!phos_sparse_value_ok(ct))
		return refuse_call(name, "with a complex, half or bfloat16 compute type");
	if (!alpha || !beta)
		return CUSPARSE_STATUS_INVALID_VALUE;
	if (h->mode == CUSPARSE_POINTER_MODE_DEVICE) {
		c->alpha_ptr = (uint64_t)(uintptr_t)alpha;
		c->beta_ptr = (uint64_t)(uintptr_t)beta;
	} else if (ct == CUDA_R_64F) {
		memcpy(&c->alpha, alpha, sizeof(double));
		memcpy(&c->beta, beta, sizeof(double));
	} else {
		float a, b;

		memcpy(&a, alpha, sizeof(a));
		memcpy(&b, beta, sizeof(b));
		c->alpha = a;
		c->beta = b;
	}
	return CUSPARSE_STATUS_SUCCESS;
}

/* Checks c (its layout, its memory) and sends it: SPARSE_SIZE into
 * *ret_size when it is not NULL, else SPARSE_EXEC on the handle's stream. */
/* Whether c may run on the device: its arrays (r[0 .. n)) and its buffer in
 * cudaMalloc's memory, and the handle's stream one to post on (its id into c). */
static cusparseStatus_t device_ready(const char *name, cusparseHandle_t h, struct phos_sparse_call *c,
				     const struct phos_sparse_range *r, uint32_t n)
{
	int rc;

	for (uint32_t i = 0; i < n; i++)
		if (!in_arena(r[i].addr))
			return refuse_call(name, "on memory other than cudaMalloc's (host or managed memory)");
	if (c->buffer && !in_arena(c->buffer))
		return refuse_call(name, "with an external buffer other than cudaMalloc's");
	rc = phos_preload_stream_id(h->stream, &c->stream);
	if (rc == cudaErrorStreamCaptureUnsupported)
		return refuse_call(name, "on a stream that is capturing a graph");
	return rc == cudaSuccess ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_INVALID_VALUE;
}

static cusparseStatus_t forward(const char *name, cusparseHandle_t h, struct phos_sparse_call *c, size_t *ret_size)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n = 0;
	int st = phos_sparse_ranges_of(c, 0, r, &n), rc;

	if (st == PHOS_SPARSE_NOT_SUPPORTED)
		return refuse_call(name, "of a batched matrix (SpMV, SparseToDense) or a COO matrix (SDDMM)");
	if (st)
		return (cusparseStatus_t)st;
	if (!ret_size) {   /* (a size query may name memory not yet allocated) */
		if ((st = device_ready(name, h, c, r, n)))
			return (cusparseStatus_t)st;
		return status_of(phos_preload_post(PHOS_OP_SPARSE_EXEC, c, sizeof(*c), NULL, 0), 0);
	} else {
		uint64_t bytes = 0;
		size_t len = 0;

		st = 0;
		rc = phos_preload_call(PHOS_OP_SPARSE_SIZE, c, sizeof(*c), NULL, 0, &bytes, sizeof(bytes), &len, &st);
		if (status_of(rc, st) != CUSPARSE_STATUS_SUCCESS)
			return status_of(rc, st);
		if (len != sizeof(bytes))
			return CUSPARSE_STATUS_INTERNAL_ERROR;
		*ret_size = (size_t)bytes;
		return CUSPARSE_STATUS_SUCCESS;
	}
}

static cusparseStatus_t spmv(const char *name, cusparseHandle_t h, cusparseOperation_t opA, const void *alpha,
			     cusparseConstSpMatDescr_t A, cusparseConstDnVecDescr_t x, const void *beta,
			     cusparseConstDnVecDescr_t y, cudaDataType ct, cusparseSpMVAlg_t alg, void *buffer,
			     size_t *ret_size)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init(name, h, PHOS_SPARSE_SPMV, opA, 0, alpha, beta, ct, alg, buffer, &c);

	if (st)
		return st;
	if (!spmat_ok(A) || !dnvec_ok(x) || !dnvec_ok(y))
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.sp = A->m;
	c.d[0] = x->d;
	c.d[1] = y->d;
	return forward(name, h, &c, ret_size);
}

PHOS_EXPORT cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA,
						     const void *alpha, cusparseConstSpMatDescr_t matA,
						     cusparseConstDnVecDescr_t vecX, const void *beta,
						     cusparseDnVecDescr_t vecY, cudaDataType computeType,
						     cusparseSpMVAlg_t alg, size_t *bufferSize)
{
	if (!bufferSize)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return spmv("cusparseSpMV_bufferSize", handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, NULL,
		    bufferSize);
}

PHOS_EXPORT cusparseStatus_t cusparseSpMV(cusparseHandle_t handle, cusparseOperation_t opA, const void *alpha,
					  cusparseConstSpMatDescr_t matA, cusparseConstDnVecDescr_t vecX,
					  const void *beta, cusparseDnVecDescr_t vecY, cudaDataType computeType,
					  cusparseSpMVAlg_t alg, void *externalBuffer)
{
	return spmv("cusparseSpMV", handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, externalBuffer,
		    NULL);
}

static cusparseStatus_t spmm(const char *name, bool pre, cusparseHandle_t h, cusparseOperation_t opA,
			     cusparseOperation_t opB, const void *alpha, cusparseConstSpMatDescr_t A,
			     cusparseConstDnMatDescr_t B, const void *beta, cusparseConstDnMatDescr_t C,
			     cudaDataType ct, cusparseSpMMAlg_t alg, void *buffer, size_t *ret_size)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init(name, h, PHOS_SPARSE_SPMM, opA, opB, alpha, beta, ct, alg, buffer, &c);

	if (st)
		return st;
	if (!spmat_ok(A) || !dnmat_ok(B) || !dnmat_ok(C))
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.preprocess = pre;
	c.sp = A->m;
	c.d[0] = B->d;
	c.d[1] = C->d;
	return forward(name, h, &c, ret_size);
}

PHOS_EXPORT cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA,
						     cusparseOperation_t opB, const void *alpha,
						     cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB,
						     const void *beta, cusparseDnMatDescr_t matC,
						     cudaDataType computeType, cusparseSpMMAlg_t alg, size_t *bufferSize)
{
	if (!bufferSize)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return spmm("cusparseSpMM_bufferSize", false, handle, opA, opB, alpha, matA, matB, beta, matC, computeType,
		    alg, NULL, bufferSize);
}

PHOS_EXPORT cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t handle, cusparseOperation_t opA,
						     cusparseOperation_t opB, const void *alpha,
						     cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB,
						     const void *beta, cusparseDnMatDescr_t matC,
						     cudaDataType computeType, cusparseSpMMAlg_t alg, void *externalBuffer)
{
	return spmm("cusparseSpMM_preprocess", true, handle, opA, opB, alpha, matA, matB, beta, matC, computeType,
		    alg, externalBuffer, NULL);
}

PHOS_EXPORT cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
					  const void *alpha, cusparseConstSpMatDescr_t matA,
					  cusparseConstDnMatDescr_t matB, const void *beta, cusparseDnMatDescr_t matC,
					  cudaDataType computeType, cusparseSpMMAlg_t alg, void *externalBuffer)
{
	return spmm("cusparseSpMM", false, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg,
		    externalBuffer, NULL);
}

static cusparseStatus_t sddmm(const char *name, bool pre, cusparseHandle_t h, cusparseOperation_t opA,
			      cusparseOperation_t opB, const void *alpha, cusparseConstDnMatDescr_t A,
			      cusparseConstDnMatDescr_t B, const void *beta, cusparseConstSpMatDescr_t C,
			      cudaDataType ct, cusparseSDDMMAlg_t alg, void *buffer, size_t *ret_size)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init(name, h, PHOS_SPARSE_SDDMM, opA, opB, alpha, beta, ct, alg, buffer, &c);

	if (st)
		return st;
	if (!dnmat_ok(A) || !dnmat_ok(B) || !spmat_ok(C))
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.preprocess = pre;
	c.d[0] = A->d;
	c.d[1] = B->d;
	c.sp = C->m;
	return forward(name, h, &c, ret_size);
}

PHOS_EXPORT cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t opA,
						      cusparseOperation_t opB, const void *alpha,
						      cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB,
						      const void *beta, cusparseSpMatDescr_t matC,
						      cudaDataType computeType, cusparseSDDMMAlg_t alg,
						      size_t *bufferSize)
{
	if (!bufferSize)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return sddmm("cusparseSDDMM_bufferSize", false, handle, opA, opB, alpha, matA, matB, beta, matC,
		     computeType, alg, NULL, bufferSize);
}

PHOS_EXPORT cusparseStatus_t cusparseSDDMM_preprocess(cusparseHandle_t handle, cusparseOperation_t opA,
						      cusparseOperation_t opB, const void *alpha,
						      cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB,
						      const void *beta, cusparseSpMatDescr_t matC,
						      cudaDataType computeType, cusparseSDDMMAlg_t alg,
						      void *externalBuffer)
{
	return sddmm("cusparseSDDMM_preprocess", true, handle, opA, opB, alpha, matA, matB, beta, matC, computeType,
		     alg, externalBuffer, NULL);
}

PHOS_EXPORT cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t opA, cusparseOperation_t opB,
					   const void *alpha, cusparseConstDnMatDescr_t matA,
					   cusparseConstDnMatDescr_t matB, const void *beta, cusparseSpMatDescr_t matC,
					   cudaDataType computeType, cusparseSDDMMAlg_t alg, void *externalBuffer)
{
	return sddmm("cusparseSDDMM", false, handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg,
		     externalBuffer, NULL);
}

static cusparseStatus_t to_dense(const char *name, cusparseHandle_t h, cusparseConstSpMatDescr_t A,
				 cusparseConstDnMatDescr_t B, cusparseSparseToDenseAlg_t alg, void *buffer,
				 size_t *ret_size)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init(name, h, PHOS_SPARSE_TO_DENSE, 0, 0, NULL, NULL, CUDA_R_32F, alg, buffer, &c);

	if (st)
		return st;
	if (!spmat_ok(A) || !dnmat_ok(B))
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.sp = A->m;
	c.d[0] = B->d;
	c.compute_type = A->m.value_type;
	return forward(name, h, &c, ret_size);
}

PHOS_EXPORT cusparseStatus_t cusparseSparseToDense_bufferSize(cusparseHandle_t handle,
							      cusparseConstSpMatDescr_t matA,
							      cusparseDnMatDescr_t matB,
							      cusparseSparseToDenseAlg_t alg, size_t *bufferSize)
{
	if (!bufferSize)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return to_dense("cusparseSparseToDense_bufferSize", handle, matA, matB, alg, NULL, bufferSize);
}

PHOS_EXPORT cusparseStatus_t cusparseSparseToDense(cusparseHandle_t handle, cusparseConstSpMatDescr_t matA,
						   cusparseDnMatDescr_t matB, cusparseSparseToDenseAlg_t alg,
						   void *externalBuffer)
{
	return to_dense("cusparseSparseToDense", handle, matA, matB, alg, externalBuffer, NULL);
}

PHOS_EXPORT cusparseStatus_t cusparseXcoo2csr(cusparseHandle_t handle, const int *cooRowInd, int nnz, int m,
					      int *csrSortedRowPtr, cusparseIndexBase_t idxBase)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init("cusparseXcoo2csr", handle, PHOS_SPARSE_COO2CSR, 0, 0, NULL, NULL,
					CUDA_R_32F, 0, NULL, &c);

	if (st)
		return st;
	if (nnz < 0 || m < 0 || !csrSortedRowPtr || (nnz > 0 && !cooRowInd))
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.sp = (struct phos_sparse_spmat){ .format = PHOS_SPARSE_FORMAT_COO, .offsets_type = PHOS_SPARSE_INDEX_32I,
					   .index_type = PHOS_SPARSE_INDEX_32I, .base = idxBase,
					   .value_type = PHOS_SPARSE_R_32F, .batch = 1, .rows = m, .nnz = nnz,
					   .offsets = (uint64_t)(uintptr_t)cooRowInd,
					   .columns = (uint64_t)(uintptr_t)csrSortedRowPtr };
	return forward("cusparseXcoo2csr", handle, &c, NULL);
}

/* The 32-bit legacy sorts and the identity permutation: sp's rows, cols,
 * nnz, base, offsets (CSR offsets or COO rows), columns and values (P). */
static cusparseStatus_t legacy(const char *name, cusparseHandle_t h, enum phos_sparse_kind kind, int m, int n,
			       int nnz, int base, const void *offsets, const void *columns, const void *perm,
			       void *buffer, size_t *ret_size)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = call_init(name, h, kind, 0, 0, NULL, NULL, CUDA_R_32F, 0, buffer, &c);

	if (st)
		return st;
	if (m < 0 || n < 0 || nnz < 0)
		return CUSPARSE_STATUS_INVALID_VALUE;
	c.sp = (struct phos_sparse_spmat){ .format = PHOS_SPARSE_FORMAT_COO, .offsets_type = PHOS_SPARSE_INDEX_32I,
					   .index_type = PHOS_SPARSE_INDEX_32I, .base = base,
					   .value_type = PHOS_SPARSE_R_32F, .batch = 1, .rows = m, .cols = n, .nnz = nnz,
					   .offsets = (uint64_t)(uintptr_t)offsets,
					   .columns = (uint64_t)(uintptr_t)columns,
					   .values = (uint64_t)(uintptr_t)perm };
	return forward(name, h, &c, ret_size);
}

PHOS_EXPORT cusparseStatus_t cusparseCreateIdentityPermutation(cusparseHandle_t handle, int n, int *p)
{
	if (n < 0 || (n > 0 && !p))
		return CUSPARSE_STATUS_INVALID_VALUE;
	return legacy("cusparseCreateIdentityPermutation", handle, PHOS_SPARSE_IDENTITY, 0, 0, n, 0, NULL, NULL, p,
		      NULL, NULL);
}

PHOS_EXPORT cusparseStatus_t cusparseXcsrsort_bufferSizeExt(cusparseHandle_t handle, int m, int n, int nnz,
							    const int *csrRowPtrA, const int *csrColIndA,
							    size_t *pBufferSizeInBytes)
{
	if (!pBufferSizeInBytes)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return legacy("cusparseXcsrsort_bufferSizeExt", handle, PHOS_SPARSE_CSRSORT, m, n, nnz, 0, csrRowPtrA,
		      csrColIndA, NULL, NULL, pBufferSizeInBytes);
}

PHOS_EXPORT cusparseStatus_t cusparseXcsrsort(cusparseHandle_t handle, int m, int n, int nnz,
					      const cusparseMatDescr_t descrA, const int *csrRowPtrA, int *csrColIndA,
					      int *P, void *pBuffer)
{
	if (!matdescr_ok(descrA))
		return CUSPARSE_STATUS_INVALID_VALUE;
	return legacy("cusparseXcsrsort", handle, PHOS_SPARSE_CSRSORT, m, n, nnz, descrA->base, csrRowPtrA,
		      csrColIndA, P, pBuffer, NULL);
}

PHOS_EXPORT cusparseStatus_t cusparseXcoosort_bufferSizeExt(cusparseHandle_t handle, int m, int n, int nnz,
							    const int *cooRowsA, const int *cooColsA,
							    size_t *pBufferSizeInBytes)
{
	if (!pBufferSizeInBytes)
		return CUSPARSE_STATUS_INVALID_VALUE;
	return legacy("cusparseXcoosort_bufferSizeExt", handle, PHOS_SPARSE_COOSORT, m, n, nnz, 0, cooRowsA,
		      cooColsA, NULL, NULL, pBufferSizeInBytes);
}

PHOS_EXPORT cusparseStatus_t cusparseXcoosortByRow(cusparseHandle_t handle, int m, int n, int nnz, int *cooRowsA,
						   int *cooColsA, int *P, void *pBuffer)
{
	return legacy("cusparseXcoosortByRow", handle, PHOS_SPARSE_COOSORT, m, n, nnz, 0, cooRowsA, cooColsA, P,
		      pBuffer, NULL);
}

/* Called by every generated stub (stubs_cusparse.c). */
int phos_cusparse_stub(const char *name, int *logged);
int phos_cusparse_stub(const char *name, int *logged)
{
	phos_log_once("cuSPARSE API", name, logged);
	return CUSPARSE_STATUS_NOT_SUPPORTED;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-cusparse", PHOS_LOG_OFF);
}

/* --- SpGEMM: C = alpha A B --- */

PHOS_EXPORT cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t *descr)
{
	struct cusparseSpGEMMDescr *g;

	if (!descr)
		return CUSPARSE_STATUS_INVALID_VALUE;
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUSPARSE_STATUS_ALLOC_FAILED;
	g->magic = SPGEMM_MAGIC;
	*descr = g;
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr)
{
	if (!descr)
		return CUSPARSE_STATUS_SUCCESS;
	if (descr->magic != SPGEMM_MAGIC)
		return CUSPARSE_STATUS_INVALID_VALUE;
	descr->magic = 0;
	free(descr);
	return CUSPARSE_STATUS_SUCCESS;
}

/* One SpGEMM phase's call: its operands described and its form checked. */
static cusparseStatus_t spgemm_init(const char *name, enum phos_sparse_kind kind, cusparseHandle_t h,
				    cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
				    cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B, const void *beta,
				    cusparseSpMatDescr_t C, cudaDataType ct, cusparseSpGEMMAlg_t alg,
				    cusparseSpGEMMDescr_t g, struct phos_sparse_call *c)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n = 0;
	cusparseStatus_t st = call_init(name, h, kind, opA, opB, alpha, beta, ct, alg, NULL, c);

	if (st)
		return st;
	if (!spmat_ok(A) || !spmat_ok(B) || !spmat_ok(C) || !g || g->magic != SPGEMM_MAGIC)
		return CUSPARSE_STATUS_INVALID_VALUE;
	c->sp = A->m;
	c->sp2[0] = B->m;
	c->sp2[1] = C->m;
	if (kind == PHOS_SPARSE_SPGEMM)
		c->sp2[1].nnz = g->nnz;
	st = (cusparseStatus_t)phos_sparse_ranges_of(c, 0, r, &n);
	if (st == CUSPARSE_STATUS_NOT_SUPPORTED)
		return refuse_call(name, "other than CSR x CSR, op N, beta 0, host scalars, the default algorithm or "
				   "ALG1");
	return st;
}

PHOS_EXPORT cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t handle, cusparseOperation_t opA,
							   cusparseOperation_t opB, const void *alpha,
							   cusparseConstSpMatDescr_t matA,
							   cusparseConstSpMatDescr_t matB, const void *beta,
							   cusparseSpMatDescr_t matC, cudaDataType computeType,
							   cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr,
							   size_t *bufferSize1, void *externalBuffer1)
{
	struct phos_sparse_call c;
	cusparseStatus_t st = spgemm_init("cusparseSpGEMM_workEstimation", PHOS_SPARSE_SPGEMM_NNZ, handle, opA, opB,
					  alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr, &c);

	if (st)
		return st;
	if (!bufferSize1)
		return CUSPARSE_STATUS_INVALID_VALUE;
	if (!externalBuffer1)
		*bufferSize1 = SPGEMM_BUFFER;
	spgemmDescr->counted = false;   /* (a new product: compute counts it) */
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t handle, cusparseOperation_t opA,
						    cusparseOperation_t opB, const void *alpha,
						    cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
						    const void *beta, cusparseSpMatDescr_t matC,
						    cudaDataType computeType, cusparseSpGEMMAlg_t alg,
						    cusparseSpGEMMDescr_t spgemmDescr, size_t *bufferSize2,
						    void *externalBuffer2)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	struct phos_sparse_call c;
	size_t nnz = 0;
	uint32_t n = 0;
	cusparseStatus_t st = spgemm_init("cusparseSpGEMM_compute", PHOS_SPARSE_SPGEMM_NNZ, handle, opA, opB, alpha,
					  matA, matB, beta, matC, computeType, alg, spgemmDescr, &c);

	if (st)
		return st;
	if (!bufferSize2)
		return CUSPARSE_STATUS_INVALID_VALUE;
	if (!externalBuffer2) {
		*bufferSize2 = SPGEMM_BUFFER;
		return CUSPARSE_STATUS_SUCCESS;
	}
	/* the count reads A and B on the device: as a posted call's checks, then SIZE's answer */
	(void)phos_sparse_ranges_of(&c, 0, r, &n);
	if ((st = device_ready("cusparseSpGEMM_compute", handle, &c, r, n)) ||
	    (st = forward("cusparseSpGEMM_compute", handle, &c, &nnz)))
		return st;
	if (nnz > PHOS_SPARSE_ELEMS_MAX)
		return CUSPARSE_STATUS_INTERNAL_ERROR;
	spgemmDescr->nnz = (int64_t)nnz;
	spgemmDescr->counted = true;
	matC->m.nnz = (int64_t)nnz;   /* what cusparseSpMatGetSize says now */
	return CUSPARSE_STATUS_SUCCESS;
}

PHOS_EXPORT cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t handle, cusparseOperation_t opA,
						 cusparseOperation_t opB, const void *alpha,
						 cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB,
						 const void *beta, cusparseSpMatDescr_t matC, cudaDataType computeType,
						 cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr)
{
	struct phos_sparse_call c;
	cusparseStatus_t st;

	if (spgemmDescr && spgemmDescr->magic == SPGEMM_MAGIC && !spgemmDescr->counted)
		return CUSPARSE_STATUS_INVALID_VALUE;   /* (copy before compute) */
	st = spgemm_init("cusparseSpGEMM_copy", PHOS_SPARSE_SPGEMM, handle, opA, opB, alpha, matA, matB, beta, matC,
			 computeType, alg, spgemmDescr, &c);
	if (st)
		return st;
	return forward("cusparseSpGEMM_copy", handle, &c, NULL);
}
