/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "proto.h"

static const char *const op_names[PHOS_OP__COUNT] = {
	[PHOS_OP_NOP] = "nop",
	[PHOS_OP_HELLO] = "hello",
	[PHOS_OP_MALLOC] = "malloc",
	[PHOS_OP_FREE] = "free",
	[PHOS_OP_MEMCPY_H2D] = "memcpy_h2d",
	[PHOS_OP_MEMCPY_D2H] = "memcpy_d2h",
	[PHOS_OP_MEMCPY_D2D] = "memcpy_d2d",
	[PHOS_OP_MEMCPY_H2D_SHM] = "memcpy_h2d_shm",
	[PHOS_OP_MEMCPY_D2H_SHM] = "memcpy_d2h_shm",
	[PHOS_OP_MEMSET] = "memset",
	[PHOS_OP_MEM_GET_INFO] = "mem_get_info",
	[PHOS_OP_HOSTMEM_ADD] = "hostmem_add",
	[PHOS_OP_HOSTMEM_REMOVE] = "hostmem_remove",
	[PHOS_OP_DEVICE_INFO] = "device_info",
	[PHOS_OP_DEVICE_SYNC] = "device_sync",
	[PHOS_OP_DEVICE_RESET] = "device_reset",
	[PHOS_OP_STREAM_CREATE] = "stream_create",
	[PHOS_OP_STREAM_DESTROY] = "stream_destroy",
	[PHOS_OP_STREAM_SYNC] = "stream_sync",
	[PHOS_OP_STREAM_QUERY] = "stream_query",
	[PHOS_OP_STREAM_WAIT_EVENT] = "stream_wait_event",
	[PHOS_OP_EVENT_CREATE] = "event_create",
	[PHOS_OP_EVENT_DESTROY] = "event_destroy",
	[PHOS_OP_EVENT_RECORD] = "event_record",
	[PHOS_OP_EVENT_SYNC] = "event_sync",
	[PHOS_OP_EVENT_QUERY] = "event_query",
	[PHOS_OP_EVENT_ELAPSED] = "event_elapsed",
	[PHOS_OP_MODULE_LOAD] = "module_load",
	[PHOS_OP_MODULE_UNLOAD] = "module_unload",
	[PHOS_OP_FUNC_REGISTER] = "func_register",
	[PHOS_OP_VAR_REGISTER] = "var_register",
	[PHOS_OP_FUNC_INFO] = "func_info",
	[PHOS_OP_FUNC_SET_ATTR] = "func_set_attr",
	[PHOS_OP_OCCUPANCY] = "occupancy",
	[PHOS_OP_VAR_INFO] = "var_info",
	[PHOS_OP_LAUNCH] = "launch",
	[PHOS_OP_LAUNCH_EX] = "launch_ex",
	[PHOS_OP_OCCUPANCY_CLUSTER] = "occupancy_cluster",
	[PHOS_OP_BLAS_CREATE] = "blas_create",
	[PHOS_OP_BLAS_DESTROY] = "blas_destroy",
	[PHOS_OP_BLAS_SET_STREAM] = "blas_set_stream",
	[PHOS_OP_BLAS_SET_MATH] = "blas_set_math",
	[PHOS_OP_BLAS_SET_WORKSPACE] = "blas_set_workspace",
	[PHOS_OP_BLAS_GEMM] = "blas_gemm",
	[PHOS_OP_BLAS_L1] = "blas_l1",
	[PHOS_OP_BLAS_GEMV] = "blas_gemv",
	[PHOS_OP_SERVE] = "serve",
	[PHOS_OP_GOODBYE] = "goodbye",
	[PHOS_OP_MODULE_LOAD_SHM] = "module_load_shm",
	[PHOS_OP_BLAS_SET_MATRIX] = "blas_set_matrix",
	[PHOS_OP_BLAS_GET_MATRIX] = "blas_get_matrix",
	[PHOS_OP_BLAS_CALL] = "blas_call",
	[PHOS_OP_BLAS_LU] = "blas_lu",
	[PHOS_OP_POOL_CREATE] = "pool_create",
	[PHOS_OP_POOL_DESTROY] = "pool_destroy",
	[PHOS_OP_POOL_MALLOC] = "pool_malloc",
	[PHOS_OP_POOL_FREE] = "pool_free",
	[PHOS_OP_POOL_SET_ATTR] = "pool_set_attr",
	[PHOS_OP_POOL_GET_ATTR] = "pool_get_attr",
	[PHOS_OP_POOL_TRIM] = "pool_trim",
	[PHOS_OP_POOL_ADOPT] = "pool_adopt",
	[PHOS_OP_HOST_FUNC] = "host_func",
	[PHOS_OP_MEMCPY_2D] = "memcpy_2d",
	[PHOS_OP_MEMSET_2D] = "memset_2d",
	[PHOS_OP_STREAM_ATTR] = "stream_attr",
	[PHOS_OP_DEVICE_LIMIT] = "device_limit",
	[PHOS_OP_MODULE_STATUS] = "module_status",
	[PHOS_OP_NCCL_VERSION] = "nccl_version",
	[PHOS_OP_NCCL_UNIQUE_ID] = "nccl_unique_id",
	[PHOS_OP_NCCL_INIT] = "nccl_init",
	[PHOS_OP_NCCL_SPLIT] = "nccl_split",
	[PHOS_OP_NCCL_END] = "nccl_end",
	[PHOS_OP_NCCL_QUERY] = "nccl_query",
	[PHOS_OP_NCCL_COLL] = "nccl_coll",
	[PHOS_OP_NCCL_GROUP] = "nccl_group",
	[PHOS_OP_ARRAY_CREATE] = "array_create",
	[PHOS_OP_ARRAY_DESTROY] = "array_destroy",
	[PHOS_OP_ARRAY_COPY] = "array_copy",
	[PHOS_OP_TEX_CREATE] = "tex_create",
	[PHOS_OP_TEX_DESTROY] = "tex_destroy",
	[PHOS_OP_ADDR_RANGE] = "addr_range",
	[PHOS_OP_SET_DEVICE] = "set_device",
	[PHOS_OP_BLASLT_MATMUL] = "blaslt_matmul",
	[PHOS_OP_BLASLT_HEURISTIC] = "blaslt_heuristic",
	[PHOS_OP_DNN_VERSION] = "dnn_version",
	[PHOS_OP_DNN_CREATE] = "dnn_create",
	[PHOS_OP_DNN_DESTROY] = "dnn_destroy",
	[PHOS_OP_DNN_DESC_CREATE] = "dnn_desc_create",
	[PHOS_OP_DNN_DESC_DESTROY] = "dnn_desc_destroy",
	[PHOS_OP_DNN_SET] = "dnn_set",
	[PHOS_OP_DNN_GET] = "dnn_get",
	[PHOS_OP_DNN_FINALIZE] = "dnn_finalize",
	[PHOS_OP_DNN_EXECUTE] = "dnn_execute",
	[PHOS_OP_DNN_BN] = "dnn_bn",
	[PHOS_OP_DNN_BN_SIZE] = "dnn_bn_size",
	[PHOS_OP_DNN_STF] = "dnn_stf",
	[PHOS_OP_DNN_RNN] = "dnn_rnn",
	[PHOS_OP_DNN_RNN_ASK] = "dnn_rnn_ask",
	[PHOS_OP_DNN_CTC] = "dnn_ctc",
	[PHOS_OP_DNN_CTC_SIZE] = "dnn_ctc_size",
	[PHOS_OP_VMM_RESERVE] = "vmm_reserve",
	[PHOS_OP_VMM_FREE] = "vmm_free",
	[PHOS_OP_VMM_MAP] = "vmm_map",
	[PHOS_OP_VMM_UNMAP] = "vmm_unmap",
	[PHOS_OP_GRAPH_BUILD] = "graph_build",
	[PHOS_OP_GRAPH_LAUNCH] = "graph",
	[PHOS_OP_GRAPH_DESTROY] = "graph_destroy",
	[PHOS_OP_FFT_VERSION] = "fft_version",
	[PHOS_OP_FFT_PLAN] = "fft_plan",
	[PHOS_OP_FFT_SIZE] = "fft_size",
	[PHOS_OP_FFT_DESTROY] = "fft_destroy",
	[PHOS_OP_FFT_EXEC] = "fft_exec",
	[PHOS_OP_SPARSE_VERSION] = "sparse_version",
	[PHOS_OP_SPARSE_SIZE] = "sparse_size",
	[PHOS_OP_SPARSE_EXEC] = "sparse_exec",
	[PHOS_OP_RAND_VERSION] = "rand_version",
	[PHOS_OP_RAND_CREATE] = "rand_create",
	[PHOS_OP_RAND_SET] = "rand_set",
	[PHOS_OP_RAND_DESTROY] = "rand_destroy",
	[PHOS_OP_RAND_GENERATE] = "rand_generate",
	[PHOS_OP_RAND_REPLAY] = "rand_replay",
	[PHOS_OP_SOLVER_VERSION] = "solver_version",
	[PHOS_OP_SOLVER_SIZE] = "solver_size",
	[PHOS_OP_SOLVER_EXEC] = "solver_exec",
};

const char *phos_op_name(uint32_t op)
{
	if (op < PHOS_OP__COUNT && op_names[op])
		return op_names[op];
	return "unknown";
}

bool phos_pitched_extent(uint64_t pitch, uint64_t slice, uint64_t width, uint64_t height, uint64_t depth,
			 uint64_t *ret_extent)
{
	uint64_t rows;

	if (width == 0 || height == 0 || depth == 0) {
		*ret_extent = 0;
		return true;
	}
	if (height > 1 && (pitch < width || pitch > (UINT64_MAX - width) / (height - 1)))
		return false;
	rows = (height - 1) * pitch + width;
	if (depth > 1 && (slice < rows || slice > (UINT64_MAX - rows) / (depth - 1)))
		return false;
	*ret_extent = (depth - 1) * slice + rows;
	return true;
}

int phos_channel_format(const int32_t bits[4], int32_t kind, uint32_t *ret_channels, uint32_t *ret_channel_bytes)
{
	uint32_t n = 0;

	if (kind < 0 || kind > 2)
		return -1;
	while (n < 4 && bits[n] > 0)
		n++;
	if (n == 0 || (bits[0] != 8 && bits[0] != 16 && bits[0] != 32))
		return -1;
	for (uint32_t i = 0; i < 4; i++)
		if (i < n ? bits[i] != bits[0] : bits[i] != 0)
			return -1;
	if (kind == 2 && bits[0] == 8)
		return -1;
	*ret_channels = n;
	*ret_channel_bytes = (uint32_t)bits[0] / 8;
	return 0;
}

bool phos_array_extent(const struct phos_array_create *a, uint32_t elem_bytes, uint64_t ret_dims[3],
		       uint64_t *ret_bytes)
{
	const uint64_t max = 1u << 20;
	uint64_t d[3] = { a->width, a->height ? a->height : 1, a->depth ? a->depth : 1 };

	if (d[0] == 0 || d[0] > max || d[1] > max || d[2] > max || elem_bytes == 0 || elem_bytes > 16)
		return false;
	/* at most 2^60 elements (no overflow); at most 1 TiB */
	if (d[0] * d[1] * d[2] > (1ull << 40) / elem_bytes)
		return false;
	memcpy(ret_dims, d, sizeof(d));
	*ret_bytes = d[0] * d[1] * d[2] * elem_bytes;
	return true;
}
