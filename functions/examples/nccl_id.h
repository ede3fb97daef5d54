/* SPDX-License-Identifier: MIT */
/*
 * The NCCL unique id of a multi-process run, passed through a file: rank 0
 * makes it and writes it atomically (a temporary file renamed over PATH); the
 * other ranks wait for PATH to appear, up to wait_ms. Host code only, shared
 * by tp_mlp, the NCCL benchmark and the NCCL tests.
 *
 * A relative PATH is taken inside $PHOS_RENDEZVOUS_DIR when that is set: the
 * folder a phos-invoker gives the ranks of a function deployed with "ranks",
 * mirrored from rank 0's invoker to the others' (invoker/peer/rendezvous.c).
 *
 * Returns 0, or -1 with a one-line message on stderr (prefixed with who).
 */
#ifndef PHOS_EXAMPLE_NCCL_ID_H
#define PHOS_EXAMPLE_NCCL_ID_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

static inline int nccl_id_exchange(const char *path, int rank, int wait_ms, const char *who, ncclUniqueId *id)
{
	const char *rdv = getenv("PHOS_RENDEZVOUS_DIR");
	char joined[4096];

	if (path[0] != '/' && rdv && *rdv) {
		if (snprintf(joined, sizeof(joined), "%s/%s", rdv, path) >= (int)sizeof(joined)) {
			fprintf(stderr, "%s: id file path too long\n", who);
			return -1;
		}
		path = joined;
	}
	if (rank == 0) {
		char tmp[4096];
		ncclResult_t r = ncclGetUniqueId(id);
		FILE *f;

		if (r != ncclSuccess) {
			fprintf(stderr, "%s: ncclGetUniqueId: %s\n", who, ncclGetErrorString(r));
			return -1;
		}
		if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
			fprintf(stderr, "%s: id file path too long\n", who);
			return -1;
		}
		f = fopen(tmp, "wb");
		if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
			fprintf(stderr, "%s: cannot write %s\n", who, path);
			return -1;
		}
		return 0;
	}
	for (int i = 0; i < wait_ms; i++) {
		FILE *f = fopen(path, "rb");

		if (f) {
			size_t n = fread(id, sizeof(*id), 1, f);

			fclose(f);
			if (n == 1)
				return 0;
		}
		usleep(1000);
	}
	fprintf(stderr, "%s: rank %d: no unique id in %s\n", who, rank, path);
	return -1;
}

#endif
