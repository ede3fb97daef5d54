/* SPDX-License-Identifier: MIT */
/* Shared between the snapshotter's files, not part of its interface. */
#pragma once

#include <stdbool.h>

#include "snapshotter.h"

struct phos_image;
struct phos_criu_inherit;

/* Reads dir's manifest (refusing a bad snapshot before anything is taken) and
 * fills the descriptors a restore hands in: stdio at 0..2; the channel (3) is
 * set by restore_cpu. */
int restore_plan(const char *dir, const int stdio[3], struct phos_image **ret_img,
		 struct phos_criu_inherit inh[4], char *err, size_t errlen);

/* CRIU-restores the function with channel as its socket (it then waits for
 * its executor's channel there); the time goes into st->cpu_restore_s. */
int restore_criu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		 int channel, const struct phos_restore_bound *bound, pid_t *ret_fn, struct phos_restore_stats *st,
		 char *err, size_t errlen);

/* Reads the executor's READY (its phase times into *st) or its ERROR (its
 * reason into err; -EBADMSG when the snapshot's data did not match its
 * checksums, -EIO otherwise); a fresh executor's HELLO first when hello is
 * set. Waits until bound's deadline (-ETIMEDOUT) or cancel (-ECANCELED); as
 * long as the executor takes without one. */
struct restore_shared;
int restore_ready(int ctl, bool hello, const struct phos_restore_bound *bound, struct phos_restore_stats *st,
		  struct restore_shared *shared, char *err, size_t errlen);

/* The SHARED messages of a fill restore (pool.c, issue 42), which come
 * before its READY: each buffer with its descriptor (owned). restore_ready
 * keeps them in *shared (NULL: not asked for; they are closed). */
#define RESTORE_SHARED_MAX 4096u
struct restore_shared {
	struct restore_shared_buf { uint64_t id, addr, size, hash; int fd; } *bufs;
	size_t n;
};
void restore_shared_clear(struct restore_shared *s);

/* Both, while the executor loads the GPU side. On failure the restored
 * function is gone again. */
int restore_cpu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		int channel, int ctl, bool hello, const struct phos_restore_bound *bound, pid_t *ret_fn,
		struct phos_restore_stats *st, struct restore_shared *shared, char *err, size_t errlen);
