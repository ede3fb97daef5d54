// SPDX-License-Identifier: MIT
// Fixture of tests/unit/test_kparam.c: kernels whose parameter layouts and kinds
// the test knows exactly. nvcc builds it into fatbins at build time (meson.build).

struct span {
	float *data;
	int n;
};

template <class T>
struct vec {
	T *p;
	int n;
};

// (const float*, const float*, float*, int): offsets 0 8 16 24, sizes 8 8 8 4
__global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

// a struct holding a pointer, by value: one opaque 16-byte parameter, then a float
__global__ void fill_span(span s, float v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < s.n)
		s.data[i] = v;
}

// no mangling: every parameter is opaque
extern "C" __global__ void c_copy(float *out, const float *in, unsigned long long n)
{
	unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = in[i];
}

// _Z4axpyIfEvPKT_PS0_S0_i: template parameters and substitutions
template <class T>
__global__ void axpy(const T *x, T *y, T a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += a * x[i];
}
template __global__ void axpy<float>(const float *, float *, float, int);

// _Z5sum_vIfEv3vecIT_EPKS2_: a class template by value and by const pointer
template <class T>
__global__ void sum_v(vec<T> v, const vec<T> *out)
{
	if (v.n)
		v.p[0] = out->p[0];
}
template __global__ void sum_v<float>(vec<float>, const vec<float> *);

namespace phos_test {
// _ZN9phos_test5scaleEPffi
__global__ void scale(float *x, float k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= k;
}
} // namespace phos_test

// mixed sizes and alignments: offsets 0 8 16 24, sizes 1 8 2 8
__global__ void mixed(char c, double d, short s, int *p)
{
	p[0] = c + (int)d + s;
}

__global__ void no_params(void)
{
}

// more parameters than PHOS_MAX_PARAMS (64): phos_fatbin_kernel says -E2BIG
#define P4(x) int x##0, int x##1, int x##2, int x##3
#define P16(x) P4(x##a), P4(x##b), P4(x##c), P4(x##d)
__device__ int many_sink;
__global__ void many(P16(a), P16(b), P16(c), P16(d), int last)
{
	many_sink = aa0 + dd3 + last;
}

// Parameter blocks over 4 KiB (CUDA 12.1+ allows 32,764 bytes). Over 16,383
// bytes the cubin describes them with EIATTR_KPARAM_INFO_V2, not KPARAM_INFO.
struct block20k {
	char v[20000];
};
struct block32k {
	int v[8188];
};
// offsets 0 8 20008 20016, sizes 8 20000 8 8
__global__ void big_mid(const float *p, block20k a, double d, float *o)
{
	o[0] = p[0] + a.v[threadIdx.x] + d;
}
// the largest block: offsets 0 32752, sizes 32752 8; 32760 bytes
__global__ void big_max(block32k b, int *out)
{
	out[threadIdx.x] = b.v[threadIdx.x];
}
