/* SPDX-License-Identifier: MIT */
/* The arena allocator: deterministic, non-overlapping, mapped exactly where used. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufmap.h"

#define BASE 0x600000000000ull
#define SIZE (64ull << 30)
#define NCH (SIZE / PHOS_CHUNK)
#define OPS 20000

#include "check.h"

/* Tracks mapped chunks through the callbacks. */
struct tracker {
	unsigned char mapped[NCH];
	int fail_next_map;
};

static int track_map(void *ctx, uint64_t addr, uint64_t len)
{
	struct tracker *t = ctx;

	if (t->fail_next_map) {
		t->fail_next_map = 0;
		return -EIO;
	}
	for (uint64_t a = addr; a < addr + len; a += PHOS_CHUNK) {
		uint64_t c = (a - BASE) / PHOS_CHUNK;

		CHECK(!t->mapped[c], "chunk %llu mapped twice", (unsigned long long)c);
		t->mapped[c] = 1;
	}
	return 0;
}

static void track_unmap(void *ctx, uint64_t addr, uint64_t len)
{
	struct tracker *t = ctx;

	for (uint64_t a = addr; a < addr + len; a += PHOS_CHUNK) {
		uint64_t c = (a - BASE) / PHOS_CHUNK;

		CHECK(t->mapped[c], "chunk %llu unmapped while not mapped", (unsigned long long)c);
		t->mapped[c] = 0;
	}
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int copy_buf(const struct phos_buf *b, void *ctx)
{
	return phos_bufmap_alloc_at(ctx, b->addr, b->size, b->id);
}

/* A table rebuilt from the live buffers (a restore) continues exactly like the original. */
static void rebuild_continues(void)
{
	struct phos_bufmap *orig, *copy;
	uint64_t s = 7, addrs[64];

	if (phos_bufmap_new(BASE, SIZE, NULL, &orig) < 0 || phos_bufmap_new(BASE, SIZE, NULL, &copy) < 0) {
		failures++;
		return;
	}
	for (int i = 0; i < 64; i++) {
		uint64_t size = i % 5 == 0 ? (3u << 20) + (uint64_t)i : 1000u + (uint64_t)i * 37;

		phos_bufmap_alloc(orig, size, &addrs[i]);
	}
	for (int i = 0; i < 64; i += 3)
		phos_bufmap_release(orig, addrs[i]);
	CHECK(phos_bufmap_foreach(orig, copy_buf, copy) == 0, "alloc_at of every live buffer");
	phos_bufmap_set_next_id(copy, phos_bufmap_next_id(orig));
	CHECK(phos_bufmap_live_bytes(copy) == phos_bufmap_live_bytes(orig) &&
		      phos_bufmap_mapped_bytes(copy) == phos_bufmap_mapped_bytes(orig),
	      "rebuilt table holds the same bytes");
	for (int i = 0; i < 200; i++) {
		uint64_t r = rng(&s), size = r % 4 == 0 ? (r >> 8) % (8u << 20) + 1 : (r >> 8) % 5000 + 1;
		uint64_t a1 = 0, a2 = 0;

		CHECK(phos_bufmap_alloc(orig, size, &a1) == 0 && phos_bufmap_alloc(copy, size, &a2) == 0 && a1 == a2,
		      "allocation %d after a rebuild: %#llx vs %#llx", i, (unsigned long long)a1,
		      (unsigned long long)a2);
		CHECK(phos_bufmap_find(orig, a1)->id == phos_bufmap_find(copy, a2)->id, "same ids after a rebuild");
	}
	CHECK(phos_bufmap_alloc_at(copy, BASE + 256, 10, 999) == -EEXIST, "alloc_at over a live buffer refused");
	CHECK(phos_bufmap_alloc_at(copy, BASE + 100, 10, 999) == -EINVAL, "misaligned alloc_at refused");
	CHECK(phos_bufmap_alloc_at(copy, BASE + SIZE, 10, 999) == -EINVAL, "alloc_at outside the arena refused");
	phos_bufmap_free(orig);
	phos_bufmap_free(copy);
}


struct live { uint64_t addr, size; };

/* Runs a seeded random malloc/free sequence; records the addresses handed out. */
static void run_sequence(uint64_t seed, uint64_t *addrs, struct tracker *t)
{
	struct phos_bufmap_ops ops = { .map = track_map, .unmap = track_unmap, .ctx = t };
	struct phos_bufmap *m;
	static struct live live[OPS];
	size_t nlive = 0;
	uint64_t s = seed;

	if (phos_bufmap_new(BASE, SIZE, &ops, &m) < 0) {
		failures++;
		return;
	}
	for (int i = 0; i < OPS; i++) {
		uint64_t r = rng(&s);

		if (nlive && r % 3 == 0) {
			size_t k = (size_t)(rng(&s) % nlive);

			CHECK(phos_bufmap_release(m, live[k].addr) == 0, "release failed");
			CHECK(phos_bufmap_find(m, live[k].addr) == NULL, "freed buffer still found");
			live[k] = live[--nlive];
			addrs[i] = 0;
			continue;
		}
		uint64_t size = (r >> 8) % 16 == 0 ? ((r >> 12) % (64ull << 20)) + 1 : ((r >> 12) % 70000) + 1;
		uint64_t a;

		CHECK(phos_bufmap_alloc(m, size, &a) == 0, "alloc %llu failed", (unsigned long long)size);
		addrs[i] = a;
		CHECK(a >= BASE && a + size <= BASE + SIZE, "outside arena");
		CHECK(size >= PHOS_CHUNK ? a % PHOS_CHUNK == 0 : a % PHOS_SMALL_ALIGN == 0, "misaligned");
		CHECK(t->mapped[(a - BASE) / PHOS_CHUNK] && t->mapped[(a + size - 1 - BASE) / PHOS_CHUNK],
		      "allocated memory not mapped");
		for (size_t k = 0; k < nlive; k++)
			CHECK(a + size <= live[k].addr || live[k].addr + live[k].size <= a,
			      "overlap: %#llx+%llu with %#llx+%llu", (unsigned long long)a,
			      (unsigned long long)size, (unsigned long long)live[k].addr,
			      (unsigned long long)live[k].size);
		const struct phos_buf *b = phos_bufmap_find(m, a + size - 1);

		CHECK(b && b->addr == a && b->size == size, "find of last byte");
		CHECK(phos_bufmap_contains(m, a, size) && !phos_bufmap_contains(m, a, size + 1),
		      "contains bounds");
		live[nlive++] = (struct live){ a, size };
		if (failures > 10)
			break;
	}
	uint64_t sum = 0;

	for (size_t k = 0; k < nlive; k++)
		sum += live[k].size;
	CHECK(phos_bufmap_live_bytes(m) == sum, "live bytes");
	phos_bufmap_free(m);
	for (uint64_t c = 0; c < NCH; c++)
		CHECK(!t->mapped[c], "chunk %llu left mapped after free", (unsigned long long)c);
}

static int count_buf(const struct phos_buf *b, void *ctx)
{
	(void)b;
	++*(int *)ctx;
	return 0;
}

/* Reservations (cuMemAddressReserve): never allocated over, mapped into,
 * back to reserved when unmapped, and made again around restored buffers. */
static void reservations(void)
{
	static struct tracker t;
	struct phos_bufmap_ops ops = { track_map, track_unmap, &t };
	struct phos_bufmap *m, *r;
	uint64_t res, a, b, base, size;
	int n = 0;

	CHECK(phos_bufmap_new(BASE, SIZE, &ops, &m) == 0, "new");
	CHECK(phos_bufmap_alloc(m, 100, &a) == 0 && a == BASE, "a slab first");
	CHECK(phos_bufmap_reserve(m, 64 * PHOS_CHUNK, 8 * PHOS_CHUNK, &res) == 0 && res == BASE + 8 * PHOS_CHUNK,
	      "a reservation, aligned, after the slab: 0x%llx", (unsigned long long)res);
	CHECK(!t.mapped[8], "a reservation maps nothing");
	CHECK(phos_bufmap_reserve(m, 100, 0, &b) == -EINVAL, "a reservation of part of a chunk refused");
	CHECK(phos_bufmap_alloc(m, 4 * PHOS_CHUNK, &b) == 0 && b == BASE + PHOS_CHUNK, "first fit before it");
	CHECK(phos_bufmap_alloc(m, 4 * PHOS_CHUNK, &a) == 0 && a == BASE + 72 * PHOS_CHUNK,
	      "then around it: 0x%llx", (unsigned long long)a);
	CHECK(phos_bufmap_release(m, b) == 0 && phos_bufmap_release(m, a) == 0, "release");
	a = BASE;
	CHECK(phos_bufmap_map_at(m, res + PHOS_CHUNK, 2 * PHOS_CHUNK) == 0 && t.mapped[9] && t.mapped[10],
	      "map_at inside: chunks mapped");
	CHECK(phos_bufmap_map_at(m, res + 3 * PHOS_CHUNK, PHOS_CHUNK) == 0, "an adjacent mapping");
	CHECK(phos_bufmap_map_at(m, res + 2 * PHOS_CHUNK, PHOS_CHUNK) == -EEXIST, "over a mapping refused");
	CHECK(phos_bufmap_map_at(m, BASE + 80 * PHOS_CHUNK, PHOS_CHUNK) == -EINVAL, "outside a reservation refused");
	CHECK(phos_bufmap_map_at(m, res + 63 * PHOS_CHUNK, 2 * PHOS_CHUNK) == -EINVAL, "across its end refused");
	CHECK(phos_bufmap_covered(m, res + PHOS_CHUNK + 5, 2 * PHOS_CHUNK) &&
	      !phos_bufmap_covered(m, res + PHOS_CHUNK, 4 * PHOS_CHUNK), "adjacent mappings cover a range across them");
	CHECK(phos_bufmap_reservation(m, res + 2 * PHOS_CHUNK, &base, &size) && base == res &&
	      size == 64 * PHOS_CHUNK && !phos_bufmap_reservation(m, a, &base, &size), "reservation of an address");
	CHECK(phos_bufmap_foreach_in(m, res, res + size, count_buf, &n) == 0 && n == 2, "two mappings inside");
	CHECK(phos_bufmap_unreserve(m, res) == -EBUSY, "unreserve while mapped refused");
	/* a restore: buffers first (alloc_at), then the reservation around them */
	CHECK(phos_bufmap_new(BASE, SIZE, NULL, &r) == 0, "new");
	CHECK(phos_bufmap_alloc_at(r, res + PHOS_CHUNK, 2 * PHOS_CHUNK, 2) == 0, "restored mapping");
	CHECK(phos_bufmap_reserve_at(r, res, 64 * PHOS_CHUNK) == 0, "reserved again around it");
	CHECK(phos_bufmap_reserve_at(r, res, 64 * PHOS_CHUNK) == -EEXIST, "twice refused");
	CHECK(phos_bufmap_release(r, res + PHOS_CHUNK) == 0 && phos_bufmap_map_at(r, res + PHOS_CHUNK, PHOS_CHUNK) == 0,
	      "its chunks reserved again once unmapped");
	CHECK(phos_bufmap_alloc(r, PHOS_CHUNK, &b) == 0 && (b < res || b >= res + 64 * PHOS_CHUNK),
	      "no allocation inside the restored reservation");
	phos_bufmap_free(r);
	CHECK(phos_bufmap_release(m, res + PHOS_CHUNK) == 0 && !t.mapped[9] && !t.mapped[10], "unmapped");
	CHECK(phos_bufmap_map_at(m, res + PHOS_CHUNK, PHOS_CHUNK) == 0, "mapped again where it was");
	phos_bufmap_reset(m);
	for (uint64_t c = 0; c < NCH; c++)
		CHECK(!t.mapped[c], "chunk %llu left mapped after reset", (unsigned long long)c);
	CHECK(phos_bufmap_reserve(m, 64 * PHOS_CHUNK, 0, &res) == 0 && res == BASE, "reset dropped the reservation");
	CHECK(phos_bufmap_unreserve(m, res) == 0 && phos_bufmap_alloc(m, PHOS_CHUNK, &b) == 0 && b == BASE,
	      "unreserve frees its chunks");
	phos_bufmap_free(m);
}

int main(void)
{
	static uint64_t a1[OPS], a2[OPS];
	static struct tracker t1, t2;
	struct phos_bufmap *m;
	uint64_t a, b, c;

	rebuild_continues();
	reservations();
	run_sequence(42, a1, &t1);
	run_sequence(42, a2, &t2);
	CHECK(memcmp(a1, a2, sizeof(a1)) == 0, "same sequence gave different addresses");

	/* Freed space is reused first-fit; small allocations share a slab. */
	CHECK(phos_bufmap_new(BASE, SIZE, NULL, &m) == 0, "new");
	CHECK(phos_bufmap_alloc(m, 100, &a) == 0 && a == BASE, "first small at base");
	CHECK(phos_bufmap_alloc(m, 100, &b) == 0 && b == BASE + PHOS_SMALL_ALIGN, "second small packed");
	CHECK(phos_bufmap_alloc(m, 3u << 20, &c) == 0 && c == BASE + PHOS_CHUNK, "big after slab");
	CHECK(phos_bufmap_release(m, a) == 0, "release");
	CHECK(phos_bufmap_alloc(m, 200, &a) == 0 && a == BASE, "reuse of freed space");
	CHECK(phos_bufmap_release(m, a + 8) == -EINVAL, "release of interior pointer refused");
	CHECK(phos_bufmap_release(m, 0x1234) == -EINVAL, "release of unknown pointer refused");
	CHECK(phos_bufmap_alloc(m, 0, &a) == -EINVAL, "zero size refused");
	/* a snapshot made before the 512-byte alignment: its 256-aligned small
	 * buffers are placed again where they were */
	CHECK(phos_bufmap_alloc_at(m, BASE + 3 * PHOS_SMALL_ALIGN + 256, 100, 77) == 0, "256-aligned alloc_at");
	CHECK(phos_bufmap_alloc_at(m, BASE + 5 * PHOS_SMALL_ALIGN + 128, 100, 78) == -EINVAL,
	      "a 128-aligned one refused");
	CHECK(phos_bufmap_alloc(m, SIZE + 1, &a) == -ENOMEM, "oversize refused");
	CHECK(phos_bufmap_alloc(m, SIZE, &a) == -ENOMEM, "no room refused");
	/* Extern ranges (module variables) are found but never allocated over. */
	CHECK(phos_bufmap_add_extern(m, 0x7000000000ull, 64) == 0, "extern");
	CHECK(phos_bufmap_add_extern(m, 0x7000000020ull, 64) == -EEXIST, "overlapping extern");
	CHECK(phos_bufmap_add_extern(m, BASE + 4096, 64) == -EINVAL, "extern inside arena");
	CHECK(phos_bufmap_find(m, 0x7000000000ull + 63) != NULL, "extern found");
	CHECK(phos_bufmap_release(m, 0x7000000000ull) == -EINVAL, "extern is not freeable");
	phos_bufmap_reset(m);
	CHECK(phos_bufmap_mapped_bytes(m) == 0 && phos_bufmap_live_bytes(m) == 0, "reset");
	CHECK(phos_bufmap_alloc(m, 100, &a) == 0 && a == BASE, "after reset starts at base");
	phos_bufmap_free(m);

	/* Parts of several devices (phos_arena_parts): allocations go to the
	 * window's part, the gaps between parts are outside the arena. */
	{
		uint64_t stride = 0, span = 0, d0, d1, s1;

		CHECK(phos_arena_parts(SIZE, 2, &stride, &span) && stride == SIZE / 2 &&
		      span == stride - PHOS_ARENA_PART_GAP, "two parts");
		CHECK(!phos_arena_parts(6ull << 30, 2, &stride, &span), "parts too small refused");
		CHECK(phos_arena_parts(SIZE, 1, &stride, &span) && stride == SIZE && span == SIZE, "one part: all");
		phos_arena_parts(SIZE, 2, &stride, &span);
		CHECK(phos_bufmap_new(BASE, SIZE, NULL, &m) == 0 && phos_bufmap_set_parts(m, stride, span) == 0, "parts");
		CHECK(phos_bufmap_set_window(m, BASE, span) == 0 && phos_bufmap_alloc(m, 3u << 20, &d0) == 0 &&
		      d0 == BASE, "device 0's first buffer");
		CHECK(phos_bufmap_set_window(m, BASE + stride, span) == 0 && phos_bufmap_alloc(m, 3u << 20, &d1) == 0 &&
		      d1 == BASE + stride && phos_bufmap_alloc(m, 100, &s1) == 0 && s1 >= BASE + stride &&
		      s1 < BASE + stride + span, "device 1's buffers in its part");
		CHECK(phos_bufmap_alloc(m, span, &a) == -ENOMEM, "a part holds no more than its span");
		CHECK(phos_bufmap_set_window(m, BASE, span) == 0 && phos_bufmap_alloc(m, 3u << 20, &a) == 0 &&
		      a == BASE + 2 * PHOS_CHUNK, "back on device 0");
		CHECK(!phos_bufmap_in_arena(m, BASE + span) && phos_bufmap_in_arena(m, BASE + stride),
		      "the gap is outside the arena");
		CHECK(phos_bufmap_add_extern(m, BASE + span + PHOS_CHUNK, 64) == 0, "extern in a gap");
		CHECK(phos_bufmap_set_window(m, BASE + SIZE, span) == -EINVAL, "window outside refused");
		phos_bufmap_free(m);
	}

	/* A failing map leaves nothing allocated. */
	struct phos_bufmap_ops ops = { .map = track_map, .unmap = track_unmap, .ctx = &t1 };

	CHECK(phos_bufmap_new(BASE, SIZE, &ops, &m) == 0, "new");
	t1.fail_next_map = 1;
	CHECK(phos_bufmap_alloc(m, 8u << 20, &a) == -EIO, "map failure propagates");
	CHECK(phos_bufmap_live_bytes(m) == 0 && phos_bufmap_mapped_bytes(m) == 0, "nothing left");
	CHECK(phos_bufmap_alloc(m, 8u << 20, &a) == 0 && a == BASE, "next alloc takes the same place");
	phos_bufmap_free(m);

	if (failures)
		return 1;
	printf("bufmap: %d random operations, deterministic and non-overlapping\n", OPS);
	return 0;
}
