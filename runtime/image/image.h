/* SPDX-License-Identifier: MIT */
/*
 * The snapshot image: one directory per snapshot, written atomically.
 *
 *   DIR/
 *     manifest.json     format magic + version, function, GPU needs, buffers
 *                       (address, size, offset in gpu.data, checksum), modules
 *                       (by fatbin hash), kernels, variables, streams, events,
 *                       cuBLAS handles, prefetch order, CPU image facts
 *     gpu.data          buffer contents, each at a 4 KiB-aligned offset (O_DIRECT)
 *     modules/<hash>.fatbin   each fatbin once, named by its hash
 *     cpu/              the CRIU image of the function process (1.1: each file's
 *                       size and checksum in the manifest, verified before
 *                       every CRIU restore; see phos_image_cpu_verify)
 *
 * Writing: phos_image_dir_begin makes DIR.tmp-XXXXXX beside DIR; everything is
 * written there; phos_image_dir_commit fsyncs and renames it into place (an
 * existing DIR is swapped out with RENAME_EXCHANGE and removed), so a crash,
 * a full disk or a failed dump at any point leaves the old snapshot or none.
 * A directory without a manifest.json is never a snapshot, and the manifest is
 * the last file written.
 *
 * Checksums: a buffer's checksum is XXH3-64 over the little-endian array of the
 * XXH3-64 hashes of its 4 MiB chunks (PHOS_IMAGE_HASH_CHUNK; the last chunk may
 * be short), so chunks can be hashed in parallel inside the copy pipeline and
 * combined in order at the end. phos_image_hash computes the same value in one
 * call.
 *
 * Reading is bounded and validating: a manifest with a wrong magic, a newer
 * major version, missing or out-of-range fields, overlapping buffers, buffers
 * outside gpu.data or outside the arena, more than PHOS_IMAGE_MAX_* entries, is
 * refused with a message that names the problem.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define PHOS_IMAGE_MAGIC "phos-fn-snapshot"
#define PHOS_IMAGE_MAJOR 1
#define PHOS_IMAGE_MINOR 4   /* 1.1: cpu.files, the CRIU image's checksums; 1.2: checkpoint;
                              * 1.3: arrays, textures; 1.4: devices (an executor over
                              * several GPUs) and the device of each stream, event,
                              * cuBLAS handle, variable copy, array and texture object */
#define PHOS_IMAGE_ALIGN 4096u
#define PHOS_IMAGE_HASH_CHUNK (4u << 20)

/* Limits on what a manifest may hold. */
#define PHOS_IMAGE_MAX_BUFS (1u << 20)
#define PHOS_IMAGE_MAX_OBJECTS (1u << 16)    /* modules, kernels, variables, streams, ... each */
#define PHOS_IMAGE_MAX_MANIFEST (256u << 20) /* bytes */
#define PHOS_IMAGE_MAX_NAME 4096u
#define PHOS_IMAGE_MAX_CPU_FILES 4096u
#define PHOS_IMAGE_MAX_DEVICES 8u          /* the executor's EXEC_MAX_DEVICES */

struct phos_image_buf {
	uint64_t addr, size;
	uint64_t id;          /* allocation order id (bufmap) */
	uint64_t offset;      /* in gpu.data, PHOS_IMAGE_ALIGN-aligned */
	uint64_t hash;        /* chunked XXH3, see above */
};

struct phos_image_module {
	uint32_t id;
	char hash[33];        /* XXH3-128 of the fatbin, 32 hex digits: modules/<hash>.fatbin */
	uint64_t size;
};

struct phos_image_func {
	uint32_t id, module;
	char *name;           /* mangled; owned */
};

struct phos_image_var {
	uint32_t id, module;
	char *name;           /* owned */
	uint64_t addr, size;  /* where it lived */
	uint64_t offset;      /* its contents in gpu.data */
	uint64_t hash;
	bool constant;
	uint32_t device;      /* 1.4: which device's copy (one entry per device) */
	bool given;           /* its address went to the program ("given", written when true) */
};

/* device (1.4, absent: 0): of the executor's devices, < devices */
struct phos_image_stream { uint32_t id, flags; int32_t priority; uint32_t device; };
struct phos_image_event { uint32_t id, flags; uint32_t device; };
struct phos_image_blas {
	uint32_t id, stream;
	int32_t math_mode;
	uint64_t workspace, workspace_size;
	uint32_t device;
};

/* 1.2: a host-memory region the function shared with its executor
 * (cudaMallocHost, cudaHostRegister: a memfd mapped by both). A snapshot
 * taken at phos_fn_serve ignores them (the preload sends them again); a
 * restored checkpoint maps them again from the restored function
 * (ctxpool/executor/main.c, adopting). */
struct phos_image_region {
	uint32_t id;
	uint64_t size;
	uint64_t addr;        /* where the function maps it */
	uint64_t exec_addr;   /* where the executor mapped it: its device address */
};

/* 1.3: a CUDA array (ctxpool/calls/exec_array.c): how it was made, and its
 * contents, packed rows, in gpu.data like a buffer's. */
struct phos_image_array {
	struct phos_array_create desc;   /* id, format, flags, extent */
	uint64_t offset, size;           /* size: phos_array_extent's bytes */
	uint64_t hash;
	uint32_t device;                 /* 1.4: the GPU it was made on (absent: 0) */
};

/* 1.3: a texture or surface object, by its handle, as it was made. */
struct phos_image_tex {
	uint64_t handle;
	bool dangling;        /* its array was freed before the dump: the handle stays taken */
	struct phos_tex_create desc;
	uint32_t device;      /* 1.4: the GPU it was made on (absent: 0) */
};

/* A file of the CRIU image (cpu/NAME), checksummed like a buffer. */
struct phos_image_file {
	char name[64];
	uint64_t size;
	uint64_t hash;        /* chunked XXH3 of its contents */
};

/* A descriptor of the function process that a restore hands in fresh. */
struct phos_image_fd {
	int fd;               /* number in the function process */
	char key[64];         /* CRIU's --inherit-fd key: "socket:[123]", "pipe:[456]" */
};

/* 1.2: present in a checkpoint of a running program (issue 11), which resumes
 * where it was stopped rather than inside phos_fn_serve. */
struct phos_image_checkpoint {
	bool present;
	char mode[16];        /* "stw", ... (control.h, enum phos_ckpt_mode) */
	int channel_fd;       /* the channel memfd's number in the function (channel.h, "adopting") */
	uint64_t seq;         /* the last record the executor had taken */
	double stall_s;       /* the program's records held */
	double total_s;       /* the whole checkpoint, until committed */
	uint64_t early;       /* cow: buffers copied ahead of a record writing them */
	/* Optional (absent: 0): recopy's rounds, and the GPU bytes copied while
	 * the program ran and while its records were held. */
	uint32_t rounds;
	uint64_t precopy_bytes, stop_bytes;
	double gpu_s, cpu_s;  /* optional: the device side (executor), the CRIU dump */
	double copy_s;        /* optional, stw: the device copy while held (into
			       * host memory, or through the ring to gpu.data) */
	bool host_copy;       /* stw, cow: through a pinned host copy (staging.h) */
	uint64_t reserve_copies;  /* optional: cow's early copies into the device reserve */
};

/* Memory pools (cudaMallocAsync, cudaMemPoolCreate) as the executor had
 * them: each pool's attributes, and which buffers are its live blocks
 * ("pools", "pool_blocks"; absent when there are none). A checkpoint's
 * restore makes them again (cached blocks were given back before the
 * image); a snapshot's restore leaves that to the function's runtime. */
struct phos_image_pool {
	uint32_t id;
	bool gone;               /* destroyed, with live blocks left */
	bool reuse[3];           /* follow event dependencies, opportunistic, internal dependencies */
	uint64_t max_size, threshold;
};
struct phos_image_pool_block { uint32_t pool; uint64_t addr; };   /* addr: a buffer's */

/* Limits (cudaDeviceSetLimit) and stream attributes (cudaStreamSetAttribute)
 * the function set, with their values at the image ("limits",
 * "stream_attrs"; absent when none). A checkpoint's restore sets them again;
 * a snapshot's leaves that to the function's runtime. */
#define PHOS_IMAGE_MAX_CONTEXT 64
struct phos_image_limit { int32_t limit; uint32_t device; uint64_t value; };
struct phos_image_stream_attr { uint32_t stream; int32_t attr; uint8_t value[64]; };   /* stream 0: the default */

/* Ranges the function reserved (cuMemAddressReserve; "reservations", absent
 * when none): whole 2 MiB chunks inside the arena, disjoint. A checkpoint's
 * restore reserves them again after placing the buffers (mappings lie
 * inside); a snapshot's leaves that to the function's runtime. */
struct phos_image_resv { uint64_t addr, size; };

struct phos_image {
	unsigned major, minor;
	char function[256];   /* program name, for messages */
	char device[64];      /* backend that took it: "cuda" or "sim" */
	char gpu_name[256];
	uint64_t arena_base, arena_size;
	uint32_t devices;     /* 1.4: GPUs of the executor (absent: 1); its arena in parts (bufmap.h) */
	uint64_t gpu_bytes;   /* device memory the buffers need (live bytes) */
	uint64_t data_bytes;  /* size of gpu.data */
	int64_t created;      /* unix time */

	struct phos_image_buf *bufs;         uint32_t nbufs;     /* sorted by addr */
	struct phos_image_module *modules;   uint32_t nmodules;
	struct phos_image_func *funcs;       uint32_t nfuncs;
	struct phos_image_var *vars;         uint32_t nvars;
	struct phos_image_stream *streams;   uint32_t nstreams;
	struct phos_image_event *events;     uint32_t nevents;
	struct phos_image_blas *blas;        uint32_t nblas;
	uint64_t *prefetch;                  uint32_t nprefetch; /* buffer ids, first-touch order */
	struct phos_image_region *regions;   uint32_t nregions;  /* 1.2, may be absent */
	struct phos_image_array *arrays;     uint32_t narrays;   /* 1.3, may be absent */
	struct phos_image_tex *texes;        uint32_t ntexes;    /* 1.3, by handle; may be absent */
	struct phos_image_pool *pools;       uint32_t npools;    /* may be absent */
	struct phos_image_pool_block *pool_blocks; uint32_t npool_blocks;
	struct phos_image_limit *limits;     uint32_t nlimits;   /* may be absent */
	struct phos_image_stream_attr *stream_attrs; uint32_t nstream_attrs;
	struct phos_image_resv *resvs;       uint32_t nresvs;    /* may be absent */

	/* CPU side */
	char criu_dir[64];    /* relative to the snapshot directory: "cpu" */
	struct phos_image_fd fds[8]; uint32_t nfds; /* channel socket and stdio */
	struct phos_image_file *cpu_files;   uint32_t ncpu_files; /* by name; none before 1.1 */
	struct phos_image_checkpoint checkpoint;
};

/* Allocates an empty image (arrays NULL). */
struct phos_image *phos_image_new(void);
/* Frees an image and everything it owns; accepts NULL. */
void phos_image_free(struct phos_image *img);

/* Appends to the arrays (growing them); return 0 or -ENOMEM / -E2BIG past the limits.
 * Strings are copied. */
int phos_image_add_buf(struct phos_image *img, const struct phos_image_buf *b);
int phos_image_add_module(struct phos_image *img, const struct phos_image_module *m);
int phos_image_add_func(struct phos_image *img, uint32_t id, uint32_t module, const char *name);
int phos_image_add_var(struct phos_image *img, const struct phos_image_var *v); /* v->name copied */
int phos_image_add_stream(struct phos_image *img, const struct phos_image_stream *s);
int phos_image_add_event(struct phos_image *img, const struct phos_image_event *e);
int phos_image_add_blas(struct phos_image *img, const struct phos_image_blas *b);
int phos_image_add_region(struct phos_image *img, const struct phos_image_region *reg);
int phos_image_add_array(struct phos_image *img, const struct phos_image_array *a);
int phos_image_add_tex(struct phos_image *img, const struct phos_image_tex *t);
int phos_image_add_pool(struct phos_image *img, const struct phos_image_pool *p);
int phos_image_add_pool_block(struct phos_image *img, const struct phos_image_pool_block *b);
int phos_image_add_limit(struct phos_image *img, const struct phos_image_limit *l);
int phos_image_add_stream_attr(struct phos_image *img, const struct phos_image_stream_attr *a);
int phos_image_add_resv(struct phos_image *img, const struct phos_image_resv *v);

/* The items of gpu.data, in order: buffers, variables (a variable without
 * contents has len 0), arrays. */
uint32_t phos_image_nitems(const struct phos_image *img);
void phos_image_item(const struct phos_image *img, uint32_t i, uint64_t *ret_off, uint64_t *ret_len,
		     uint64_t *ret_hash);

/* Writes DIR/manifest.json (through a temporary file, fsync, rename). */
int phos_image_write_manifest(const char *dir, const struct phos_image *img);

/* Reads and validates DIR/manifest.json, and checks that gpu.data holds every
 * buffer and variable, that each module file exists with its size, and that
 * the CPU image directory exists. On failure returns a negative errno and a
 * one-line reason in err (e.g. "manifest.json: format 2.0 is newer than this
 * phos-fn (1.x)", "gpu.data is truncated: 1048576 bytes, buffer 3 needs 4194304"). */
int phos_image_read(const char *dir, struct phos_image **ret_img, char *err, size_t errlen);

/* Parses and validates manifest text (len bytes, at most PHOS_IMAGE_MAX_MANIFEST)
 * as phos_image_read does, without looking at any file: for a manifest that
 * arrives before its files (a snapshot pulled from a peer invoker). */
int phos_image_parse(const char *text, size_t len, struct phos_image **ret_img, char *err, size_t errlen);

/* CRIU image checksums (format 1.1): every regular file of DIR/<criu_dir>
 * but CRIU's logs is listed with its size and chunked XXH3.
 * cpu_hash: lists and hashes them into img (replacing any list).
 * cpu_verify: 0 when every listed file is there with its size and checksum and
 * no other image file is; else -EBADMSG (-errno when unreadable) and err
 * names the file ("checksum mismatch in cpu/pages-1.img"). An image without a
 * list (older than 1.1) passes. Both read every byte: call it off the hot
 * path where there is one (a parked process is verified once, when parked). */
int phos_image_cpu_hash(const char *dir, struct phos_image *img, char *err, size_t errlen);
int phos_image_cpu_verify(const char *dir, const struct phos_image *img, char *err, size_t errlen);

/* Stores the first-touch order of a snapshot's buffers (ids; unknown ids and
 * repeats are dropped) as its prefetch order: the manifest is rewritten
 * atomically, nothing else changes. */
int phos_image_set_prefetch(const char *dir, const uint64_t *ids, size_t n, char *err, size_t errlen);

/* Checksums (see the top of this file). */
uint64_t phos_image_chunk_hash(const void *data, size_t len);        /* one chunk */
uint64_t phos_image_combine(const uint64_t *chunk_hashes, size_t n);  /* in order */
uint64_t phos_image_hash(const void *data, size_t len);               /* whole buffer */
/* XXH3-128 of a fatbin as 32 hex digits + NUL. */
void phos_image_module_hash(const void *data, size_t len, char ret_hex[33]);

/* The index in img->bufs (sorted by address) of the buffer that starts at
 * addr, or img->nbufs when none does. */
static inline uint32_t phos_image_buf_at(const struct phos_image *img, uint64_t addr)
{
	uint32_t lo = 0, hi = img->nbufs;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (img->bufs[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < img->nbufs && img->bufs[lo].addr == addr ? lo : img->nbufs;
}

/* Whether buffer b of img holds a cuBLAS handle's workspace: cuBLAS reaches
 * it by handle, so no call's read/write set names it. */
static inline bool phos_image_buf_holds_workspace(const struct phos_image *img, const struct phos_image_buf *b)
{
	for (uint32_t k = 0; k < img->nblas; k++)
		if (img->blas[k].workspace_size && img->blas[k].workspace >= b->addr &&
		    img->blas[k].workspace < b->addr + b->size)
			return true;
	return false;
}

/* Offset of the next item in gpu.data after one of len bytes at off. */
static inline uint64_t phos_image_next_offset(uint64_t off, uint64_t len)
{
	return (off + len + PHOS_IMAGE_ALIGN - 1) & ~(uint64_t)(PHOS_IMAGE_ALIGN - 1);
}

/* Atomic directory commit. begin: creates "<final>.tmp-XXXXXX" beside final
 * (same filesystem) and returns its path. commit: fsyncs every file in it and
 * the directory, then moves it to final (exchanging with an existing final,
 * which is then removed) and fsyncs the parent. abort: removes the temporary
 * directory and everything in it; accepts a path that no longer exists. */
int phos_image_dir_begin(const char *final_dir, char *ret_tmp, size_t len);
int phos_image_dir_commit(const char *tmp_dir, const char *final_dir);
void phos_image_dir_abort(const char *tmp_dir);
/* Removes a committed snapshot or checkpoint: renamed to a temporary name
 * beside it first (sweepable), then deleted. 0 (also when there is none) or
 * -errno. */
int phos_image_dir_remove(const char *final_dir);

/* Removes leftovers of interrupted snapshots of final_dir ("<final>.tmp-*" whose
 * creator is gone); returns how many were removed. */
int phos_image_dir_sweep(const char *final_dir);
