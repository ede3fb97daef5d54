// SPDX-License-Identifier: MIT
// The kernel corpus (tests/unit/access_corpus.cu) as a phos_fn_serve function,
// for the on-demand test on the GPU (test_corpus_ondemand.py):
//
//   init:     a 16 MiB padding buffer first (first in the background order of
//             a restore, so that everything after it is still missing when the
//             first request runs), then four 64 KiB buffers per kernel, filled
//             with patterns, pointer tables and linked nodes, and the module
//             variables.
//   request:  "K" → runs kernel K of the table below once, then answers
//             {"k":K,"name":...,"run":true,"sums":[s0,s1,s2,s3]} where si is an
//             order-insensitive checksum of buffer i (sum and sum of squares of
//             its 32-bit words), or "run":false for kernels the harness does
//             not launch (printf, textures, surfaces, a hard-coded address).
//   "count" → {"count":N}
//
// Every kernel touches only its own buffers and read-only module variables,
// so kernel K gives the same sums in the original process, after a
// stop-the-world restore and after an on-demand restore where K runs first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "../unit/access_corpus.cu"

#define PAD_BYTES (16u << 20)
#define BUF_BYTES (64u << 10)
#define NB 4

struct kernel_case {
	const char *name;
	int hash_mask;          // buffers whose checksum the answer holds
};

static const kernel_case cases[] = {
	{ "exact_saxpy", 15 }, { "exact_grid_stride", 15 }, { "exact_restrict", 15 }, { "exact_ldg", 15 },
	{ "exact_many_params", 15 }, { "exact_negative_offset", 15 }, { "exact_char_bytes", 15 },
	{ "exact_half", 15 }, { "exact_vec4", 15 }, { "exact_double2", 15 }, { "exact_matrix_pitch", 15 },
	{ "exact_select", 15 }, { "exact_pointer_walk", 15 }, { "exact_int_param_address", 15 },
	{ "exact_extern_c", 15 }, { "exact_template_scale<float>", 15 }, { "exact_template_scale<double>", 15 },
	{ "exact_template_scale<int>", 15 }, { "exact_struct_by_value", 15 }, { "exact_nested_struct", 15 },
	{ "exact_struct_pointer_array", 15 }, { "opaque_small_struct_pointer_array", 15 },
	{ "exact_gather", 15 }, { "exact_scatter", 15 }, { "exact_histogram", 15 }, { "exact_csr_spmv", 15 },
	{ "exact_atomic_counter", 15 }, { "exact_atomic_cas_max", 15 }, { "exact_shared_reduce", 15 },
	{ "exact_dynamic_shared_scan", 15 }, { "exact_warp_shuffle", 15 }, { "exact_cp_async", 15 },
	{ "exact_inline_ptx_load", 15 }, { "exact_red_add", 15 }, { "exact_module_variable", 15 },
	{ "exact_constant_coeffs", 15 }, { "opaque_pointer_table", 15 }, { "opaque_batched_pointers", 15 },
	{ "opaque_linked_list", 15 }, { "opaque_struct_in_device_memory", 15 },
	{ "opaque_address_from_memory", 15 }, { "opaque_address_from_halves", 15 },
	{ "opaque_shared_staged_pointer", 15 }, { "opaque_pointer_in_module_variable", 15 },
	{ "opaque_constant_pointer_table", 15 }, { "opaque_atomic_exchange_pointer", 15 },
	{ "opaque_absolute_address", -1 }, { "opaque_local_pointer_array", 15 },
	{ "opaque_noinline_call", 15 }, { "opaque_device_new", 0 }, { "opaque_device_malloc_free", 15 },
	{ "opaque_printf", -1 }, { "opaque_texture", -1 }, { "opaque_surface", -1 },
	{ "exact_shuffled_pointer", 15 }, { "exact_gather_int64", 15 }, { "opaque_byte_gather_int64", 15 },
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

struct corpus {
	char *pad;
	char *b[NCASES][NB];
};

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			return -1;                                                             \
		}                                                                              \
	} while (0)

template <typename T> static T *B(corpus *c, int k, int i, size_t elem_off = 0)
{
	return (T *)c->b[k][i] + elem_off;
}

static int put(void *dev, const void *host, size_t n)
{
	CK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
	return 0;
}

// Patterns: word i of buffer (k, j) is small, so float sums stay exact and
// integer indices stay in range.
static int fill(corpus *c)
{
	std::vector<unsigned> w(BUF_BYTES / 4);

	for (int k = 0; k < NCASES; k++)
		for (int j = 0; j < NB; j++) {
			for (size_t i = 0; i < w.size(); i++)
				w[i] = (unsigned)((i * 7 + k * 3 + j) % 17);
			if (put(c->b[k][j], w.data(), BUF_BYTES))
				return -1;
		}
	// float inputs: small integers as floats
	{
		std::vector<float> f(BUF_BYTES / 4);
		int fk[] = { 0, 1, 2, 3, 4, 5, 11, 14, 15, 18, 19, 22, 23, 25, 28, 30, 31, 32, 33, 35, 36, 37, 42, 47 };

		for (int k : fk)
			for (int j = 0; j < NB; j++) {
				for (size_t i = 0; i < f.size(); i++)
					f[i] = (float)((i * 5 + k + j) % 13);
				if (put(c->b[k][j], f.data(), BUF_BYTES))
					return -1;
			}
		for (size_t i = 0; i < f.size() / 2; i++)
			((double *)f.data())[i] = (double)(i % 11);
		if (put(c->b[9][0], f.data(), BUF_BYTES) || put(c->b[16][0], f.data(), BUF_BYTES) ||
		    put(c->b[19][2], f.data(), BUF_BYTES))
			return -1;
	}
	// gather: idx in [0, 4096); scatter: a permutation of 0..255
	for (size_t i = 0; i < w.size(); i++)
		w[i] = (unsigned)((i * 2654435761u) >> 20) % 4096;
	if (put(c->b[22][1], w.data(), BUF_BYTES))
		return -1;
	for (size_t i = 0; i < w.size(); i++)
		w[i] = (unsigned)((i * 37) % 256);
	if (put(c->b[23][1], w.data(), BUF_BYTES))
		return -1;
	// int64 indices in [0, 4096)
	{
		std::vector<long long> q(BUF_BYTES / 8);

		for (size_t i = 0; i < q.size(); i++)
			q[i] = (long long)((i * 40503u) % 4096);
		if (put(c->b[55][1], q.data(), BUF_BYTES) || put(c->b[56][1], q.data(), BUF_BYTES))
			return -1;
	}
	// csr: 256 rows of 4 entries
	for (size_t i = 0; i < w.size(); i++)
		w[i] = (unsigned)(4 * i);
	if (put(c->b[25][0], w.data(), 257 * 4))
		return -1;
	for (size_t i = 0; i < w.size(); i++)
		w[i] = (unsigned)((i * 13) % 4096);
	if (put(c->b[25][1], w.data(), BUF_BYTES))
		return -1;
	// atomic counter starts at 0
	w[0] = 0;
	if (put(c->b[26][0], w.data(), 4))
		return -1;
	// pointer tables and structs in device memory
	{
		void *t36[3] = { c->b[36][1], c->b[36][2], c->b[36][3] };
		void *t37a[2] = { c->b[37][1], c->b[37][2] };
		void *t37c[2] = { c->b[37][3], B<float>(c, 37, 3, 1024) };
		device_view v39;

		memset(&v39, 0, sizeof(v39));
		v39.data = B<float>(c, 39, 1);
		v39.n = 256;
		unsigned long long a40 = (unsigned long long)c->b[40][1];
		unsigned h41[2] = { (unsigned)a40, 0 };
		unsigned long long a41 = (unsigned long long)c->b[41][1];
		std::vector<node> nodes(100);

		h41[0] = (unsigned)a41;
		h41[1] = (unsigned)(a41 >> 32);
		for (int j = 0; j < 100; j++) {
			nodes[j].next = j + 1 < 100 ? (node *)(c->b[38][0] + (j + 1) * sizeof(node)) : nullptr;
			nodes[j].value = (float)j;
		}
		node head45, fresh45;           // zeroed whole: padding bytes are hashed too
		node *slot45 = (node *)c->b[45][1];

		memset(&head45, 0, sizeof(head45));
		memset(&fresh45, 0, sizeof(fresh45));
		head45.value = 5.0f;
		int which[256];

		for (int j = 0; j < 256; j++)
			which[j] = (j * 5) & 3;
		if (put(c->b[36][0], t36, sizeof(t36)) || put(c->b[37][0], t37a, sizeof(t37a)) ||
		    put(c->b[37][0] + 16, t37c, sizeof(t37c)) || put(c->b[38][0], nodes.data(), 100 * sizeof(node)) ||
		    put(c->b[39][0], &v39, sizeof(v39)) || put(c->b[40][0], &a40, 8) || put(c->b[41][0], h41, 8) ||
		    put(c->b[45][1], &head45, sizeof(head45)) || put(c->b[45][0], &slot45, 8) ||
		    put(c->b[45][2], &fresh45, sizeof(fresh45)) || put(c->b[47][3] + 8192, which, sizeof(which)))
			return -1;
	}
	// module variables
	{
		float tab[64], coeffs[16];
		float *p = B<float>(c, 43, 0);
		const float *cp[4] = { B<float>(c, 44, 0), B<float>(c, 44, 1), B<float>(c, 44, 2), B<float>(c, 44, 3) };

		for (int j = 0; j < 64; j++)
			tab[j] = (float)(j % 9);
		for (int j = 0; j < 16; j++)
			coeffs[j] = (float)(j % 3);
		CK(cudaMemcpyToSymbol(dev_table, tab, sizeof(tab)));
		CK(cudaMemcpyToSymbol(const_coeffs, coeffs, sizeof(coeffs)));
		CK(cudaMemcpyToSymbol(dev_pointer, &p, sizeof(p)));
		CK(cudaMemcpyToSymbol(const_pointers, cp, sizeof(cp)));
	}
	CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 8u << 20));
	CK(cudaDeviceSynchronize());
	return 0;
}

static int run_case(corpus *c, int k)
{
	float *f0 = B<float>(c, k, 0), *f1 = B<float>(c, k, 1), *f2 = B<float>(c, k, 2), *f3 = B<float>(c, k, 3);

	switch (k) {
	case 0: exact_saxpy<<<16, 256>>>(4096, 2.0f, f0, f1); break;
	case 1: exact_grid_stride<<<4, 256>>>(f0, f1, 4096); break;
	case 2: exact_restrict<<<1, 256>>>(f0, f1, f2); break;
	case 3: exact_ldg<<<1, 256>>>(f0, f1); break;
	case 4: exact_many_params<<<1, 256>>>(f0, f1, f2, f3, f0 + 1024, f1 + 1024, f2 + 1024, f3 + 1024,
					       f2 + 2048, f3 + 3072); break;
	case 5: exact_negative_offset<<<1, 1>>>(f0, 256); break;
	case 6: exact_char_bytes<<<1, 256>>>((unsigned char *)f1, (const unsigned char *)f0, 4096); break;
	case 7: exact_half<<<1, 256>>>((const __half *)f0, (__half *)f1); break;
	case 8: exact_vec4<<<1, 256>>>((const float4 *)f0, (float4 *)f1); break;
	case 9: exact_double2<<<1, 256>>>((const double2 *)f0, (double *)f1); break;
	case 10: exact_matrix_pitch<<<16, 1>>>(f0, 1024, 256, f1); break;
	case 11: exact_select<<<1, 256>>>(f0, f1, f2, 1); break;
	case 12: exact_pointer_walk<<<1, 256>>>((const int *)f0, (const int *)f0 + 4096, (int *)f1); break;
	case 13: exact_int_param_address<<<1, 256>>>((uintptr_t)f0, 256); break;
	case 14: exact_extern_c<<<1, 256>>>(f0, f1, 256); break;
	case 15: exact_template_scale<float><<<1, 256>>>(f0, 2.0f, 256); break;
	case 16: exact_template_scale<double><<<1, 256>>>((double *)f0, 2.0, 256); break;
	case 17: exact_template_scale<int><<<1, 256>>>((int *)f0, 3, 256); break;
	case 18: exact_struct_by_value<<<1, 256>>>(span{ f0, f1, 256 }); break;
	case 19: exact_nested_struct<<<1, 256>>>(nested{ 3, span{ f0, f1, 256 }, (double *)f2 }); break;
	case 20: {
		wide_ptrs m;
		for (int j = 0; j < 40; j++)
			m.p[j] = j < 16 ? f0 + j * 256 : f1 + (j - 16) * 128;
		exact_struct_pointer_array<<<1, 256>>>(m, 37);
		break;
	}
	case 21: {
		many_ptrs m;
		for (int j = 0; j < 8; j++)
			m.p[j] = f0 + j * 512;
		opaque_small_struct_pointer_array<<<1, 256>>>(m, 5);
		break;
	}
	case 22: exact_gather<<<1, 256>>>(f0, (const int *)f1, f2); break;
	case 23: exact_scatter<<<1, 256>>>(f0, (const int *)f1, f2); break;
	case 24: exact_histogram<<<4, 256>>>((const unsigned char *)f0, 4096, (unsigned *)f1); break;
	case 25: exact_csr_spmv<<<1, 256>>>((const int *)f0, (const int *)f1, f2, f3, f0 + 2048); break;
	case 26: exact_atomic_counter<<<1, 256>>>((int *)f0, (int *)f1); break;
	case 27: exact_atomic_cas_max<<<1, 256>>>((unsigned long long *)f0, (const unsigned long long *)f1); break;
	case 28: exact_shared_reduce<<<4, 256>>>(f0, f1); break;
	case 29: exact_dynamic_shared_scan<<<1, 256, 256 * sizeof(int)>>>((const int *)f0, (int *)f1, 256); break;
	case 30: exact_warp_shuffle<<<4, 32>>>(f0, f1); break;
	case 31: exact_cp_async<<<2, 128>>>((const float4 *)f0, (float4 *)f1); break;
	case 32: exact_inline_ptx_load<<<1, 256>>>(f0, f1); break;
	case 33: exact_red_add<<<1, 256>>>(f0, f1); break;
	case 34: exact_module_variable<<<1, 256>>>(f0); break;
	case 35: exact_constant_coeffs<<<1, 256>>>(f0, f1); break;
	case 36: opaque_pointer_table<<<1, 256>>>((float *const *)f0, 2, f1 + 2048); break;
	case 37: opaque_batched_pointers<<<2, 256>>>((const float *const *)f0, (float *const *)(f0 + 4), 256); break;
	case 38: opaque_linked_list<<<1, 1>>>((const node *)f0, f1); break;
	case 39: opaque_struct_in_device_memory<<<1, 256>>>((const device_view *)f0, f2); break;
	case 40: opaque_address_from_memory<<<1, 256>>>((const unsigned long long *)f0, f2); break;
	case 41: opaque_address_from_halves<<<1, 256>>>((const unsigned *)f0, f2); break;
	case 42: opaque_shared_staged_pointer<<<1, 256>>>(f0, f1, f2, 1); break;
	case 43: opaque_pointer_in_module_variable<<<1, 256>>>(f1); break;
	case 44: opaque_constant_pointer_table<<<1, 256>>>(3, B<float>(c, 44, 0, 2048)); break;
	case 45: opaque_atomic_exchange_pointer<<<1, 1>>>((node **)f0, (node *)f2); break;
	case 47: opaque_local_pointer_array<<<1, 256>>>(f0, f1, f2, f3 + 1024, (const int *)(f3 + 2048)); break;
	case 48: opaque_noinline_call<<<1, 256>>>(f0); break;
	case 49: opaque_device_new<<<1, 1>>>((float **)f0, 16); break;
	case 50: opaque_device_malloc_free<<<1, 256>>>(16, f0); break;
	case 54: exact_shuffled_pointer<<<1, 32>>>(f0, f1); break;
	case 55: exact_gather_int64<<<1, 256>>>(f0, (const long long *)f1, f2); break;
	case 56: opaque_byte_gather_int64<<<1, 256>>>((const unsigned char *)f0, (const long long *)f1,
						       (unsigned char *)f2); break;
	default: return 1;      // not launched
	}
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	return 0;
}

static int handle(void *state, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	static char out[1024];
	corpus *c = (corpus *)state;
	char line[32] = { 0 };
	int k, r, n = 0;

	memcpy(line, req->body, req->len < sizeof(line) - 1 ? req->len : sizeof(line) - 1);
	if (!strncmp(line, "count", 5)) {
		n = snprintf(out, sizeof(out), "{\"count\":%d}", NCASES);
	} else if (sscanf(line, "%d", &k) != 1 || k < 0 || k >= NCASES) {
		n = snprintf(out, sizeof(out), "{\"error\":\"bad kernel index\"}");
	} else if (cases[k].hash_mask < 0 || (r = run_case(c, k)) == 1) {
		n = snprintf(out, sizeof(out), "{\"k\":%d,\"name\":\"%s\",\"run\":false}", k, cases[k].name);
	} else if (r < 0) {
		n = snprintf(out, sizeof(out), "{\"k\":%d,\"name\":\"%s\",\"error\":\"cuda\"}", k, cases[k].name);
	} else {
		std::vector<unsigned> w(BUF_BYTES / 4);

		n = snprintf(out, sizeof(out), "{\"k\":%d,\"name\":\"%s\",\"run\":true,\"sums\":[", k, cases[k].name);
		for (int j = 0; j < NB; j++) {
			unsigned long long s = 0, q = 0;

			if (cudaMemcpy(w.data(), c->b[k][j], BUF_BYTES, cudaMemcpyDeviceToHost) != cudaSuccess)
				return -1;
			if (cases[k].hash_mask & (1 << j))
				for (unsigned x : w) {
					s += x;
					q += (unsigned long long)x * x;
				}
			n += snprintf(out + n, sizeof(out) - n, "%s\"%llx:%llx\"", j ? "," : "", s, q);
		}
		n += snprintf(out + n, sizeof(out) - n, "]}");
	}
	resp->body = (char *)malloc((size_t)n + 1);
	if (!resp->body)
		return -1;
	memcpy(resp->body, out, (size_t)n + 1);
	resp->len = (size_t)n;
	return 0;
}

int main()
{
	static corpus c;

	if (cudaMalloc(&c.pad, PAD_BYTES) != cudaSuccess || cudaMemset(c.pad, 1, PAD_BYTES) != cudaSuccess)
		return 1;
	for (int k = 0; k < NCASES; k++)
		for (int j = 0; j < NB; j++)
			if (cudaMalloc(&c.b[k][j], BUF_BYTES) != cudaSuccess)
				return 1;
	if (fill(&c)) {
		fprintf(stderr, "corpus_fn: init failed\n");
		return 1;
	}
	return phos_fn_serve(handle, &c);
}
