/* SPDX-License-Identifier: MIT */
/*
 * Fatbins, kernels, device variables and launches: the hidden registration API
 * nvcc's generated code calls, and the public launch API.
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

#include <cuda_runtime_api.h>

#include "internal.h"
#include "kparam.h"
#include "log.h"

#define FATBIN_WRAPPER_MAGIC 0x466243b1
#define MAX_FATBIN (1ull << 30)
#define MAX_NAME 4096
#define CONFIG_DEPTH 16

struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned long long *data;
	void *filename_or_fatbins;
};

struct func;
struct var;

struct module {
	uint32_t id;
	bool valid;          /* the fatbin validated */
	bool sent;           /* the executor has it, its kernels and variables (lazy_lock) */
	bool owned;          /* image is our copy (cuModuleLoadData), freed at unload */
	const void *image;
	size_t size;
	struct func *funcs;  /* registered kernels and variables, newest first (lazy_lock) */
	struct var *vars;
};

struct func {
	uint32_t id;
	struct module *mod;
	struct func *next;   /* on mod->funcs */
	bool registered;     /* the executor has it (lazy_lock; read with acquire) */
	const void *host;    /* the host stub nvcc registered; NULL: cuModuleGetFunction */
	char *name;
	bool missing;        /* cuModuleGetFunction of a name the module lacks */
	pthread_mutex_t lock;
	bool have_info;
	struct phos_reply_func_info info;
};

struct var {
	uint32_t id;
	struct module *mod;
	struct var *next;    /* on mod->vars */
	bool registered;     /* the executor has it (lazy_lock) */
	const void *host;    /* the host shadow of the variable; NULL: cuModuleGetGlobal */
	char *name;
	uint64_t size;
	int constant;
	/* where the executor put it, per device (a copy on each) */
	bool have_info[PHOS_MAX_DEVICES];
	uint64_t addr[PHOS_MAX_DEVICES], dev_size[PHOS_MAX_DEVICES];
	bool given[PHOS_MAX_DEVICES];   /* its address went to the program (the executor knows) */
};

/* The hidden API, as crt/host_runtime.h and crt/device_functions.h declare it
 * (for C++ only, hence repeated here). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
		       size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
			      const char *deviceName, int ext, size_t size, int constant, int global);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream);

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
static int func_ensure(struct func *f)
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

/* --- kernels --- */

/* func from a host stub or from a cudaKernel_t we handed out. */
static struct func *func_lookup(const void *p)
{
	uint32_t id = phos_handle_unwrap(p, PHOS_H_FUNC);

	return id ? phos_ids_get(PHOS_H_FUNC, id) : ptrmap_get(&funcs, p);
}

/* The kernel's FUNC_INFO, fetched on first use. A failure is not cached: the
 * status of a synchronous reply may be an earlier asynchronous error. */
static int func_info(struct func *f, struct phos_reply_func_info *ret)
{
	struct phos_handle h = { .id = f->id };
	size_t len = 0;
	int r = func_ensure(f);

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
static int launch_prepare(struct func *f, const uint32_t grid[3], const uint32_t block[3], size_t shmem, void **args,
			  struct phos_launch_ex *ret_l, void **ret_params, struct phos_reply_func_info *ret_fi)
{
	struct phos_reply_func_info fi;
	struct phos_launch_ex l = { 0 };
	uint8_t *params;
	int max_threads = 1024, r;

	if (!f)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidDeviceFunction;
	r = func_info(f, &fi);
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
	return launch_prepare(func_lookup(func), grid, block, shmem, args, ret_l, ret_params, ret_fi);
}

int phos_launch_post(const struct phos_launch_ex *lx, const void *stream, const void *params)
{
	struct phos_launch_ex l = *lx;
	int r = phos_preload_stream_id(stream, &l.l.stream);

	if (r)
		return r;
	if (l.flags)
		return phos_preload_post(PHOS_OP_LAUNCH_EX, &l, sizeof(l), params, l.l.param_bytes);
	return phos_preload_post(PHOS_OP_LAUNCH, &l.l, sizeof(l.l), params, l.l.param_bytes);
}

/* A cooperative grid must be resident at once: CUDA refuses more blocks than
 * the device holds (cudaErrorCooperativeLaunchTooLarge), and so do we, from
 * the same occupancy figure, before anything is sent. */
static int cooperative_check(struct func *f, const struct phos_launch_ex *l)
{
	struct phos_occupancy o = { .func = f->id, .dyn_shared = l->l.shared };
	int32_t per_sm = 0;
	int sms = 0, coop = 0, r;
	size_t len = 0;

	r = phos_device_attr(cudaDevAttrCooperativeLaunch, &coop);
	if (r == cudaSuccess && !coop)
		return cudaErrorNotSupported;
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMultiProcessorCount, &sms);
	o.block = (int32_t)((uint64_t)l->l.block[0] * l->l.block[1] * l->l.block[2]);
	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_OCCUPANCY, &o, sizeof(o), NULL, 0, &per_sm, sizeof(per_sm), &len, NULL);
	if (r == cudaSuccess && len != sizeof(per_sm))
		r = cudaErrorUnknown;
	if (r)
		return r;
	if ((uint64_t)l->l.grid[0] * l->l.grid[1] * l->l.grid[2] > (uint64_t)per_sm * (uint64_t)sms)
		return cudaErrorCooperativeLaunchTooLarge;
	return cudaSuccess;
}

/* A launch into a capturing stream whose kernel has no host stub (the
 * driver API's: Triton's, torch.compile's): its record is the node
 * (graph_capture.c, phos_graph_capture_record), posted again at each launch
 * of the graph, on the launch stream. */
static int capture_record(const struct phos_launch_ex *lx, const void *stream, const void *params)
{
	size_t head = lx->flags ? sizeof(*lx) : sizeof(lx->l);
	uint8_t *buf = malloc(head + lx->l.param_bytes);
	int r;

	if (!buf)
		return cudaErrorMemoryAllocation;
	memcpy(buf, lx->flags ? (const void *)lx : (const void *)&lx->l, head);
	memcpy(buf + head, params, lx->l.param_bytes);
	r = phos_graph_capture_record(stream, lx->flags ? PHOS_OP_LAUNCH_EX : PHOS_OP_LAUNCH, buf,
				      head + lx->l.param_bytes,
				      (uint32_t)((lx->flags ? offsetof(struct phos_launch_ex, l) : 0) +
						 offsetof(struct phos_launch, stream)));
	free(buf);
	return r;
}

/* Checks, packs, then captures (stream capturing) or posts the launch. */
static int launch_flags(struct func *f, dim3 grid, dim3 block, void **args, size_t shmem, const void *stream,
			uint32_t flags, const uint32_t cluster[3])
{
	struct phos_reply_func_info fi;
	struct phos_launch_ex l;
	void *params = NULL;
	int r;

	r = launch_prepare(f, (const uint32_t[3]){ grid.x, grid.y, grid.z },
			   (const uint32_t[3]){ block.x, block.y, block.z }, shmem, args, &l, &params, &fi);
	if (r)
		return r;
	l.flags = flags;
	if (cluster)
		memcpy(l.cluster, cluster, sizeof(l.cluster));
	if ((flags & PHOS_LAUNCH_CLUSTER) &&
	    (!l.cluster[0] || !l.cluster[1] || !l.cluster[2] || grid.x % l.cluster[0] || grid.y % l.cluster[1] ||
	     grid.z % l.cluster[2]))
		r = cudaErrorInvalidValue; /* the grid must be a whole number of clusters */
	if (r == cudaSuccess && (flags & PHOS_LAUNCH_COOPERATIVE))
		r = cooperative_check(f, &l);
	if (r == cudaSuccess) {
		if (phos_graph_capturing(stream))   /* a driver-API kernel has no host stub: a record node */
			r = f->host ? phos_graph_capture_kernel(stream, f->host, &l, params, fi.offset, fi.nparams)
				    : capture_record(&l, stream, params);
		else
			r = phos_launch_post(&l, stream, params);
	}
	free(params);
	return r;
}

static int launch(struct func *f, dim3 grid, dim3 block, void **args, size_t shmem, const void *stream)
{
	return launch_flags(f, grid, block, args, shmem, stream, 0, NULL);
}

/* A launch whose parameters come packed (cuLaunchKernel's forms, libcuda.c):
 * checked as any launch, then posted, or captured as a record node. */
static int launch_post(const struct func *f, const struct phos_reply_func_info *fi, dim3 grid, dim3 block,
		       const void *params, size_t shmem, const void *stream)
{
	struct phos_launch_ex l = { 0 };
	int max_threads = 1024;

	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	    (uint64_t)block.x * block.y * block.z > (uint64_t)(fi->max_threads > 0 ? fi->max_threads : max_threads) ||
	    shmem > UINT32_MAX)
		return cudaErrorInvalidConfiguration;
	l.l.func = f->id;
	l.l.grid[0] = grid.x;
	l.l.grid[1] = grid.y;
	l.l.grid[2] = grid.z;
	l.l.block[0] = block.x;
	l.l.block[1] = block.y;
	l.l.block[2] = block.z;
	l.l.shared = (uint32_t)shmem;
	l.l.param_bytes = fi->param_bytes;
	if (phos_graph_capturing(stream))
		return capture_record(&l, stream, params);
	return phos_launch_post(&l, stream, params);
}

struct call_config {
	dim3 grid, block;
	size_t shmem;
	void *stream;
};

static __thread struct call_config configs[CONFIG_DEPTH];
static __thread unsigned nconfigs;

PHOS_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
						 struct CUstream_st *stream)
{
	if (nconfigs == CONFIG_DEPTH)
		return 1;
	configs[nconfigs].grid = gridDim;
	configs[nconfigs].block = blockDim;
	configs[nconfigs].shmem = sharedMem;
	configs[nconfigs].stream = stream;
	nconfigs++;
	return 0;
}

PHOS_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
						   void *stream)
{
	if (!nconfigs)
		return phos_set_error(cudaErrorMissingConfiguration);
	nconfigs--;
	*gridDim = configs[nconfigs].grid;
	*blockDim = configs[nconfigs].block;
	*sharedMem = configs[nconfigs].shmem;
	*(void **)stream = configs[nconfigs].stream;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	struct func *f = ptrmap_get(&funcs, hostFun);

	if (!kernel)
		return phos_set_error(cudaErrorInvalidValue);
	if (!f)
		return phos_set_error(cudaErrorInvalidDeviceFunction);
	*kernel = phos_handle_wrap(PHOS_H_FUNC, f->id);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

PHOS_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					   size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch(func_lookup(kernel), gridDim, blockDim, args, sharedMem, stream));
}

PHOS_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch(func_lookup(func), gridDim, blockDim, args, sharedMem, stream));
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

static int launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	uint32_t flags = 0, cluster[3] = { 0 };

	if (!config || (config->numAttrs && !config->attrs))
		return cudaErrorInvalidValue;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		int r = phos_launch_attr_apply(config->attrs[i].id, &config->attrs[i].val, &flags, cluster);

		if (r)
			return r;
	}
	return launch_flags(func_lookup(func), config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
			    config->stream, flags, cluster);
}

PHOS_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	return phos_set_error(launch_ex(config, func, args));
}

PHOS_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
						    size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch_flags(func_lookup(func), gridDim, blockDim, args, sharedMem, stream,
					   PHOS_LAUNCH_COOPERATIVE, NULL));
}

/* --- kernel attributes and occupancy --- */

static int func_get(const void *func, struct func **ret_f, struct phos_reply_func_info *ret_info)
{
	struct func *f = func_lookup(func);
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!f)
		return cudaErrorInvalidDeviceFunction;
	*ret_f = f;
	return ret_info ? func_info(f, ret_info) : cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	struct phos_reply_func_info fi;
	struct func *f;
	int r;

	if (!attr)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, &fi);
	if (r)
		return phos_set_error(r);
	memset(attr, 0, sizeof(*attr));
	attr->sharedSizeBytes = (size_t)fi.shared_bytes;
	attr->constSizeBytes = (size_t)fi.const_bytes;
	attr->localSizeBytes = (size_t)fi.local_bytes;
	attr->maxThreadsPerBlock = fi.max_threads;
	attr->numRegs = fi.num_regs;
	attr->ptxVersion = fi.ptx_version;
	attr->binaryVersion = fi.binary_version;
	attr->maxDynamicSharedSizeBytes = fi.max_dynamic_shared;
	attr->preferredShmemCarveout = fi.carveout;
	attr->clusterDimMustBeSet = fi.cluster_must_be_set;
	attr->requiredClusterWidth = fi.cluster_dim[0];
	attr->requiredClusterHeight = fi.cluster_dim[1];
	attr->requiredClusterDepth = fi.cluster_dim[2];
	attr->nonPortableClusterSizeAllowed = fi.cluster_non_portable;
	attr->clusterSchedulingPolicyPreference = fi.cluster_policy;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	struct phos_func_attr a = { .attr = (int32_t)attr, .value = value };
	struct func *f;
	int r = func_get(func, &f, NULL);

	if (r)
		return phos_set_error(r);
	r = func_ensure(f);
	if (r)
		return phos_set_error(r);
	a.func = f->id;
	/* Synchronous, so that a refused value is this call's error. */
	r = phos_preload_call(PHOS_OP_FUNC_SET_ATTR, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
	if (r == cudaSuccess)
		__atomic_store_n(&f->have_info, false, __ATOMIC_RELEASE); /* limits changed */
	return phos_set_error(r);
}

/* Cache preferences are hints: accepted for a known kernel, not forwarded. */
PHOS_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	struct func *f;

	return phos_set_error(func_get(func, &f, NULL));
}

PHOS_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
	struct func *f;
	int r;

	if (!name)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, NULL);
	if (r == cudaSuccess)
		*name = f->name;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
									   int blockSize, size_t dynamicSMemSize,
									   unsigned int flags)
{
	struct phos_occupancy o = { .block = blockSize, .dyn_shared = dynamicSMemSize };
	struct func *f;
	int32_t blocks = 0;
	size_t len = 0;
	int r;

	if (!numBlocks || blockSize <= 0)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, NULL);
	if (r)
		return phos_set_error(r);
	r = func_ensure(f);
	if (r)
		return phos_set_error(r);
	o.func = f->id;
	r = phos_preload_call(PHOS_OP_OCCUPANCY, &o, sizeof(o), NULL, 0, &blocks, sizeof(blocks), &len, NULL);
	if (r == cudaSuccess && len != sizeof(blocks))
		r = cudaErrorUnknown;
	if (r == cudaSuccess)
		*numBlocks = blocks;
	return phos_set_error(r);
}

static int occupancy_cluster(int *ret, const void *func, const cudaLaunchConfig_t *config, bool potential)
{
	struct phos_occupancy_cluster o = { .potential = potential };
	uint32_t flags = 0;
	struct func *f;
	int32_t n = 0;
	size_t len = 0;
	int r;

	if (!ret || !config || (config->numAttrs && !config->attrs))
		return cudaErrorInvalidValue;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		r = phos_launch_attr_apply(config->attrs[i].id, &config->attrs[i].val, &flags, o.cluster);
		if (r)
			return r;
	}
	r = func_get(func, &f, NULL);
	if (r)
		return r;
	r = func_ensure(f);
	if (r)
		return r;
	o.func = f->id;
	o.grid[0] = config->gridDim.x;
	o.grid[1] = config->gridDim.y;
	o.grid[2] = config->gridDim.z;
	o.block[0] = config->blockDim.x;
	o.block[1] = config->blockDim.y;
	o.block[2] = config->blockDim.z;
	if (config->dynamicSmemBytes > UINT32_MAX)
		return cudaErrorInvalidValue;
	o.shared = (uint32_t)config->dynamicSmemBytes;
	r = phos_preload_call(PHOS_OP_OCCUPANCY_CLUSTER, &o, sizeof(o), NULL, 0, &n, sizeof(n), &len, NULL);
	if (r == cudaSuccess && len != sizeof(n))
		r = cudaErrorUnknown;
	if (r == cudaSuccess)
		*ret = n;
	return r;
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func,
						       const cudaLaunchConfig_t *launchConfig)
{
	return phos_set_error(occupancy_cluster(numClusters, func, launchConfig, false));
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
							     const cudaLaunchConfig_t *launchConfig)
{
	return phos_set_error(occupancy_cluster(clusterSize, func, launchConfig, true));
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
								      int blockSize, size_t dynamicSMemSize)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
								      cudaOccupancyDefault);
}

/* Shared memory left per block when numBlocks blocks share an SM, from the
 * device's limits and the kernel's static use (the driver's rule). */
PHOS_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func,
								  int numBlocks, int blockSize)
{
	struct phos_reply_func_info fi;
	struct func *f;
	int per_sm = 0, optin = 0, reserved = 0, r;
	int64_t avail;

	if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, &fi);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor, &per_sm);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, &optin);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrReservedSharedMemoryPerBlock, &reserved);
	if (r)
		return phos_set_error(r);
	avail = (int64_t)per_sm / numBlocks - reserved - fi.shared_bytes;
	if (avail > (int64_t)optin - fi.shared_bytes)
		avail = (int64_t)optin - fi.shared_bytes;
	if (avail > fi.max_dynamic_shared && fi.max_dynamic_shared > 0)
		avail = fi.max_dynamic_shared;
	*dynamicSmemSize = avail > 0 ? (size_t)avail : 0;
	return cudaSuccess;
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
	r = func_info(f, &fi);
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

#define DIM3(v) ((dim3){ (v)[0], (v)[1], (v)[2] })

PHOS_EXPORT int phos_launch_args(const void *func, const uint32_t grid[3], const uint32_t block[3], void **args,
				 size_t shmem, const void *stream)
{
	return launch(func_lookup(func), DIM3(grid), DIM3(block), args, shmem, stream);
}

PHOS_EXPORT int phos_launch_packed(const void *func, const uint32_t grid[3], const uint32_t block[3],
				   const void *params, size_t len, size_t shmem, const void *stream)
{
	struct phos_reply_func_info fi;
	struct func *f = func_lookup(func);
	int r;

	if (!f)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidDeviceFunction;
	r = func_info(f, &fi);
	if (r)
		return r;
	/* The buffer is exactly the kernel's parameters: a longer one (the
	 * struct's size padded to 8 for a 28-byte layout) was refused on an H100
	 * with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. */
	if (len > fi.param_bytes)
		return cudaErrorLaunchOutOfResources;
	if (len < fi.param_bytes || (fi.param_bytes && !params))
		return cudaErrorInvalidValue;
	return launch_post(f, &fi, DIM3(grid), DIM3(block), params, shmem, stream);
}

PHOS_EXPORT const char *phos_func_name(const void *func)
{
	struct func *f = func_lookup(func);

	return f ? f->name : NULL;
}

static int vars_forget_step(void)
{
	phos_var_forget();
	return 0;
}

/* What a restored connection does first (conn.c): variables are placed anew. */
__attribute__((constructor)) static void launch_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_VARS] = vars_forget_step;
}
