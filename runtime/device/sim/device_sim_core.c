/* SPDX-License-Identifier: MIT */
/*
 * The sim backend's core, below device_sim.c and its sub-files alike: the
 * object list every handle lives in (device_sim.h "Handles"), the stream check
 * that every operation passes (and that waits for the stream's host
 * callbacks), and the check of device ranges against the mapped chunks, the
 * variable region and scratch buffers (of the device and of its peers).
 * It calls nothing of the backend's other files.
 */
#include "device_sim_internal.h"

#include <stdlib.h>

/* ---- objects ---- */

void *phos_sim_obj_new(struct phos_device *pdev, uint32_t magic, size_t size)
{
	struct sim_device *dev = sim_dev(pdev);
	struct phos_sim_obj *o = calloc(1, size);

	if (!o)
		return NULL;
	o->magic = magic;
	pthread_mutex_lock(&dev->lock);
	o->next = dev->objs.next;
	o->prev = &dev->objs;
	o->next->prev = o;
	dev->objs.next = o;
	pthread_mutex_unlock(&dev->lock);
	return o;
}

void phos_sim_obj_free(struct phos_device *pdev, void *obj)
{
	struct sim_device *dev = sim_dev(pdev);
	struct phos_sim_obj *o = obj;

	pthread_mutex_lock(&dev->lock);
	obj_unlink_locked(o);
	pthread_mutex_unlock(&dev->lock);
	if (o->release)
		o->release(o);
	free(o);
}

void *phos_sim_obj_get(struct phos_device *pdev, const void *obj, uint32_t magic)
{
	struct sim_device *dev = sim_dev(pdev);
	struct phos_sim_obj *o, *found = NULL;

	if (!dev || !obj)
		return NULL;
	pthread_mutex_lock(&dev->lock);
	for (o = dev->objs.next; o != &dev->objs; o = o->next)
		if (o == obj) {
			found = o->magic == magic ? o : NULL;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	return found;
}

/* Whether work on s (NULL: the legacy default stream) must still wait for
 * host callbacks: its own, and between the legacy stream and blocking
 * streams each other's. With cb_lock held. */
bool phos_sim_callbacks_ahead(const struct sim_device *dev, const struct sim_stream *s)
{
	if (!s)
		return dev->legacy_issued != dev->legacy_done;
	return s->cb_issued != s->cb_done || (s->flags == 0 && dev->null_issued != dev->null_done);
}

void phos_sim_callbacks_wait(struct sim_device *dev, const struct sim_stream *s)
{
	if (!__atomic_load_n(&dev->cb_out, __ATOMIC_ACQUIRE))
		return;   /* none out (every operation passes here): no lock */
	pthread_mutex_lock(&dev->cb_lock);
	while (phos_sim_callbacks_ahead(dev, s))
		pthread_cond_wait(&dev->cb_cond, &dev->cb_lock);
	pthread_mutex_unlock(&dev->cb_lock);
}

int phos_sim_stream_check(struct phos_device *dev, const void *stream)
{
	struct sim_stream *s = stream ? phos_sim_obj_get(dev, stream, PHOS_SIM_STREAM) : NULL;

	if (stream && !s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	/* work completes at submission: the stream's host callbacks first */
	phos_sim_callbacks_wait(sim_dev(dev), s);
	return 0;
}

/* ---- memory ---- */

static bool own_range_ok(struct sim_device *dev, uint64_t addr, uint64_t len);

bool phos_sim_range_ok(struct phos_device *pdev, uint64_t addr, uint64_t len)
{
	struct sim_device *dev = sim_dev(pdev);

	if (len == 0)
		return true;
	if (!dev || addr + len < addr)
		return false;
	if (own_range_ok(dev, addr, len))
		return true;
	/* memory of a peer (peers are set before any work, then only read) */
	for (size_t i = 0; i < dev->npeers; i++) {
		if (own_range_ok(dev->peers[i], addr, len))
			return true;
	}
	return false;
}

static bool own_range_ok(struct sim_device *dev, uint64_t addr, uint64_t len)
{
	bool ok = false;

	pthread_mutex_lock(&dev->lock);
	if (addr >= dev->base && addr - dev->base < dev->size && len <= dev->size - (addr - dev->base)) {
		ok = true;
		for (uint64_t c = (addr - dev->base) / SIM_CHUNK; c <= (addr + len - 1 - dev->base) / SIM_CHUNK; c++)
			if (!chunk_test(dev, c)) {
				ok = false;
				break;
			}
	} else if (dev->var_base && addr >= dev->var_base && addr + len <= dev->var_base + dev->var_used) {
		ok = true;
	} else {
		for (size_t i = 0; !ok && i < SIM_MAX_SCRATCH; i++)
			ok = dev->scratch[i].addr && addr >= dev->scratch[i].addr &&
			     addr + len <= dev->scratch[i].addr + dev->scratch[i].len;
	}
	pthread_mutex_unlock(&dev->lock);
	return ok;
}
