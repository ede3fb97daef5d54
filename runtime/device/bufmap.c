/* SPDX-License-Identifier: MIT */
/*
 * Deterministic arena allocator and buffer table (see bufmap.h).
 *
 * State: one byte per 2 MiB chunk (free, big, slab) and the live buffers in a
 * sorted array (binary search for lookups; inserts and removals move the tail,
 * which is cheap for the thousands of buffers a function holds).
 */
#include "bufmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum chunk_state { CHUNK_FREE = 0, CHUNK_BIG, CHUNK_SLAB, CHUNK_RESERVED };

/* A reserved range (cuMemAddressReserve): chunks no allocation takes; only
 * phos_bufmap_map_at places buffers there. */
struct resv {
	uint64_t first, n;   /* chunks */
};

struct phos_bufmap {
	uint64_t base, size;
	uint64_t nchunks;
	uint8_t *chunk;             /* enum chunk_state per chunk */
	uint32_t *slab_users;       /* live small buffers per slab chunk */
	struct phos_buf *bufs;      /* sorted by addr */
	size_t nbufs, cap;
	uint64_t next_id;
	uint64_t live_bytes, mapped_chunks;
	uint64_t top;               /* 1 + highest non-free chunk: scans stop there */
	uint64_t wlo, whi;          /* the window new allocations go to (chunks) */
	uint64_t part_stride, part_span;   /* phos_bufmap_set_parts; 0: one part */
	struct phos_bufmap_ops ops;
	struct resv *resv;          /* sorted by first, disjoint */
	size_t nresv, resv_cap;
};

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int phos_bufmap_new(uint64_t arena_base, uint64_t arena_size, const struct phos_bufmap_ops *ops,
		    struct phos_bufmap **ret_map)
{
	struct phos_bufmap *m;

	if (arena_base % PHOS_CHUNK || arena_size % PHOS_CHUNK || arena_size == 0 ||
	    arena_base + arena_size < arena_base)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->base = arena_base;
	m->size = arena_size;
	m->nchunks = arena_size / PHOS_CHUNK;
	m->whi = m->nchunks;
	m->chunk = calloc(m->nchunks, 1);
	m->slab_users = calloc(m->nchunks, sizeof(uint32_t));
	if (!m->chunk || !m->slab_users) {
		phos_bufmap_free(m);
		return -ENOMEM;
	}
	if (ops)
		m->ops = *ops;
	m->next_id = 1;
	*ret_map = m;
	return 0;
}

/* The reservation holding chunk c, or NULL. */
static const struct resv *resv_of(const struct phos_bufmap *m, uint64_t c)
{
	for (size_t i = 0; i < m->nresv; i++)
		if (c >= m->resv[i].first && c - m->resv[i].first < m->resv[i].n)
			return &m->resv[i];
	return NULL;
}

/* Unmapped chunks go back to free, or to reserved inside a reservation. */
static void unmap_chunks(struct phos_bufmap *m, uint64_t first, uint64_t n)
{
	if (m->ops.unmap)
		m->ops.unmap(m->ops.ctx, m->base + first * PHOS_CHUNK, n * PHOS_CHUNK);
	memset(m->chunk + first, resv_of(m, first) ? CHUNK_RESERVED : CHUNK_FREE, n);
	m->mapped_chunks -= n;
	while (m->top > 0 && m->chunk[m->top - 1] == CHUNK_FREE)
		m->top--;
}

void phos_bufmap_free(struct phos_bufmap *m)
{
	if (!m)
		return;
	if (m->chunk)
		phos_bufmap_reset(m);
	free(m->chunk);
	free(m->slab_users);
	free(m->bufs);
	free(m->resv);
	free(m);
}

/* Index of the first buffer whose addr >= addr. */
static size_t lower_bound(const struct phos_bufmap *m, uint64_t addr)
{
	size_t lo = 0, hi = m->nbufs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->bufs[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int insert(struct phos_bufmap *m, uint64_t addr, uint64_t size, bool is_extern)
{
	size_t i;

	if (m->nbufs == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct phos_buf *b = realloc(m->bufs, cap * sizeof(*b));

		if (!b)
			return -ENOMEM;
		m->bufs = b;
		m->cap = cap;
	}
	i = lower_bound(m, addr);
	memmove(&m->bufs[i + 1], &m->bufs[i], (m->nbufs - i) * sizeof(*m->bufs));
	m->bufs[i] = (struct phos_buf){ .addr = addr, .size = size, .id = m->next_id++, .is_extern = is_extern };
	m->nbufs++;
	return 0;
}

static void remove_at(struct phos_bufmap *m, size_t i)
{
	memmove(&m->bufs[i], &m->bufs[i + 1], (m->nbufs - i - 1) * sizeof(*m->bufs));
	m->nbufs--;
}

/* First run of n free chunks in the window; returns its index or nchunks. */
static uint64_t find_free_run(const struct phos_bufmap *m, uint64_t n)
{
	uint64_t top = m->top > m->wlo ? m->top : m->wlo;
	uint64_t run = 0, end = top + n < m->whi ? top + n : m->whi;

	for (uint64_t i = m->wlo; i < end; i++) {
		run = m->chunk[i] == CHUNK_FREE ? run + 1 : 0;
		if (run == n)
			return i + 1 - n;
	}
	return m->nchunks;
}

static int map_chunks(struct phos_bufmap *m, uint64_t first, uint64_t n, uint8_t state)
{
	if (m->ops.map) {
		int r = m->ops.map(m->ops.ctx, m->base + first * PHOS_CHUNK, n * PHOS_CHUNK);

		if (r < 0)
			return r;
	}
	memset(m->chunk + first, state, n);
	m->mapped_chunks += n;
	if (first + n > m->top)
		m->top = first + n;
	return 0;
}

static int alloc_big(struct phos_bufmap *m, uint64_t size, uint64_t *ret_addr)
{
	uint64_t n = round_up(size, PHOS_CHUNK) / PHOS_CHUNK;
	uint64_t first = find_free_run(m, n);
	uint64_t addr = m->base + first * PHOS_CHUNK;
	int r;

	if (first == m->nchunks)
		return -ENOMEM;
	r = map_chunks(m, first, n, CHUNK_BIG);
	if (r < 0)
		return r;
	r = insert(m, addr, size, false);
	if (r < 0) {
		unmap_chunks(m, first, n);
		return r;
	}
	*ret_addr = addr;
	return 0;
}

/* First gap of len bytes (PHOS_SMALL_ALIGN-aligned) inside slab chunk c, or 0. */
static uint64_t slab_gap(const struct phos_bufmap *m, uint64_t c, uint64_t len)
{
	uint64_t start = m->base + c * PHOS_CHUNK, end = start + PHOS_CHUNK, at = start;

	for (size_t i = lower_bound(m, start); i < m->nbufs && m->bufs[i].addr < end; i++) {
		if (m->bufs[i].addr - at >= len)
			return at;
		at = round_up(m->bufs[i].addr + m->bufs[i].size, PHOS_SMALL_ALIGN);
	}
	return end - at >= len ? at : 0;
}

static int alloc_small(struct phos_bufmap *m, uint64_t size, uint64_t *ret_addr)
{
	uint64_t len = round_up(size, PHOS_SMALL_ALIGN), addr = 0, c;
	int r;

	for (c = m->wlo; c < m->top && c < m->whi; c++) {
		if (m->chunk[c] == CHUNK_SLAB && (addr = slab_gap(m, c, len)) != 0)
			break;
	}
	if (!addr) {
		c = find_free_run(m, 1);
		if (c == m->nchunks)
			return -ENOMEM;
		r = map_chunks(m, c, 1, CHUNK_SLAB);
		if (r < 0)
			return r;
		addr = m->base + c * PHOS_CHUNK;
	}
	r = insert(m, addr, size, false);
	if (r < 0) {
		if (m->slab_users[c] == 0)
			unmap_chunks(m, c, 1);
		return r;
	}
	m->slab_users[c]++;
	*ret_addr = addr;
	return 0;
}

int phos_bufmap_alloc(struct phos_bufmap *m, uint64_t size, uint64_t *ret_addr)
{
	int r;

	if (size == 0)
		return -EINVAL;
	if (size > m->size)
		return -ENOMEM;
	r = size >= PHOS_CHUNK ? alloc_big(m, size, ret_addr) : alloc_small(m, size, ret_addr);
	if (r == 0)
		m->live_bytes += size;
	return r;
}

static bool overlaps_known(const struct phos_bufmap *m, uint64_t addr, uint64_t size)
{
	size_t i = lower_bound(m, addr);

	if (i < m->nbufs && m->bufs[i].addr < addr + size)
		return true;
	return i > 0 && m->bufs[i - 1].addr + m->bufs[i - 1].size > addr;
}

int phos_bufmap_alloc_at(struct phos_bufmap *m, uint64_t addr, uint64_t size, uint64_t id)
{
	bool big = size >= PHOS_CHUNK;
	uint64_t first, n, saved_id;
	int r;

	if (size == 0 || !phos_bufmap_in_arena(m, addr) || size > m->base + m->size - addr ||
	    addr % (big ? PHOS_CHUNK : PHOS_SMALL_ALIGN_MIN))
		return -EINVAL;
	first = (addr - m->base) / PHOS_CHUNK;
	n = big ? round_up(size, PHOS_CHUNK) / PHOS_CHUNK : 1;
	if (!big && (addr + size - 1 - m->base) / PHOS_CHUNK != first)
		return -EINVAL; /* a small buffer never crosses its slab */
	if (overlaps_known(m, addr, big ? n * PHOS_CHUNK : size))
		return -EEXIST;
	for (uint64_t c = first; c < first + n; c++) {
		if (m->chunk[c] != CHUNK_FREE && (big || m->chunk[c] != CHUNK_SLAB))
			return -EEXIST;
	}
	if (big || m->chunk[first] == CHUNK_FREE) {
		r = map_chunks(m, first, n, big ? CHUNK_BIG : CHUNK_SLAB);
		if (r < 0)
			return r;
	}
	saved_id = m->next_id;
	m->next_id = id;
	r = insert(m, addr, size, false);
	m->next_id = saved_id > id ? saved_id : id + 1;
	if (r < 0) {
		if (big || m->slab_users[first] == 0)
			unmap_chunks(m, first, n);
		return r;
	}
	if (!big)
		m->slab_users[first]++;
	m->live_bytes += size;
	return 0;
}

int phos_bufmap_set_window(struct phos_bufmap *m, uint64_t addr, uint64_t size)
{
	if (addr < m->base || addr % PHOS_CHUNK || size % PHOS_CHUNK || size == 0 ||
	    size > m->base + m->size - addr)
		return -EINVAL;
	m->wlo = (addr - m->base) / PHOS_CHUNK;
	m->whi = m->wlo + size / PHOS_CHUNK;
	return 0;
}

uint64_t phos_bufmap_next_id(const struct phos_bufmap *m)
{
	return m->next_id;
}

void phos_bufmap_set_next_id(struct phos_bufmap *m, uint64_t id)
{
	m->next_id = id;
}

int phos_bufmap_release(struct phos_bufmap *m, uint64_t addr)
{
	size_t i = lower_bound(m, addr);
	struct phos_buf b;
	uint64_t c;

	if (i == m->nbufs || m->bufs[i].addr != addr || m->bufs[i].is_extern)
		return -EINVAL;
	b = m->bufs[i];
	remove_at(m, i);
	m->live_bytes -= b.size;
	c = (addr - m->base) / PHOS_CHUNK;
	if (m->chunk[c] == CHUNK_BIG)
		unmap_chunks(m, c, round_up(b.size, PHOS_CHUNK) / PHOS_CHUNK);
	else if (--m->slab_users[c] == 0)
		unmap_chunks(m, c, 1);
	return 0;
}

int phos_bufmap_add_extern(struct phos_bufmap *m, uint64_t addr, uint64_t size)
{
	if (size == 0 || addr + size < addr)
		return -EINVAL;
	if (phos_bufmap_in_arena(m, addr) || phos_bufmap_in_arena(m, addr + size - 1))
		return -EINVAL;
	if (overlaps_known(m, addr, size))
		return -EEXIST;
	return insert(m, addr, size, true);
}

int phos_bufmap_remove_extern(struct phos_bufmap *m, uint64_t addr)
{
	size_t i = lower_bound(m, addr);

	if (i == m->nbufs || m->bufs[i].addr != addr || !m->bufs[i].is_extern)
		return -EINVAL;
	remove_at(m, i);
	return 0;
}

const struct phos_buf *phos_bufmap_find(const struct phos_bufmap *m, uint64_t addr)
{
	size_t i = lower_bound(m, addr + 1);

	if (i == 0)
		return NULL;
	if (addr - m->bufs[i - 1].addr < m->bufs[i - 1].size)
		return &m->bufs[i - 1];
	return NULL;
}

bool phos_bufmap_contains(const struct phos_bufmap *m, uint64_t addr, uint64_t len)
{
	const struct phos_buf *b = phos_bufmap_find(m, addr);

	return b && len <= b->size - (addr - b->addr);
}

bool phos_bufmap_in_arena(const struct phos_bufmap *m, uint64_t addr)
{
	return addr >= m->base && addr - m->base < m->size &&
	       (!m->part_stride || (addr - m->base) % m->part_stride < m->part_span);
}

int phos_bufmap_set_parts(struct phos_bufmap *m, uint64_t stride, uint64_t span)
{
	if (!stride || stride % PHOS_CHUNK || span % PHOS_CHUNK || !span || span > stride || stride > m->size)
		return -EINVAL;
	m->part_stride = stride < m->size ? stride : 0;
	m->part_span = span;
	return 0;
}

void phos_bufmap_reset(struct phos_bufmap *m)
{
	/* Release one by one, last first (cheap), so that every chunk is unmapped
	 * with the same extent it was mapped with. */
	while (m->nbufs > 0) {
		struct phos_buf *b = &m->bufs[m->nbufs - 1];

		if (b->is_extern)
			m->nbufs--;
		else
			phos_bufmap_release(m, b->addr);
	}
	while (m->nresv > 0)
		phos_bufmap_unreserve(m, m->base + m->resv[0].first * PHOS_CHUNK);
}

/* --- reservations (the driver's virtual memory management) --- */

static int resv_add(struct phos_bufmap *m, uint64_t first, uint64_t n)
{
	size_t i = 0;

	if (m->nresv == m->resv_cap) {
		size_t cap = m->resv_cap ? m->resv_cap * 2 : 8;
		struct resv *r = realloc(m->resv, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		m->resv = r;
		m->resv_cap = cap;
	}
	while (i < m->nresv && m->resv[i].first < first)
		i++;
	memmove(&m->resv[i + 1], &m->resv[i], (m->nresv - i) * sizeof(*m->resv));
	m->resv[i] = (struct resv){ first, n };
	m->nresv++;
	for (uint64_t c = first; c < first + n; c++)
		if (m->chunk[c] == CHUNK_FREE)
			m->chunk[c] = CHUNK_RESERVED;
	if (first + n > m->top)
		m->top = first + n;
	return 0;
}

int phos_bufmap_reserve(struct phos_bufmap *m, uint64_t size, uint64_t align, uint64_t *ret_addr)
{
	uint64_t n = round_up(size, PHOS_CHUNK) / PHOS_CHUNK, step;
	uint64_t a = align > PHOS_CHUNK ? align / PHOS_CHUNK : 1;

	if (size == 0 || size % PHOS_CHUNK || (align && align % PHOS_CHUNK) || n > m->whi - m->wlo)
		return -EINVAL;
	for (uint64_t first = m->wlo; first + n <= m->whi; first += step) {
		uint64_t off = (m->base / PHOS_CHUNK + first) % a, c;

		step = 1;
		if (off) {
			step = a - off;
			continue;
		}
		for (c = first; c < first + n && m->chunk[c] == CHUNK_FREE; c++)
			;
		if (c == first + n) {
			int r = resv_add(m, first, n);

			if (r == 0)
				*ret_addr = m->base + first * PHOS_CHUNK;
			return r;
		}
		step = c + 1 - first;   /* past the chunk in use */
	}
	return -ENOMEM;
}

int phos_bufmap_reserve_at(struct phos_bufmap *m, uint64_t addr, uint64_t size)
{
	uint64_t first, n;

	if (size == 0 || size % PHOS_CHUNK || addr % PHOS_CHUNK || !phos_bufmap_in_arena(m, addr) ||
	    size > m->base + m->size - addr)
		return -EINVAL;
	first = (addr - m->base) / PHOS_CHUNK;
	n = size / PHOS_CHUNK;
	for (uint64_t c = first; c < first + n; c++)
		if (m->chunk[c] == CHUNK_SLAB || m->chunk[c] == CHUNK_RESERVED || resv_of(m, c))
			return -EEXIST;
	/* buffers inside (restored mappings) must lie wholly inside */
	for (size_t i = lower_bound(m, addr); i < m->nbufs && m->bufs[i].addr < addr + size; i++)
		if (m->bufs[i].is_extern || m->bufs[i].addr + m->bufs[i].size > addr + size)
			return -EEXIST;
	if (lower_bound(m, addr) > 0) {
		const struct phos_buf *b = &m->bufs[lower_bound(m, addr) - 1];

		if (b->addr + b->size > addr)
			return -EEXIST;
	}
	return resv_add(m, first, n);
}

int phos_bufmap_unreserve(struct phos_bufmap *m, uint64_t addr)
{
	uint64_t first;
	size_t i;

	if (addr < m->base || (addr - m->base) % PHOS_CHUNK)
		return -EINVAL;
	first = (addr - m->base) / PHOS_CHUNK;
	for (i = 0; i < m->nresv && m->resv[i].first != first; i++)
		;
	if (i == m->nresv)
		return -EINVAL;
	for (uint64_t c = first; c < first + m->resv[i].n; c++)
		if (m->chunk[c] != CHUNK_RESERVED)
			return -EBUSY;   /* still mapped: unmap first, as the driver wants */
	memset(m->chunk + first, CHUNK_FREE, m->resv[i].n);
	memmove(&m->resv[i], &m->resv[i + 1], (m->nresv - i - 1) * sizeof(*m->resv));
	m->nresv--;
	while (m->top > 0 && m->chunk[m->top - 1] == CHUNK_FREE)
		m->top--;
	return 0;
}

int phos_bufmap_map_at(struct phos_bufmap *m, uint64_t addr, uint64_t size)
{
	uint64_t first, n;
	const struct resv *rv;
	int r;

	if (size == 0 || size % PHOS_CHUNK || addr % PHOS_CHUNK || !phos_bufmap_in_arena(m, addr) ||
	    size > m->base + m->size - addr)
		return -EINVAL;
	first = (addr - m->base) / PHOS_CHUNK;
	n = size / PHOS_CHUNK;
	rv = resv_of(m, first);
	if (!rv || first + n > rv->first + rv->n)
		return -EINVAL;   /* not inside one reservation */
	for (uint64_t c = first; c < first + n; c++)
		if (m->chunk[c] != CHUNK_RESERVED)
			return -EEXIST;
	r = map_chunks(m, first, n, CHUNK_BIG);
	if (r < 0) {
		memset(m->chunk + first, CHUNK_RESERVED, n);
		return r;
	}
	r = insert(m, addr, size, false);
	if (r < 0) {
		unmap_chunks(m, first, n);
		return r;
	}
	m->live_bytes += size;
	return 0;
}

bool phos_bufmap_reservation(const struct phos_bufmap *m, uint64_t addr, uint64_t *ret_base, uint64_t *ret_size)
{
	const struct resv *rv;

	if (addr < m->base || addr - m->base >= m->size)
		return false;
	rv = resv_of(m, (addr - m->base) / PHOS_CHUNK);
	if (!rv)
		return false;
	*ret_base = m->base + rv->first * PHOS_CHUNK;
	*ret_size = rv->n * PHOS_CHUNK;
	return true;
}

size_t phos_bufmap_reservations(const struct phos_bufmap *m)
{
	return m->nresv;
}

int phos_bufmap_reservation_nth(const struct phos_bufmap *m, size_t i, uint64_t *ret_base, uint64_t *ret_size)
{
	if (i >= m->nresv)
		return -ENOENT;
	*ret_base = m->base + m->resv[i].first * PHOS_CHUNK;
	*ret_size = m->resv[i].n * PHOS_CHUNK;
	return 0;
}

int phos_bufmap_foreach_in(const struct phos_bufmap *m, uint64_t lo, uint64_t hi,
			   int (*fn)(const struct phos_buf *b, void *ctx), void *ctx)
{
	for (size_t i = lower_bound(m, lo); i < m->nbufs && m->bufs[i].addr < hi; i++) {
		int r = fn(&m->bufs[i], ctx);

		if (r)
			return r;
	}
	return 0;
}

bool phos_bufmap_covered(const struct phos_bufmap *m, uint64_t addr, uint64_t len)
{
	uint64_t at = addr, end = addr + len;

	if (end < addr)
		return false;
	while (at < end) {
		const struct phos_buf *b = phos_bufmap_find(m, at);

		if (!b)
			return false;
		at = b->addr + b->size;
	}
	return true;
}

int phos_bufmap_foreach(const struct phos_bufmap *m, int (*fn)(const struct phos_buf *b, void *ctx),
			void *ctx)
{
	for (size_t i = 0; i < m->nbufs; i++) {
		int r = fn(&m->bufs[i], ctx);

		if (r)
			return r;
	}
	return 0;
}

uint64_t phos_bufmap_live_bytes(const struct phos_bufmap *m)
{
	return m->live_bytes;
}

uint64_t phos_bufmap_mapped_bytes(const struct phos_bufmap *m)
{
	return m->mapped_chunks * PHOS_CHUNK;
}
