/*
 * multi_gpu: one process driving two devices (phos-fn run --gpus A,B), the
 * CUDA semantics a program over several GPUs relies on. Prints one JSON line
 * per check, {"check":NAME,"ok":BOOL,...}, then {"done":true}; exits 0 when
 * every check passed.
 *
 *   - device count, selection per host thread, cudaSetDevice of a device not
 *     owned: cudaErrorInvalidDevice;
 *   - allocations land on the selected device (cudaPointerGetAttributes);
 *   - a __device__ variable has a copy per device;
 *   - a kernel and a cuBLAS handle on device 1, its stream used while device 0
 *     is selected;
 *   - peer access as CUDA checks it, and peer copies both ways;
 *   - an event of one device waited for by a stream of the other;
 *   - the driver API's primary contexts: one per device, and making one
 *     current selects its device for the runtime too (as CUDA's runtime
 *     follows the driver's current context).
 *
 * multi_gpu --serve [--give]: then serves (phos_fn_serve, the snapshot
 * point; the program takes mg_var's addresses, cudaGetSymbolAddress, only
 * without --serve or with --give); each
 * request first has a kernel on device 1 read device 1's buffer and, through
 * peer access, device 0's last one (both as the snapshot left them: what an
 * on-demand restore must have brought in before that kernel runs, whichever
 * device it is on), reads the variable on both devices, runs a kernel on
 * device 1's stream and reads device 0's buffer, and answers
 * {"v0":7,"v1":9,"fill":2005,"p0":5,"peek1":14,"peek0":82,"arr0":1400,
 * "arr1":601,"n0":N,"n1":N,"ok":BOOL} (arr: a CUDA array made on each
 * device; n0, n1: a counter of the requests served in each device's memory,
 * counted up by a kernel there, 1 at the first request after the snapshot):
 * what a restore must bring back on the right devices, and a checkpoint
 * taken between two requests must carry on.
 */
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <phos/fn.h>
#include <thread>

__device__ int mg_var;

__global__ void mg_fill(int *p, int v, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = v + i;
}

/* One more request served. */
__global__ void mg_count(int *n)
{
	n[0]++;
}

/* out[k] = p[at[k]] for k < 2: a kernel reading restored memory. */
__global__ void mg_peek(const int *a, int ia, const int *b, int ib, int *out)
{
	out[0] = a[ia];
	out[1] = b[ib];
}

static int failed;

static void report(const char *name, bool ok, const char *detail = "")
{
	printf("{\"check\":\"%s\",\"ok\":%s%s%s}\n", name, ok ? "true" : "false", *detail ? "," : "", detail);
	fflush(stdout);
	if (!ok)
		failed++;
}

struct served {
	int *p0, *p1, *q1, *r0;
	int *n0, *n1;   /* requests served, on device 0 and device 1 */
	cudaStream_t s1;
	cudaArray_t a0, a1;   /* 64 x 4 floats, element i: 7 i on device 0, 3 i + 1 on device 1 */
};

/* Element at of a's 64 x 4 floats, read back through host memory. */
static float array_at(cudaArray_t a, int at)
{
	static float h[256];

	if (cudaMemcpy2DFromArray(h, 64 * sizeof(float), a, 0, 0, 64 * sizeof(float), 4, cudaMemcpyDeviceToHost))
		return -1;
	return h[at];
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	served *s = (served *)arg;
	int v0 = 0, v1 = 0, fill = 0, p0 = 0, peek[2] = { 0, 0 }, n0 = 0, n1 = 0;
	float arr0, arr1;
	char out[320];

	(void)req;
	/* before anything else touches them: p1 and (peer) r0 hold 5 + i */
	cudaSetDevice(1);
	mg_peek<<<1, 1, 0, s->s1>>>(s->p1, 9, s->r0, 77, s->q1);
	cudaMemcpyAsync(peek, s->q1, sizeof(peek), cudaMemcpyDeviceToHost, s->s1);
	cudaStreamSynchronize(s->s1);
	cudaSetDevice(0);
	cudaMemcpyFromSymbol(&v0, mg_var, sizeof(int));
	cudaMemcpy(&p0, s->p0, sizeof(int), cudaMemcpyDeviceToHost);
	cudaSetDevice(1);
	cudaMemcpyFromSymbol(&v1, mg_var, sizeof(int));
	mg_fill<<<32, 128, 0, s->s1>>>(s->p1, 2000, 1 << 16);
	cudaMemcpyAsync(&fill, s->p1 + 5, sizeof(int), cudaMemcpyDeviceToHost, s->s1);
	mg_fill<<<32, 128, 0, s->s1>>>(s->p1, 5, 1 << 16);   /* as the snapshot had it, for the next request */
	cudaStreamSynchronize(s->s1);
	arr1 = array_at(s->a1, 200);
	mg_count<<<1, 1, 0, s->s1>>>(s->n1);
	cudaMemcpyAsync(&n1, s->n1, sizeof(int), cudaMemcpyDeviceToHost, s->s1);
	cudaStreamSynchronize(s->s1);
	cudaSetDevice(0);
	arr0 = array_at(s->a0, 200);
	mg_count<<<1, 1>>>(s->n0);
	cudaMemcpy(&n0, s->n0, sizeof(int), cudaMemcpyDeviceToHost);
	snprintf(out, sizeof(out), "{\"v0\":%d,\"v1\":%d,\"fill\":%d,\"p0\":%d,\"peek1\":%d,\"peek0\":%d,"
				   "\"arr0\":%g,\"arr1\":%g,\"n0\":%d,\"n1\":%d,\"ok\":%s}",
		 v0, v1, fill, p0, peek[0], peek[1], arr0, arr1, n0, n1,
		 v0 == 7 && v1 == 9 && fill == 2005 && p0 == 5 && peek[0] == 14 && peek[1] == 82 && arr0 == 1400 &&
				 arr1 == 601 && n0 == n1 && n0 > 0 ? "true" : "false");
	resp->body = strdup(out);   /* phos_fn_serve frees it */
	if (!resp->body)
		return 500;
	resp->len = strlen(out);
	return 0;
}

static int device_of(const void *p)
{
	cudaPointerAttributes a;

	if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice)
		return -1;
	return a.device;
}

int main(int argc, char **argv)
{
	bool serve = argc > 1 && !strcmp(argv[1], "--serve");
	/* --serve --give: the program also takes mg_var's address (kept) */
	bool give = serve && argc > 2 && !strcmp(argv[2], "--give");
	const int n = 1 << 16;
	char detail[256];
	int count = 0, dev = -1, can = 0, v0 = 0, v1 = 0;
	int *p0 = nullptr, *p1 = nullptr, *q1 = nullptr;
	void *a0 = nullptr, *a1 = nullptr;
	static int host[1 << 16];

	cudaGetDeviceCount(&count);
	snprintf(detail, sizeof(detail), "\"count\":%d", count);
	report("count", count == 2, detail);
	if (count != 2) {
		printf("{\"done\":true}\n");
		return 1;
	}
	report("set_bad", cudaSetDevice(2) == cudaErrorInvalidDevice && cudaGetLastError() == cudaErrorInvalidDevice);
	report("get_default", cudaGetDevice(&dev) == cudaSuccess && dev == 0);

	/* allocations on the selected device, from two host threads */
	cudaSetDevice(0);
	cudaMalloc(&p0, n * sizeof(int));
	std::thread th([&] {
		cudaSetDevice(1);
		cudaMalloc(&p1, n * sizeof(int));
		cudaMalloc(&q1, 100);
	});
	th.join();
	cudaGetDevice(&dev);
	snprintf(detail, sizeof(detail), "\"p0\":%d,\"p1\":%d,\"q1\":%d,\"main\":%d", device_of(p0), device_of(p1),
		 device_of(q1), dev);
	report("alloc_per_device", p0 && p1 && q1 && device_of(p0) == 0 && device_of(p1) == 1 && device_of(q1) == 1 &&
					   dev == 0, detail);

	/* a __device__ variable per device */
	cudaSetDevice(0);
	int seven = 7, nine = 9;
	cudaMemcpyToSymbol(mg_var, &seven, sizeof(int));
	if (!serve || give)
		cudaGetSymbolAddress(&a0, mg_var);
	cudaSetDevice(1);
	cudaMemcpyToSymbol(mg_var, &nine, sizeof(int));
	if (!serve || give)
		cudaGetSymbolAddress(&a1, mg_var);
	cudaSetDevice(0);
	cudaMemcpyFromSymbol(&v0, mg_var, sizeof(int));
	cudaSetDevice(1);
	cudaMemcpyFromSymbol(&v1, mg_var, sizeof(int));
	snprintf(detail, sizeof(detail), "\"v0\":%d,\"v1\":%d", v0, v1);
	report("var_per_device", v0 == 7 && v1 == 9 && ((serve && !give) || (a0 && a1 && a0 != a1)), detail);

	/* a kernel on device 1's stream, launched while device 0 is selected
	 * (CUDA runs work on its stream's device) is checked below through a
	 * peer copy */
	cudaStream_t s1, s0;
	cudaEvent_t e1;
	cudaSetDevice(1);
	cudaStreamCreate(&s1);
	cudaEventCreate(&e1);
	mg_fill<<<32, 128, 0, s1>>>(p1, 1000, n);
	cudaError_t launch = cudaGetLastError();
	cudaEventRecord(e1, s1);
	cudaSetDevice(0);
	cudaStreamCreate(&s0);
	cudaStreamWaitEvent(s0, e1, 0);   /* device 0 waits for device 1's kernel */
	cudaError_t peer = cudaMemcpyPeerAsync(p0, 0, p1, 1, n * sizeof(int), s0);
	cudaStreamSynchronize(s0);
	cudaMemcpy(host, p0, n * sizeof(int), cudaMemcpyDeviceToHost);
	bool same = true;
	for (int i = 0; i < n; i++)
		same = same && host[i] == 1000 + i;
	snprintf(detail, sizeof(detail), "\"launch\":%d,\"peer\":%d,\"host0\":%d", (int)launch, (int)peer, host[0]);
	report("kernel_event_peer_copy", launch == cudaSuccess && peer == cudaSuccess && same, detail);

	/* and back: device 0's kernel, copied to device 1 synchronously */
	mg_fill<<<32, 128, 0, s0>>>(p0, 5, n);
	cudaStreamSynchronize(s0);
	peer = cudaMemcpyPeer(p1, 1, p0, 0, n * sizeof(int));
	cudaSetDevice(1);
	cudaMemcpy(host, p1, n * sizeof(int), cudaMemcpyDeviceToHost);
	same = true;
	for (int i = 0; i < n; i++)
		same = same && host[i] == 5 + i;
	report("peer_copy_back", peer == cudaSuccess && same);

	/* cuBLAS on device 1: a SAXPY into device 1's memory */
	cublasHandle_t h;
	float *x, *y, hy[4], alpha = 2.0f, hx[4] = { 1, 2, 3, 4 };
	cudaMalloc(&x, sizeof(hx));
	cudaMalloc(&y, sizeof(hx));
	cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice);
	cudaMemcpy(y, hx, sizeof(hx), cudaMemcpyHostToDevice);
	cublasStatus_t bs = cublasCreate(&h);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = cublasSaxpy(h, 4, &alpha, x, 1, y, 1);
	cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost);
	snprintf(detail, sizeof(detail), "\"status\":%d,\"y\":[%g,%g,%g,%g],\"dev\":%d", (int)bs, hy[0], hy[1], hy[2],
		 hy[3], device_of(y));
	report("blas_device1", bs == CUBLAS_STATUS_SUCCESS && hy[0] == 3 && hy[3] == 12 && device_of(y) == 1, detail);
	cublasDestroy(h);

	/* peer access, as CUDA checks it */
	cudaSetDevice(0);
	cudaDeviceCanAccessPeer(&can, 0, 1);
	int self = 1;
	cudaDeviceCanAccessPeer(&self, 0, 0);
	cudaError_t en = cudaDeviceEnablePeerAccess(1, 0);
	cudaError_t again = cudaDeviceEnablePeerAccess(1, 0);
	cudaError_t me = cudaDeviceEnablePeerAccess(0, 0);
	cudaError_t flags = cudaDeviceEnablePeerAccess(1, 1);
	cudaError_t dis = cudaDeviceDisablePeerAccess(1);
	cudaError_t dis2 = cudaDeviceDisablePeerAccess(1);
	cudaGetLastError();
	snprintf(detail, sizeof(detail), "\"can\":%d,\"self\":%d,\"enable\":%d,\"again\":%d,\"me\":%d,\"flags\":%d,"
					 "\"disable\":%d,\"disable2\":%d",
		 can, self, (int)en, (int)again, (int)me, (int)flags, (int)dis, (int)dis2);
	report("peer_access", can == 1 && self == 0 && en == cudaSuccess && again == cudaErrorPeerAccessAlreadyEnabled &&
				      me == cudaErrorInvalidDevice && flags == cudaErrorInvalidValue &&
				      dis == cudaSuccess && dis2 == cudaErrorPeerAccessNotEnabled, detail);

	/* the driver API (libcuda.so.1: the stand-in under phos-fn) */
	{
		void *lib = dlopen("libcuda.so.1", RTLD_NOW);
		int (*cu_init)(unsigned) = lib ? (int (*)(unsigned))dlsym(lib, "cuInit") : nullptr;
		int (*retain)(void **, int) = lib ? (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain") : nullptr;
		int (*setcur)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxSetCurrent") : nullptr;
		int (*getdev)(int *) = lib ? (int (*)(int *))dlsym(lib, "cuCtxGetDevice") : nullptr;
		int (*push)(void *) = lib ? (int (*)(void *))dlsym(lib, "cuCtxPushCurrent_v2") : nullptr;
		int (*pop)(void **) = lib ? (int (*)(void **))dlsym(lib, "cuCtxPopCurrent_v2") : nullptr;
		void *c0 = nullptr, *c1 = nullptr, *popped = nullptr;
		int d1 = -1, r1 = -1, d0 = -1, r0 = -1, d1b = -1, r1b = -1;
		bool ok = cu_init && retain && setcur && getdev && push && pop && cu_init(0) == 0 && retain(&c0, 0) == 0 &&
			  retain(&c1, 1) == 0 && c0 != c1;

		if (ok) {
			ok = setcur(c1) == 0 && getdev(&d1) == 0 && cudaGetDevice(&r1) == cudaSuccess && push(c0) == 0 &&
			     getdev(&d0) == 0 && cudaGetDevice(&r0) == cudaSuccess && pop(&popped) == 0 &&
			     getdev(&d1b) == 0 && cudaGetDevice(&r1b) == cudaSuccess;
			setcur(c0);
		}
		cudaSetDevice(0);
		snprintf(detail, sizeof(detail), "\"d1\":%d,\"r1\":%d,\"d0\":%d,\"r0\":%d,\"d1b\":%d,\"r1b\":%d", d1, r1,
			 d0, r0, d1b, r1b);
		report("driver_contexts", ok && d1 == 1 && r1 == 1 && d0 == 0 && r0 == 0 && popped == c0 && d1b == 1 &&
						  r1b == 1, detail);
	}

	cudaDeviceProp prop;
	report("properties_1", cudaGetDeviceProperties(&prop, 1) == cudaSuccess && prop.totalGlobalMem > 0);
	report("properties_bad", cudaGetDeviceProperties(&prop, 2) == cudaErrorInvalidDevice);
	cudaGetLastError();

	if (serve) {
		static served s;

		/* mg_var is 7 on device 0, 9 on device 1; p0, p1 and r0 (device
		 * 0's last buffer: last in its restore order) hold 5 + i; device 1
		 * reaches device 0's memory */
		int *r0 = nullptr;
		report("serve_alloc", cudaMalloc(&r0, 1 << 20) == cudaSuccess);
		mg_fill<<<32, 128>>>(r0, 5, 1 << 18);
		s = { p0, p1, q1, r0, nullptr, nullptr, s1, nullptr, nullptr };
		report("serve_counters", cudaMalloc(&s.n0, sizeof(int)) == cudaSuccess &&
					 cudaMemset(s.n0, 0, sizeof(int)) == cudaSuccess && cudaSetDevice(1) == cudaSuccess &&
					 cudaMalloc(&s.n1, sizeof(int)) == cudaSuccess &&
					 cudaMemset(s.n1, 0, sizeof(int)) == cudaSuccess && cudaSetDevice(0) == cudaSuccess);
		/* a CUDA array on each device */
		{
			cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
			static float h0[256], h1[256];

			for (int i = 0; i < 256; i++)
				h0[i] = 7.0f * i, h1[i] = 3.0f * i + 1;
			report("serve_array0", cudaMallocArray(&s.a0, &fd, 64, 4) == cudaSuccess &&
						       cudaMemcpy2DToArray(s.a0, 0, 0, h0, 64 * sizeof(float),
									   64 * sizeof(float), 4,
									   cudaMemcpyHostToDevice) == cudaSuccess);
			cudaSetDevice(1);
			report("serve_array1", cudaMallocArray(&s.a1, &fd, 64, 4) == cudaSuccess &&
						       cudaMemcpy2DToArray(s.a1, 0, 0, h1, 64 * sizeof(float),
									   64 * sizeof(float), 4,
									   cudaMemcpyHostToDevice) == cudaSuccess);
			cudaSetDevice(0);
		}
		cudaSetDevice(1);
		report("serve_peer", cudaDeviceEnablePeerAccess(0, 0) == cudaSuccess);
		cudaSetDevice(0);
		report("sync", cudaDeviceSynchronize() == cudaSuccess);
		printf("{\"done\":true,\"failed\":%d}\n", failed);
		fflush(stdout);
		return failed ? 1 : phos_fn_serve(handle, &s);
	}
	cudaSetDevice(1);
	cudaFree(p1);
	cudaFree(q1);
	cudaSetDevice(0);
	cudaFree(p0);
	report("sync", cudaDeviceSynchronize() == cudaSuccess);
	printf("{\"done\":true,\"failed\":%d}\n", failed);
	return failed ? 1 : 0;
}
