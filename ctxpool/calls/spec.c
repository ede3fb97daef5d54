/* SPDX-License-Identifier: MIT */
/*
 * Speculation: the read and write sets of every forwarded call (docs/design.md,
 * "Kernel metadata and speculation"). Launches use the parameter kinds from
 * kparam; library calls and copies use their exact ranges. Sets are written to
 * the trace (--trace / PHOS_TRACE) one JSON object per line:
 *
 *   {"seq":12,"op":"launch","kernel":"_Z7vec_addPKfS0_Pfi","stream":0,
 *    "reads":[[105553116266496,4096]],"writes":[[105553116270592,4096]]}
 *
 * Launch sets hold whole buffers (a kernel may touch any byte of a buffer it
 * has a pointer into); copies and cuBLAS calls hold the bytes they touch. A
 * launch's line says whether its sets are "exact" (the kernel's PTX proves
 * every access derives from the parameters in the set) or "opaque" (the
 * kernel may touch any buffer: on-demand restore waits for all of them).
 * A synchronous call's answer adds {"seq":12,"op":"reply","t_ms":..,"status":0}
 * (executor.c) and the restore engine its own lines (restore/engine.c): together they
 * are the timeline of a cold start.
 */
#include <stdio.h>
#include <string.h>

#include "executor.h"
#include "engine.h"
#include "log.h"

void spec_add(struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access)
{
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->r[i].addr == addr && s->r[i].len == len) {
			s->r[i].access |= access;
			return;
		}
	}
	if (s->n == SPEC_MAX_RANGES) {
		s->overflow = true;
		return;
	}
	s->r[s->n++] = (struct spec_range){ .addr = addr, .len = len, .access = access };
}

struct piece {
	struct spec_set *s;
	uint64_t lo, hi;
	uint8_t access;
};

static int add_piece(const struct phos_buf *b, void *ctx)
{
	struct piece *p = ctx;
	uint64_t lo = b->addr > p->lo ? b->addr : p->lo, hi = b->addr + b->size < p->hi ? b->addr + b->size : p->hi;

	if (lo < hi)
		spec_add(p->s, lo, hi - lo, p->access);
	return 0;
}

int spec_range(struct executor *ex, struct spec_set *s, uint64_t addr, uint64_t len, uint8_t access)
{
	uint64_t base, size;
	struct piece p = { s, addr, addr + len, access };
	const struct phos_buf *first;

	if (len == 0)
		return 0;
	if (phos_bufmap_contains(ex->bufs, addr, len)) {
		spec_add(s, addr, len, access);
		return 0;
	}
	/* mappings side by side in one reservation (cuMemMap) are one range to
	 * their user: a tensor may span them. Each gets its own piece. */
	if (!phos_bufmap_reservation(ex->bufs, addr, &base, &size) || len > base + size - addr ||
	    !phos_bufmap_covered(ex->bufs, addr, len) || !(first = phos_bufmap_find(ex->bufs, addr)))
		return -PHOS_CUDA_INVALID_VALUE;
	add_piece(first, &p);
	phos_bufmap_foreach_in(ex->bufs, first->addr + first->size, addr + len, add_piece, &p);
	return 0;
}

/* Every mapping of a reservation, whole: a pointer into one may reach the
 * others (a tensor over several mappings), so all of them are in the set. */
static void add_reservation(struct executor *ex, struct spec_set *s, uint64_t base, uint64_t size, uint8_t access)
{
	struct piece p = { s, base, base + size, access };

	phos_bufmap_foreach_in(ex->bufs, base, base + size, add_piece, &p);
}

/* Adds the buffer holding pointer value v to s (when s is given). Returns -1
 * when v points into the arena at no live buffer (a freed or never allocated
 * address). */
static int add_pointer(struct executor *ex, struct spec_set *s, uint64_t v, uint8_t access, bool strict)
{
	const struct phos_buf *b;

	if (v == 0)
		return 0;
	b = phos_bufmap_find(ex->bufs, v);
	if (b) {
		uint64_t base, size;

		if (s && phos_bufmap_reservation(ex->bufs, b->addr, &base, &size))
			add_reservation(ex, s, base, size, access);
		else if (s)
			spec_add(s, b->addr, b->size, access);
		return 0;
	}
	if (!strict || !phos_bufmap_in_arena(ex->bufs, v))
		return 0;
	/* One past the end of a buffer is a valid C pointer that a kernel may get
	 * as a bound without dereferencing it. */
	b = phos_bufmap_find(ex->bufs, v - 1);
	return b && b->addr + b->size == v ? 0 : -1;
}

/* The parameters by their declared kinds (kparam.h): pointers are checked
 * (-PHOS_CUDA_ILLEGAL_ADDRESS when one dangles) and, when s is given, their
 * buffers added to it. */
static int launch_declared(struct executor *ex, const struct phos_kernel_info *ki, const uint8_t *params,
			   uint32_t param_bytes, struct spec_set *s)
{
	for (uint32_t i = 0; i < ki->nparams; i++) {
		const struct phos_kparam *p = &ki->params[i];
		uint64_t v;

		if ((uint32_t)p->offset + p->size > param_bytes)
			return -PHOS_CUDA_INVALID_VALUE;
		switch (p->kind) {
		case PHOS_PARAM_CONST_PTR:
		case PHOS_PARAM_PTR:
			if (p->size == 8) {
				memcpy(&v, params + p->offset, 8);
				if (add_pointer(ex, s, v, p->kind == PHOS_PARAM_PTR ? SPEC_READ | SPEC_WRITE : SPEC_READ,
						true) < 0)
					return -PHOS_CUDA_ILLEGAL_ADDRESS;
				break;
			}
			/* An odd-sized "pointer" is scanned like a struct. */
			__attribute__((fallthrough));
		case PHOS_PARAM_OPAQUE:
			/* Every aligned 8-byte word may be a pointer; it cannot be told from
			 * an integer, so a word pointing nowhere is not an error, and
			 * without a set to fill there is nothing to look up. */
			if (!s)
				break;
			for (uint32_t off = (p->offset + 7u) & ~7u; off + 8 <= (uint32_t)p->offset + p->size; off += 8) {
				memcpy(&v, params + off, 8);
				add_pointer(ex, s, v, SPEC_READ | SPEC_WRITE, false);
			}
			break;
		default:
			break;
		}
	}
	return 0;
}

/* An exact kernel: the buffers its parameter words point into, with the access
 * the analysis found; and its module's variables when it touches them. */
static void launch_exact(struct executor *ex, const struct exec_func *f, const uint8_t *params,
			 uint32_t param_bytes, struct spec_set *s)
{
	const struct phos_kernel_access *acc = &f->info.access;

	for (uint32_t w = 0; w < PHOS_ACCESS_WORDS && (uint64_t)w * 8 < param_bytes; w++) {
		uint8_t access = (phos_access_word(acc->read, w) ? SPEC_READ : 0) |
				 (phos_access_word(acc->write, w) ? SPEC_WRITE : 0);
		uint64_t v = 0;

		if (!access)
			continue;
		memcpy(&v, params + (size_t)w * 8, param_bytes - w * 8 < 8 ? param_bytes - w * 8 : 8);
		add_pointer(ex, s, v, access, false);
	}
	if (!acc->globals)
		return;
	for (uint32_t id = 0; id < ex->vars.cap; id++) {
		const struct exec_var *v = ex->vars.slot[id];

		if (v && !v->error && v->module == f->module && v->size)
			spec_add(s, v->addr, v->size,
				 (acc->globals & PHOS_ACCESS_READ ? SPEC_READ : 0) |
				 (acc->globals & PHOS_ACCESS_WRITE ? SPEC_WRITE : 0));
	}
}

int spec_launch(struct executor *ex, const struct exec_func *f, const uint8_t *params,
		uint32_t param_bytes, struct spec_set *s)
{
	const struct phos_kernel_info *ki = &f->info;
	bool exact = ki->access.verdict == PHOS_ACCESS_EXACT;

	/* Declared pointers: checked always (a dangling one is refused); they make
	 * the set of an opaque kernel, for the trace and later modes. */
	TRY(launch_declared(ex, ki, params, param_bytes, exact ? NULL : s));
	if (!exact) {
		s->opaque = true;
		return 0;
	}
	launch_exact(ex, f, params, param_bytes, s);
	return 0;
}


static void write_ranges(FILE *f, const struct spec_set *s, uint8_t access)
{
	bool first = true;

	fputc('[', f);
	for (uint32_t i = 0; i < s->n; i++) {
		if (!(s->r[i].access & access))
			continue;
		fprintf(f, "%s[%llu,%llu]", first ? "" : ",", (unsigned long long)s->r[i].addr,
			(unsigned long long)s->r[i].len);
		first = false;
	}
	fputc(']', f);
}

static void trace(struct executor *ex, const char *what, const char *name, uint32_t stream,
		  const struct spec_set *s)
{
	FILE *f = ex->trace;

	/* The restore engine writes lines of its own from another thread: one
	 * line of ours is written under the stream's lock, so lines never mix. */
	flockfile(f);
	fprintf(f, "{\"seq\":%llu,\"op\":\"%s\",\"t_ms\":%.3f", (unsigned long long)ex->seq, what, phos_now() * 1e3);
	if (name) {
		/* Mangled names are identifiers: nothing to escape but be safe anyway. */
		fputs(",\"kernel\":\"", f);
		for (const char *c = name; *c; c++)
			if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
				fputc(*c, f);
		fputc('"', f);
	}
	if (!strcmp(what, "launch") || !strcmp(what, "graph") || s->opaque)   /* (a library call's set is exact unless said) */
		fprintf(f, ",\"sets\":\"%s\"", s->opaque ? "opaque" : s->validated ? "validated" : "exact");
	fprintf(f, ",\"stream\":%u,\"reads\":", stream);
	write_ranges(f, s, SPEC_READ);
	fputs(",\"writes\":", f);
	write_ranges(f, s, SPEC_WRITE);
	if (s->overflow)
		fputs(",\"overflow\":true", f);
	fputs("}\n", f);
	funlockfile(f);
}

int spec_commit(struct executor *ex, const char *what, const char *name, uint32_t stream,
		const struct spec_set *s)
{
	void *dev_stream;

	if (ex->trace) {
		/* One locked section: the restore engine writes lines too. */
		flockfile(ex->trace);
		trace(ex, what, name, stream, s);
		funlockfile(ex->trace);
	}
	for (size_t i = 0; i < sizeof(ex->before_write) / sizeof(ex->before_write[0]); i++)
		if (ex->before_write[i])
			TRY(ex->before_write[i](ex, s));
	if (!ex->loader)
		return 0;
	/* Also once everything is resident: the gate records first touches. */
	TRY(exec_stream(ex, stream, &dev_stream));
	if ((s->overflow || s->opaque) && !loader_done(ex->loader)) {
		ex->spec_fallbacks[s->opaque ? SPEC_FB_OPAQUE : SPEC_FB_OVERFLOW]++;
		return loader_gate_all(ex->loader, ex->dev_index, dev_stream);
	}
	for (uint32_t i = 0; i < s->n; i++)
		TRY(loader_gate(ex->loader, ex->dev_index, dev_stream, s->r[i].addr, s->r[i].len));
	return 0;
}
