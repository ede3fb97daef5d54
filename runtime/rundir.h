/* SPDX-License-Identifier: MIT */
/*
 * Our private runtime directory: where the sockets, locks and caches of one
 * user's phos-fn processes meet, out of other users' reach.
 *
 * A name of our own in a shared /tmp is an invitation: any local user can
 * create it first (functions run as nobody and share /tmp). A CRIU dump lock
 * held that way by nobody kept a deploy in its dumping phase for 90 s
 * (issue 37). So such files live in a directory that only we can write into,
 * and one that another user made first is refused, never used.
 */
#pragma once

#include <stddef.h>

/* The directory into buf: $PHOS_RUNTIME_DIR, else /run/phos-fn for root, else
 * $XDG_RUNTIME_DIR/phos-fn, else /tmp/phos-fn-UID. It is made (0700) when
 * missing. 0; -EPERM when it is not a directory of ours that no one else may
 * write into (another user made it, or a link stands there); -ENAMETOOLONG;
 * or -errno of mkdir. */
int phos_rundir(char *buf, size_t len);
