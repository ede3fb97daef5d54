/* SPDX-License-Identifier: MIT */
/*
 * Device memory shared between the sim executors of one host (device.h:
 * share_out, share_in, share_own; issue 42).
 *
 *   share_out   memfd ← the range's contents, sealed against writes and
 *               resizing, then mapped MAP_SHARED read-only over the range
 *   share_in    the memfd (its size checked, and its write seal) mapped the
 *               same way at the range, which was not mapped
 *   share_own   private pages with the contents moved over the range
 *               (mremap), read/write
 *
 * Being read-only is what makes sharing safe on this device as on the GPU:
 * a write that the executor's copy on write missed faults the executor (a
 * failed instance), and no other instance ever sees it. sim runs every
 * operation when it is submitted, so nothing is in flight during a remap.
 */
#include "device_sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* Whether [addr, addr+len) is a chunk-aligned range of the arena whose chunks
 * are all mapped (want) or none is (!want). With dev->lock held. */
static bool range_is(const struct sim_device *dev, uint64_t addr, uint64_t len, bool want)
{
	uint64_t c0, c1;

	if (!len || addr % SIM_CHUNK || len % SIM_CHUNK || addr < dev->base || addr - dev->base >= dev->size ||
	    len > dev->size - (addr - dev->base))
		return false;
	c0 = (addr - dev->base) / SIM_CHUNK;
	c1 = c0 + len / SIM_CHUNK;
	for (uint64_t c = c0; c < c1; c++)
		if (chunk_test(dev, c) != want)
			return false;
	return true;
}

int phos_sim_share_out(struct phos_device *pdev, uint64_t addr, uint64_t len, int *ret_fd)
{
	struct sim_device *dev = sim_dev(pdev);
	void *tmp = MAP_FAILED, *p;
	int fd = -1, r = 0;

	*ret_fd = -1;
	pthread_mutex_lock(&dev->lock);
	if (!range_is(dev, addr, len, true)) {
		r = -PHOS_CUDA_INVALID_VALUE;
		goto out;
	}
	fd = memfd_create("phos-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		goto fail;
	tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED)
		goto fail;
	memcpy(tmp, (const void *)(uintptr_t)addr, len);
	munmap(tmp, len);   /* (a writable mapping would refuse the write seal) */
	if (fcntl(fd, F_ADD_SEALS, SEALS) < 0)
		goto fail;
	p = mmap((void *)(uintptr_t)addr, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED)
		goto fail;   /* MAP_FIXED failing leaves the old mapping (EINVAL, ENOMEM before the change) */
	*ret_fd = fd;
	goto out;
fail:
	phos_warn("sim: sharing %#llx+%#llx: %s", (unsigned long long)addr, (unsigned long long)len, strerror(errno));
	r = -PHOS_CUDA_MEMORY_ALLOCATION;
	if (fd >= 0)
		close(fd);
out:
	pthread_mutex_unlock(&dev->lock);
	return r;
}

int phos_sim_share_in(struct phos_device *pdev, uint64_t addr, uint64_t len, int fd)
{
	struct sim_device *dev = sim_dev(pdev);
	uint64_t c0, c1;
	struct stat st;
	int seals, r = 0;
	void *p;

	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != len || (seals = fcntl(fd, F_GET_SEALS)) < 0 ||
	    (seals & SEALS) != SEALS) {
		phos_warn("sim: a shared buffer of %#llx bytes at %#llx came as another size or unsealed",
			  (unsigned long long)len, (unsigned long long)addr);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	pthread_mutex_lock(&dev->lock);
	if (!range_is(dev, addr, len, false)) {
		r = -PHOS_CUDA_INVALID_VALUE;   /* as cuMemMap on a mapped range */
		goto out;
	}
	if (dev->mapped_bytes + len > dev->total_mem) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	p = mmap((void *)(uintptr_t)addr, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		phos_warn("sim: mapping a shared buffer at %#llx: %s", (unsigned long long)addr, strerror(errno));
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	c0 = (addr - dev->base) / SIM_CHUNK;
	c1 = c0 + len / SIM_CHUNK;
	for (uint64_t c = c0; c < c1; c++)
		dev->chunk_bits[c / 64] |= 1ull << (c % 64);
	dev->mapped_bytes += len;
out:
	pthread_mutex_unlock(&dev->lock);
	return r;
}

int phos_sim_share_own(struct phos_device *pdev, uint64_t addr, uint64_t len)
{
	struct sim_device *dev = sim_dev(pdev);
	void *tmp, *p;
	int r = 0;

	pthread_mutex_lock(&dev->lock);
	if (!range_is(dev, addr, len, true)) {
		r = -PHOS_CUDA_INVALID_VALUE;
		goto out;
	}
	tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	memcpy(tmp, (const void *)(uintptr_t)addr, len);
	p = mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)addr);
	if (p == MAP_FAILED) {
		phos_warn("sim: a private copy at %#llx: %s", (unsigned long long)addr, strerror(errno));
		munmap(tmp, len);
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
	}
out:
	pthread_mutex_unlock(&dev->lock);
	return r;
}
