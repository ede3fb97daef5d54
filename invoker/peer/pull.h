/* SPDX-License-Identifier: MIT */
/*
 * The puller's parts (transfer.h), internal to pull.c (the request, the
 * export document, the commit) and pull_fetch.c (libcurl, the chunks this
 * host holds, the files).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>
#include <xxhash.h>

#include "transfer.h"

#define PULL_URL_MAX 1024
#define PULL_TOKEN_MAX 1024
#define PULL_DISK_MARGIN (64ull << 20)   /* left free after a pull */
#define PULL_BYTES_MAX (1ull << 40)      /* a snapshot over 1 TiB is refused */
#define PULL_ERRBODY_MAX 4096

/* A chunk a local snapshot holds. */
struct local_chunk {
	uint64_t hash, len, offset;
	unsigned src;     /* index in pull.src_fd */
};

struct pull {
	const char *name;
	CURLU *base;            /* the peer's URL (scheme, host, port) */
	char auth[PULL_TOKEN_MAX + 32];
	CURL *curl;
	struct curl_slist *headers;
	int cancel_fd;          /* f->snap_cancel_fd while pulling */
	json_t *exp;            /* the export document */
	const char *snapshot_id;
	struct phos_image *img;
	const char *manifest;
	size_t manifest_len;
	struct inv_extent *ext; /* chunk lists, checked against img */
	size_t next;
	struct local_chunk *local;
	size_t nlocal;
	int src_fd[1024];
	unsigned nsrc;
	uint64_t fetched, reused, chunks_fetched, chunks_reused;
	double started;
	double deadline;        /* (phos_now) the whole pull ends by then; 0: none */
	unsigned timeout_ms;    /* what the deadline came from */
	int code;               /* HTTP status of a failure, 0: by errno */
	/* where file ranges come from: the snapshot export's
	 * /system/functions/NAME/export/file when empty; the query carries
	 * snapshot=<snapshot_id> either way */
	char file_route[192];
};

/* Where an answer goes: memory (the export document, error bodies) or a file. */
struct sink {
	struct pull *p;
	long status;            /* of the answer being received */
	/* into memory (the export document, error bodies) */
	char *mem;
	size_t len, cap, max;
	/* into a file at off, hashed in PHOS_IMAGE_HASH_CHUNK chunks */
	int fd;
	uint64_t off, got;
	XXH3_state_t *chunk;    /* the chunk being received */
	uint64_t chunk_fill;
	uint64_t *hashes;       /* hashes of the chunks completed, in order */
	size_t nhashes, maxhashes;
	const uint64_t *expect; /* when set: each completed chunk must match */
	XXH3_state_t *whole;    /* when set: XXH3-128 of everything (modules) */
	bool mismatch, write_error;
	int werr;               /* errno of the failed write */
};

/* pull_base.c, for pull.c, pull_fetch.c, rendezvous.c and migrate.c */
/* "from" is http(s)://HOST[:PORT][/] and nothing else: into p->base. 0 or -EINVAL with err. */
int pull_url_check(struct pull *p, const char *from, char *err, size_t errlen);
/* A peer's token (its peer token, token.h): 16..PULL_TOKEN_MAX printable characters. */
bool pull_token_valid(const char *t);
/* Everything p holds (the token wiped). */
void pull_free(struct pull *p);

/* Records a failure with its HTTP status in p; returns rc. */
__attribute__((format(printf, 6, 7)))
int pull_fail(struct pull *p, int code, int rc, char *err, size_t errlen, const char *fmt, ...);
/* A remove of the name or the drain asked the pull to stop, or its deadline passed. */
bool pull_cancelled(const struct pull *p);
/* Records why the pull stopped (pull_cancelled): 503 the drain, 504 its
 * deadline (-ETIMEDOUT), else 409 (a remove); returns the -errno. */
int pull_fail_stopped(struct pull *p, char *err, size_t errlen);

/* pull.c, for migrate.c too */
/* Makes the CRIU image of the snapshot or checkpoint img at dir run as this
 * invoker runs its functions: a peer's image keeps the user the peer gave
 * it. With --run-as USER, an image of another user is re-owned to USER
 * without capabilities (*ret_reowned; its CPU files' list in img and
 * dir/manifest.json made again), and every regular file it has open must be
 * one USER may open here (CRIU opens them as root). Without --run-as
 * (functions run as we do) an image of another user is refused. -EPERM with
 * why in err when refused. */
int inv_image_run_as(const char *dir, struct phos_image *img, bool *ret_reowned, char *err, size_t errlen);

/* pull_fetch.c */
/* p->curl with the peer's token and our limits (http/https only, no
 * redirects, 10 s to connect, 30 s below 1 KiB/s ends a transfer): 0 or -ENOMEM. */
int pull_curl_open(struct pull *p, const char *token);
/* GET path?query from the peer into s: 0 with s->status 200 (or s->mismatch
 * set: a chunk did not hash right), or a failure recorded in p. */
int pull_http_get(struct pull *p, const char *path, const char *query, struct sink *s, char *err, size_t errlen);
/* Indexes the chunks of every ready local snapshot into p->local. */
void pull_local_index(struct pull *p);
/* Each into the temporary snapshot directory tmp, verified; 0 or a failure recorded in p. */
int pull_module(struct pull *p, const char *tmp, const struct phos_image_module *m, char *err, size_t errlen);
int pull_cpu_file(struct pull *p, const char *tmp, const struct phos_image_file *cf, char *err, size_t errlen);
/* modules/ and the CRIU image's folder made in tmp, and every module (one
 * file per fatbin) and CRIU file of p->img fetched into them, verified:
 * 0 or a failure recorded in p. gpu.data is the caller's. */
int pull_image_files(struct pull *p, const char *tmp, char *err, size_t errlen);
int pull_gpu_data(struct pull *p, const char *tmp, char *err, size_t errlen);
/* gpu.data of p->img whole, in ranges, not verified here (a checkpoint has no
 * chunk list; its restore checks every buffer's checksum). */
int pull_gpu_data_whole(struct pull *p, const char *tmp, char *err, size_t errlen);
/* [off, off + len) of the peer's file path into fd at the same offset, not verified. */
int pull_file_range(struct pull *p, int fd, const char *path, uint64_t off, uint64_t len, char *err, size_t errlen);
/* Writes a new file rel below dir (O_EXCL): 0 or -errno with the reason in err. */
int pull_write_new(const char *dir, const char *rel, const char *data, size_t len, char *err, size_t errlen);
