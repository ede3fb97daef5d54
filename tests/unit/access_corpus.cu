// The kernel corpus of the PTX access analysis (runtime/kernel/ptx_access.h), written
// the ways different authors write kernels. Each kernel's name says the verdict
// the analysis must reach: exact_* (every global access provably derives from
// the parameters) or opaque_* (some access may reach a buffer no parameter
// names, or the analysis cannot tell). test_access.c checks every verdict and,
// for the kernels it lists, the exact read and write parameter words.
//
// The corpus is compiled to a fatbin (cubin + PTX) and once more without PTX
// (every kernel of that build is opaque: SASS only).
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

// ---- plain parameters -------------------------------------------------------

__global__ void exact_saxpy(int n, float a, const float *x, float *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

__global__ void exact_grid_stride(const float *in, float *out, size_t n)
{
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		out[i] = in[i] * in[i];
}

__global__ void exact_restrict(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c)
{
	int i = threadIdx.x;
	c[i] = a[i] + b[i];
}

__global__ void exact_ldg(const float *a, float *b)
{
	b[threadIdx.x] = __ldg(a + threadIdx.x) * 3.0f;
}

__global__ void exact_many_params(const float *a0, const float *a1, const float *a2, const float *a3,
				  const float *a4, const float *a5, const float *a6, const float *a7,
				  float *o0, float *o1)
{
	int i = threadIdx.x;
	o0[i] = a0[i] + a1[i] + a2[i] + a3[i];
	o1[i] = a4[i] + a5[i] + a6[i] + a7[i];
}

__global__ void exact_negative_offset(float *p, int n)
{
	int i = threadIdx.x + 1;
	if (i < n)
		p[i] += p[i - 1];
}

__global__ void exact_char_bytes(unsigned char *dst, const unsigned char *src, int n)
{
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		dst[i] = src[n - 1 - i] ^ 0x5a;
}

__global__ void exact_half(const __half *a, __half *b)
{
	b[threadIdx.x] = __hadd(a[threadIdx.x], a[threadIdx.x]);
}

__global__ void exact_vec4(const float4 *a, float4 *b)
{
	float4 v = a[threadIdx.x];
	b[threadIdx.x] = make_float4(v.w, v.z, v.y, v.x);
}

__global__ void exact_double2(const double2 *a, double *b)
{
	double2 v = a[threadIdx.x];
	b[threadIdx.x] = v.x * v.y;
}

__global__ void exact_matrix_pitch(const float *m, size_t pitch, int cols, float *rowsum)
{
	const float *row = (const float *)((const char *)m + blockIdx.x * pitch);
	float s = 0;
	for (int c = 0; c < cols; c++)
		s += row[c];
	rowsum[blockIdx.x] = s;
}

__global__ void exact_select(const float *a, const float *b, float *out, int use_b)
{
	const float *src = use_b ? b : a;
	out[threadIdx.x] = src[threadIdx.x];
}

__global__ void exact_pointer_walk(const int *begin, const int *end, int *sum)
{
	int s = 0;
	for (const int *p = begin + threadIdx.x; p < end; p += blockDim.x)
		s += *p;
	atomicAdd(sum, s);
}

// An address passed as an integer: still a parameter.
__global__ void exact_int_param_address(uintptr_t base, int n)
{
	float *p = (float *)base;
	if ((int)threadIdx.x < n)
		p[threadIdx.x] = (float)threadIdx.x;
}

extern "C" __global__ void exact_extern_c(float *x, const float *y, int n)
{
	int i = threadIdx.x;
	if (i < n)
		x[i] += y[i];
}

template <typename T> __global__ void exact_template_scale(T *v, T f, int n)
{
	int i = threadIdx.x;
	if (i < n)
		v[i] *= f;
}
template __global__ void exact_template_scale<float>(float *, float, int);
template __global__ void exact_template_scale<double>(double *, double, int);
template __global__ void exact_template_scale<int>(int *, int, int);

// ---- structs by value -------------------------------------------------------

struct span {
	const float *src;
	float *dst;
	int n;
};

struct nested {
	int tag;
	span s;
	double *aux;
};

struct many_ptrs {
	float *p[8];
};

__global__ void exact_struct_by_value(span s)
{
	int i = threadIdx.x;
	if (i < s.n)
		s.dst[i] = s.src[i] + 1.0f;
}

__global__ void exact_nested_struct(nested v)
{
	int i = threadIdx.x;
	if (i < v.s.n)
		v.s.dst[i] = v.s.src[i] * (float)v.tag;
	v.aux[0] = 1.0;
}

// An array of pointers inside a big struct *by value*, indexed at run time:
// read from the parameter space through a computed address, never from device
// memory.
struct wide_ptrs {
	float *p[40];
};

__global__ void exact_struct_pointer_array(wide_ptrs m, int k)
{
	m.p[k % 40][threadIdx.x] = 2.0f;
}

// The same with a small struct: nvcc copies it to local memory to index it,
// and the pointer comes back from memory (a conservative verdict).
__global__ void opaque_small_struct_pointer_array(many_ptrs m, int k)
{
	m.p[k & 7][threadIdx.x] = 2.0f;
}

// ---- indices loaded from memory (gather, scatter, histogram) ------------------

__global__ void exact_gather(const float *table, const int *idx, float *out)
{
	int i = threadIdx.x;
	out[i] = table[idx[i]];
}

__global__ void exact_scatter(const float *vals, const int *idx, float *out)
{
	int i = threadIdx.x;
	out[idx[i]] = vals[i];
}

// 64-bit indices (PyTorch's index tensors are int64): scaled by the element
// size before they are added, so they are offsets.
__global__ void exact_gather_int64(const float *table, const long long *idx, float *out)
{
	int i = threadIdx.x;
	out[i] = table[idx[i]];
}

// ... but an unscaled 64-bit value added to a byte pointer cannot be told from
// a pointer (a conservative verdict).
__global__ void opaque_byte_gather_int64(const unsigned char *bytes, const long long *idx, unsigned char *out)
{
	int i = threadIdx.x;
	out[i] = bytes[idx[i]];
}

__global__ void exact_histogram(const unsigned char *data, int n, unsigned *bins)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		atomicAdd(&bins[data[i]], 1u);
}

__global__ void exact_csr_spmv(const int *rowptr, const int *col, const float *val, const float *x, float *y)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0;
	for (int k = rowptr[r]; k < rowptr[r + 1]; k++)
		s += val[k] * x[col[k]];
	y[r] = s;
}

// ---- atomics, shared memory, warps, async copies ------------------------------

__global__ void exact_atomic_counter(int *counter, int *slots)
{
	int slot = atomicAdd(counter, 1);
	slots[slot] = (int)threadIdx.x;
}

// a conditional node's condition set from the kernel (CUDA 12.4+): the
// device runtime's call touches no memory of the program
__global__ void exact_graph_condition(cudaGraphConditionalHandle h, int *counter)
{
	if (threadIdx.x == 0) {
		int c = --*counter;
		cudaGraphSetConditional(h, c > 0);
	}
}

__global__ void exact_atomic_cas_max(unsigned long long *best, const unsigned long long *cand)
{
	unsigned long long v = cand[threadIdx.x], old = *best;
	while (v > old) {
		unsigned long long prev = atomicCAS(best, old, v);
		if (prev == old)
			break;
		old = prev;
	}
}

__global__ void exact_shared_reduce(const float *in, float *out)
{
	__shared__ float tile[256];
	tile[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
	__syncthreads();
	for (int s = 128; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			tile[threadIdx.x] += tile[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = tile[0];
}

__global__ void exact_dynamic_shared_scan(const int *in, int *out, int n)
{
	extern __shared__ int buf[];
	int i = threadIdx.x;
	buf[i] = i < n ? in[i] : 0;
	__syncthreads();
	for (int off = 1; off < (int)blockDim.x; off <<= 1) {
		int v = i >= off ? buf[i - off] : 0;
		__syncthreads();
		buf[i] += v;
		__syncthreads();
	}
	if (i < n)
		out[i] = buf[i];
}

__global__ void exact_warp_shuffle(const float *in, float *out)
{
	float v = in[blockIdx.x * 32 + threadIdx.x];
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	if (threadIdx.x == 0)
		out[blockIdx.x] = v;
}

__global__ void exact_cp_async(const float4 *in, float4 *out)
{
	__shared__ float4 stage[128];
	__pipeline_memcpy_async(&stage[threadIdx.x], &in[blockIdx.x * 128 + threadIdx.x], sizeof(float4));
	__pipeline_commit();
	__pipeline_wait_prior(0);
	__syncthreads();
	out[blockIdx.x * 128 + threadIdx.x] = stage[127 - threadIdx.x];
}

__global__ void exact_inline_ptx_load(const float *a, float *b)
{
	float v;
	asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(a + threadIdx.x));
	asm volatile("st.global.f32 [%0], %1;" ::"l"(b + threadIdx.x), "f"(v * 2.0f));
}

__global__ void exact_red_add(float *acc, const float *v)
{
	atomicAdd(acc + (threadIdx.x & 3), v[threadIdx.x]);
}

// ---- module variables ----------------------------------------------------------

__device__ float dev_table[64];
__constant__ float const_coeffs[16];

__global__ void exact_module_variable(float *out)
{
	out[threadIdx.x] = dev_table[threadIdx.x & 63];
}

__global__ void exact_constant_coeffs(const float *in, float *out)
{
	float s = 0;
	for (int k = 0; k < 16; k++)
		s += const_coeffs[k] * in[threadIdx.x + k];
	out[threadIdx.x] = s;
}

// ---- pointers from device memory: opaque ------------------------------------------

__global__ void opaque_pointer_table(float *const *tables, int t, float *out)
{
	out[threadIdx.x] = tables[t][threadIdx.x];
}

__global__ void opaque_batched_pointers(const float *const *a, float *const *c, int n)
{
	int b = blockIdx.x, i = threadIdx.x;
	if (i < n)
		c[b][i] = 2.0f * a[b][i];
}

struct node {
	node *next;
	float value;
};

__global__ void opaque_linked_list(const node *head, float *sum)
{
	float s = 0;
	for (const node *p = head; p; p = p->next)
		s += p->value;
	*sum = s;
}

struct device_view {
	const float *data;
	int n;
};

// The struct lives in device memory: its pointer is loaded from there.
__global__ void opaque_struct_in_device_memory(const device_view *v, float *out)
{
	if ((int)threadIdx.x < v->n)
		out[threadIdx.x] = v->data[threadIdx.x];
}

// An address kept as a 64-bit integer in device memory.
__global__ void opaque_address_from_memory(const unsigned long long *addr, float *out)
{
	out[threadIdx.x] = ((const float *)addr[0])[threadIdx.x];
}

// An address put together from two 32-bit halves read from memory.
__global__ void opaque_address_from_halves(const unsigned *halves, float *out)
{
	unsigned long long a = ((unsigned long long)halves[1] << 32) | halves[0];
	out[threadIdx.x] = ((const float *)a)[threadIdx.x];
}

// A pointer staged through shared memory.
__global__ void opaque_shared_staged_pointer(const float *a, const float *b, float *out, int pick)
{
	__shared__ const float *chosen;
	if (threadIdx.x == 0)
		chosen = pick ? b : a;
	__syncthreads();
	out[threadIdx.x] = chosen[threadIdx.x];
}

__device__ float *dev_pointer;

__global__ void opaque_pointer_in_module_variable(float *out)
{
	out[threadIdx.x] = dev_pointer[threadIdx.x];
}

__constant__ const float *const_pointers[4];

__global__ void opaque_constant_pointer_table(int k, float *out)
{
	out[threadIdx.x] = const_pointers[k & 3][threadIdx.x];
}

__global__ void opaque_atomic_exchange_pointer(node **head, node *fresh)
{
	node *old = (node *)atomicExch((unsigned long long *)head, (unsigned long long)fresh);
	fresh->next = old;
	if (old)
		old->value += 1.0f;
}

__global__ void opaque_absolute_address(float v)
{
	*(float *)0x600000001000ull = v;
}

// A local array of pointers indexed at run time lives in local memory: the
// pointer comes back from memory (a conservative verdict: it is one of the
// parameters, but the analysis does not follow values through memory).
__global__ void opaque_local_pointer_array(float *a, float *b, float *c, float *d, const int *which)
{
	float *ptrs[4] = { a, b, c, d };
	int k = which[threadIdx.x] & 3;
	ptrs[k][threadIdx.x] = 1.0f;
}

// ---- calls, device heap, textures, surfaces -----------------------------------------

__device__ __noinline__ void store_twice(float *p, float v)
{
	p[0] = v;
	p[1] = v;
}

__global__ void opaque_noinline_call(float *p)
{
	store_twice(p + 2 * threadIdx.x, 1.0f);
}

__global__ void opaque_device_new(float **keep, int n)
{
	float *p = new float[n];
	p[0] = 1.0f;
	keep[threadIdx.x] = p;
}

__global__ void opaque_device_malloc_free(int n, float *out)
{
	float *tmp = (float *)malloc(n * sizeof(float));
	if (!tmp)
		return;
	tmp[0] = 3.0f;
	out[threadIdx.x] = tmp[0];
	free(tmp);
}

__global__ void opaque_printf(const float *a)
{
	if (threadIdx.x == 0)
		printf("a[0] = %f\n", a[0]);
}

__global__ void opaque_texture(cudaTextureObject_t tex, float *out)
{
	out[threadIdx.x] = tex1Dfetch<float>(tex, threadIdx.x);
}

__global__ void opaque_surface(cudaSurfaceObject_t surf, int w)
{
	surf2Dwrite(1.0f, surf, (threadIdx.x % w) * 4, threadIdx.x / w);
}

// Lanes exchange a 64-bit pointer as two 32-bit shuffles and rebuild it: the
// halves derive from parameters only, so the pointer is one of them.
__global__ void exact_shuffled_pointer(float *a, float *b)
{
	float *p = (threadIdx.x & 1) ? a : b;
	unsigned long long bits = (unsigned long long)p;
	unsigned lo = __shfl_sync(0xffffffffu, (unsigned)bits, 0);
	unsigned hi = __shfl_sync(0xffffffffu, (unsigned)(bits >> 32), 0);
	float *q = (float *)(((unsigned long long)hi << 32) | lo);
	q[threadIdx.x] = 1.0f;
}
