// SPDX-License-Identifier: MIT
// A function that builds and instantiates its graph during init (one
// captured, one explicit), then serves: each request launches both and
// answers whether the results match the CPU reference. Snapshotted at
// phos_fn_serve and restored, the instantiated graphs must still launch.
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "common.h"

static const int N = 2048;
static const int B = 128;
static const int G = (N + B - 1) / B;

// copied in and out by the captured graph: a restored executor may place
// module variables elsewhere, and the graph must follow
__device__ float staged[N];

struct state {
	cudaStream_t s;
	cudaGraphExec_t captured, built;
	float *dx, *dy, *hy, *hs;   // hy, hs: pinned
	std::vector<float> x;
	int requests;
	int host_calls;
};

static void CUDART_CB count_call(void *p)
{
	(*(int *)p)++;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	std::vector<float> want(N);
	bool ok = true;
	char out[256];

	(void)req;
	st->requests++;
	// captured: y = 2x + y_prev... reset y first so every request is the same
	CK(cudaMemcpyAsync(st->dy, st->x.data(), N * sizeof(float), cudaMemcpyHostToDevice, st->s));
	memset(st->hs, 0, N * sizeof(float));
	CK(cudaGraphLaunch(st->captured, st->s));   // y = 3x + y, y = 2y + i, D2H into hy, y -> staged -> hs
	CK(cudaStreamSynchronize(st->s));
	for (int i = 0; i < N; i++) {
		want[i] = (3.0f * st->x[i] + st->x[i]) * 2.0f + (float)i;
		if (st->hy[i] != want[i] || st->hs[i] != want[i]) {
			if (ok)
				fprintf(stderr, "captured [%d] = %g (staged %g), want %g\n", i, st->hy[i], st->hs[i],
					want[i]);
			ok = false;
		}
	}
	CK(cudaGraphLaunch(st->built, st->s));      // y = 0 (memset), y += 4x, host node
	CK(cudaStreamSynchronize(st->s));
	std::vector<float> y(N);
	CK(cudaMemcpy(y.data(), st->dy, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		if (y[i] != 4.0f * st->x[i]) {
			if (ok)
				fprintf(stderr, "built [%d] = %g, want %g\n", i, y[i], 4.0f * st->x[i]);
			ok = false;
		}
	snprintf(out, sizeof(out), "{\"ok\":%s,\"requests\":%d,\"host_calls\":%d}", ok ? "true" : "false",
		 st->requests, st->host_calls);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static state st;
	cudaGraph_t g;
	int n = N;
	float three = 3.0f, two = 2.0f, four = 4.0f;

	st.x.resize(N);
	for (int i = 0; i < N; i++)
		st.x[i] = (float)(i % 41);
	CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	CK(cudaMalloc(&st.dx, N * sizeof(float)));
	CK(cudaMalloc(&st.dy, N * sizeof(float)));
	CK(cudaMallocHost(&st.hy, N * sizeof(float)));
	CK(cudaMallocHost(&st.hs, N * sizeof(float)));
	CK(cudaMemcpy(st.dx, st.x.data(), N * sizeof(float), cudaMemcpyHostToDevice));

	CK(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal));
	graphs_saxpy<<<G, B, 0, st.s>>>(three, st.dx, st.dy, n);
	graphs_scale_add<<<G, B, 0, st.s>>>(st.dy, two, n);
	CK(cudaMemcpyAsync(st.hy, st.dy, N * sizeof(float), cudaMemcpyDeviceToHost, st.s));
	CK(cudaMemcpyToSymbolAsync(staged, st.dy, N * sizeof(float), 0, cudaMemcpyDeviceToDevice, st.s));
	CK(cudaMemcpyFromSymbolAsync(st.hs, staged, N * sizeof(float), 0, cudaMemcpyDeviceToHost, st.s));
	CK(cudaStreamEndCapture(st.s, &g));
	CK(cudaGraphInstantiate(&st.captured, g, 0));
	CK(cudaGraphDestroy(g));   // the instantiated graph lives on without it

	cudaGraphNode_t nset, nk, nh;
	CK(cudaGraphCreate(&g, 0));
	cudaMemsetParams m = {};
	m.dst = st.dy;
	m.elementSize = 1;
	m.width = N * sizeof(float);
	m.height = 1;
	CK(cudaGraphAddMemsetNode(&nset, g, nullptr, 0, &m));
	cudaKernelNodeParams kp = {};
	void *args[] = { &four, &st.dx, &st.dy, &n };
	kp.func = (void *)graphs_saxpy;
	kp.gridDim = dim3(G);
	kp.blockDim = dim3(B);
	kp.kernelParams = args;
	CK(cudaGraphAddKernelNode(&nk, g, &nset, 1, &kp));
	cudaHostNodeParams hp = { count_call, &st.host_calls };
	CK(cudaGraphAddHostNode(&nh, g, &nk, 1, &hp));
	CK(cudaGraphInstantiate(&st.built, g, 0));
	CK(cudaGraphDestroy(g));
	return phos_fn_serve(handle, &st);
}
