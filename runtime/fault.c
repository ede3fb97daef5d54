/* SPDX-License-Identifier: MIT */
/*
 * Fault injection at named points (see fault.h).
 *
 * PHOS_FAULT is read once per process (pthread_once). Each armed point keeps a
 * hit counter under one mutex; a process without PHOS_FAULT takes no lock.
 * Malformed entries (empty names, names longer than 63 bytes, a count that is
 * not a decimal number) and entries past the 32nd are ignored.
 */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAULT_MAX_POINTS 32
#define FAULT_MAX_NAME 63

struct fault_point {
	char name[FAULT_MAX_NAME + 1];
	uint64_t pass;      /* hits that pass before the failure */
	uint64_t hits;
};

static struct fault_point fault_points[FAULT_MAX_POINTS];
static unsigned fault_npoints;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

/* Parses one "name" or "name:N" entry of len bytes; false when malformed. */
static bool fault_parse_entry(const char *s, size_t len, struct fault_point *ret_point)
{
	const char *colon = memchr(s, ':', len);
	size_t name_len = colon ? (size_t)(colon - s) : len;
	uint64_t pass = 0;

	if (name_len == 0 || name_len > FAULT_MAX_NAME)
		return false;
	if (colon) {
		const char *p = colon + 1, *end = s + len;

		if (p == end)
			return false;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9' || pass > (UINT64_MAX - 9) / 10)
				return false;
			pass = pass * 10 + (uint64_t)(*p - '0');
		}
	}
	memset(ret_point, 0, sizeof(*ret_point));
	memcpy(ret_point->name, s, name_len);
	ret_point->pass = pass;
	return true;
}

static void fault_parse(void)
{
	const char *env = getenv("PHOS_FAULT");

	while (env && *env && fault_npoints < FAULT_MAX_POINTS) {
		size_t len = strcspn(env, ",");

		if (fault_parse_entry(env, len, &fault_points[fault_npoints]))
			fault_npoints++;
		env += len;
		if (*env == ',')
			env++;
	}
}

bool phos_fault(const char *point)
{
	bool fail = false;

	pthread_once(&fault_once, fault_parse);
	if (fault_npoints == 0 || !point)
		return false;
	pthread_mutex_lock(&fault_lock);
	for (unsigned i = 0; i < fault_npoints; i++) {
		struct fault_point *f = &fault_points[i];

		if (strcmp(f->name, point) != 0)
			continue;
		if (f->hits < UINT64_MAX)
			f->hits++;
		if (f->hits == f->pass + 1)
			fail = true;
	}
	pthread_mutex_unlock(&fault_lock);
	return fail;
}
