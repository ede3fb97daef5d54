/* SPDX-License-Identifier: MIT */
/*
 * ckpt_baseline: the baseline that bench/snapshot.py measures phos-fn against,
 * the NVIDIA driver's checkpoint API applied to another (native CUDA) process:
 *
 *   ckpt_baseline [--init] [--lock-timeout-ms N] OP[,OP...] PID
 *       OP: lock | checkpoint | restore | unlock | state
 *
 *   dump:    lock,checkpoint  then `criu dump`     (the process then holds no
 *                                                   GPU state; its GPU memory
 *                                                   sits in its host memory)
 *   restore: `criu restore`   then restore,unlock  (the driver copies it back)
 *
 * Each OP is one driver call on PID. One line of JSON per call on stdout:
 *   {"op":"lock","pid":123,"result":"CUDA_SUCCESS","s":0.001234}
 * where s times the driver call alone; "state" adds "state":"checkpointed".
 * A line {"op":"load","s":...} times dlopen and symbol lookup, and
 * {"op":"init",...} cuInit(0), which runs first with --init, or once when a
 * call answers CUDA_ERROR_NOT_INITIALIZED (that call is then retried).
 * Exit status: 0 when every call returned CUDA_SUCCESS; 1 after the line of
 * the first call that did not (its CUresult's name also goes to stderr);
 * 2 for usage errors or a driver that cannot be loaded.
 *
 * The driver is reached only through dlopen("libcuda.so.1") (docs/design.md, "Two
 * device backends"): the tool builds, and starts, on machines without one.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*init_fn)(unsigned int flags);
typedef CUresult (*get_error_name_fn)(CUresult res, const char **name);
typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
					CUdriverProcAddressQueryResult *status);
typedef CUresult (*lock_fn)(int pid, CUcheckpointLockArgs *args);
typedef CUresult (*checkpoint_fn)(int pid, CUcheckpointCheckpointArgs *args);
typedef CUresult (*restore_fn)(int pid, CUcheckpointRestoreArgs *args);
typedef CUresult (*unlock_fn)(int pid, CUcheckpointUnlockArgs *args);
typedef CUresult (*get_state_fn)(int pid, CUprocessState *state);

struct driver {
	void *lib;
	init_fn init;
	get_error_name_fn get_error_name;
	lock_fn lock;
	checkpoint_fn checkpoint;
	restore_fn restore;
	unlock_fn unlock;
	get_state_fn get_state;
};

enum op { OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK, OP_STATE };

static const char *const op_names[] = {
	[OP_LOCK] = "lock", [OP_CHECKPOINT] = "checkpoint", [OP_RESTORE] = "restore",
	[OP_UNLOCK] = "unlock", [OP_STATE] = "state",
};

#define MAX_OPS 16

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A driver entry point: the exported symbol, else cuGetProcAddress. */
static void *driver_sym(void *lib, get_proc_address_fn gpa, const char *name)
{
	void *p = dlsym(lib, name);
	CUdriverProcAddressQueryResult status;

	if (!p && gpa && (gpa(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
			  status != CU_GET_PROC_ADDRESS_SUCCESS))
		p = NULL;
	return p;
}

/* Loads libcuda.so.1 and resolves every entry point once; 0 or -ENOENT with the reason on stderr. */
static int driver_load(struct driver *d)
{
	get_proc_address_fn gpa;

	d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		fprintf(stderr, "ckpt_baseline: cannot load the driver: %s\n", dlerror());
		return -ENOENT;
	}
	gpa = (get_proc_address_fn)dlsym(d->lib, "cuGetProcAddress_v2");
	d->init = (init_fn)driver_sym(d->lib, gpa, "cuInit");
	d->get_error_name = (get_error_name_fn)driver_sym(d->lib, gpa, "cuGetErrorName");
	d->lock = (lock_fn)driver_sym(d->lib, gpa, "cuCheckpointProcessLock");
	d->checkpoint = (checkpoint_fn)driver_sym(d->lib, gpa, "cuCheckpointProcessCheckpoint");
	d->restore = (restore_fn)driver_sym(d->lib, gpa, "cuCheckpointProcessRestore");
	d->unlock = (unlock_fn)driver_sym(d->lib, gpa, "cuCheckpointProcessUnlock");
	d->get_state = (get_state_fn)driver_sym(d->lib, gpa, "cuCheckpointProcessGetState");
	if (!d->init || !d->lock || !d->checkpoint || !d->restore || !d->unlock || !d->get_state) {
		fprintf(stderr, "ckpt_baseline: this driver has no checkpoint API (cuCheckpointProcess*; "
				"driver 570 or newer needed)\n");
		return -ENOENT;
	}
	return 0;
}

static const char *result_name(const struct driver *d, CUresult r)
{
	static char buf[32];
	const char *name = NULL;

	if (d->get_error_name && d->get_error_name(r, &name) == CUDA_SUCCESS && name)
		return name;
	snprintf(buf, sizeof buf, "CUresult %d", (int)r);
	return buf;
}

static const char *state_name(CUprocessState s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
	case CU_PROCESS_STATE_FAILED: return "failed";
	}
	return "unknown";
}

static CUresult op_call(const struct driver *d, enum op op, int pid, unsigned lock_timeout_ms,
			CUprocessState *ret_state)
{
	switch (op) {
	case OP_LOCK: {
		CUcheckpointLockArgs args;

		memset(&args, 0, sizeof args);
		args.timeoutMs = lock_timeout_ms;
		return d->lock(pid, &args);
	}
	case OP_CHECKPOINT: {
		CUcheckpointCheckpointArgs args;

		memset(&args, 0, sizeof args);
		return d->checkpoint(pid, &args);
	}
	case OP_RESTORE: {
		CUcheckpointRestoreArgs args;

		memset(&args, 0, sizeof args);
		return d->restore(pid, &args);
	}
	case OP_UNLOCK: {
		CUcheckpointUnlockArgs args;

		memset(&args, 0, sizeof args);
		return d->unlock(pid, &args);
	}
	case OP_STATE:
		return d->get_state(pid, ret_state);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult init_timed(const struct driver *d)
{
	double t0 = now_s();
	CUresult r = d->init(0);

	printf("{\"op\":\"init\",\"result\":\"%s\",\"s\":%.6f}\n", result_name(d, r), now_s() - t0);
	fflush(stdout);
	return r;
}

static int parse_ops(char *list, enum op *ops, unsigned *ret_n)
{
	unsigned n = 0;

	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned k;

		for (k = 0; k < sizeof op_names / sizeof op_names[0]; k++)
			if (strcmp(tok, op_names[k]) == 0)
				break;
		if (k == sizeof op_names / sizeof op_names[0] || n == MAX_OPS)
			return -EINVAL;
		ops[n++] = (enum op)k;
	}
	if (n == 0)
		return -EINVAL;
	*ret_n = n;
	return 0;
}

static int usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [--init] [--lock-timeout-ms N] OP[,OP...] PID\n"
			"  OP: lock | checkpoint | restore | unlock | state\n", argv0);
	return 2;
}

int main(int argc, char **argv)
{
	struct driver d = { 0 };
	enum op ops[MAX_OPS];
	unsigned nops, lock_timeout_ms = 30000;
	int i, pid, force_init = 0, initialised = 0;
	char *end;
	long v;
	double t0;

	for (i = 1; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--init") == 0) {
			force_init = 1;
		} else if (strcmp(argv[i], "--lock-timeout-ms") == 0 && i + 1 < argc) {
			v = strtol(argv[++i], &end, 10);
			if (*end || v < 0 || v > INT_MAX)
				return usage(argv[0]);
			lock_timeout_ms = (unsigned)v;
		} else {
			return usage(argv[0]);
		}
	}
	if (argc - i != 2 || parse_ops(argv[i], ops, &nops) < 0)
		return usage(argv[0]);
	v = strtol(argv[i + 1], &end, 10);
	if (*end || v <= 0 || v > INT_MAX)
		return usage(argv[0]);
	pid = (int)v;

	t0 = now_s();
	if (driver_load(&d) < 0)
		return 2;
	printf("{\"op\":\"load\",\"s\":%.6f}\n", now_s() - t0);
	if (force_init) {
		if (init_timed(&d) != CUDA_SUCCESS)
			return 1;
		initialised = 1;
	}

	for (unsigned k = 0; k < nops; k++) {
		CUprocessState state = CU_PROCESS_STATE_RUNNING;
		CUresult r;

		t0 = now_s();
		r = op_call(&d, ops[k], pid, lock_timeout_ms, &state);
		if (r == CUDA_ERROR_NOT_INITIALIZED && !initialised) {
			printf("{\"op\":\"%s\",\"pid\":%d,\"result\":\"%s\",\"s\":%.6f}\n", op_names[ops[k]], pid,
			       result_name(&d, r), now_s() - t0);
			initialised = 1;
			if (init_timed(&d) != CUDA_SUCCESS)
				return 1;
			t0 = now_s();
			r = op_call(&d, ops[k], pid, lock_timeout_ms, &state);
		}
		printf("{\"op\":\"%s\",\"pid\":%d,\"result\":\"%s\",\"s\":%.6f", op_names[ops[k]], pid,
		       result_name(&d, r), now_s() - t0);
		if (ops[k] == OP_STATE && r == CUDA_SUCCESS)
			printf(",\"state\":\"%s\"", state_name(state));
		printf("}\n");
		fflush(stdout);
		if (r != CUDA_SUCCESS) {
			fprintf(stderr, "ckpt_baseline: %s of pid %d: %s\n", op_names[ops[k]], pid, result_name(&d, r));
			return 1;
		}
	}
	return 0;
}
