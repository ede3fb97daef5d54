/* SPDX-License-Identifier: MIT */
/*
 * The sim device backend: a test device in host memory (docs/design.md "Two device backends").
 *
 *   arena_base                                   arena_base+size   +1 GiB gap   var region (1 GiB)
 *   |<- PROT_NONE reservation, 2 MiB chunks ------------>|                   |<- __device__ vars ->|
 *   [rw][rw][  ][rw][  ] ... map() = fresh zero pages       bump-allocated, 256-byte aligned,
 *     chunk_bits: 1 per mapped chunk                        made read/write as it grows
 *
 * Device memory is host memory at the device addresses, so twins and the cuBLAS
 * reference dereference device pointers directly. Every operation runs to
 * completion when it is submitted: streams and events are bookkeeping, and an
 * event's timestamp is CLOCK_MONOTONIC at record time.
 *
 * Every copy/memset range is checked against chunk_bits (and the used part of
 * the variable region), so a bad address gives -cudaErrorInvalidValue instead of
 * a fault in the executor. Launch pointers are the executor's to validate.
 *
 * Kernels run through host twins (sim_twin.h) loaded from PHOS_SIM_TWINS at open.
 */
#include "device_sim_internal.h"
#include "sim_tex.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "sim_twin.h"

#define SIM_TOTAL_MEM (80ull << 30)      /* what the simulated device reports */
#define SIM_VAR_GAP (1ull << 30)         /* between the arena end and the variable region */
#define SIM_VAR_REGION (1ull << 30)      /* room for all __device__ variables */
#define SIM_VAR_ALIGN 256u
#define SIM_MAX_IMAGE (1ull << 30)       /* largest fatbin module_load accepts */
#define SIM_MAX_NAME 65536u              /* longest mangled name */
#define SIM_MAX_TWINS 65536u
#define SIM_DEFAULT_DYN_SHARED 49152     /* per block without opt-in */
#define SIM_OPTIN_DYN_SHARED 232448      /* per block with cudaFuncAttributeMaxDynamicSharedMemorySize */
#define SIM_SMEM_PER_SM 233472
#define SIM_SMEM_RESERVED 1024           /* per block, taken by the driver */
#define FATBIN_MAGIC 0xBA55ED50u
#define EVENT_FLAGS_KNOWN 0x7u           /* BlockingSync | DisableTiming | Interprocess */
#define EVENT_DISABLE_TIMING 0x2u
#define FUNC_ATTR_MAX_DYN_SHARED 8       /* cudaFuncAttributeMaxDynamicSharedMemorySize */
#define FUNC_ATTR_CARVEOUT 9             /* cudaFuncAttributePreferredSharedMemoryCarveout */
#define SIM_PERSISTING_L2_MAX 32505856   /* CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE */

struct sim_twin_entry {
	const char *name;                /* owned by the plugin */
	phos_sim_kernel_fn fn;
	size_t order;                    /* load order: the first of duplicate names wins */
};

struct sim_event {
	struct phos_sim_obj obj;
	uint32_t flags;
	bool recorded;
	uint64_t ns;                     /* CLOCK_MONOTONIC at the last record */
};

struct sim_var {
	struct sim_var *next;
	uint64_t addr, size;
	char name[];
};

struct sim_module {
	struct phos_sim_obj obj;
	void *image;
	size_t len;
	struct sim_var *vars;
};

struct sim_func {
	struct phos_sim_obj obj;
	struct sim_module *module;
	phos_sim_kernel_fn twin;         /* NULL: launch fails with NOT_SUPPORTED */
	int max_dyn_shared, carveout;
	int cluster[3], non_portable, cluster_policy;
	char name[];
};

static int sim_warm(struct phos_device *dev)
{
	(void)dev;
	return 0;
}

/* ---- memory ---- */

/* Whether [addr, addr+len) is a non-empty, chunk-aligned range of the arena. */
static bool arena_range_valid(const struct sim_device *dev, uint64_t addr, uint64_t len)
{
	return len && addr % SIM_CHUNK == 0 && len % SIM_CHUNK == 0 && addr >= dev->base &&
	       addr - dev->base < dev->size && len <= dev->size - (addr - dev->base);
}

/* Gives [addr, addr+len) back to the PROT_NONE reservation, dropping its pages. */
static int arena_reserve(uint64_t addr, uint64_t len)
{
	void *p = mmap((void *)(uintptr_t)addr, len, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);

	return p == MAP_FAILED ? -errno : 0;
}

static int sim_map(struct phos_device *pdev, uint64_t addr, uint64_t len)
{
	struct sim_device *dev = sim_dev(pdev);
	uint64_t c0, c1, c;
	void *p;
	int r = 0;

	if (!dev || !arena_range_valid(dev, addr, len))
		return -PHOS_CUDA_INVALID_VALUE;
	c0 = (addr - dev->base) / SIM_CHUNK;
	c1 = c0 + len / SIM_CHUNK;
	if (dev->map_delay_us)
		usleep(dev->map_delay_us);
	pthread_mutex_lock(&dev->lock);
	for (c = c0; c < c1; c++)
		if (chunk_test(dev, c)) {
			r = -PHOS_CUDA_INVALID_VALUE;   /* as cuMemMap on a mapped range */
			goto out;
		}
	if (dev->mapped_bytes + len > dev->total_mem) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	/* Fresh private pages are zero; no MAP_NORESERVE, so the kernel may refuse cleanly. */
	p = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (p == MAP_FAILED) {
		phos_warn("sim: map %#llx+%#llx: %s", (unsigned long long)addr, (unsigned long long)len,
			  strerror(errno));
		(void)arena_reserve(addr, len);  /* a failed MAP_FIXED may have left a hole */
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	for (c = c0; c < c1; c++)
		dev->chunk_bits[c / 64] |= 1ull << (c % 64);
	dev->mapped_bytes += len;
out:
	pthread_mutex_unlock(&dev->lock);
	return r;
}

static void sim_unmap(struct phos_device *pdev, uint64_t addr, uint64_t len)
{
	struct sim_device *dev = sim_dev(pdev);
	uint64_t c0, c1;

	if (!dev || !arena_range_valid(dev, addr, len))
		return;
	c0 = (addr - dev->base) / SIM_CHUNK;
	c1 = c0 + len / SIM_CHUNK;
	pthread_mutex_lock(&dev->lock);
	for (uint64_t c = c0; c < c1; c++)
		if (chunk_test(dev, c)) {
			dev->chunk_bits[c / 64] &= ~(1ull << (c % 64));
			dev->mapped_bytes -= SIM_CHUNK;
		}
	if (arena_reserve(addr, len) < 0)
		phos_warn("sim: unmap %#llx+%#llx: %s", (unsigned long long)addr, (unsigned long long)len,
			  strerror(errno));
	pthread_mutex_unlock(&dev->lock);
}

/* Storage for a __device__ variable: size bytes, zeroed, at a deterministic address. */
static int var_alloc(struct sim_device *dev, uint64_t size, uint64_t *ret_addr)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t off, end, rw_end;
	int r = 0;

	pthread_mutex_lock(&dev->lock);
	off = (dev->var_used + SIM_VAR_ALIGN - 1) / SIM_VAR_ALIGN * SIM_VAR_ALIGN;
	if (!dev->var_base || size > SIM_VAR_REGION - off) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto out;
	}
	end = off + size;
	rw_end = (end + page - 1) / page * page;
	if (rw_end > dev->var_rw) {
		if (mprotect((void *)(uintptr_t)(dev->var_base + dev->var_rw), rw_end - dev->var_rw,
			     PROT_READ | PROT_WRITE) < 0) {
			r = -PHOS_CUDA_MEMORY_ALLOCATION;
			goto out;
		}
		dev->var_rw = rw_end;
	}
	dev->var_used = end;
	*ret_addr = dev->var_base + off;
out:
	pthread_mutex_unlock(&dev->lock);
	return r;
}

/* ---- open / close ---- */

static int twin_cmp(const void *a, const void *b)
{
	const struct sim_twin_entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static void twins_add_plugin(struct sim_device *dev, const char *path)
{
	const struct phos_sim_twin *list;
	struct sim_twin_entry *grown;
	phos_sim_twins_fn get;
	unsigned count = 0;
	void *h;

	if (dev->nplugins == SIM_MAX_PLUGINS) {
		phos_warn("sim: more than %u twin plugins, ignoring %s", SIM_MAX_PLUGINS, path);
		return;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		phos_warn("sim: twin plugin %s: %s", path, dlerror());
		return;
	}
	get = (phos_sim_twins_fn)dlsym(h, "phos_sim_twins");
	list = get ? get(&count) : NULL;
	if (!list || count > SIM_MAX_TWINS - dev->ntwins) {
		phos_warn("sim: twin plugin %s: no usable phos_sim_twins()", path);
		dlclose(h);
		return;
	}
	grown = realloc(dev->twins, (dev->ntwins + count + 1) * sizeof(*grown));
	if (!grown) {
		dlclose(h);
		return;
	}
	dev->twins = grown;
	for (unsigned i = 0; i < count; i++) {
		if (!list[i].name || !list[i].fn)
			continue;
		dev->twins[dev->ntwins] = (struct sim_twin_entry){
			.name = list[i].name, .fn = list[i].fn, .order = dev->ntwins };
		dev->ntwins++;
	}
	dev->plugins[dev->nplugins++] = h;
	/* twins that sample textures or surfaces are given the objects' lookup */
	phos_sim_twins_bind_fn bind = (phos_sim_twins_bind_fn)dlsym(h, PHOS_SIM_TWINS_BIND);
	if (bind)
		bind(phos_sim_tex_lookup);
	/* twins of kernels that set a graph's condition, its setter */
	phos_sim_cond_bind_fn cond_bind = (phos_sim_cond_bind_fn)dlsym(h, PHOS_SIM_COND_BIND);
	if (cond_bind)
		cond_bind(phos_sim_cond_set);
	phos_info("sim: %u twins from %s", count, path);
}

/* Loads the plugins named in PHOS_SIM_TWINS and indexes their twins by name. */
static void twins_load(struct sim_device *dev)
{
	const char *env = getenv("PHOS_SIM_TWINS");
	char *paths, *save = NULL;
	size_t n = 0;

	if (!env || !*env || !(paths = strdup(env)))
		return;
	for (char *p = strtok_r(paths, ":", &save); p; p = strtok_r(NULL, ":", &save))
		twins_add_plugin(dev, p);
	free(paths);
	if (!dev->ntwins)
		return;
	qsort(dev->twins, dev->ntwins, sizeof(*dev->twins), twin_cmp);
	for (size_t i = 0; i < dev->ntwins; i++) {
		if (n && !strcmp(dev->twins[n - 1].name, dev->twins[i].name)) {
			phos_warn("sim: twin %s defined twice, keeping the first", dev->twins[i].name);
			continue;
		}
		dev->twins[n++] = dev->twins[i];
	}
	dev->ntwins = n;
}

static phos_sim_kernel_fn twin_find(const struct sim_device *dev, const char *name)
{
	size_t lo = 0, hi = dev->ntwins;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, dev->twins[mid].name);

		if (!c)
			return dev->twins[mid].fn;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Frees everything, also a half-built device. */
static void sim_device_free(struct sim_device *dev)
{
	if (!dev)
		return;
	pthread_mutex_lock(&dev->cb_lock);   /* callbacks name their stream */
	while (dev->cb_out)
		pthread_cond_wait(&dev->cb_cond, &dev->cb_lock);
	pthread_mutex_unlock(&dev->cb_lock);
	while (dev->objs.next && dev->objs.next != &dev->objs) {
		struct phos_sim_obj *o = dev->objs.next;

		obj_unlink_locked(o);
		if (o->release)
			o->release(o);
		free(o);
	}
	for (size_t i = 0; i < dev->nplugins; i++)
		dlclose(dev->plugins[i]);
	free(dev->twins);
	for (size_t i = 0; i < SIM_MAX_SCRATCH; i++)
		free((void *)(uintptr_t)dev->scratch[i].addr);
	if (dev->var_base)
		munmap((void *)(uintptr_t)dev->var_base, SIM_VAR_REGION);
	if (dev->size)
		munmap((void *)(uintptr_t)dev->base, dev->size);
	free(dev->chunk_bits);
	free(dev->regs);
	pthread_mutex_destroy(&dev->reg_lock);
	pthread_mutex_destroy(&dev->lock);
	free(dev);
}

static void sim_close(struct phos_device *dev)
{
	phos_sim_tex_clear();
	sim_device_free(sim_dev(dev));
}

/* Reserves [addr, addr+len) at exactly addr; 0 or -errno. */
static int reserve_fixed(uint64_t addr, uint64_t len)
{
	void *p = mmap((void *)(uintptr_t)addr, len, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	if ((uintptr_t)p != addr) {      /* a kernel older than 4.17 takes the flag as a hint */
		munmap(p, len);
		return -EEXIST;
	}
	return 0;
}

static int sim_gpus(void);

static int sim_open(int ordinal, uint64_t arena_base, uint64_t arena_size, bool warm,
		    struct phos_device **ret_dev)
{
	struct sim_device *dev;
	uint64_t var_base;
	int r;

	if (ordinal < 0 || ordinal >= sim_gpus())
		return -PHOS_CUDA_INVALID_DEVICE;
	if (!ret_dev || !arena_base || !arena_size || arena_base % SIM_CHUNK || arena_size % SIM_CHUNK ||
	    arena_base + arena_size < arena_base || arena_base + arena_size > (1ull << 47))
		return -PHOS_CUDA_INVALID_VALUE;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutex_init(&dev->cb_lock, NULL);
	pthread_cond_init(&dev->cb_cond, NULL);
	pthread_mutex_init(&dev->reg_lock, NULL);
	dev->objs.next = dev->objs.prev = &dev->objs;
	dev->total_mem = SIM_TOTAL_MEM;
	{
		static const uint64_t limits[SIM_LIMITS] = { 1024, 1 << 20, 8 << 20, 2, 2048, 64, 0 };

		memcpy(dev->limits, limits, sizeof(limits));
	}
	/* Tests shrink the device to exercise "too little GPU memory". */
	if (getenv("PHOS_SIM_MEMORY")) {
		char *end;
		unsigned long long v = strtoull(getenv("PHOS_SIM_MEMORY"), &end, 0);

		if (*end == '\0' && v >= SIM_CHUNK && v <= SIM_TOTAL_MEM)
			dev->total_mem = v;
	}
	/* Tests slow host copies down to expose callers that reuse host memory
	 * before the device is done with it (a real DMA takes its time). */
	if (getenv("PHOS_SIM_COPY_DELAY_US")) {
		char *end;
		unsigned long v = strtoul(getenv("PHOS_SIM_COPY_DELAY_US"), &end, 10);

		if (*end == '\0' && v <= 1000000)
			dev->copy_delay_us = (unsigned)v;
	}
	/* ... and mappings, to hold placement open while the restore engine
	 * streams into what is mapped already (a real cuMemMap takes its time) */
	if (getenv("PHOS_SIM_MAP_DELAY_US")) {
		char *end;
		unsigned long v = strtoul(getenv("PHOS_SIM_MAP_DELAY_US"), &end, 10);

		if (*end == '\0' && v <= 1000000)
			dev->map_delay_us = (unsigned)v;
	}
	dev->nchunks = arena_size / SIM_CHUNK;
	dev->chunk_bits = calloc((dev->nchunks + 63) / 64, sizeof(uint64_t));
	if (!dev->chunk_bits) {
		sim_device_free(dev);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	r = reserve_fixed(arena_base, arena_size);
	if (r < 0) {
		phos_err("sim: cannot reserve the arena at %#llx+%#llx: %s", (unsigned long long)arena_base,
			 (unsigned long long)arena_size, strerror(-r));
		sim_device_free(dev);
		return -PHOS_CUDA_INITIALIZATION;
	}
	dev->base = arena_base;
	dev->size = arena_size;
	/* Variables sit at fixed addresses too when the space is free, else
	 * anywhere; PHOS_SIM_VAR_SKEW (bytes, < 1 MiB) moves them all by that
	 * much, as the driver places them differently in every process (tests
	 * of restores whose variables move). */
	{
		const char *skew = getenv("PHOS_SIM_VAR_SKEW");
		unsigned long long v = skew ? strtoull(skew, NULL, 0) : 0;

		dev->var_used = v < (1u << 20) ? (v + SIM_VAR_ALIGN - 1) / SIM_VAR_ALIGN * SIM_VAR_ALIGN : 0;
	}
	var_base = arena_base + arena_size + SIM_VAR_GAP;
	if (reserve_fixed(var_base, SIM_VAR_REGION) == 0) {
		dev->var_base = var_base;
	} else {
		void *p = mmap(NULL, SIM_VAR_REGION, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		phos_warn("sim: variable region not at %#llx: addresses of __device__ variables vary",
			  (unsigned long long)var_base);
		if (p != MAP_FAILED)
			dev->var_base = (uintptr_t)p;
	}
	twins_load(dev);
	*ret_dev = (struct phos_device *)(void *)dev;
	return 0;
}

/* ---- device ---- */

/* The GPUs of the simulated host: PHOS_SIM_GPUS (1 to 8), 1 by default. */
static int sim_gpus(void)
{
	const char *e = getenv("PHOS_SIM_GPUS");
	char *end;
	long v;

	if (!e || !*e)
		return 1;
	v = strtol(e, &end, 10);
	return *end == '\0' && v >= 1 && v <= 8 ? (int)v : 1;
}

static int sim_device_count(struct phos_device *dev, int *ret_count)
{
	(void)dev;
	if (!ret_count)
		return -PHOS_CUDA_INVALID_VALUE;
	*ret_count = sim_gpus();
	return 0;
}

static int sim_enter(struct phos_device *dev)
{
	(void)dev;
	return 0;
}

static int sim_peer_add(struct phos_device *pdev, struct phos_device *ppeer)
{
	struct sim_device *dev = sim_dev(pdev), *peer = sim_dev(ppeer);

	if (!dev || !peer || dev == peer)
		return -PHOS_CUDA_INVALID_VALUE;
	if (peer->npeers == sizeof(peer->peers) / sizeof(peer->peers[0]))
		return -PHOS_CUDA_NOT_SUPPORTED;
	peer->peers[peer->npeers++] = dev;
	return 0;
}

/* An H100 SXM-like device, indexed by CUdevice_attribute (== cudaDeviceAttr). */
static const struct { int attr, value; } sim_attrs[] = {
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, SIM_DEFAULT_DYN_SHARED },
	{ CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536 },
	{ CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32 },
	{ CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647 },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536 },
	{ CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000 },
	{ CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512 },
	{ CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1 },
	{ CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132 },
	{ CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384 },
	{ CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512 },
	{ CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1 },
	{ CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1 },
	{ CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000 },
	{ CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120 },
	{ CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800 },
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048 },
	{ CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3 },
	{ CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1 },
	{ CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0 },
	{ CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, SIM_SMEM_PER_SM },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536 },
	{ CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1 },
	{ CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2 },
	{ CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, SIM_OPTIN_DYN_SHARED },
	{ CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32 },
	{ CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, SIM_PERSISTING_L2_MAX },
	{ CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632 },
	{ CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, SIM_SMEM_RESERVED },
	{ CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1 },
	{ CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT, 4 },
	{ CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_NUMA_ID, -1 },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1 },
	/* the rest of what an H100 SXM5 reports (attributes it reports as 0 are left out) */
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048 },
	{ CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 24 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, 8192 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, 8192 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH, 131072 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT, 65536 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH, 16384 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT, 16384 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH, 16384 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS, 2048 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS, 2048 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, 2046 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 131072 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 65000 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH, 2097120 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, 32768 },
	{ CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, 32768 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1 },
	{ CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 1 },
	{ CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 1 },
	{ CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1 },
	{ CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, 0x233010de },
	{ CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, 0x16c110de },
};

_Static_assert(CU_DEVICE_ATTRIBUTE_MAX <= PHOS_DEVICE_ATTR_MAX, "attr[] too small for CUdevice_attribute");

static int sim_info(struct phos_device *pdev, struct phos_reply_device *ret_info)
{
	struct sim_device *dev = sim_dev(pdev);
	static const uint8_t uuid[16] = { 'p', 'h', 'o', 's', '-', 's', 'i', 'm', 0, 0, 0, 0, 0, 0, 0, 1 };

	if (!ret_info)
		return -PHOS_CUDA_INVALID_VALUE;
	memset(ret_info, 0, sizeof(*ret_info));
	snprintf(ret_info->name, sizeof(ret_info->name), "phos sim device (not a GPU)");
	memcpy(ret_info->uuid, uuid, sizeof(uuid));
	ret_info->total_mem = dev->total_mem;
	for (size_t i = 0; i < sizeof(sim_attrs) / sizeof(sim_attrs[0]); i++)
		ret_info->attr[sim_attrs[i].attr] = sim_attrs[i].value;
	return 0;
}

static int sim_mem_info(struct phos_device *pdev, uint64_t *ret_free, uint64_t *ret_total)
{
	struct sim_device *dev = sim_dev(pdev);
	if (!dev || !ret_free || !ret_total)
		return -PHOS_CUDA_INVALID_VALUE;
	pthread_mutex_lock(&dev->lock);
	*ret_free = dev->total_mem - dev->mapped_bytes;
	pthread_mutex_unlock(&dev->lock);
	*ret_total = dev->total_mem;
	return 0;
}

/* A fatal device error, injected by tests: when the file that PHOS_SIM_FATAL
 * names exists at a launch, it is removed (one fault across processes) and
 * that launch and every later launch and synchronisation fail with
 * cudaErrorLaunchFailure, as a GPU's sticky error does. */
static atomic_bool sim_fatal;

static bool sim_failed(void)
{
	const char *f;

	if (atomic_load(&sim_fatal))
		return true;
	f = getenv("PHOS_SIM_FATAL");
	if (f && *f && unlink(f) == 0)
		atomic_store(&sim_fatal, true);
	return atomic_load(&sim_fatal);
}

static int sim_synchronize(struct phos_device *pdev)
{
	struct sim_device *dev = sim_dev(pdev);

	pthread_mutex_lock(&dev->cb_lock);   /* every host callback returned */
	while (dev->cb_out)
		pthread_cond_wait(&dev->cb_cond, &dev->cb_lock);
	pthread_mutex_unlock(&dev->cb_lock);
	return atomic_load(&sim_fatal) ? -PHOS_CUDA_LAUNCH_FAILURE : 0;
}

static int sim_host_register(struct phos_device *dev, void *ptr, size_t len)
{
	struct sim_device *d = sim_dev(dev);
	uintptr_t a = (uintptr_t)ptr;
	int r = 0;

	if (!ptr || !len || a + len < a)
		return -PHOS_CUDA_INVALID_VALUE;
	pthread_mutex_lock(&d->reg_lock);
	for (size_t i = 0; i < d->nregs && r == 0; i++)
		if (a < d->regs[i].addr + d->regs[i].len && d->regs[i].addr < a + len)
			r = -PHOS_CUDA_HOST_MEMORY_ALREADY_REGISTERED;
	if (r == 0 && d->nregs == d->regs_cap) {
		size_t cap = d->regs_cap ? 2 * d->regs_cap : 16;
		void *p = realloc(d->regs, cap * sizeof(*d->regs));

		if (p) {
			d->regs = p;
			d->regs_cap = cap;
		} else {
			r = -PHOS_CUDA_MEMORY_ALLOCATION;
		}
	}
	if (r == 0) {
		d->regs[d->nregs].addr = a;
		d->regs[d->nregs++].len = len;
	}
	pthread_mutex_unlock(&d->reg_lock);
	return r;
}

static void sim_host_unregister(struct phos_device *dev, void *ptr)
{
	struct sim_device *d = sim_dev(dev);

	pthread_mutex_lock(&d->reg_lock);
	for (size_t i = 0; i < d->nregs; i++) {
		if (d->regs[i].addr == (uintptr_t)ptr) {
			d->regs[i] = d->regs[--d->nregs];
			break;
		}
	}
	pthread_mutex_unlock(&d->reg_lock);
}

/* Whether a copy may use [host, +len): inside one pinned range, or touching
 * none (pageable). The driver takes a registration for one range and refuses
 * a copy that runs off its end into another or into pageable memory. */
static bool host_side_ok(struct sim_device *d, const void *host, size_t len)
{
	uintptr_t a = (uintptr_t)host;
	bool ok = true;

	pthread_mutex_lock(&d->reg_lock);
	for (size_t i = 0; i < d->nregs && ok; i++)
		if (a < d->regs[i].addr + d->regs[i].len && d->regs[i].addr < a + len)
			ok = a >= d->regs[i].addr && a + len <= d->regs[i].addr + d->regs[i].len;
	pthread_mutex_unlock(&d->reg_lock);
	return ok;
}

/* ---- streams and events ---- */

static int sim_stream_create(struct phos_device *dev, uint32_t flags, int priority, void **ret_stream)
{
	struct sim_stream *s;

	if (!dev || !ret_stream || flags > 1)   /* cudaStreamDefault, cudaStreamNonBlocking */
		return -PHOS_CUDA_INVALID_VALUE;
	s = phos_sim_obj_new(dev, PHOS_SIM_STREAM, sizeof(*s));
	if (!s)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	s->flags = flags;
	s->priority = priority;
	*ret_stream = s;
	return 0;
}

static bool stream_attr_ok(int attr)
{
	return attr == 1 || attr == 3 || attr == 8 || attr == 9 || attr == 10;
}

static int sim_stream_set_attr(struct phos_device *pdev, void *stream, int attr, const void *value)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_stream *s = stream ? phos_sim_obj_get(pdev, stream, PHOS_SIM_STREAM) : NULL;
	uint8_t *slot;
	int v;

	if (stream && !s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!value || !stream_attr_ok(attr))
		return -PHOS_CUDA_INVALID_VALUE;
	memcpy(&v, value, sizeof(v));
	if (attr == 3 && (v < 1 || v > 4))           /* CUsynchronizationPolicy */
		return -PHOS_CUDA_INVALID_VALUE;
	if (attr == 8) {                             /* priority: clamped to [-5, 0] */
		v = v > 0 ? 0 : v < -5 ? -5 : v;
		if (s)
			s->priority = v;
	}
	slot = (s ? &s->attrs : &dev->default_attrs)->v[attr];
	memcpy(slot, value, PHOS_STREAM_ATTR_BYTES);
	if (attr == 8)
		memcpy(slot, &v, sizeof(v));
	return 0;
}

static int sim_stream_get_attr(struct phos_device *pdev, void *stream, int attr, void *ret_value)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_stream *s = stream ? phos_sim_obj_get(pdev, stream, PHOS_SIM_STREAM) : NULL;
	int v;

	if (stream && !s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!ret_value || !stream_attr_ok(attr))
		return -PHOS_CUDA_INVALID_VALUE;
	memcpy(ret_value, (s ? &s->attrs : &dev->default_attrs)->v[attr], PHOS_STREAM_ATTR_BYTES);
	memcpy(&v, ret_value, sizeof(v));
	if (attr == 3 && v == 0) {
		/* never set: CU_SYNC_POLICY_AUTO on a created stream; on the
		 * default stream an H100's driver reads -1 (and refuses to set it) */
		v = s ? 1 : -1;
		memcpy(ret_value, &v, sizeof(v));
	}
	if (attr == 8) {
		v = s ? s->priority : 0;
		memcpy(ret_value, &v, sizeof(v));
	}
	return 0;
}

static int sim_limit_set(struct phos_device *pdev, int limit, uint64_t value)
{
	struct sim_device *dev = sim_dev(pdev);

	if (limit < 0 || limit >= SIM_LIMITS)
		return -PHOS_CUDA_INVALID_VALUE;     /* an id CUDA does not know (H100) */
	if (limit == 5 && value > 128)               /* L2 fetch granularity */
		return -PHOS_CUDA_INVALID_VALUE;
	if (limit == 6 && value > SIM_PERSISTING_L2_MAX)
		value = SIM_PERSISTING_L2_MAX;
	__atomic_store_n(&dev->limits[limit], value, __ATOMIC_RELAXED);
	return 0;
}

static int sim_limit_get(struct phos_device *pdev, int limit, uint64_t *ret_value)
{
	struct sim_device *dev = sim_dev(pdev);

	if (limit < 0 || limit >= SIM_LIMITS)
		return -PHOS_CUDA_INVALID_VALUE;     /* an id CUDA does not know (H100) */
	*ret_value = __atomic_load_n(&dev->limits[limit], __ATOMIC_RELAXED);
	return 0;
}

static int sim_stream_destroy(struct phos_device *dev, void *stream)
{
	struct sim_stream *s = phos_sim_obj_get(dev, stream, PHOS_SIM_STREAM);

	if (!s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	phos_sim_callbacks_wait(sim_dev(dev), s);   /* they name it */
	phos_sim_obj_free(dev, s);
	return 0;
}

/* Host callbacks, as a GPU's driver runs them: each on a thread of its own
 * once the stream's earlier work is done (at once: sim's work completes at
 * submission), in its stream's order, while the stream's later work waits
 * for it (phos_sim_stream_check, which every operation on a stream calls) and
 * the other streams' goes on. So a callback may wait for the program's work
 * on another stream, as natively; work queued on its own stream meanwhile
 * holds the dispatcher instead (sim runs it at submission). */
struct sim_callback {
	struct sim_device *dev;
	struct sim_stream *s;            /* NULL: the legacy default stream */
	bool legacy;                     /* the NULL stream's or a blocking stream's */
	uint64_t ticket;                 /* its place: in legacy_issued's order, else in its stream's */
	void (*fn)(void *arg, int status);
	void *arg;
};

static void *callback_thread(void *p)
{
	struct sim_callback *cb = p;
	struct sim_device *dev = cb->dev;

	pthread_mutex_lock(&dev->cb_lock);
	while ((cb->legacy ? dev->legacy_done : cb->s->cb_done) != cb->ticket)
		pthread_cond_wait(&dev->cb_cond, &dev->cb_lock);
	pthread_mutex_unlock(&dev->cb_lock);
	cb->fn(cb->arg, atomic_load(&sim_fatal) ? -PHOS_CUDA_LAUNCH_FAILURE : 0);
	pthread_mutex_lock(&dev->cb_lock);
	if (cb->s)
		cb->s->cb_done++;
	else
		dev->null_done++;
	if (cb->legacy)
		dev->legacy_done++;
	__atomic_fetch_sub(&dev->cb_out, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&dev->cb_cond);
	pthread_mutex_unlock(&dev->cb_lock);
	free(cb);
	return NULL;
}

static int sim_stream_host_func(struct phos_device *pdev, void *stream, void (*fn)(void *arg, int status), void *arg)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_stream *s = stream ? phos_sim_obj_get(pdev, stream, PHOS_SIM_STREAM) : NULL;
	struct sim_callback *cb;
	pthread_attr_t attr;
	pthread_t t;
	int r;

	if (stream && !s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!fn)
		return -PHOS_CUDA_INVALID_VALUE;
	cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*cb = (struct sim_callback){ .dev = dev, .s = s, .legacy = !s || s->flags == 0, .fn = fn, .arg = arg };
	pthread_mutex_lock(&dev->cb_lock);
	if (s)
		s->cb_issued++;
	else
		dev->null_issued++;
	cb->ticket = cb->legacy ? dev->legacy_issued++ : s->cb_issued - 1;
	__atomic_fetch_add(&dev->cb_out, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&dev->cb_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, callback_thread, cb);
	pthread_attr_destroy(&attr);
	if (r != 0)
		callback_thread(cb);   /* no thread to be had: here, in its turn */
	return 0;
}

/* Work completes at submission: a valid stream is idle once its host
 * callbacks returned. */
static int sim_stream_sync(struct phos_device *dev, void *stream)
{
	if (atomic_load(&sim_fatal))
		return -PHOS_CUDA_LAUNCH_FAILURE;
	return phos_sim_stream_check(dev, stream);
}

/* As sim_stream_sync, without waiting: -NOT_READY while a host callback
 * the stream waits for is out (the program may poll while it waits). */
static int sim_stream_query(struct phos_device *pdev, void *stream)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_stream *s = stream ? phos_sim_obj_get(pdev, stream, PHOS_SIM_STREAM) : NULL;
	bool ahead;

	if (stream && !s)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (atomic_load(&sim_fatal))
		return -PHOS_CUDA_LAUNCH_FAILURE;
	pthread_mutex_lock(&dev->cb_lock);
	ahead = phos_sim_callbacks_ahead(dev, s);
	pthread_mutex_unlock(&dev->cb_lock);
	return ahead ? -PHOS_CUDA_NOT_READY : 0;
}

static int sim_stream_wait_event(struct phos_device *dev, void *stream, void *event)
{
	if (!phos_sim_obj_get(dev, event, PHOS_SIM_EVENT))
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	return phos_sim_stream_check(dev, stream);
}

/* Flags are host words (sim's device memory is the executor's own); a write
 * wakes the waiters through a futex. */
static int sim_flags_alloc(struct phos_device *dev, uint32_t n, uint64_t *ret_addr)
{
	void *p;

	if (!dev || !n || !ret_addr)
		return -PHOS_CUDA_INVALID_VALUE;
	p = calloc(n, sizeof(uint32_t));
	if (!p)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*ret_addr = (uint64_t)(uintptr_t)p;
	return 0;
}

static void sim_flags_free(struct phos_device *dev, uint64_t addr)
{
	free((void *)(uintptr_t)addr);
}

/* Host memory, listed so that phos_sim_range_ok takes it as device memory. */
static int sim_scratch_alloc(struct phos_device *pdev, uint64_t len, uint64_t *ret_addr)
{
	struct sim_device *dev = sim_dev(pdev);
	void *p;
	int r = -PHOS_CUDA_MEMORY_ALLOCATION;

	if (!dev || !len || !ret_addr || len > dev->total_mem)
		return len > 0 && dev && ret_addr ? r : -PHOS_CUDA_INVALID_VALUE;
	if (posix_memalign(&p, 256, (size_t)len))
		return r;
	pthread_mutex_lock(&dev->lock);
	for (size_t i = 0; i < SIM_MAX_SCRATCH; i++)
		if (!dev->scratch[i].addr) {
			dev->scratch[i].addr = (uint64_t)(uintptr_t)p;
			dev->scratch[i].len = len;
			*ret_addr = dev->scratch[i].addr;
			r = 0;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	if (r)
		free(p);
	return r;
}

static void sim_scratch_free(struct phos_device *pdev, uint64_t addr)
{
	struct sim_device *dev = sim_dev(pdev);

	if (!dev || !addr)
		return;
	pthread_mutex_lock(&dev->lock);
	for (size_t i = 0; i < SIM_MAX_SCRATCH; i++)
		if (dev->scratch[i].addr == addr) {
			dev->scratch[i].addr = 0;
			free((void *)(uintptr_t)addr);
			break;
		}
	pthread_mutex_unlock(&dev->lock);
}

static int sim_flag_write(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value)
{
	_Atomic uint32_t *w = (_Atomic uint32_t *)(uintptr_t)addr;
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0 || !addr || addr % 4)
		return r < 0 ? r : -PHOS_CUDA_INVALID_VALUE;
	atomic_store(w, value);
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
	return 0;
}

static int sim_flag_wait(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value)
{
	_Atomic uint32_t *w = (_Atomic uint32_t *)(uintptr_t)addr;
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0 || !addr || addr % 4)
		return r < 0 ? r : -PHOS_CUDA_INVALID_VALUE;
	for (;;) {
		uint32_t v = atomic_load(w);
		struct timespec ts = { 0, 100000000 };

		if (v >= value)
			return 0;
		syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, &ts, NULL, 0);
	}
}

static int sim_event_create(struct phos_device *dev, uint32_t flags, void **ret_event)
{
	struct sim_event *e;

	if (!dev || !ret_event || flags & ~EVENT_FLAGS_KNOWN)
		return -PHOS_CUDA_INVALID_VALUE;
	e = phos_sim_obj_new(dev, PHOS_SIM_EVENT, sizeof(*e));
	if (!e)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	e->flags = flags;
	*ret_event = e;
	return 0;
}

static int sim_event_destroy(struct phos_device *dev, void *event)
{
	struct sim_event *e = phos_sim_obj_get(dev, event, PHOS_SIM_EVENT);

	if (!e)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	phos_sim_obj_free(dev, e);
	return 0;
}

static int sim_event_record(struct phos_device *dev, void *event, void *stream)
{
	struct sim_event *e = phos_sim_obj_get(dev, event, PHOS_SIM_EVENT);
	struct timespec ts;

	if (!e || phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	e->ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	e->recorded = true;
	return 0;
}

static int sim_event_sync(struct phos_device *dev, void *event)
{
	return phos_sim_obj_get(dev, event, PHOS_SIM_EVENT) ? 0 : -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
}

static int sim_event_elapsed(struct phos_device *dev, void *start, void *end, float *ret_ms)
{
	struct sim_event *a = phos_sim_obj_get(dev, start, PHOS_SIM_EVENT);
	struct sim_event *b = phos_sim_obj_get(dev, end, PHOS_SIM_EVENT);

	if (!ret_ms)
		return -PHOS_CUDA_INVALID_VALUE;
	/* As CUDA: never recorded, or made with cudaEventDisableTiming → invalid handle. */
	if (!a || !b || !a->recorded || !b->recorded || (a->flags | b->flags) & EVENT_DISABLE_TIMING)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	*ret_ms = (float)((double)((int64_t)(b->ns - a->ns)) / 1e6);
	return 0;
}

/* ---- copies ---- */

static int sim_memcpy_h2d(struct phos_device *dev, uint64_t dst, const void *host, size_t len, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (len && (!host || !phos_sim_range_ok(dev, dst, len) || !host_side_ok(sim_dev(dev), host, len)))
		return -PHOS_CUDA_INVALID_VALUE;
	if (sim_dev(dev)->copy_delay_us)
		usleep(sim_dev(dev)->copy_delay_us);
	if (len)
		memcpy((void *)(uintptr_t)dst, host, len);
	return 0;
}

static int sim_memcpy_d2h(struct phos_device *dev, void *host, uint64_t src, size_t len, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (len && (!host || !phos_sim_range_ok(dev, src, len) || !host_side_ok(sim_dev(dev), host, len)))
		return -PHOS_CUDA_INVALID_VALUE;
	if (sim_dev(dev)->copy_delay_us)
		usleep(sim_dev(dev)->copy_delay_us);
	if (len)
		memcpy(host, (const void *)(uintptr_t)src, len);
	return 0;
}

static int sim_memcpy_d2d(struct phos_device *dev, uint64_t dst, uint64_t src, size_t len, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (!phos_sim_range_ok(dev, dst, len) || !phos_sim_range_ok(dev, src, len))
		return -PHOS_CUDA_INVALID_VALUE;
	if (len)
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static int sim_memset(struct phos_device *dev, uint64_t dst, uint8_t value, size_t len, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (!phos_sim_range_ok(dev, dst, len))
		return -PHOS_CUDA_INVALID_VALUE;
	if (len)
		memset((void *)(uintptr_t)dst, value, len);
	return 0;
}

/* Row by row: sim copies complete at once, so rows need no batching. */
static int sim_memcpy_2d(struct phos_device *dev, const struct phos_copy_2d *c, void *stream)
{
	int r = phos_sim_stream_check(dev, stream);

	if (r < 0)
		return r;
	if (!c || (c->height > 1 && ((!c->dst_host && c->dpitch < c->width) ||
				     (!c->src_host && c->spitch < c->width))))
		return -PHOS_CUDA_INVALID_VALUE;
	for (uint64_t i = 0; i < c->height && r == 0; i++) {
		uint64_t d = c->dst + i * c->dpitch, s = c->src + i * c->spitch;

		if (c->src_host && c->dst_host)
			r = -PHOS_CUDA_INVALID_VALUE;
		else if (c->src_host)
			r = sim_memcpy_h2d(dev, d, (const uint8_t *)c->src_host + i * c->spitch, c->width, stream);
		else if (c->dst_host)
			r = sim_memcpy_d2h(dev, (uint8_t *)c->dst_host + i * c->dpitch, s, c->width, stream);
		else
			r = sim_memcpy_d2d(dev, d, s, c->width, stream);
	}
	return r;
}

static int sim_memset_2d(struct phos_device *dev, uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width,
			 uint64_t height, void *stream)
{
	int r = 0;

	if (height > 1 && pitch < width)
		return -PHOS_CUDA_INVALID_VALUE;
	for (uint64_t i = 0; i < height && r == 0; i++)
		r = sim_memset(dev, dst + i * pitch, value, width, stream);
	return r;
}

/* ---- modules and kernels ---- */

static void module_release(struct phos_sim_obj *o)
{
	struct sim_module *m = (struct sim_module *)o;

	while (m->vars) {
		struct sim_var *v = m->vars;

		m->vars = v->next;
		free(v);
	}
	free(m->image);
}

static int sim_module_load(struct phos_device *dev, const void *image, size_t len, void **ret_module)
{
	struct sim_module *m;
	enum phos_modimage_kind kind;
	void *copy;

	if (!dev || !ret_module)
		return -PHOS_CUDA_INVALID_VALUE;
	if (!image || len < 16 || len > SIM_MAX_IMAGE)
		return -PHOS_CUDA_INVALID_KERNEL_IMAGE;
	/* what the driver takes: a fatbin, a cubin, PTX text (kparam.h) */
	kind = phos_modimage_kind(image, len);
	if (kind != PHOS_MODIMAGE_FATBIN && kind != PHOS_MODIMAGE_CUBIN && kind != PHOS_MODIMAGE_PTX)
		return -PHOS_CUDA_INVALID_KERNEL_IMAGE;
	copy = malloc(len);
	if (!copy)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	memcpy(copy, image, len);
	m = phos_sim_obj_new(dev, PHOS_SIM_MODULE, sizeof(*m));
	if (!m) {
		free(copy);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	m->image = copy;
	m->len = len;
	m->obj.release = module_release;
	*ret_module = m;
	return 0;
}

/* Frees the module and every function taken from it (their handles die with it,
 * as CUfunctions do). Variable storage is not reused: it is a bump region. */
static int sim_module_unload(struct phos_device *pdev, void *module)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_module *m = phos_sim_obj_get(pdev, module, PHOS_SIM_MODULE);
	struct phos_sim_obj *o, *next, *dead = NULL;

	if (!m)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	pthread_mutex_lock(&dev->lock);
	for (o = dev->objs.next; o != &dev->objs; o = next) {
		next = o->next;
		if (o->magic == PHOS_SIM_FUNC && ((struct sim_func *)o)->module == m) {
			obj_unlink_locked(o);
			o->next = dead;
			dead = o;
		}
	}
	pthread_mutex_unlock(&dev->lock);
	for (o = dead; o; o = next) {
		next = o->next;
		free(o);
	}
	phos_sim_obj_free(pdev, m);
	return 0;
}

static int sim_module_function(struct phos_device *pdev, void *module, const char *name, void **ret_func)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_module *m = phos_sim_obj_get(pdev, module, PHOS_SIM_MODULE);
	struct phos_sim_obj *o;
	struct sim_func *f = NULL;
	size_t len;

	if (!m)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!name || !ret_func || !(len = strnlen(name, SIM_MAX_NAME)) || len == SIM_MAX_NAME)
		return -PHOS_CUDA_INVALID_VALUE;
	pthread_mutex_lock(&dev->lock);
	for (o = dev->objs.next; o != &dev->objs; o = o->next)
		if (o->magic == PHOS_SIM_FUNC && ((struct sim_func *)o)->module == m &&
		    !strcmp(((struct sim_func *)o)->name, name)) {
			f = (struct sim_func *)o;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	if (!f) {
		/* Registration never fails for want of a twin: only launching does. */
		f = phos_sim_obj_new(pdev, PHOS_SIM_FUNC, sizeof(*f) + len + 1);
		if (!f)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		f->module = m;
		f->twin = twin_find(dev, name);
		f->max_dyn_shared = SIM_DEFAULT_DYN_SHARED;
		f->carveout = -1;
		memcpy(f->name, name, len + 1);
		if (!f->twin)
			phos_debug("sim: no twin for %s", name);
	}
	*ret_func = f;
	return 0;
}

/* sim cannot read variable sizes from the fatbin: *ret_size is a size hint on
 * input (from __cudaRegisterVar); the first call for a name allocates that many
 * zeroed bytes, later calls return the same storage and its size. */
static int sim_module_global(struct phos_device *pdev, void *module, const char *name, uint64_t *ret_addr,
			     uint64_t *ret_size)
{
	struct sim_device *dev = sim_dev(pdev);
	struct sim_module *m = phos_sim_obj_get(pdev, module, PHOS_SIM_MODULE);
	struct sim_var *v;
	uint64_t addr;
	size_t len;
	int r;

	if (!m)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!name || !ret_addr || !ret_size || !(len = strnlen(name, SIM_MAX_NAME)) || len == SIM_MAX_NAME)
		return -PHOS_CUDA_INVALID_VALUE;
	for (v = m->vars; v; v = v->next)
		if (!strcmp(v->name, name)) {
			*ret_addr = v->addr;
			*ret_size = v->size;
			return 0;
		}
	if (*ret_size == 0) {
		/* no size given (cuModuleGetGlobal): the PTX declares it */
		char *ptx = NULL;
		size_t plen = 0;

		r = phos_modimage_ptx(m->image, m->len, &ptx, &plen);
		if (r == 0)
			r = phos_ptx_global_size(ptx, plen, name, ret_size);
		free(ptx);
		if (r < 0 || *ret_size == 0)
			return -PHOS_CUDA_SYMBOL_NOT_FOUND;
	}
	v = malloc(sizeof(*v) + len + 1);
	if (!v)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	r = var_alloc(dev, *ret_size, &addr);
	if (r < 0) {
		free(v);
		return r;
	}
	v->addr = addr;
	v->size = *ret_size;
	memcpy(v->name, name, len + 1);
	v->next = m->vars;
	m->vars = v;
	*ret_addr = addr;
	return 0;
}

static int sim_func_attrs(struct phos_device *dev, void *func, struct phos_reply_func_info *info)
{
	struct sim_func *f = phos_sim_obj_get(dev, func, PHOS_SIM_FUNC);

	if (!f)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!info)
		return -PHOS_CUDA_INVALID_VALUE;
	info->max_threads = 1024;
	info->num_regs = 32;
	info->shared_bytes = 0;
	info->const_bytes = 0;
	info->local_bytes = 0;
	info->ptx_version = 90;
	info->binary_version = 90;
	info->max_dynamic_shared = f->max_dyn_shared;
	info->carveout = f->carveout;
	info->cluster_must_be_set = 0;
	memcpy(info->cluster_dim, f->cluster, sizeof(info->cluster_dim));
	info->cluster_non_portable = f->non_portable;
	info->cluster_policy = f->cluster_policy;
	return 0;
}

static int sim_func_set_attr(struct phos_device *dev, void *func, int attr, int value)
{
	struct sim_func *f = phos_sim_obj_get(dev, func, PHOS_SIM_FUNC);

	if (!f)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (attr == FUNC_ATTR_MAX_DYN_SHARED && value >= 0 && value <= SIM_OPTIN_DYN_SHARED)
		f->max_dyn_shared = value;
	else if (attr == FUNC_ATTR_CARVEOUT && value >= -1 && value <= 100)
		f->carveout = value;
	/* cluster dimensions (cudaFuncAttributeRequiredClusterWidth..Depth) up to
	 * 16, non-portable cluster sizes (0 or 1), cluster scheduling policy (0..2):
	 * accepted as an H100 accepts them; sim runs no clusters */
	else if (attr >= 11 && attr <= 13 && value >= 0 && value <= 16)
		f->cluster[attr - 11] = value;
	else if (attr == 14 && (value == 0 || value == 1))
		f->non_portable = value;
	else if (attr == 15 && value >= 0 && value <= 2)
		f->cluster_policy = value;
	else
		return -PHOS_CUDA_INVALID_VALUE;
	return 0;
}

/* Blocks per SM: limited by 2048 threads (32 regs each, so registers agree),
 * 32 blocks, and 228 KiB of shared memory with 1 KiB reserved per block. */
static int sim_occupancy(struct phos_device *dev, void *func, int block, size_t dyn_shared, int *ret_blocks)
{
	struct sim_func *f = phos_sim_obj_get(dev, func, PHOS_SIM_FUNC);
	int warps, blocks;

	if (!f)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!ret_blocks || block <= 0)
		return -PHOS_CUDA_INVALID_VALUE;
	if (block > 1024 || dyn_shared > (size_t)f->max_dyn_shared) {
		*ret_blocks = 0;
		return 0;
	}
	warps = (block + 31) / 32;
	blocks = 64 / warps;
	if (blocks > 32)
		blocks = 32;
	if ((size_t)blocks > SIM_SMEM_PER_SM / (dyn_shared + SIM_SMEM_RESERVED))
		blocks = (int)(SIM_SMEM_PER_SM / (dyn_shared + SIM_SMEM_RESERVED));
	*ret_blocks = blocks;
	return 0;
}

static bool launch_config_ok(const uint32_t grid[3], const uint32_t block[3])
{
	for (int i = 0; i < 3; i++)
		if (!grid[i] || !block[i])
			return false;
	return grid[0] <= 0x7fffffffu && grid[1] <= 65535 && grid[2] <= 65535 && block[0] <= 1024 &&
	       block[1] <= 1024 && block[2] <= 64 && (uint64_t)block[0] * block[1] * block[2] <= 1024;
}

/* sim's figures: portable clusters of up to 8 blocks; as many clusters as
 * the device's blocks (occupancy per SM x SMs) hold. Not a GPU's answer:
 * clusters live in GPCs there. */
static int sim_occupancy_cluster(struct phos_device *dev, void *func, const uint32_t grid[3], const uint32_t block[3],
				 uint32_t shared, const uint32_t cluster[3], bool potential, int *ret)
{
	uint64_t threads, csize;
	int per_sm = 0, r;

	if (!grid || !block || !cluster || !ret)
		return -PHOS_CUDA_INVALID_VALUE;
	threads = (uint64_t)block[0] * block[1] * block[2];
	if (!threads || threads > 1024)
		return -PHOS_CUDA_INVALID_VALUE;
	if (potential) {
		*ret = 8;
		return 0;
	}
	csize = (uint64_t)cluster[0] * cluster[1] * cluster[2];
	if (!csize || csize > 8)
		return -PHOS_CUDA_INVALID_VALUE; /* sim kernels have no compile-time cluster size */
	r = sim_occupancy(dev, func, (int)threads, shared, &per_sm);
	if (r < 0)
		return r;
	*ret = (int)((uint64_t)per_sm * 132 / csize);
	return 0;
}

static int sim_launch(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
		      const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
		      const void *params, uint32_t param_bytes)
{
	struct sim_func *f = phos_sim_obj_get(dev, func, PHOS_SIM_FUNC);
	struct phos_sim_launch l;
	int r;

	if (!f)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = phos_sim_stream_check(dev, stream);
	if (r < 0)
		return r;
	if (sim_failed())
		return -PHOS_CUDA_LAUNCH_FAILURE;
	if (!grid || !block || !ki || (param_bytes && !params) || param_bytes < ki->param_bytes)
		return -PHOS_CUDA_INVALID_VALUE;
	if (!launch_config_ok(grid, block))
		return -PHOS_CUDA_INVALID_CONFIGURATION;
	if (shared > (uint32_t)f->max_dyn_shared)
		return -PHOS_CUDA_INVALID_VALUE;
	if (!f->twin)
		return -PHOS_CUDA_NOT_SUPPORTED;
	memcpy(l.grid, grid, sizeof(l.grid));
	memcpy(l.block, block, sizeof(l.block));
	l.shared = shared;
	l.params = params;
	l.ki = ki;
	f->twin(&l);
	return 0;
}

/* sim runs a grid one block after the other on the host: a cooperative
 * kernel's twin does its grid-wide steps itself, and clusters change nothing
 * there. The cooperative size limit is checked by the preload (occupancy). */
static int sim_launch_ex(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
			 const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
			 const void *params, uint32_t param_bytes, uint32_t flags, const uint32_t cluster[3])
{
	if ((flags & PHOS_LAUNCH_CLUSTER) && cluster &&
	    (!cluster[0] || !cluster[1] || !cluster[2] || grid[0] % cluster[0] || grid[1] % cluster[1] ||
	     grid[2] % cluster[2]))
		return -PHOS_CUDA_INVALID_CONFIGURATION; /* the grid must be a whole number of clusters */
	return sim_launch(dev, func, ki, grid, block, shared, stream, params, param_bytes);
}

/* graph_launch: the graph runs its nodes through this table. */
static int sim_graph_launch(struct phos_device *dev, void *graph, void *stream)
{
	return phos_sim_graph_launch(&phos_device_sim, dev, graph, stream);
}

const struct phos_device_ops phos_device_sim = {
	.name = "sim",
	.open = sim_open,
	.close = sim_close,
	.enter = sim_enter,
	.peer_add = sim_peer_add,
	.device_count = sim_device_count,
	.info = sim_info,
	.mem_info = sim_mem_info,
	.synchronize = sim_synchronize,
	.map = sim_map,
	.unmap = sim_unmap,
	.share_out = phos_sim_share_out,
	.share_in = phos_sim_share_in,
	.share_own = phos_sim_share_own,
	.host_register = sim_host_register,
	.host_unregister = sim_host_unregister,
	.stream_create = sim_stream_create,
	.stream_destroy = sim_stream_destroy,
	.stream_sync = sim_stream_sync,
	.stream_host_func = sim_stream_host_func,
	.stream_query = sim_stream_query,
	.stream_wait_event = sim_stream_wait_event,
	.stream_set_attr = sim_stream_set_attr,
	.stream_get_attr = sim_stream_get_attr,
	.limit_set = sim_limit_set,
	.limit_get = sim_limit_get,
	.flags_alloc = sim_flags_alloc,
	.flags_free = sim_flags_free,
	.scratch_alloc = sim_scratch_alloc,
	.scratch_free = sim_scratch_free,
	.flag_write = sim_flag_write,
	.flag_wait = sim_flag_wait,
	.event_create = sim_event_create,
	.event_destroy = sim_event_destroy,
	.event_record = sim_event_record,
	.event_sync = sim_event_sync,
	.event_query = sim_event_sync,
	.event_elapsed = sim_event_elapsed,
	.warm = sim_warm,
	.memcpy_h2d = sim_memcpy_h2d,
	.memcpy_d2h = sim_memcpy_d2h,
	.memcpy_h2d_async = sim_memcpy_h2d,
	.memcpy_d2h_async = sim_memcpy_d2h,
	.memcpy_d2d = sim_memcpy_d2d,
	.memset = sim_memset,
	.memcpy_2d = sim_memcpy_2d,
	.memset_2d = sim_memset_2d,
	.array_create = phos_sim_array_create,
	.array_destroy = phos_sim_array_destroy,
	.array_copy = phos_sim_array_copy,
	.tex_create = phos_sim_tex_create,
	.tex_destroy = phos_sim_tex_destroy,
	.module_load = sim_module_load,
	.module_unload = sim_module_unload,
	.module_function = sim_module_function,
	.module_global = sim_module_global,
	.func_attrs = sim_func_attrs,
	.func_set_attr = sim_func_set_attr,
	.occupancy = sim_occupancy,
	.occupancy_cluster = sim_occupancy_cluster,
	.launch = sim_launch,
	.launch_ex = sim_launch_ex,
	.graph_make = phos_sim_graph_make,
	.graph_launch = sim_graph_launch,
	.graph_destroy = phos_sim_graph_destroy,
	.blas_create = phos_sim_blas_create,
	.blas_destroy = phos_sim_blas_destroy,
	.blas_set_stream = phos_sim_blas_set_stream,
	.blas_set_math = phos_sim_blas_set_math,
	.blas_set_workspace = phos_sim_blas_set_workspace,
	.blas_gemm = phos_sim_blas_gemm,
	.blas_l1 = phos_sim_blas_l1,
	.blas_gemv = phos_sim_blas_gemv,
	.blas_call = phos_sim_blas_call,
	.blas_lu = phos_sim_blas_lu,
	.blaslt_matmul = phos_sim_blaslt_matmul,
	.blaslt_heuristic = phos_sim_blaslt_heuristic,
};
