/* SPDX-License-Identifier: MIT */
/*
 * What the two sides of a move share (migrate.c: the source;
 * migrate_target.c: the target): limits, and the few helpers both use.
 * Private to invoker/peer/migrate*.c.
 */
#ifndef PHOS_INVOKER_MIGRATE_H
#define PHOS_INVOKER_MIGRATE_H

#include <stddef.h>

#include <jansson.h>

#define MIGRATE_ANSWER_MAX (64u << 10)
#define MIGRATE_TIMEOUT_S 3600L          /* the target's fetch and restore, at most */
#define MIGRATE_DISK_MARGIN (64ull << 20)
#define LAYOUT_MAX (64ull << 20)          /* a pre-copy's item places: 4M items */

/* A JSON object's string field, or NULL. */
static inline const char *mig_str_of(json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

/* An answer's body as curl hands it in (the first MIGRATE_ANSWER_MAX bytes
 * kept, NUL-terminated); mig_on_answer is its CURLOPT_WRITEFUNCTION. */
struct mig_answer {
	char *buf;
	size_t len;
};
size_t mig_on_answer(char *data, size_t size, size_t nmemb, void *arg);

/* Starts writing path's dirty pages to disk on a thread of its own, so that
 * the commit at the stop, which fsyncs every file of the checkpoint, finds
 * them written (both sides: the source's checkpoint, the target's copy). */
void mig_writeback_start(const char *path);

#endif
