/* SPDX-License-Identifier: MIT */
/* The executor's own tables and devices: handles, streams, the selected
 * device, the arena's devices (executor.h). The calls use these; the
 * dispatcher (dispatch.c) is above them. */
#include "executor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

int handle_put(struct handle_table *t, uint32_t id, void *obj)
{
	if (id == 0 || id >= EXEC_MAX_HANDLES)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (id >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		void **s;

		while (cap <= id)
			cap *= 2;
		s = realloc(t->slot, cap * sizeof(*s));
		if (!s)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		memset(s + t->cap, 0, (cap - t->cap) * sizeof(*s));
		t->slot = s;
		t->cap = cap;
	}
	if (t->slot[id])
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE; /* id reused while alive */
	t->slot[id] = obj;
	return 0;
}

void *handle_get(const struct handle_table *t, uint32_t id)
{
	return id < t->cap ? t->slot[id] : NULL;
}

void *handle_take(struct handle_table *t, uint32_t id)
{
	void *obj = handle_get(t, id);

	if (obj)
		t->slot[id] = NULL;
	return obj;
}

void handle_table_exit(struct handle_table *t)
{
	free(t->slot);
	t->slot = NULL;
	t->cap = 0;
}

int exec_stream(struct executor *ex, uint32_t id, void **ret_stream)
{
	struct exec_stream_obj *s;

	if (id == 0) {
		*ret_stream = NULL;
		return 0;
	}
	s = handle_get(&ex->streams, id);
	if (!s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	/* Work on a stream runs on the stream's device, whichever is selected. */
	if (s->device != ex->dev_index)
		exec_use_device(ex, s->device);
	*ret_stream = s->dev;
	return 0;
}

void exec_use_device(struct executor *ex, int d)
{
	if (d < 0 || d >= ex->ndevs)
		return;
	ex->dev = ex->devs[d];
	ex->dev_index = d;
}

int exec_drain_all(struct executor *ex)
{
	int d = ex->dev_index, r = 0;

	for (int k = 0; k < ex->ndevs && r == 0; k++) {
		exec_use_device(ex, k);
		r = ex->dev_ops->synchronize(ex->dev);
	}
	exec_use_device(ex, d);
	return r;
}

int exec_device_at(const struct executor *ex, uint64_t addr)
{
	uint64_t d;

	if (ex->ndevs <= 1 || addr < ex->arena_base || !ex->dev_stride)
		return ex->ndevs <= 1 ? 0 : ex->cur;
	d = (addr - ex->arena_base) / ex->dev_stride;
	return d < (uint64_t)ex->ndevs ? (int)d : ex->cur;
}

void *exec_func_here(const struct executor *ex, const struct exec_func *f)
{
	return ex->dev_index == 0 ? f->dev_func : f->peer_func[ex->dev_index];
}

uint64_t exec_var_here(const struct executor *ex, const struct exec_var *v)
{
	return ex->dev_index == 0 ? v->addr : v->peer_addr[ex->dev_index];
}

uint64_t exec_env_bytes(const char *name, uint64_t dflt, uint64_t max, uint64_t multiple)
{
	const char *env = getenv(name);
	unsigned long long v;
	char *end;

	if (!env || !*env)
		return dflt;
	errno = 0;
	v = strtoull(env, &end, 10);
	if (*end || errno || env[0] == '-' || v > max || (multiple > 1 && v % multiple)) {
		phos_warn("%s=%s is not a number of bytes (at most %llu, a multiple of %llu); using the default", name,
			  env, (unsigned long long)max, (unsigned long long)multiple);
		return dflt;
	}
	return v;
}
