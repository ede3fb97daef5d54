/* SPDX-License-Identifier: MIT */
/*
 * vecadd: opaque kernels, two streams and an event, a __device__ variable.
 *
 *   init:    cudaMalloc a, b, c, y (ELEMENTS floats each), fill a and b from
 *            --seed with cudaMemcpy, write the __device__ `bias` (0.25) with
 *            cudaMemcpyToSymbol.
 *   request: {"n": 4096, "seed": 7, "alpha": 2, "scale": 0.5, "bias": 0.25}
 *            (all optional; without "seed" the request reuses the inputs that
 *            init left on the device, which checks a restored snapshot)
 *
 *     main stream   [H2D a, b]─event─[vec_add c=a+b]──[D2H c]──wait──▶ done
 *                               │                                │
 *     side stream               └─[y=b][axpy y=αa+y][scale y=y·s+bias][D2H y]
 *
 *   Kernels: vec_add (const/non-const pointers), axpy (a struct holding device
 *   pointers, by value), scale_inplace (extern "C"). bias is read back with
 *   cudaMemcpyFromSymbol and passed to scale_inplace.
 *
 *   reply:   {"n":4096,"seed":7,"refilled":true,"alpha":2,"scale":0.5,
 *             "bias":0.25,"checksum":...,"max_abs_err":0,"tol":...,"ok":true}
 *
 * Every float operation is one IEEE operation or an explicit fmaf, on the GPU,
 * in the CPU reference and in the sim twins, so the expected error is 0; the
 * tolerance is 1e-6 * (1 + max |reference|).
 *
 * Usage: vecadd [--elements N (default 1<<20, at most 1<<26)] [--seed S (default 1)]
 */
#include <cuda_runtime.h>

#include "example.h"

#define THREADS 256
#define MAX_BLOCKS 1024
#define DEFAULT_ELEMENTS (1u << 20)
#define MAX_ELEMENTS (1u << 26)
#define INIT_BIAS 0.25f

struct axpy_args {
	const float *x;
	float *y;
	float a;
	int n;
};

__device__ float bias;

__global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		c[i] = a[i] + b[i];
}

/* y = a*x + y */
__global__ void axpy(struct axpy_args args)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < args.n; i += gridDim.x * blockDim.x)
		args.y[i] = fmaf(args.a, args.x[i], args.y[i]);
}

/* x = x*s + b */
extern "C" __global__ void scale_inplace(float *x, int n, float s, float b)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = fmaf(x[i], s, b);
}

struct vecadd {
	int capacity;
	float *d_a, *d_b, *d_c, *d_y;
	float *h_a, *h_b, *h_c, *h_y;        /* pinned staging */
	cudaStream_t main_stream, side_stream;
	cudaEvent_t inputs_ready, side_done, all_done;
	uint32_t resident_seed;              /* d_a, d_b hold this seed's inputs ... */
	int resident_n;                      /* ... in [0, resident_n) */
	float bias_expected;                 /* what `bias` must hold */
};

static unsigned blocks_for(int n)
{
	unsigned b = (unsigned)((n + THREADS - 1) / THREADS);

	return b < MAX_BLOCKS ? b : MAX_BLOCKS;
}

/* Inputs are a function of (seed, element): a[i] and b[i] are streams 0 and 1. */
static void fill_inputs(const struct vecadd *v, uint32_t seed, int n)
{
	for (int i = 0; i < n; i++) {
		v->h_a[i] = ex_uniform(seed, 0, (uint64_t)i);
		v->h_b[i] = ex_uniform(seed, 1, (uint64_t)i);
	}
}

static void vecadd_free(struct vecadd *v)
{
	cudaFree(v->d_a);
	cudaFree(v->d_b);
	cudaFree(v->d_c);
	cudaFree(v->d_y);
	cudaFreeHost(v->h_a);
	cudaFreeHost(v->h_b);
	cudaFreeHost(v->h_c);
	cudaFreeHost(v->h_y);
	if (v->main_stream)
		cudaStreamDestroy(v->main_stream);
	if (v->side_stream)
		cudaStreamDestroy(v->side_stream);
	if (v->inputs_ready)
		cudaEventDestroy(v->inputs_ready);
	if (v->side_done)
		cudaEventDestroy(v->side_done);
	if (v->all_done)
		cudaEventDestroy(v->all_done);
	memset(v, 0, sizeof(*v));
}

static int vecadd_init(struct vecadd *v, int capacity, uint32_t seed, struct ex_err *err)
{
	size_t bytes = (size_t)capacity * sizeof(float);
	float b0 = INIT_BIAS;

	memset(v, 0, sizeof(*v));
	v->capacity = capacity;
	CUDA_TRY(err, cudaMalloc((void **)&v->d_a, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&v->d_b, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&v->d_c, bytes));
	CUDA_TRY(err, cudaMalloc((void **)&v->d_y, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&v->h_a, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&v->h_b, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&v->h_c, bytes));
	CUDA_TRY(err, cudaMallocHost((void **)&v->h_y, bytes));
	CUDA_TRY(err, cudaStreamCreateWithFlags(&v->main_stream, cudaStreamNonBlocking));
	CUDA_TRY(err, cudaStreamCreateWithFlags(&v->side_stream, cudaStreamNonBlocking));
	CUDA_TRY(err, cudaEventCreateWithFlags(&v->inputs_ready, cudaEventDisableTiming));
	CUDA_TRY(err, cudaEventCreateWithFlags(&v->side_done, cudaEventDisableTiming));
	CUDA_TRY(err, cudaEventCreateWithFlags(&v->all_done, cudaEventDisableTiming));

	fill_inputs(v, seed, capacity);
	CUDA_TRY(err, cudaMemcpy(v->d_a, v->h_a, bytes, cudaMemcpyHostToDevice));
	CUDA_TRY(err, cudaMemcpy(v->d_b, v->h_b, bytes, cudaMemcpyHostToDevice));
	CUDA_TRY(err, cudaMemset(v->d_c, 0, bytes));
	CUDA_TRY(err, cudaMemset(v->d_y, 0, bytes));
	CUDA_TRY(err, cudaMemcpyToSymbol(bias, &b0, sizeof(b0)));
	CUDA_TRY(err, cudaDeviceSynchronize());
	v->resident_seed = seed;
	v->resident_n = capacity;
	v->bias_expected = b0;
	return 0;
fail:
	vecadd_free(v);
	return -1;
}

struct vecadd_req {
	int n;
	uint32_t seed;
	float alpha, scale;
	bool set_bias;
	float bias;
};

static int parse_request(const struct vecadd *v, const struct phos_fn_request *req,
			 struct vecadd_req *r, struct ex_err *err)
{
	static const char *const known[] = {"n", "seed", "alpha", "scale", "bias", NULL};
	json_t *root = ex_request_parse(req, err);
	long long n, seed;
	double alpha, scale, b;
	int rc = -1;

	if (!root)
		return -1;
	if (ex_request_known(root, known, err) ||
	    ex_request_int(root, "n", v->capacity < 4096 ? v->capacity : 4096, 1, v->capacity, &n, NULL, err) ||
	    ex_request_int(root, "seed", v->resident_seed, 0, UINT32_MAX, &seed, NULL, err) ||
	    ex_request_real(root, "alpha", 2.0, -1000.0, 1000.0, &alpha, NULL, err) ||
	    ex_request_real(root, "scale", 0.5, -1000.0, 1000.0, &scale, NULL, err) ||
	    ex_request_real(root, "bias", v->bias_expected, -1000.0, 1000.0, &b, &r->set_bias, err))
		goto out;
	r->n = (int)n;
	r->seed = (uint32_t)seed;
	r->alpha = (float)alpha;
	r->scale = (float)scale;
	r->bias = (float)b;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* Runs the request on the GPU; h_c and h_y hold the results, *ret_bias what `bias` held. */
static int run_gpu(struct vecadd *v, const struct vecadd_req *r, bool refill, float *ret_bias,
		   struct ex_err *err)
{
	size_t bytes = (size_t)r->n * sizeof(float);
	unsigned grid = blocks_for(r->n);
	struct axpy_args args;
	float dev_bias;

	if (r->set_bias)
		CUDA_TRY(err, cudaMemcpyToSymbol(bias, &r->bias, sizeof(r->bias)));
	CUDA_TRY(err, cudaMemcpyFromSymbol(&dev_bias, bias, sizeof(dev_bias)));

	if (refill) {
		CUDA_TRY(err, cudaMemcpyAsync(v->d_a, v->h_a, bytes, cudaMemcpyHostToDevice, v->main_stream));
		CUDA_TRY(err, cudaMemcpyAsync(v->d_b, v->h_b, bytes, cudaMemcpyHostToDevice, v->main_stream));
	}
	CUDA_TRY(err, cudaEventRecord(v->inputs_ready, v->main_stream));

	/* side stream: y = (alpha*a + b)*scale + bias */
	CUDA_TRY(err, cudaStreamWaitEvent(v->side_stream, v->inputs_ready, 0));
	CUDA_TRY(err, cudaMemcpyAsync(v->d_y, v->d_b, bytes, cudaMemcpyDeviceToDevice, v->side_stream));
	args.x = v->d_a;
	args.y = v->d_y;
	args.a = r->alpha;
	args.n = r->n;
	LAUNCH_TRY(err, axpy<<<grid, THREADS, 0, v->side_stream>>>(args));
	LAUNCH_TRY(err, scale_inplace<<<grid, THREADS, 0, v->side_stream>>>(v->d_y, r->n, r->scale, dev_bias));
	CUDA_TRY(err, cudaMemcpyAsync(v->h_y, v->d_y, bytes, cudaMemcpyDeviceToHost, v->side_stream));
	CUDA_TRY(err, cudaEventRecord(v->side_done, v->side_stream));

	/* main stream: c = a + b, then join the side stream */
	LAUNCH_TRY(err, vec_add<<<grid, THREADS, 0, v->main_stream>>>(v->d_a, v->d_b, v->d_c, r->n));
	CUDA_TRY(err, cudaMemcpyAsync(v->h_c, v->d_c, bytes, cudaMemcpyDeviceToHost, v->main_stream));
	CUDA_TRY(err, cudaStreamWaitEvent(v->main_stream, v->side_done, 0));
	CUDA_TRY(err, cudaEventRecord(v->all_done, v->main_stream));
	CUDA_TRY(err, cudaEventSynchronize(v->all_done));
	*ret_bias = dev_bias;
	return 0;
fail:
	return -1;
}

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct vecadd *v = (struct vecadd *)state;
	struct vecadd_req r;
	struct ex_err err;
	double max_err = 0, max_ref = 0, checksum = 0, tol;
	float dev_bias;
	bool refill;

	if (parse_request(v, req, &r, &err))
		return ex_reply_error(resp, 400, err.msg);

	/* The host copies are the CPU reference's inputs, and the upload when refilling. */
	fill_inputs(v, r.seed, r.n);
	refill = r.seed != v->resident_seed || r.n > v->resident_n;
	if (run_gpu(v, &r, refill, &dev_bias, &err)) {
		if (refill)
			v->resident_n = 0;          /* half-uploaded: the next request refills */
		return ex_reply_error(resp, 500, err.msg);
	}
	if (refill) {
		v->resident_seed = r.seed;
		v->resident_n = r.n;
	}
	if (r.set_bias)
		v->bias_expected = r.bias;

	for (int i = 0; i < r.n; i++) {
		float c = v->h_a[i] + v->h_b[i];
		float y = fmaf(fmaf(r.alpha, v->h_a[i], v->h_b[i]), r.scale, v->bias_expected);

		max_err = fmax(max_err, ex_abs_err(v->h_c[i], c));
		max_err = fmax(max_err, ex_abs_err(v->h_y[i], y));
		max_ref = fmax(max_ref, fmax(fabs(c), fabs(y)));
		checksum += (double)v->h_c[i] + (double)v->h_y[i];
	}
	tol = 1e-6 * (1.0 + max_ref);

	return ex_reply(resp, json_pack("{s:i, s:I, s:b, s:f, s:f, s:f, s:o, s:o, s:f, s:b}",
					"n", r.n, "seed", (json_int_t)r.seed, "refilled", refill,
					"alpha", (double)r.alpha, "scale", (double)r.scale,
					"bias", (double)dev_bias, "checksum", ex_json_err(checksum),
					"max_abs_err", ex_json_err(max_err), "tol", tol,
					"ok", max_err <= tol), 0);
}

int main(int argc, char **argv)
{
	unsigned long long elements = DEFAULT_ELEMENTS, seed = 1;
	struct vecadd v;
	struct ex_err err;
	int rc;

	for (int i = 1; i < argc; i++) {
		int bad;

		if (strcmp(argv[i], "--elements") == 0)
			bad = ex_arg_u64(argc, argv, &i, 1, MAX_ELEMENTS, &elements, &err);
		else if (strcmp(argv[i], "--seed") == 0)
			bad = ex_arg_u64(argc, argv, &i, 0, UINT32_MAX, &seed, &err);
		else {
			ex_err_set(&err, "unknown argument \"%s\"; usage: vecadd [--elements N] [--seed S]",
				   argv[i]);
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "vecadd: %s\n", err.msg);
			return 2;
		}
	}

	if (vecadd_init(&v, (int)elements, (uint32_t)seed, &err)) {
		fprintf(stderr, "vecadd: init failed: %s\n", err.msg);
		return 1;
	}
	rc = phos_fn_serve(handle, &v);
	vecadd_free(&v);
	return rc ? 1 : 0;
}
