// SPDX-License-Identifier: MIT
// Graph memory nodes, as CUDA's graphMemoryNodes sample uses them: a scratch
// buffer allocated and freed inside a captured graph (cudaMallocAsync and
// cudaFreeAsync on the capturing stream), and explicit allocation nodes
// whose memory outlives the launch (freed by cudaFreeAsync, cudaFree, or
// AutoFreeOnLaunch); CUDA's rules for such graphs (a relaunch while the last
// allocation lives fails; no clone, no child graph, one instantiation at a
// time; a free node only for an allocation, once); the graph memory
// attributes; and such a graph built through cudaGraphAddNode, its kernel
// changed by cudaGraphExecNodeSetParams and cudaGraphNodeSetParams.
//
// argv[1] "serve": build both graphs during init, then serve: each request
// launches them and checks the results (snapshotted at phos_fn_serve and
// restored, the allocations' fixed addresses must still hold).
#include <cstdint>
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "common.h"

static const int N = 4096;
static const int B = 128;
static const int G = (N + B - 1) / B;

struct state {
	cudaStream_t s;
	float *dx, *dy, *dz, *hz;
	std::vector<float> x, y;
	cudaGraph_t scratch_g, keep_g;
	cudaGraphExec_t scratch, keep;
	void *kept;           // the keep graph's allocation (its address is fixed)
	int requests;
};

static uint64_t attr(cudaGraphMemAttributeType a)
{
	uint64_t v = 0;

	CK(cudaDeviceGetGraphMemAttribute(0, a, &v));
	return v;
}

// scratch: tmp = alloc; tmp = 0; tmp += 2x; z = tmp + y; free tmp
static void build_scratch(state *st)
{
	float *tmp = nullptr;

	CK(cudaStreamBeginCapture(st->s, cudaStreamCaptureModeGlobal));
	CK(cudaMallocAsync((void **)&tmp, N * sizeof(float), st->s));
	EXPECT(tmp != nullptr, "captured cudaMallocAsync gave an address");
	CK(cudaMemsetAsync(tmp, 0, N * sizeof(float), st->s));
	graphs_saxpy<<<G, B, 0, st->s>>>(2.0f, st->dx, tmp, N);
	graphs_add<<<G, B, 0, st->s>>>(tmp, st->dy, st->dz, N);
	CK(cudaFreeAsync(tmp, st->s));
	CK(cudaStreamEndCapture(st->s, &st->scratch_g));
	CK(cudaGraphInstantiate(&st->scratch, st->scratch_g, 0));
}

// keep: p = alloc (explicit node); p = 0; p += 3x; z = p + y; p stays
static void build_keep(state *st)
{
	cudaMemAllocNodeParams ap;
	cudaGraphNode_t alloc, set, k1, k2;
	cudaMemsetParams ms;
	cudaKernelNodeParams kp;
	float a = 3.0f;
	int n = N;
	void *args1[4], *args2[4];

	CK(cudaGraphCreate(&st->keep_g, 0));
	memset(&ap, 0, sizeof(ap));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = N * sizeof(float);
	CK(cudaGraphAddMemAllocNode(&alloc, st->keep_g, nullptr, 0, &ap));
	st->kept = ap.dptr;
	EXPECT(st->kept != nullptr, "an allocation node gave an address");
	memset(&ms, 0, sizeof(ms));
	ms.dst = st->kept;
	ms.elementSize = 4;
	ms.width = N;
	ms.height = 1;
	ms.value = 0;
	CK(cudaGraphAddMemsetNode(&set, st->keep_g, &alloc, 1, &ms));
	args1[0] = &a, args1[1] = &st->dx, args1[2] = &st->kept, args1[3] = &n;
	memset(&kp, 0, sizeof(kp));
	kp.func = (void *)graphs_saxpy;
	kp.gridDim = dim3(G);
	kp.blockDim = dim3(B);
	kp.kernelParams = args1;
	CK(cudaGraphAddKernelNode(&k1, st->keep_g, &set, 1, &kp));
	args2[0] = &st->kept, args2[1] = &st->dy, args2[2] = &st->dz, args2[3] = &n;
	kp.func = (void *)graphs_add;
	kp.kernelParams = args2;
	CK(cudaGraphAddKernelNode(&k2, st->keep_g, &k1, 1, &kp));
	CK(cudaGraphInstantiate(&st->keep, st->keep_g, 0));

	cudaMemAllocNodeParams got;
	CK(cudaGraphMemAllocNodeGetParams(alloc, &got));
	EXPECT(got.dptr == st->kept && got.bytesize == N * sizeof(float) &&
		       got.poolProps.location.type == cudaMemLocationTypeDevice && got.poolProps.location.id == 0,
	       "the allocation node's parameters read back");
}

static bool check_z(state *st, float a, const char *what)
{
	std::vector<float> want(N);

	CK(cudaMemcpy(st->hz, st->dz, N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < N; i++)
		want[i] = a * st->x[i] + st->y[i];
	return same(st->hz, want.data(), N, what);
}

static void setup(state *st)
{
	CK(cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking));
	st->x.resize(N);
	st->y.resize(N);
	for (int i = 0; i < N; i++) {
		st->x[i] = (float)(i % 97) * 0.5f;
		st->y[i] = (float)(i % 13) - 6.0f;
	}
	CK(cudaMalloc(&st->dx, N * sizeof(float)));
	CK(cudaMalloc(&st->dy, N * sizeof(float)));
	CK(cudaMalloc(&st->dz, N * sizeof(float)));
	CK(cudaMallocHost(&st->hz, N * sizeof(float)));
	CK(cudaMemcpy(st->dx, st->x.data(), N * sizeof(float), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(st->dy, st->y.data(), N * sizeof(float), cudaMemcpyHostToDevice));
	build_scratch(st);
	build_keep(st);
}

// One round of both graphs: scratch, then keep (its allocation freed after
// the launch, in stream order).
static bool round_trip(state *st, const char *what)
{
	bool ok;

	CK(cudaGraphLaunch(st->scratch, st->s));
	CK(cudaStreamSynchronize(st->s));
	ok = check_z(st, 2.0f, what);
	CK(cudaGraphLaunch(st->keep, st->s));
	CK(cudaFreeAsync(st->kept, st->s));
	CK(cudaStreamSynchronize(st->s));
	return check_z(st, 3.0f, what) && ok;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	char out[128];
	bool ok;

	(void)req;
	st->requests++;
	ok = round_trip(st, "request");
	snprintf(out, sizeof(out), "{\"ok\": %s, \"requests\": %d}", ok ? "true" : "false", st->requests);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

// The same as the keep graph, built through cudaGraphAddNode (CUDA 12.3+):
// an allocation, a memset, the two kernels, a D2D copy out, a free node.
static void add_node_graph(state *st)
{
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t alloc, set, k1, k2, cp, fr;
	cudaGraphNodeParams p = {};   // (an aggregate: its union has members with constructors)
	float a = 3.0f;
	int n = N;
	void *mem, *args1[4], *args2[4];

	CK(cudaGraphCreate(&g, 0));
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemAlloc;
	p.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
	p.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
	p.alloc.bytesize = N * sizeof(float);
	CK(cudaGraphAddNode(&alloc, g, nullptr, nullptr, 0, &p));
	mem = p.alloc.dptr;
	EXPECT(mem != nullptr, "cudaGraphAddNode gave the allocation's address");
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = mem;
	p.memset.elementSize = 4;
	p.memset.width = N;
	p.memset.height = 1;
	CK(cudaGraphAddNode(&set, g, &alloc, nullptr, 1, &p));
	args1[0] = &a, args1[1] = &st->dx, args1[2] = &mem, args1[3] = &n;
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeKernel;
	p.kernel.func = (void *)graphs_saxpy;
	p.kernel.gridDim = dim3(G);
	p.kernel.blockDim = dim3(B);
	p.kernel.kernelParams = args1;
	CK(cudaGraphAddNode(&k1, g, &set, nullptr, 1, &p));
	args2[0] = &mem, args2[1] = &st->dy, args2[2] = &st->dz, args2[3] = &n;
	p.kernel.func = (void *)graphs_add;
	p.kernel.kernelParams = args2;
	CK(cudaGraphAddNode(&k2, g, &k1, nullptr, 1, &p));
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemcpy;
	p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(st->dz, N * sizeof(float), N, 1);
	p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(st->hz, N * sizeof(float), N, 1);
	p.memcpy.copyParams.extent = make_cudaExtent(N * sizeof(float), 1, 1);
	p.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
	CK(cudaGraphAddNode(&cp, g, &k2, nullptr, 1, &p));
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemFree;
	p.free.dptr = mem;
	CK(cudaGraphAddNode(&fr, g, &k2, nullptr, 1, &p));
	CK(cudaGraphInstantiate(&x, g, 0));
	for (int i = 0; i < 2; i++) {   // freed in the graph: launched again
		memset(st->hz, 0, N * sizeof(float));
		CK(cudaGraphLaunch(x, st->s));
		CK(cudaStreamSynchronize(st->s));
		std::vector<float> want(N);
		for (int j = 0; j < N; j++)
			want[j] = 3.0f * st->x[j] + st->y[j];
		same(st->hz, want.data(), N, "cudaGraphAddNode graph");
	}
	// the generic setters (CUDA 12.2+): the instantiated kernel's scale, then
	// the graph's own node before a new instantiation
	std::vector<float> want(N);
	const float scales[2] = { 5.0f, 7.0f };
	for (int round = 0; round < 2; round++) {
		a = scales[round];
		memset(&p, 0, sizeof(p));
		p.type = cudaGraphNodeTypeKernel;
		p.kernel.func = (void *)graphs_saxpy;
		p.kernel.gridDim = dim3(G);
		p.kernel.blockDim = dim3(B);
		p.kernel.kernelParams = args1;   // packed now: a later change of a is not seen
		if (round == 0) {
			CK(cudaGraphExecNodeSetParams(x, k1, &p));
		} else {
			CK(cudaGraphExecDestroy(x));
			CK(cudaGraphNodeSetParams(k1, &p));
			CK(cudaGraphInstantiate(&x, g, 0));
		}
		a = -1.0f;
		memset(st->hz, 0, N * sizeof(float));
		CK(cudaGraphLaunch(x, st->s));
		CK(cudaStreamSynchronize(st->s));
		for (int j = 0; j < N; j++)
			want[j] = scales[round] * st->x[j] + st->y[j];
		same(st->hz, want.data(), N, round ? "cudaGraphNodeSetParams" : "cudaGraphExecNodeSetParams");
	}
	EXPECT(cudaGraphNodeSetParams(set, &p) != cudaSuccess, "kernel parameters for a memset node: refused");
	cudaGetLastError();
	memset(&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemFree;
	p.free.dptr = mem;
	EXPECT(cudaGraphExecNodeSetParams(x, fr, &p) != cudaSuccess, "a free node's parameters are not changed");
	cudaGetLastError();
	CK(cudaGraphExecDestroy(x));
	CK(cudaGraphDestroy(g));
}

static void rules(state *st)
{
	cudaGraph_t g;
	cudaGraphExec_t x2;
	cudaGraphNode_t node;
	void *plain;

	// launched again while its allocation lives: refused (then freed by cudaFree)
	CK(cudaGraphLaunch(st->keep, st->s));
	CK(cudaStreamSynchronize(st->s));
	EXPECT(attr(cudaGraphMemAttrUsedMemCurrent) >= N * sizeof(float), "the kept allocation is in use: %llu",
	       (unsigned long long)attr(cudaGraphMemAttrUsedMemCurrent));
	EXPECT(cudaGraphLaunch(st->keep, st->s) != cudaSuccess, "a relaunch with its allocation live is refused");
	cudaGetLastError();
	CK(cudaFree(st->kept));
	// (CUDA keeps freed graph memory reserved, and may count it used, until a trim)
	EXPECT(attr(cudaGraphMemAttrReservedMemCurrent) >= N * sizeof(float), "reserved for the graphs: %llu",
	       (unsigned long long)attr(cudaGraphMemAttrReservedMemCurrent));
	CK(cudaGraphLaunch(st->keep, st->s));
	CK(cudaStreamSynchronize(st->s));
	check_z(st, 3.0f, "after cudaFree");
	EXPECT(cudaFree(st->kept) == cudaSuccess, "cudaFree of the kept allocation");
	EXPECT(cudaFree(st->kept) != cudaSuccess, "freed twice: refused");
	cudaGetLastError();

	// no clone, no child graph, no second instantiation
	EXPECT(cudaGraphClone(&g, st->keep_g) != cudaSuccess, "a graph with memory nodes is not cloned");
	cudaGetLastError();
	CK(cudaGraphCreate(&g, 0));
	EXPECT(cudaGraphAddChildGraphNode(&node, g, nullptr, 0, st->keep_g) != cudaSuccess,
	       "a graph with memory nodes is not a child");
	cudaGetLastError();
	EXPECT(cudaGraphInstantiate(&x2, st->keep_g, 0) != cudaSuccess, "one instantiation at a time");
	cudaGetLastError();

	// free nodes: only an allocation's address, once
	CK(cudaMalloc(&plain, 256));
	EXPECT(cudaGraphAddMemFreeNode(&node, g, nullptr, 0, plain) != cudaSuccess,
	       "a free node of a cudaMalloc address is refused");
	cudaGetLastError();
	CK(cudaFree(plain));
	{
		cudaGraph_t h;
		cudaGraphNode_t a, f, f2;
		cudaGraphExec_t hx;
		cudaMemAllocNodeParams ap;
		void *freed = nullptr;

		CK(cudaGraphCreate(&h, 0));
		memset(&ap, 0, sizeof(ap));
		ap.poolProps.allocType = cudaMemAllocationTypePinned;
		ap.poolProps.location.type = cudaMemLocationTypeDevice;
		ap.bytesize = 1 << 20;
		CK(cudaGraphAddMemAllocNode(&a, h, nullptr, 0, &ap));
		CK(cudaGraphAddMemFreeNode(&f, h, &a, 1, ap.dptr));
		CK(cudaGraphMemFreeNodeGetParams(f, &freed));
		EXPECT(freed == ap.dptr, "the free node's address reads back");
		EXPECT(cudaGraphAddMemFreeNode(&f2, h, &f, 1, ap.dptr) != cudaSuccess, "freed twice in a graph: refused");
		cudaGetLastError();
		// freed in its graph: launched many times
		CK(cudaGraphInstantiate(&hx, h, 0));
		for (int i = 0; i < 3; i++)
			CK(cudaGraphLaunch(hx, st->s));
		CK(cudaStreamSynchronize(st->s));
		CK(cudaGraphExecDestroy(hx));
		// AutoFreeOnLaunch: an allocation that outlives each launch
		cudaGraph_t k;
		cudaGraphNode_t ka;
		cudaGraphExec_t kx;

		CK(cudaGraphCreate(&k, 0));
		CK(cudaGraphAddMemAllocNode(&ka, k, nullptr, 0, &ap));
		CK(cudaGraphInstantiateWithFlags(&kx, k, cudaGraphInstantiateFlagAutoFreeOnLaunch));
		for (int i = 0; i < 3; i++)
			CK(cudaGraphLaunch(kx, st->s));
		CK(cudaStreamSynchronize(st->s));
		CK(cudaFree(ap.dptr));
		CK(cudaGraphExecDestroy(kx));
		CK(cudaGraphDestroy(k));
		CK(cudaGraphDestroy(h));
	}
	CK(cudaGraphDestroy(g));
	uint64_t high = attr(cudaGraphMemAttrUsedMemHigh);
	EXPECT(high >= N * sizeof(float), "the high watermark of use: %llu", (unsigned long long)high);
	uint64_t zero = 0, one = 1;
	CK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
	EXPECT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one) != cudaSuccess,
	       "a high watermark is reset only to zero");
	cudaGetLastError();
	CK(cudaDeviceGraphMemTrim(0));
}

// Memory nodes captured across two streams, as the graphMemoryNodes sample
// writes them: allocations on the origin stream, a fork to a second stream
// through an event, copies to and from pageable host memory on both, one
// buffer freed on the second stream, then joined back. Launched twice with
// new input; the host vectors hold the answers after each launch.
static void two_streams(state *st)
{
	std::vector<float> in(N), sq(N, -1.0f), neg(N, -1.0f);
	float *a = nullptr, *b = nullptr, *c = nullptr;
	cudaStream_t s2;
	cudaEvent_t forked, done, freed;
	cudaGraph_t g;
	cudaGraphExec_t ge;

	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CK(cudaEventCreate(&forked));
	CK(cudaEventCreate(&done));
	CK(cudaEventCreate(&freed));
	CK(cudaStreamBeginCapture(st->s, cudaStreamCaptureModeGlobal));
	CK(cudaMallocAsync((void **)&a, N * sizeof(float), st->s));
	CK(cudaMallocAsync((void **)&b, N * sizeof(float), st->s));
	CK(cudaMemcpyAsync(a, in.data(), N * sizeof(float), cudaMemcpyHostToDevice, st->s));
	CK(cudaMemsetAsync(b, 0, N * sizeof(float), st->s));
	graphs_saxpy<<<G, B, 0, st->s>>>(2.0f, a, b, N);             // b = 2 in
	CK(cudaEventRecord(forked, st->s));
	CK(cudaStreamWaitEvent(s2, forked, 0));
	CK(cudaMemcpyAsync(sq.data(), b, N * sizeof(float), cudaMemcpyDeviceToHost, s2));
	CK(cudaFreeAsync(a, st->s));
	CK(cudaMallocAsync((void **)&c, N * sizeof(float), st->s));
	CK(cudaMemsetAsync(c, 0, N * sizeof(float), st->s));
	graphs_saxpy<<<G, B, 0, st->s>>>(-1.0f, b, c, N);            // c = -2 in
	CK(cudaEventRecord(done, st->s));
	CK(cudaMemcpyAsync(neg.data(), c, N * sizeof(float), cudaMemcpyDeviceToHost, st->s));
	CK(cudaFreeAsync(c, st->s));
	CK(cudaStreamWaitEvent(s2, done, 0));
	CK(cudaFreeAsync(b, s2));
	CK(cudaEventRecord(freed, s2));
	CK(cudaStreamWaitEvent(st->s, freed, 0));
	// the second stream and the events go before the capture ends (joined
	// back: nothing of theirs is pending in it)
	CK(cudaStreamDestroy(s2));
	CK(cudaEventDestroy(forked));
	CK(cudaEventDestroy(done));
	CK(cudaEventDestroy(freed));
	CK(cudaStreamEndCapture(st->s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int round = 1; round <= 2; round++) {
		for (int i = 0; i < N; i++)
			in[i] = (float)((i * round) % 101) - 50.0f;
		CK(cudaGraphLaunch(ge, st->s));
		CK(cudaStreamSynchronize(st->s));
		int bad = -1;
		for (int i = 0; i < N && bad < 0; i++)
			if (sq[i] != 2.0f * in[i] || neg[i] != -2.0f * in[i])
				bad = i;
		EXPECT(bad < 0, "two streams, launch %d: [%d] %g %g for %g", round, bad, bad < 0 ? 0.0 : sq[bad],
		       bad < 0 ? 0.0 : neg[bad], bad < 0 ? 0.0 : in[bad]);
	}
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
}

// An allocation node after the free node of another of the same size takes
// its virtual address, as the driver's do (graphMemoryNodes checks it).
static void address_reuse(state *st)
{
	cudaMemAllocNodeParams ap;
	cudaGraphNode_t a1, f1, a2, f2;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	void *first;

	(void)st;
	CK(cudaGraphCreate(&g, 0));
	memset(&ap, 0, sizeof(ap));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = N * sizeof(float);
	CK(cudaGraphAddMemAllocNode(&a1, g, nullptr, 0, &ap));
	first = ap.dptr;
	CK(cudaGraphAddMemFreeNode(&f1, g, &a1, 1, first));
	CK(cudaGraphAddMemAllocNode(&a2, g, &f1, 1, &ap));
	EXPECT(ap.dptr == first, "an allocation after a free node is at %p, not the freed %p", ap.dptr, first);
	CK(cudaGraphAddMemFreeNode(&f2, g, &a2, 1, ap.dptr));
	// one beside the second (after the first's free, not the second's) may
	// not: both would be live at once
	cudaGraphNode_t a3, f3;
	CK(cudaGraphAddMemAllocNode(&a3, g, &f1, 1, &ap));
	EXPECT(ap.dptr != first, "an allocation beside a live one shares its address %p", first);
	CK(cudaGraphAddMemFreeNode(&f3, g, &a3, 1, ap.dptr));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaGraphLaunch(ge, st->s));
	CK(cudaStreamSynchronize(st->s));
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
}

int main(int argc, char **argv)
{
	static state st;

	setup(&st);
	if (argc > 1 && !strcmp(argv[1], "serve")) {
		int r = phos_fn_serve(handle, &st);

		return r ? r : failures ? 1 : 0;
	}
	for (int i = 0; i < 3; i++)
		round_trip(&st, "launch");
	rules(&st);
	add_node_graph(&st);
	two_streams(&st);
	address_reuse(&st);
	round_trip(&st, "after the rules");
	CK(cudaGraphExecDestroy(st.scratch));
	CK(cudaGraphExecDestroy(st.keep));
	CK(cudaGraphDestroy(st.scratch_g));
	CK(cudaGraphDestroy(st.keep_g));
	CK(cudaStreamSynchronize(st.s));
	if (failures) {
		fprintf(stderr, "graph_mem: %d failure(s)\n", failures);
		return 1;
	}
	printf("graph_mem: ok\n");
	return 0;
}
