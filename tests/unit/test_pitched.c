/* SPDX-License-Identifier: MIT */
/* phos_pitched_extent: the geometry check that the preload and the executor
 * both apply to every pitched copy and set (cudaMemcpy2D/3D, cudaMemset2D/3D). */
#include <stdint.h>

#include "check.h"
#include "proto.h"

static void want(uint64_t pitch, uint64_t slice, uint64_t w, uint64_t h, uint64_t d, bool ok, uint64_t ext)
{
	uint64_t e = 12345;
	bool r = phos_pitched_extent(pitch, slice, w, h, d, &e);

	CHECK(r == ok, "pitch %llu slice %llu %llux%llux%llu: %s, want %s", (unsigned long long)pitch,
	      (unsigned long long)slice, (unsigned long long)w, (unsigned long long)h, (unsigned long long)d,
	      r ? "accepted" : "refused", ok ? "accepted" : "refused");
	if (r && ok)
		CHECK(e == ext, "pitch %llu %llux%llux%llu: extent %llu, want %llu", (unsigned long long)pitch,
		      (unsigned long long)w, (unsigned long long)h, (unsigned long long)d, (unsigned long long)e,
		      (unsigned long long)ext);
	if (!r)
		CHECK(e == 12345, "a refused geometry wrote its extent");
}

int main(void)
{
	/* empty: accepted, nothing touched */
	want(0, 0, 0, 5, 5, true, 0);
	want(64, 0, 64, 0, 1, true, 0);
	want(64, 0, 64, 3, 0, true, 0);
	/* one row: any pitch */
	want(0, 0, 100, 1, 1, true, 100);
	/* rows: the last ends width after its start */
	want(512, 0, 100, 9, 1, true, 8 * 512 + 100);
	want(100, 0, 100, 9, 1, true, 900);
	want(99, 0, 100, 9, 1, false, 0);                   /* pitch < width */
	/* slices */
	want(512, 512 * 6, 40, 6, 5, true, 4 * 512 * 6 + 5 * 512 + 40);
	want(512, 5 * 512 + 40, 40, 6, 2, true, 5 * 512 + 40 + 5 * 512 + 40);
	want(512, 5 * 512 + 39, 40, 6, 2, false, 0);        /* slices overlap */
	want(512, 0, 40, 6, 1, true, 5 * 512 + 40);         /* one slice: its stride is unused */
	/* overflow anywhere is refused, never wrapped */
	want(UINT64_MAX / 2, 0, 8, 3, 1, false, 0);
	want(UINT64_MAX - 4, 0, 8, 2, 1, false, 0);
	want(64, UINT64_MAX / 2, 64, 1, 3, false, 0);
	want(64, UINT64_MAX - 10, 64, 1, 2, false, 0);
	want(1, 0, UINT64_MAX, 1, 1, true, UINT64_MAX);
	return failures ? 1 : 0;
}
