/* SPDX-License-Identifier: MIT */
/*
 * The call recorder of tools/route-trace (issue 40): LD_PRELOADed into an
 * invoker built with -finstrument-functions. Each time a thread enters the
 * function at PHOS_TRACE_FN (an offset in the executable: inv_invoke), every
 * call and return on that thread until it returns is written to
 * PHOS_TRACE_DIR/call.N: "E <fn> <call site>" and "X <fn>", as offsets in
 * the executable. Not instrumented itself.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uintptr_t base, target;
static int counter;
static __thread FILE *out;
static __thread int depth;

static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(uintptr_t *)arg = info->dlpi_addr;   /* the executable comes first */
	return 1;
}

__attribute__((constructor, no_instrument_function)) static void hook_init(void)
{
	const char *fn = getenv("PHOS_TRACE_FN");

	dl_iterate_phdr(first_object, &base);
	if (fn)
		target = base + (uintptr_t)strtoull(fn, NULL, 0);
}

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site)
{
	if (!out && target && (uintptr_t)fn == target) {
		char path[4096];
		const char *dir = getenv("PHOS_TRACE_DIR");

		snprintf(path, sizeof(path), "%s/call.%d", dir ? dir : "/tmp", __atomic_fetch_add(&counter, 1, 0));
		out = fopen(path, "w");
		depth = 0;
	}
	if (out) {
		fprintf(out, "E %#lx %#lx\n", (unsigned long)((uintptr_t)fn - base), (unsigned long)((uintptr_t)site - base));
		depth++;
	}
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site)
{
	(void)site;
	if (!out)
		return;
	fprintf(out, "X %#lx\n", (unsigned long)((uintptr_t)fn - base));
	if (--depth == 0) {
		fclose(out);
		out = NULL;
	}
}
