/* SPDX-License-Identifier: MIT */
/*
 * NCCL's binary interface as phos-fn sees it (NCCL 2.2x), declared here from
 * the ABI (names and values), so that neither the stand-in libnccl.so.2 nor
 * the executor needs NVIDIA's header:
 *
 *   ncclComm_t       an opaque pointer (ours: a wrapped id, preload/cudart/internal.h)
 *   ncclUniqueId     128 bytes, copied by value between processes
 *   ncclResult_t     int: 0 success ... 7 in progress
 *   ncclDataType_t   int: 0 int8 ... 11 float8e5m2
 *   ncclRedOp_t      int: 0 sum, 1 prod, 2 max, 3 min, 4 avg (others: user ops)
 *   ncclConfig_t     the 2.28 layout: size, magic, version, then the settings
 *
 * The executor's cuda backend passes these to the real library unchanged.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PHOS_NCCL_UNIQUE_ID_BYTES 128
/* The version the stand-in reports (ncclGetVersion on the sim device):
 * major * 10000 + minor * 100 + patch, as NCCL >= 2.9 encodes it. */
#define PHOS_NCCL_VERSION_CODE 22809

typedef struct phos_nccl_comm *phos_nccl_comm_t;
typedef struct {
	char internal[PHOS_NCCL_UNIQUE_ID_BYTES];
} phos_nccl_unique_id;

enum phos_nccl_result {
	PHOS_NCCL_SUCCESS = 0,
	PHOS_NCCL_UNHANDLED_CUDA_ERROR = 1,
	PHOS_NCCL_SYSTEM_ERROR = 2,
	PHOS_NCCL_INTERNAL_ERROR = 3,
	PHOS_NCCL_INVALID_ARGUMENT = 4,
	PHOS_NCCL_INVALID_USAGE = 5,
	PHOS_NCCL_REMOTE_ERROR = 6,
	PHOS_NCCL_IN_PROGRESS = 7,
	PHOS_NCCL_NUM_RESULTS = 8,
};

enum phos_nccl_type {
	PHOS_NCCL_INT8 = 0,
	PHOS_NCCL_UINT8 = 1,
	PHOS_NCCL_INT32 = 2,
	PHOS_NCCL_UINT32 = 3,
	PHOS_NCCL_INT64 = 4,
	PHOS_NCCL_UINT64 = 5,
	PHOS_NCCL_FLOAT16 = 6,
	PHOS_NCCL_FLOAT32 = 7,
	PHOS_NCCL_FLOAT64 = 8,
	PHOS_NCCL_BFLOAT16 = 9,
	PHOS_NCCL_FLOAT8E4M3 = 10,
	PHOS_NCCL_FLOAT8E5M2 = 11,
	PHOS_NCCL_NUM_TYPES = 12,
};

enum phos_nccl_op {
	PHOS_NCCL_SUM = 0,
	PHOS_NCCL_PROD = 1,
	PHOS_NCCL_MAX = 2,
	PHOS_NCCL_MIN = 3,
	PHOS_NCCL_AVG = 4,
	PHOS_NCCL_NUM_OPS = 5,
};

#define PHOS_NCCL_CONFIG_MAGIC 0xcafebeefu
#define PHOS_NCCL_CONFIG_UNDEF_INT ((int)0x80000000u)
#define PHOS_NCCL_SPLIT_NOCOLOR (-1)

/* ncclConfig_t of NCCL 2.28 (version 22800 of the struct). Older callers pass
 * a smaller size: only the fields inside it are read. */
struct phos_nccl_config {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cga_cluster_size;
	int min_ctas;
	int max_ctas;
	const char *net_name;
	int split_share;
	int traffic_class;
	const char *comm_name;
	int collnet_enable;
	int cta_policy;
	int shrink_share;
	int nvls_ctas;
	int nchannels_per_net_peer;
	int nvlink_centric_sched;
};

/* Bytes of one element, or 0 for a type NCCL does not have. */
static inline size_t phos_nccl_type_size(int type)
{
	switch (type) {
	case PHOS_NCCL_INT8: case PHOS_NCCL_UINT8: case PHOS_NCCL_FLOAT8E4M3: case PHOS_NCCL_FLOAT8E5M2:
		return 1;
	case PHOS_NCCL_FLOAT16: case PHOS_NCCL_BFLOAT16:
		return 2;
	case PHOS_NCCL_INT32: case PHOS_NCCL_UINT32: case PHOS_NCCL_FLOAT32:
		return 4;
	case PHOS_NCCL_INT64: case PHOS_NCCL_UINT64: case PHOS_NCCL_FLOAT64:
		return 8;
	default:
		return 0;
	}
}
