/* SPDX-License-Identifier: MIT */
/*
 * Fatbins, kernels and device variables: the hidden registration API nvcc's
 * generated code calls, the driver API's modules, and what a launch needs of
 * a kernel (its checks, its packed parameters). The launches are launch.c.
 *
 *   constructor of each translation unit (before main), nothing sent:
 *     __cudaRegisterFatBinary(&wrapper)  → module id
 *     __cudaRegisterFunction(mod, stub)  → func id, on the module's list
 *     __cudaRegisterVar(mod, &shadow)    → var id, on the module's list
 *   first use of a module (a kernel's FUNC_INFO, a variable's VAR_INFO, an
 *   attribute or occupancy query), as CUDA's lazy loading does:
 *     MODULE_LOAD + fatbin, then FUNC_REGISTER and VAR_REGISTER for every
 *     kernel and variable of the module (a kernel may write a variable the
 *     host never names: the executor must know it, to snapshot it)
 *   kernel<<<g, b, s, st>>>(args):
 *     __cudaPushCallConfiguration(g, b, s, st)
 *     stub: __cudaGetKernel(&h, stub) once; __cudaPopCallConfiguration(...)
 *           __cudaLaunchKernel(h, g, b, args, s, st)
 *   first launch of a kernel: FUNC_INFO (sync) → parameter layout, cached;
 *   every launch: arguments packed at their offsets, LAUNCH posted.
 *
 * A program that registers thousands of fatbins and uses a few (PyTorch:
 * libtorch_cuda's ~1 GB of them) sends, snapshots and restores only those it
 * used. CUDA_MODULE_LOADING=EAGER sends every module at registration, as
 * CUDA then loads them. Modules loaded through the driver API
 * (cuModuleLoadData) are sent at once: the load's verdict is that call's.
 *
 * A fatbin that does not validate is remembered as invalid and never sent: its
 * kernels fail to launch with cudaErrorInvalidKernelImage, nothing crashes.
 * Fatbins larger than one record travel in a shared host region
 * (PHOS_OP_MODULE_LOAD_SHM).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"
#include "kparam.h"
#include "log.h"

/* The module nvcc gets back when we cannot even allocate one. */
static struct module no_module;

/* host pointer → func / var, by linear probing; never shrinks (registrations
 * are few and live as long as the program). */
struct ptrmap {
	pthread_mutex_t lock;
	const void **key;
	void **val;
	size_t cap, n;
};

static struct ptrmap funcs = { .lock = PTHREAD_MUTEX_INITIALIZER };
static struct ptrmap vars = { .lock = PTHREAD_MUTEX_INITIALIZER };

static size_t ptr_hash(const void *p, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 17) & (cap - 1);
}

static int ptrmap_put(struct ptrmap *m, const void *key, void *val)
{
	size_t i;

	pthread_mutex_lock(&m->lock);
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		const void **k = calloc(cap, sizeof(*k));
		void **v = calloc(cap, sizeof(*v));

		if (!k || !v) {
			free(k);
			free(v);
			pthread_mutex_unlock(&m->lock);
			return cudaErrorMemoryAllocation;
		}
		for (size_t j = 0; j < m->cap; j++) {
			if (!m->key[j])
				continue;
			for (i = ptr_hash(m->key[j], cap); k[i]; i = (i + 1) & (cap - 1))
				;
			k[i] = m->key[j];
			v[i] = m->val[j];
		}
		free(m->key);
		free(m->val);
		m->key = k;
		m->val = v;
		m->cap = cap;
	}
	for (i = ptr_hash(key, m->cap); m->key[i] && m->key[i] != key; i = (i + 1) & (m->cap - 1))
		;
	if (!m->key[i])
		m->n++;
	m->key[i] = key; /* a re-registered stub points at its newest kernel */
	m->val[i] = val;
	pthread_mutex_unlock(&m->lock);
	return cudaSuccess;
}

static void *ptrmap_get(struct ptrmap *m, const void *key)
{
	void *val = NULL;

	if (!key)
		return NULL;
	pthread_mutex_lock(&m->lock);
	if (m->cap) {
		for (size_t i = ptr_hash(key, m->cap); m->key[i]; i = (i + 1) & (m->cap - 1)) {
			if (m->key[i] == key) {
				val = m->val[i];
				break;
			}
		}
	}
	pthread_mutex_unlock(&m->lock);
	return val;
}

/* --- sending registrations --- */

/* A fatbin too big for one record: copy it into a memfd the executor maps. */
static int module_load_shm(const struct module *m)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t size = (m->size + (size_t)page - 1) & ~((size_t)page - 1);
	struct phos_hostmem hm = { .size = size };
	struct phos_module_load_shm ml = { .module = m->id, .len = m->size };
	void *p = MAP_FAILED;
	int fd, r;

	fd = memfd_create("phos-fatbin", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
	    (p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		r = cudaErrorMemoryAllocation;
		goto out;
	}
	memcpy(p, m->image, m->size);
	r = phos_ids_add(PHOS_H_REGION, (void *)1, &hm.region);
	if (r)
		goto out;
	ml.region = hm.region;
	r = phos_preload_call_fd(fd, PHOS_OP_HOSTMEM_ADD, &hm, sizeof(hm), NULL, 0);
	if (r == cudaSuccess) {
		r = phos_preload_post(PHOS_OP_MODULE_LOAD_SHM, &ml, sizeof(ml), NULL, 0);
		phos_preload_call(PHOS_OP_HOSTMEM_REMOVE, &hm, sizeof(hm), NULL, 0, NULL, 0, NULL, NULL);
	}
	phos_ids_take(PHOS_H_REGION, hm.region);
out:
	if (p != MAP_FAILED)
		munmap(p, size);
	if (fd >= 0)
		close(fd);
	return r;
}

/* Guards what the executor has been sent: module->sent, ->funcs, ->vars and
 * the registered flags. Held across the posts, so that a record naming a
 * kernel never overtakes its registration. */
static pthread_mutex_t lazy_lock = PTHREAD_MUTEX_INITIALIZER;

static void func_send(struct func *f)
{
	struct phos_func_register fr = { .module = f->mod->id, .func = f->id };

	if (f->mod->sent && !f->registered &&
	    phos_preload_post(PHOS_OP_FUNC_REGISTER, &fr, sizeof(fr), f->name, strlen(f->name) + 1) == cudaSuccess)
		__atomic_store_n(&f->registered, true, __ATOMIC_RELEASE);
}

static void var_send(struct var *v)
{
	struct phos_var_register vr = { .module = v->mod->id, .var = v->id, .size = v->size,
					.constant = (uint32_t)v->constant };

	if (v->mod->sent && !v->registered &&
	    phos_preload_post(PHOS_OP_VAR_REGISTER, &vr, sizeof(vr), v->name, strlen(v->name) + 1) == cudaSuccess)
		v->registered = true;
}

/* MODULE_LOAD, then every kernel and variable of the module (lazy_lock held). */
static void module_send(struct module *m)
{
	struct phos_module_load ml = { .module = m->id };
	int r;

	if (!m->valid || m->sent || phos_preload_connect())
		return;
	if (m->size <= PHOS_REC_MAX_PAYLOAD)
		r = phos_preload_post(PHOS_OP_MODULE_LOAD, &ml, sizeof(ml), m->image, m->size);
	else
		r = module_load_shm(m);
	m->sent = r == cudaSuccess;
	if (r) {
		phos_warn("module %u (%zu bytes) could not be sent: %s", m->id, m->size, cudaGetErrorName(r));
		return;
	}
	for (struct var *v = m->vars; v; v = v->next)
		var_send(v);
	for (struct func *f = m->funcs; f; f = f->next)
		func_send(f);
}

/* The executor has f (and its module, and the module's variables): sends
 * what it lacks. cudaErrorInvalidKernelImage for a refused module. */
int phos_func_ensure(struct func *f)
{
	int r;

	if (__atomic_load_n(&f->registered, __ATOMIC_ACQUIRE))
		return f->mod->valid ? cudaSuccess : cudaErrorInvalidKernelImage;
	r = phos_preload_connect();
	if (r)
		return r;
	pthread_mutex_lock(&lazy_lock);
	module_send(f->mod);
	func_send(f);
	r = f->mod->valid && f->registered ? cudaSuccess : cudaErrorInvalidKernelImage;
	pthread_mutex_unlock(&lazy_lock);
	return r;
}

static int var_ensure(struct var *v)
{
	int r = phos_preload_connect();

	if (r)
		return r;
	pthread_mutex_lock(&lazy_lock);
	module_send(v->mod);
	var_send(v);
	r = v->mod->valid && v->registered ? cudaSuccess : cudaErrorInvalidKernelImage;
	pthread_mutex_unlock(&lazy_lock);
	return r;
}

/* CUDA_MODULE_LOADING=EAGER: every module at registration, as CUDA does then. */
static bool eager_modules(void)
{
	static int eager = -1;
	const char *e;

	if (eager < 0) {
		e = getenv("CUDA_MODULE_LOADING");
		eager = e && !strcmp(e, "EAGER");
	}
	return eager;
}

/* --- the registration API --- */

PHOS_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
	const struct fatbin_wrapper *w = fatCubin;
	struct module *m = calloc(1, sizeof(*m));

	if (!m)
		return (void **)&no_module;
	if (w && w->magic == FATBIN_WRAPPER_MAGIC && w->data) {
		/* The blob lies in the binary's mapped .nv_fatbin section: once its
		 * header validates, reading header + body is safe. */
		m->size = phos_fatbin_size(w->data, MAX_FATBIN);
		m->image = w->data;
		m->valid = m->size > 0;
	}
	if (!m->valid)
		phos_warn("fatbin %p is malformed: its kernels will not launch", fatCubin);
	if (phos_ids_add(PHOS_H_MODULE, m, &m->id)) {
		free(m);
		return (void **)&no_module;
	}
	return (void **)m;
}

/* After the module's kernels and variables are registered. */
PHOS_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	struct module *m = (struct module *)fatCubinHandle;

	if (m && m != &no_module && eager_modules()) {
		pthread_mutex_lock(&lazy_lock);
		module_send(m);
		pthread_mutex_unlock(&lazy_lock);
	}
}

PHOS_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct module *m = (struct module *)fatCubinHandle;
	struct phos_handle h;

	if (!m || m == &no_module)
		return;
	/* Kernels keep their ids but can no longer launch; structures stay, as
	 * stubs may still point at them from other atexit handlers. */
	h.id = m->id;
	h._pad = 0;
	pthread_mutex_lock(&lazy_lock);
	m->valid = false;
	if (m->sent)
		phos_preload_post(PHOS_OP_MODULE_UNLOAD, &h, sizeof(h), NULL, 0);
	m->sent = false;
	pthread_mutex_unlock(&lazy_lock);
}

PHOS_EXPORT char __cudaInitModule(void **fatCubinHandle)
{
	return 1;
}

PHOS_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
					const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
					dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct module *m = (struct module *)fatCubinHandle;
	struct func *f;

	if (!m || !hostFun || !deviceName || strnlen(deviceName, MAX_NAME) == MAX_NAME)
		return;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->name = strdup(deviceName)))
		goto err;
	f->mod = m;
	f->host = hostFun;
	pthread_mutex_init(&f->lock, NULL);
	if (phos_ids_add(PHOS_H_FUNC, f, &f->id))
		goto err;
	if (ptrmap_put(&funcs, hostFun, f)) {
		phos_ids_take(PHOS_H_FUNC, f->id);
		goto err;
	}
	pthread_mutex_lock(&lazy_lock);
	f->next = m->funcs;
	m->funcs = f;
	func_send(f);   /* a module already sent (a late registration) */
	pthread_mutex_unlock(&lazy_lock);
	return;
err:
	if (f)
		free(f->name);
	free(f);
}

/* A __managed__ variable: the runtime would give it managed memory that its
 * module's symbol points at; phos-fn cannot redirect a module's symbol, so
 * the program is refused, loudly, rather than left to read a variable that
 * host and device do not share. */
PHOS_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
					  const char *deviceName, int ext, size_t size, int constant, int global)
{
	(void)fatCubinHandle;
	(void)ext;
	(void)constant;
	(void)global;
	phos_err("__managed__ variable %s is not supported by phos-fn: every CUDA call of this process fails "
		 "(cudaErrorNotSupported); cudaMallocManaged is", deviceName ? deviceName : "?");
	phos_preload_refuse(cudaErrorNotSupported);
	/* host code reaches the variable through *hostVarPtrAddress: host memory
	 * with its initial value, so that the program gets to its first CUDA
	 * call and its error instead of crashing */
	if (hostVarPtrAddress && size) {
		void *p = calloc(1, size);

		if (p && deviceAddress)
			memcpy(p, deviceAddress, size);
		*hostVarPtrAddress = p;
	}
}

PHOS_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
				   const char *deviceName, int ext, size_t size, int constant, int global)
{
	struct module *m = (struct module *)fatCubinHandle;
	struct var *v;

	if (!m || !hostVar || !deviceName || strnlen(deviceName, MAX_NAME) == MAX_NAME)
		return;
	v = calloc(1, sizeof(*v));
	if (!v || !(v->name = strdup(deviceName)))
		goto err;
	v->mod = m;
	v->host = hostVar;
	v->size = size;
	v->constant = constant;
	if (phos_ids_add(PHOS_H_VAR, v, &v->id))
		goto err;
	if (ptrmap_put(&vars, hostVar, v)) {
		phos_ids_take(PHOS_H_VAR, v->id);
		goto err;
	}
	pthread_mutex_lock(&lazy_lock);
	v->next = m->vars;
	m->vars = v;
	var_send(v);
	pthread_mutex_unlock(&lazy_lock);
	return;
err:
	if (v)
		free(v->name);
	free(v);
}

/* The executor dropped every module (a device reset): each is sent again at
 * its next use, with fresh variables, as CUDA reloads modules after a reset.
 * The ids stay ours; registrations are never freed, so ids are dense. */
void phos_launch_reset(void)
{
	pthread_mutex_lock(&lazy_lock);
	for (uint32_t id = 1; id < PHOS_MAX_IDS; id++) {
		struct module *m = phos_ids_get(PHOS_H_MODULE, id);

		if (!m)
			break;
		m->sent = false;
		for (struct func *f = m->funcs; f; f = f->next)
			__atomic_store_n(&f->registered, false, __ATOMIC_RELEASE);
		for (struct var *v = m->vars; v; v = v->next) {
			v->registered = false;
			memset(v->have_info, 0, sizeof(v->have_info));
		}
	}
	pthread_mutex_unlock(&lazy_lock);
}

/* --- variables --- */

/* A restore of a checkpoint (channel.h, phos_channel_adoptions) may have
 * put the module variables elsewhere: what was learned of them is asked
 * again. */
static void vars_refresh(void)
{
	static uint32_t seen;
	struct phos_channel *ch = phos_preload_channel();
	uint32_t now = ch ? phos_channel_adoptions(ch) : 0;

	if (now != __atomic_load_n(&seen, __ATOMIC_ACQUIRE)) {
		phos_var_forget();
		__atomic_store_n(&seen, now, __ATOMIC_RELEASE);
	}
}

/* Where v is on the current device; give: the address goes to the program,
 * which the executor is told once (PHOS_VAR_INFO_GIVEN). */
static int var_info(struct var *v, uint64_t *ret_addr, uint64_t *ret_size, bool give)
{
	struct phos_handle h;
	struct phos_reply_var_info vi;
	int d = phos_current_device();
	size_t len = 0;
	int r;

	if (!v->mod->valid)
		return cudaErrorInvalidKernelImage;
	if (d < 0 || d >= PHOS_MAX_DEVICES)
		return cudaErrorInvalidDevice;
	vars_refresh();
	if (!__atomic_load_n(&v->have_info[d], __ATOMIC_ACQUIRE) || (give && !v->given[d])) {
		r = var_ensure(v);
		if (r)
			return r;
		h.id = v->id;
		h._pad = give ? PHOS_VAR_INFO_GIVEN : 0;
		r = phos_preload_call(PHOS_OP_VAR_INFO, &h, sizeof(h), NULL, 0, &vi, sizeof(vi), &len, NULL);
		if (r)
			return r;
		if (len != sizeof(vi))
			return cudaErrorUnknown;
		v->addr[d] = vi.addr;
		v->dev_size[d] = vi.size;
		if (give)
			v->given[d] = true;
		__atomic_store_n(&v->have_info[d], true, __ATOMIC_RELEASE);
	}
	*ret_addr = v->addr[d];
	*ret_size = v->dev_size[d];
	return cudaSuccess;
}

int phos_var_lookup(const void *symbol, uint64_t *ret_addr, uint64_t *ret_size)
{
	struct var *v = ptrmap_get(&vars, symbol);

	if (!v)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidSymbol;
	return var_info(v, ret_addr, ret_size, false);
}

int phos_var_address(const void *symbol, uint64_t *ret_addr)
{
	struct var *v = ptrmap_get(&vars, symbol);
	uint64_t size;

	if (!v)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidSymbol;
	return var_info(v, ret_addr, &size, true);
}

void phos_var_forget(void)
{
	for (uint32_t id = 1; id < PHOS_MAX_IDS; id++) {
		struct var *v = phos_ids_get(PHOS_H_VAR, id);

		if (!v)
			break;
		for (int d = 0; d < PHOS_MAX_DEVICES; d++)
			__atomic_store_n(&v->have_info[d], false, __ATOMIC_RELEASE);
	}
}

bool phos_var_contains(uint64_t addr, uint64_t len)
{
	if (!phos_ids_get(PHOS_H_VAR, 1))
		return false;   /* no variable: nothing to refresh (a host copy asks this) */
	vars_refresh();
	for (uint32_t id = 1; id < PHOS_MAX_IDS; id++) {
		struct var *v = phos_ids_get(PHOS_H_VAR, id);

		if (!v)
			break;
		for (int d = 0; d < PHOS_MAX_DEVICES; d++) {
			if (__atomic_load_n(&v->have_info[d], __ATOMIC_ACQUIRE) && addr >= v->addr[d] &&
			    addr - v->addr[d] <= v->dev_size[d] && len <= v->dev_size[d] - (addr - v->addr[d]))
				return true;
		}
	}
	return false;
}

bool phos_mem_is_device(const void *addr, size_t len)
{
	const struct phos_reply_hello *h = phos_preload_hello();
	uint64_t a = (uint64_t)(uintptr_t)addr;

	if (h->arena_size && a >= h->arena_base && a - h->arena_base <= h->arena_size &&
	    len <= h->arena_size - (a - h->arena_base))
		return true;
	return phos_var_contains(a, len);
}

/* --- kernels --- */

/* func from a host stub or from a cudaKernel_t we handed out. */
struct func *phos_func_of_stub(const void *host)
{
	return ptrmap_get(&funcs, host);
}

struct func *phos_func_lookup(const void *p)
{
	uint32_t id = phos_handle_unwrap(p, PHOS_H_FUNC);

	return id ? phos_ids_get(PHOS_H_FUNC, id) : ptrmap_get(&funcs, p);
}

/* The kernel's FUNC_INFO, fetched on first use. A failure is not cached: the
 * status of a synchronous reply may be an earlier asynchronous error. */
int phos_func_info(struct func *f, struct phos_reply_func_info *ret)
{
	struct phos_handle h = { .id = f->id };
	size_t len = 0;
	int r = phos_func_ensure(f);

	if (r)
		return r;
	if (__atomic_load_n(&f->have_info, __ATOMIC_ACQUIRE)) {
		*ret = f->info;
		return cudaSuccess;
	}
	pthread_mutex_lock(&f->lock);
	if (!f->have_info) {
		r = phos_preload_call(PHOS_OP_FUNC_INFO, &h, sizeof(h), NULL, 0, &f->info, sizeof(f->info), &len,
				      NULL);
		if (r == cudaSuccess && (len != sizeof(f->info) || f->info.nparams > PHOS_MAX_PARAMS))
			r = cudaErrorUnknown;
		for (uint32_t i = 0; r == cudaSuccess && i < f->info.nparams; i++)
			if ((uint32_t)f->info.offset[i] + f->info.size[i] > f->info.param_bytes)
				r = cudaErrorUnknown;
		if (r == cudaSuccess)
			__atomic_store_n(&f->have_info, true, __ATOMIC_RELEASE);
	}
	if (r == cudaSuccess)
		*ret = f->info;
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* Checks a launch of func and packs its parameters: *ret_l (stream unset,
 * flags 0), *ret_params (malloc'd, param_bytes; the caller frees it) and the
 * kernel's layout in *ret_fi. */
int phos_func_prepare(struct func *f, const uint32_t grid[3], const uint32_t block[3], size_t shmem, void **args,
			  struct phos_launch_ex *ret_l, void **ret_params, struct phos_reply_func_info *ret_fi)
{
	struct phos_reply_func_info fi;
	struct phos_launch_ex l = { 0 };
	uint8_t *params;
	int max_threads = 1024, r;

	if (!f)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidDeviceFunction;
	r = phos_func_info(f, &fi);
	if (r)
		return r;
	if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
	    (uint64_t)block[0] * block[1] * block[2] > (uint64_t)(fi.max_threads > 0 ? fi.max_threads : max_threads) ||
	    shmem > UINT32_MAX)
		return cudaErrorInvalidConfiguration;
	if (fi.nparams && !args)
		return cudaErrorInvalidValue;
	params = calloc(1, fi.param_bytes ? fi.param_bytes : 1);
	if (!params)
		return cudaErrorMemoryAllocation;
	for (uint32_t i = 0; i < fi.nparams; i++) {
		if (!args[i]) {
			free(params);
			return cudaErrorInvalidValue;
		}
		memcpy(params + fi.offset[i], args[i], fi.size[i]);
	}
	l.l.func = f->id;
	memcpy(l.l.grid, grid, sizeof(l.l.grid));
	memcpy(l.l.block, block, sizeof(l.l.block));
	l.l.shared = (uint32_t)shmem;
	l.l.param_bytes = fi.param_bytes;
	*ret_l = l;
	*ret_params = params;
	*ret_fi = fi;
	return cudaSuccess;
}

int phos_launch_prepare(const void *func, const uint32_t grid[3], const uint32_t block[3], size_t shmem, void **args,
			struct phos_launch_ex *ret_l, void **ret_params, struct phos_reply_func_info *ret_fi)
{
	return phos_func_prepare(phos_func_lookup(func), grid, block, shmem, args, ret_l, ret_params, ret_fi);
}

/* cudaLaunchKernelEx (a template of cuda_runtime.h) comes here. Attributes
 * that change how the grid runs are sent (cooperative, cluster dimensions);
 * hints that leave the results alone are accepted and dropped: a priority,
 * programmatic stream serialization (permission to overlap with the previous
 * kernel: not overlapping is one of the allowed behaviours), memory sync
 * domains, an access policy window, a preferred carveout or cluster shape.
 * Anything else is cudaErrorInvalidValue (unknown) or cudaErrorNotSupported
 * (events triggered from inside a kernel). */
int phos_launch_attr_apply(int id, const void *value, uint32_t *flags, uint32_t cluster[3])
{
	const cudaLaunchAttributeValue *v = value;

	switch ((cudaLaunchAttributeID)id) {
	case cudaLaunchAttributeIgnore:
	case cudaLaunchAttributeAccessPolicyWindow:
	case cudaLaunchAttributePriority:
	case cudaLaunchAttributeProgrammaticStreamSerialization:
	case cudaLaunchAttributeMemSyncDomainMap:
	case cudaLaunchAttributeMemSyncDomain:
	case cudaLaunchAttributeClusterSchedulingPolicyPreference:
	case cudaLaunchAttributePreferredClusterDimension:
	case cudaLaunchAttributePreferredSharedMemoryCarveout:
		return cudaSuccess;
	case cudaLaunchAttributeCooperative:
		if (v->cooperative)
			*flags |= PHOS_LAUNCH_COOPERATIVE;
		else
			*flags &= ~(uint32_t)PHOS_LAUNCH_COOPERATIVE;
		return cudaSuccess;
	case cudaLaunchAttributeClusterDimension:
		cluster[0] = v->clusterDim.x;
		cluster[1] = v->clusterDim.y;
		cluster[2] = v->clusterDim.z;
		if ((uint64_t)cluster[0] * cluster[1] * cluster[2] == 1)
			*flags &= ~(uint32_t)PHOS_LAUNCH_CLUSTER; /* 1x1x1: no clusters */
		else
			*flags |= PHOS_LAUNCH_CLUSTER;
		return cudaSuccess;
	case cudaLaunchAttributeProgrammaticEvent:
	case cudaLaunchAttributeLaunchCompletionEvent:
	case cudaLaunchAttributeDeviceUpdatableKernelNode:
		return cudaErrorNotSupported;
	default:
		return cudaErrorInvalidValue;
	}
}

/* --- modules of the driver API (libcuda.c) ---
 *
 * cuModuleLoadData's image is copied (the caller may free it), checked the way
 * the executor will parse it, and sent like a registered fatbin: from there on
 * a driver module is a module (snapshots, restores, device resets, the access
 * analysis of its kernels). Its kernels and variables are registered by name
 * on first use. Structures are never freed (ids stay dense for
 * phos_launch_reset); an unloaded module keeps its id and its kernels fail. */

PHOS_EXPORT int phos_module_load(const void *image, uint32_t *ret_id)
{
	struct phos_fatbin *fb = NULL;
	struct phos_handle h = { 0 };
	struct module *m;
	size_t size;
	void *copy;
	int r;

	r = phos_preload_connect();
	if (r)
		return r;
	if (!image || !ret_id)
		return cudaErrorInvalidValue;
	if (phos_modimage_kind(image, MAX_FATBIN) == PHOS_MODIMAGE_WRAPPER) {
		const struct fatbin_wrapper *w = image;

		image = w->data;
		if (!image || phos_modimage_kind(image, MAX_FATBIN) != PHOS_MODIMAGE_FATBIN)
			return cudaErrorInvalidKernelImage;
	}
	size = phos_modimage_size(image, MAX_FATBIN);
	if (!size || phos_modimage_parse(image, size, &fb) < 0)
		return cudaErrorInvalidKernelImage;
	phos_fatbin_free(fb);
	m = calloc(1, sizeof(*m));
	copy = malloc(size);
	if (!m || !copy) {
		free(m);
		free(copy);
		return cudaErrorMemoryAllocation;
	}
	memcpy(copy, image, size);
	m->image = copy;
	m->size = size;
	m->owned = true;
	m->valid = true;
	r = phos_ids_add(PHOS_H_MODULE, m, &m->id);
	if (r) {
		free(copy);
		free(m);
		return r;
	}
	pthread_mutex_lock(&lazy_lock);
	module_send(m);
	pthread_mutex_unlock(&lazy_lock);
	/* The device's verdict (a PTX the JIT refuses, a cubin for another GPU). */
	h.id = m->id;
	r = m->sent ? phos_preload_call(PHOS_OP_MODULE_STATUS, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL)
		    : cudaErrorInvalidKernelImage;
	if (r) {
		phos_module_unload(m->id);
		return r;
	}
	*ret_id = m->id;
	return cudaSuccess;
}

PHOS_EXPORT int phos_module_unload(uint32_t id)
{
	struct module *m = phos_ids_get(PHOS_H_MODULE, id);
	struct phos_handle h = { .id = id };

	if (!m || !m->owned || !m->image)
		return cudaErrorInvalidResourceHandle;   /* a registered fatbin is not the user's */
	pthread_mutex_lock(&lazy_lock);
	if (m->sent)
		phos_preload_post(PHOS_OP_MODULE_UNLOAD, &h, sizeof(h), NULL, 0);
	m->sent = false;
	m->valid = false;
	pthread_mutex_unlock(&lazy_lock);
	free((void *)m->image);
	m->image = NULL;
	return cudaSuccess;
}

PHOS_EXPORT int phos_module_function(uint32_t module, const char *name, void **ret_func)
{
	struct module *m = phos_ids_get(PHOS_H_MODULE, module);
	struct phos_reply_func_info fi;
	struct func *f = NULL;
	int r;

	if (!name || !ret_func || strnlen(name, MAX_NAME) == MAX_NAME)
		return cudaErrorInvalidValue;
	if (!m || !m->owned || !m->valid)
		return cudaErrorInvalidResourceHandle;
	for (uint32_t id = 1; id < PHOS_MAX_IDS && !f; id++) {
		struct func *g = phos_ids_get(PHOS_H_FUNC, id);

		if (!g)
			break;
		if (g->mod == m && !g->missing && !g->host && !strcmp(g->name, name))
			f = g;
	}
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f || !(f->name = strdup(name))) {
			free(f);
			return cudaErrorMemoryAllocation;
		}
		f->mod = m;
		pthread_mutex_init(&f->lock, NULL);
		r = phos_ids_add(PHOS_H_FUNC, f, &f->id);
		if (r) {
			free(f->name);
			free(f);
			return r;
		}
		pthread_mutex_lock(&lazy_lock);
		f->next = m->funcs;
		m->funcs = f;
		pthread_mutex_unlock(&lazy_lock);
	}
	/* A name the module lacks is this call's error, not the first launch's. */
	r = phos_func_info(f, &fi);
	if (r == cudaErrorInvalidDeviceFunction)
		f->missing = true;
	if (r)
		return r;
	*ret_func = phos_handle_wrap(PHOS_H_FUNC, f->id);
	return cudaSuccess;
}

PHOS_EXPORT int phos_module_global(uint32_t module, const char *name, uint64_t *ret_addr, uint64_t *ret_size)
{
	struct module *m = phos_ids_get(PHOS_H_MODULE, module);
	struct var *v = NULL;
	int r;

	if (!name || strnlen(name, MAX_NAME) == MAX_NAME)
		return cudaErrorInvalidValue;
	if (!m || !m->owned || !m->valid)
		return cudaErrorInvalidResourceHandle;
	for (uint32_t id = 1; id < PHOS_MAX_IDS && !v; id++) {
		struct var *w = phos_ids_get(PHOS_H_VAR, id);

		if (!w)
			break;
		if (w->mod == m && !w->host && !strcmp(w->name, name))
			v = w;
	}
	if (!v) {
		v = calloc(1, sizeof(*v));
		if (!v || !(v->name = strdup(name))) {
			free(v);
			return cudaErrorMemoryAllocation;
		}
		v->mod = m;
		r = phos_ids_add(PHOS_H_VAR, v, &v->id);
		if (r) {
			free(v->name);
			free(v);
			return r;
		}
		pthread_mutex_lock(&lazy_lock);
		v->next = m->vars;
		m->vars = v;
		pthread_mutex_unlock(&lazy_lock);
	}
	return var_info(v, ret_addr, ret_size, true);   /* cuModuleGetGlobal gives it to the program */
}

PHOS_EXPORT const char *phos_func_name(const void *func)
{
	struct func *f = phos_func_lookup(func);

	return f ? f->name : NULL;
}

static int vars_forget_step(void)
{
	phos_var_forget();
	return 0;
}

/* What a restored connection does first (conn.c): variables are placed anew. */
__attribute__((constructor)) static void kernels_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_VARS] = vars_forget_step;
}
