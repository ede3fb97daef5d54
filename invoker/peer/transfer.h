/* SPDX-License-Identifier: MIT */
/*
 * Snapshot pull between invokers (issue 13): a host that does not have a
 * function fetches its registry entry and snapshot from a peer that does, and
 * serves it without ever running the program's initialisation.
 *
 *   host B (puller, pull.c)                          host A (peer, export.c)
 *   POST /system/functions {"name","from",
 *                           "from_token"}
 *     GET /system/functions/NAME/export ─────────────▶ snapshot id and files opened under
 *                                                      NAME's snapshot read lock; then
 *                                                      manifest text, registry entry,
 *                                                      stand-in build id, file list,
 *                                                      chunk hashes of every buffer
 *         ◀──────────────────────────────────────────── (cached per snapshot id)
 *     checks: export version, image major, device,
 *     GPU model, stand-in build, sizes, free disk
 *     NAME listed as deploying (409 for a 2nd deploy)
 *     for each module, cpu/ file, gpu.data chunk:
 *       chunk held by a local snapshot? copy it, verify
 *       else GET .../export/file?snapshot=ID&path=P& ─▶ P must be in the file list; the
 *            offset=O&length=L (≤ 64 MiB)               file opened under the read lock
 *         ◀── bytes, streamed to disk, hashed ────────── after checking ID (409: changed);
 *                                                       served from that fd (sendfile):
 *                                                       committed files are never written
 *                                                       in place, so the bytes are the ID's
 *     manifest.json written last, read back (image_read)
 *     snapshots/NAME.tmp-* ─commit─▶ snapshots/NAME ─▶ functions/NAME.json
 *
 * Content addresses: the XXH3-64 hash of each 4 MiB chunk of each buffer and
 * variable (PHOS_IMAGE_HASH_CHUNK, the manifest's own chunking, so the chunk
 * list of a buffer combines to its manifest checksum and the puller checks
 * the list against the manifest before it trusts a chunk of it).
 *
 * Trust: the peer is another invoker of ours, reached with its peer token;
 * the registry entry (env values included) travels only over that
 * authenticated channel. Every byte is verified against the manifest before
 * the snapshot is committed; a mismatch fails the pull and leaves nothing.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "image.h"

#define INV_EXPORT_VERSION 1
#define INV_EXPORT_RANGE_MAX (64u << 20)     /* bytes of one file request */
#define INV_EXPORT_JSON_MAX (64u << 20)      /* the export document, puller side */
#define INV_EXPORT_MAX_FILES (PHOS_IMAGE_MAX_CPU_FILES + PHOS_IMAGE_MAX_OBJECTS + 1)

struct inv_function;
struct MHD_Response;

/* One range of gpu.data that the manifest covers (a buffer or a variable),
 * with the hashes of its 4 MiB chunks. */
struct inv_extent {
	uint64_t offset, size, hash;
	uint64_t *chunks;      /* (size + CHUNK - 1) / CHUNK hashes */
};

/* What a snapshot holds, indexed: built once per snapshot id (snapindex.c)
 * under the function's snapshot read lock. Immutable once built. */
struct inv_snapinfo {
	char id[33];           /* the snapshot's identity, see inv_snapinfo_get */
	struct phos_image *img;
	char *manifest;        /* the manifest text it was parsed from */
	size_t manifest_len;
	struct inv_extent *ext;
	size_t next;
	bool hashed;           /* ext[].chunks are there */
	unsigned refs;
};

/* snapindex.c */
/* Chunks of an extent of size bytes. */
static inline size_t inv_extent_nchunks(uint64_t size)
{
	return (size_t)((size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);
}
/* A snapshot's identity: its directory's and gpu.data's inodes (a
 * re-snapshot commits new ones; committed files are never written in place),
 * 32 hex digits. 0 or -errno when it is not there. Call it under f->snap_lock. */
int inv_snapshot_id(const char *dir, char ret_id[33]);
/* The info of f's current snapshot: from the cache when its id is current,
 * else read (and, with chunks, every extent hashed and checked against the
 * manifest: -EBADMSG and err naming the range when gpu.data does not match).
 * Takes f->snap_lock for reading while it identifies and opens the files
 * (the caller must not hold it), and hashes after. A reference: drop it with
 * inv_snapinfo_unref. */
int inv_snapinfo_get(struct inv_function *f, bool chunks, struct inv_snapinfo **ret, char *err, size_t errlen);
void inv_snapinfo_unref(struct inv_snapinfo *si);
/* Seeds the cache for a snapshot whose chunk hashes are known (a pulled one,
 * already verified); the caller's ext array is copied. */
void inv_snapinfo_seed(struct inv_function *f, const char *manifest, size_t len, const struct inv_extent *ext,
		       size_t next);

/* The build of the CUDA stand-ins (every file of the preload directory):
 * CRIU images name them, so snapshots move only between equal builds.
 * 16 hex digits, computed once. */
const char *inv_standin_build(void);

/* pull.c: this host's NVIDIA GPU models, one a line ("" without the driver);
 * whether name is one of them (true when there is nothing to compare); the
 * kernel driver's version ("580.159.04"; "" without it). */
void inv_gpu_models(char *buf, size_t len);
bool inv_gpu_model_here(const char *name, const char *models);
void inv_driver_version(char *buf, size_t len);

/* redact.c: {"error": message} (the control plane's error body). */
json_t *inv_err_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* export.c */
/* The size of path when it is one of img's files (gpu.data, modules/H.fatbin,
 * CRIU_DIR/NAME), else -ENOENT. */
int64_t inv_image_file_size(const struct phos_image *img, const char *path);
/* The file range routes' common parts: path= (checked: a relative path
 * without "..") and offset=/length= (length 1..INV_EXPORT_RANGE_MAX): 0, or
 * 400 with a body; path below dir opened for [off, off + len) of a file of
 * size bytes: 200 and *ret_fd, or 416/500 with a body; the response streaming
 * that range from fd (taken over). */
int inv_range_args(const char *path, const char *offset, const char *length, uint64_t *off, uint64_t *len,
		   json_t **ret_body);
int inv_range_open(const char *dir, const char *path, int64_t size, uint64_t off, uint64_t len, int *ret_fd,
		   json_t **ret_body);
int inv_range_response(int fd, uint64_t off, uint64_t len, struct MHD_Response **ret_resp, json_t **ret_body);
/* Opens path (a file of an image: "a" or "a/b", names from its manifest)
 * below dir without following a link anywhere: an fd or -errno. */
int inv_open_below(const char *dir, const char *path);
/* GET /system/functions/NAME/export: an HTTP status and its JSON body. */
int inv_export_describe(const char *name, json_t **ret_body);
/* GET /system/functions/NAME/export/file: 200 and a response streaming the
 * range, or an error status and its JSON body. The query values may be NULL. */
int inv_export_file(const char *name, const char *snapshot, const char *path, const char *offset,
		    const char *length, struct MHD_Response **ret_resp, json_t **ret_body);

/* registry.c: a function's registry entry as stored (name, program, args,
 * env, device, limits, created). */
json_t *inv_function_entry(struct inv_function *f);
/* Makes f's snapshot at f->snapshot_dir (atomically: all or nothing): 0 or
 * -errno with the reason in err. */
typedef int (*inv_snapshot_maker)(struct inv_function *f, void *arg, char *err, size_t errlen);
/* Deploys a function name whose registry entry and snapshot make brings (a
 * pull), with the same ownership order as a deploy: listed as deploying at
 * once (a deploy of the name is 409, a remove cancels it: make must watch
 * f->snap_cancel_fd), the entry given by inv_function_fill, the snapshot
 * committed, then the registry file. status maps make's error to an HTTP
 * status. 201 with the description, or that status (409 for a name in use
 * or a remove meanwhile) with an error. */
int inv_function_deploy_pending(const char *name, inv_snapshot_maker make, int (*status)(int r, void *arg),
				void *arg, json_t **ret_body);
/* Gives a function of inv_function_deploy_pending its registry entry (as
 * stored; its program need not exist here): 0, or -EINVAL with err. */
int inv_function_fill(struct inv_function *f, json_t *entry, char *err, size_t errlen);

/* POST /system/functions with "from": pulls NAME from the peer (pull.c). */
int inv_pull_deploy(json_t *req, json_t **ret_body);
