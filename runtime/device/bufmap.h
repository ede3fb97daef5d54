/* SPDX-License-Identifier: MIT */
/*
 * The buffer table and the deterministic device-address allocator.
 *
 *   arena_base                                                  arena_base + size
 *   |<- 2 MiB chunks ------------------------------------------------------->|
 *   [slab: small allocs packed][ big alloc (rounded to 2 MiB) ][ free ... ]
 *
 * Every executor reserves the same arena (same base, same size), and cudaMalloc
 * is served from it by first fit in address order: allocations >= 2 MiB take
 * whole 2 MiB-aligned chunks, smaller ones are packed 512-byte aligned into 2 MiB
 * slabs (512: a GPU's textureAlignment, so that any allocation can back a
 * linear texture as a cudaMalloc'd one can). The result depends only on the sequence of malloc/free calls, so the
 * same program with the same inputs gets the same device pointers in every run
 * and in every executor. Freed space is reused (first fit again).
 *
 * The allocator does not touch a device: it hands out addresses and reports
 * which 2 MiB chunks became used or unused, and the executor maps or unmaps
 * physical memory there through the device backend.
 *
 * Besides allocations the table holds "extern" ranges (device variables of
 * modules, which live outside the arena), so that lookups for speculation see
 * every buffer a kernel may touch.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PHOS_ARENA_BASE_DEFAULT 0x600000000000ull
#define PHOS_ARENA_SIZE_DEFAULT (512ull << 30)
#define PHOS_CHUNK (2ull << 20)
#define PHOS_SMALL_ALIGN 512u
/* what phos_bufmap_alloc_at accepts: snapshots made before the 512-byte
 * alignment have 256-aligned small buffers */
#define PHOS_SMALL_ALIGN_MIN 256u

/* An executor of n devices gives device d the part [base + d * stride, +
 * span) of the arena: equal strides, each part leaving PHOS_ARENA_PART_GAP
 * free before the next (the sim device keeps its variables there). One
 * device has the whole arena. Returns false when the arena is too small. */
#define PHOS_ARENA_PART_GAP (4ull << 30)
static inline bool phos_arena_parts(uint64_t size, int n, uint64_t *ret_stride, uint64_t *ret_span)
{
	uint64_t stride = n > 1 ? size / (uint64_t)n / PHOS_CHUNK * PHOS_CHUNK : size;

	if (n < 1 || (n > 1 && stride <= PHOS_ARENA_PART_GAP))
		return false;
	*ret_stride = stride;
	*ret_span = n > 1 ? stride - PHOS_ARENA_PART_GAP : size;
	return true;
}

struct phos_buf {
	uint64_t addr;      /* device address the user sees */
	uint64_t size;      /* bytes the user asked for */
	uint64_t id;        /* allocation order, 1-based, stable across runs */
	bool is_extern;     /* a module variable, not an arena allocation */
};

struct phos_bufmap;

/* Called for every 2 MiB chunk the allocator starts or stops using, so the
 * executor can map or unmap physical memory there. A map failure makes the
 * malloc fail (and undoes the allocation). */
struct phos_bufmap_ops {
	int (*map)(void *ctx, uint64_t addr, uint64_t len);
	void (*unmap)(void *ctx, uint64_t addr, uint64_t len);
	void *ctx;
};

int phos_bufmap_new(uint64_t arena_base, uint64_t arena_size, const struct phos_bufmap_ops *ops,
		    struct phos_bufmap **ret_map);
/* Frees the table and unmaps every chunk still mapped; accepts NULL. */
void phos_bufmap_free(struct phos_bufmap *map);

/* Allocates size bytes (size > 0). Returns 0 and the address, -ENOMEM when the
 * arena has no room, or the map callback's error. */
int phos_bufmap_alloc(struct phos_bufmap *map, uint64_t size, uint64_t *ret_addr);

/* Re-creates a live allocation exactly as it was (restore): [addr, addr+size)
 * with its allocation id. Because the allocator's state is a function of the
 * live buffers, a table rebuilt this way hands out the same addresses to later
 * allocations as the original would have. -EEXIST when it overlaps a live
 * buffer or a chunk of the other kind (slab vs. big), -EINVAL when it is
 * outside the arena or misaligned for its size. */
int phos_bufmap_alloc_at(struct phos_bufmap *map, uint64_t addr, uint64_t size, uint64_t id);

/* The arena is parts of span bytes every stride bytes (phos_arena_parts):
 * the gaps between them are outside the arena (in_arena, add_extern). */
int phos_bufmap_set_parts(struct phos_bufmap *map, uint64_t stride, uint64_t span);
/* Where phos_bufmap_alloc places buffers from now on: [addr, addr+size), a
 * 2 MiB-aligned part of the arena (the whole arena at first). An executor
 * over several GPUs gives each device such a part and moves the window to
 * the device the function selects. -EINVAL when it is not inside the arena. */
int phos_bufmap_set_window(struct phos_bufmap *map, uint64_t addr, uint64_t size);
/* The next allocation id, and setting it (a restore continues the sequence). */
uint64_t phos_bufmap_next_id(const struct phos_bufmap *map);
void phos_bufmap_set_next_id(struct phos_bufmap *map, uint64_t id);

/* Frees the allocation that starts at addr; -EINVAL if addr is not the start of
 * a live allocation. */
int phos_bufmap_release(struct phos_bufmap *map, uint64_t addr);

/* Adds a range that lives outside the arena (a module variable); -EEXIST if it
 * overlaps a known buffer. */
int phos_bufmap_add_extern(struct phos_bufmap *map, uint64_t addr, uint64_t size);
int phos_bufmap_remove_extern(struct phos_bufmap *map, uint64_t addr);

/* The live buffer that contains addr, or NULL. O(log n). */
const struct phos_buf *phos_bufmap_find(const struct phos_bufmap *map, uint64_t addr);

/* True when [addr, addr+len) lies inside one live buffer. */
bool phos_bufmap_contains(const struct phos_bufmap *map, uint64_t addr, uint64_t len);

/* Whether addr lies inside the arena (live or not). */
bool phos_bufmap_in_arena(const struct phos_bufmap *map, uint64_t addr);

/* Frees every arena allocation, forgets extern ranges and drops every
 * reservation (cudaDeviceReset, scrub). */
void phos_bufmap_reset(struct phos_bufmap *map);

/* Reservations (the driver's cuMemAddressReserve): whole 2 MiB chunks of the
 * current window that no allocation takes, where phos_bufmap_map_at places
 * buffers (cuMemMap) whose chunks go back to reserved when released.
 *
 *   reserve      size (and align) multiples of 2 MiB; first fit; -ENOMEM
 *   reserve_at   the same range again (a restore: the function's reservations
 *                come back after its buffers, which may lie inside, wholly)
 *   unreserve    its base; -EBUSY while a buffer is mapped inside
 *   map_at       chunk-aligned, inside one reservation, not mapped: a buffer
 *                (next id) with its chunks mapped as an allocation's are
 *   reservation  the reservation holding addr, if any
 */
int phos_bufmap_reserve(struct phos_bufmap *map, uint64_t size, uint64_t align, uint64_t *ret_addr);
int phos_bufmap_reserve_at(struct phos_bufmap *map, uint64_t addr, uint64_t size);
int phos_bufmap_unreserve(struct phos_bufmap *map, uint64_t addr);
int phos_bufmap_map_at(struct phos_bufmap *map, uint64_t addr, uint64_t size);
bool phos_bufmap_reservation(const struct phos_bufmap *map, uint64_t addr, uint64_t *ret_base, uint64_t *ret_size);
/* How many reservations there are. */
size_t phos_bufmap_reservations(const struct phos_bufmap *map);
/* Reservation i (< phos_bufmap_reservations, in address order): 0 and its
 * range, or -ENOENT. */
int phos_bufmap_reservation_nth(const struct phos_bufmap *map, size_t i, uint64_t *ret_base, uint64_t *ret_size);

/* Calls fn on each buffer that starts in [lo, hi), in address order. */
int phos_bufmap_foreach_in(const struct phos_bufmap *map, uint64_t lo, uint64_t hi,
			   int (*fn)(const struct phos_buf *b, void *ctx), void *ctx);
/* Whether buffers cover every byte of [addr, addr + len), one after another. */
bool phos_bufmap_covered(const struct phos_bufmap *map, uint64_t addr, uint64_t len);

/* Live buffers in address order: calls fn for each; stops early if fn returns non-zero
 * and returns that value. */
int phos_bufmap_foreach(const struct phos_bufmap *map, int (*fn)(const struct phos_buf *b, void *ctx),
			void *ctx);

/* Bytes handed out (sum of live sizes) and bytes mapped (chunks). */
uint64_t phos_bufmap_live_bytes(const struct phos_bufmap *map);
uint64_t phos_bufmap_mapped_bytes(const struct phos_bufmap *map);
