// SPDX-License-Identifier: MIT
// More of the graph API, as programs use it: child graph nodes, event record
// and wait nodes, 2D copies and sets and copies to and from a __device__
// variable captured from a stream, an external event record in a capture,
// cudaStreamUpdateCaptureDependencies, cloning, removing a node, walking
// dependencies and edges, changing copy, set and host nodes of an
// instantiated graph, cudaGraphInstantiateWithParams, and a graph launched
// into a capture. Every result is checked against a CPU reference.
#include <cstring>
#include <unistd.h>
#include <vector>

#include "common.h"

static const int N = 1024;
static const int B = 128;
static const int G = (N + B - 1) / B;

__device__ float table[N];

static int calls;
static void CUDART_CB count_call(void *p)
{
	(*(int *)p)++;
}

static void read_back(std::vector<float> &h, const float *d)
{
	CK(cudaMemcpy(h.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
}

// child graph: scale_add(x, 2); parent: memset(x) -> child -> child -> event record -> host
static void child_and_events(float *dx)
{
	cudaGraph_t child, g, cl;
	cudaGraphNode_t k, nset, c1, c2, rec, wait, host;
	cudaGraphExec_t x;
	cudaEvent_t ev;
	cudaStream_t s;
	int n = N;
	float two = 2.0f;
	std::vector<float> h(N), want(N);

	CK(cudaStreamCreate(&s));
	CK(cudaEventCreate(&ev));
	CK(cudaGraphCreate(&child, 0));
	cudaKernelNodeParams kp = {};
	void *args[] = { &dx, &two, &n };
	kp.func = (void *)graphs_scale_add;
	kp.gridDim = dim3(G);
	kp.blockDim = dim3(B);
	kp.kernelParams = args;
	CK(cudaGraphAddKernelNode(&k, child, nullptr, 0, &kp));

	CK(cudaGraphCreate(&g, 0));
	cudaMemsetParams ms = {};
	ms.dst = dx;
	ms.elementSize = 4;
	ms.width = N;
	ms.height = 1;
	CK(cudaGraphAddMemsetNode(&nset, g, nullptr, 0, &ms));
	CK(cudaGraphAddChildGraphNode(&c1, g, &nset, 1, child));
	CK(cudaGraphAddChildGraphNode(&c2, g, &c1, 1, child));
	CK(cudaGraphAddEventRecordNode(&rec, g, &c2, 1, ev));
	CK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
	cudaHostNodeParams hp = { count_call, &calls };
	CK(cudaGraphAddHostNode(&host, g, &wait, 1, &hp));
	// the child was copied when it was added: this node is not in c1 or c2
	cudaGraphNode_t extra;
	CK(cudaGraphAddKernelNode(&extra, child, &k, 1, &kp));

	cudaGraph_t inner;
	size_t cnt = 0;
	CK(cudaGraphChildGraphNodeGetGraph(c1, &inner));
	CK(cudaGraphGetNodes(inner, nullptr, &cnt));
	EXPECT(cnt == 1, "child graph node holds %zu nodes, want 1", cnt);
	cudaGraphNodeType t;
	CK(cudaGraphNodeGetType(c2, &t));
	EXPECT(t == cudaGraphNodeTypeGraph, "child node type %d", (int)t);
	CK(cudaGraphNodeGetType(rec, &t));
	EXPECT(t == cudaGraphNodeTypeEventRecord, "event record node type %d", (int)t);
	cudaEvent_t got;
	CK(cudaGraphEventRecordNodeGetEvent(rec, &got));
	EXPECT(got == ev, "event of the record node");

	cudaGraphInstantiateParams ip = {};
	CK(cudaGraphInstantiateWithParams(&x, g, &ip));
	EXPECT(ip.result_out == cudaGraphInstantiateSuccess, "instantiate result %d", (int)ip.result_out);
	CK(cudaGraphLaunch(x, s));
	CK(cudaEventSynchronize(ev));    // recorded by the graph behind both children
	read_back(h, dx);
	for (int i = 0; i < N; i++)
		want[i] = (0.0f * 2.0f + (float)i) * 2.0f + (float)i;
	same(h.data(), want.data(), N, "child graph nodes");
	CK(cudaStreamSynchronize(s));
	EXPECT(calls == 1, "host node ran %d times", calls);

	// clone, find a node in it, remove the second child: memset -> child, record, wait, host
	CK(cudaGraphClone(&cl, g));
	cudaGraphNode_t c2c, c1c;
	CK(cudaGraphNodeFindInClone(&c2c, c2, cl));
	CK(cudaGraphNodeFindInClone(&c1c, c1, cl));
	size_t ndep = 0;
	CK(cudaGraphNodeGetDependentNodes(c1c, nullptr, nullptr, &ndep));
	EXPECT(ndep == 1, "%zu nodes depend on the first child, want 1", ndep);
	CK(cudaGraphDestroyNode(c2c));
	CK(cudaGraphNodeGetDependentNodes(c1c, nullptr, nullptr, &ndep));
	EXPECT(ndep == 0, "%zu nodes depend on the first child after removing the second", ndep);
	CK(cudaGraphGetNodes(cl, nullptr, &cnt));
	EXPECT(cnt == 5, "%zu nodes in the clone after a removal, want 5", cnt);
	size_t nedges = 0;
	CK(cudaGraphGetEdges(cl, nullptr, nullptr, nullptr, &nedges));
	EXPECT(nedges == 3, "%zu edges in the clone, want 3", nedges);   // set->c1, rec->wait, wait->host
	cudaGraphExec_t xc;
	CK(cudaGraphInstantiate(&xc, cl, 0));
	CK(cudaGraphLaunch(xc, s));
	CK(cudaStreamSynchronize(s));
	read_back(h, dx);
	for (int i = 0; i < N; i++)
		want[i] = (float)i;
	same(h.data(), want.data(), N, "clone without the second child");
	// the original graph is untouched
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	read_back(h, dx);
	for (int i = 0; i < N; i++)
		want[i] = (float)i * 3.0f;
	same(h.data(), want.data(), N, "original after the clone changed");
	CK(cudaGraphExecDestroy(xc));
	CK(cudaGraphExecDestroy(x));
	CK(cudaGraphDestroy(cl));
	CK(cudaGraphDestroy(g));
	CK(cudaGraphDestroy(child));
	CK(cudaEventDestroy(ev));
	CK(cudaStreamDestroy(s));
}

// captured: 2D set, 2D copies, copies into a __device__ variable and back, a
// 1D copy, an external event record, a host function and (a new root after
// cudaStreamUpdateCaptureDependencies) a 1D set; then the instantiated
// graph's 1D copy, 1D set and host nodes change (CUDA changes only 1D ones)
static void capture_pitched_and_symbols(float *dx)
{
	const int W = 64, H = 16;   // floats per row, rows
	float *dp, *dy, *dz;
	unsigned char *dflag;
	size_t pitch;
	cudaStream_t s;
	cudaEvent_t ev;
	cudaGraph_t g;
	cudaGraphExec_t x;
	std::vector<float> src(W * H), back(W * H), sym(N), h(N), iota(N);
	unsigned char flag[16];

	CK(cudaStreamCreate(&s));
	CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CK(cudaMallocPitch(&dp, &pitch, W * sizeof(float), H));
	CK(cudaMalloc(&dy, N * sizeof(float)));
	CK(cudaMalloc(&dz, N * sizeof(float)));
	CK(cudaMalloc(&dflag, sizeof(flag)));
	for (int i = 0; i < W * H; i++)
		src[i] = (float)(i % 251);
	for (int i = 0; i < N; i++) {
		sym[i] = (float)(N - i);
		iota[i] = (float)(3 * i);
	}
	CK(cudaMemcpy(dz, iota.data(), N * sizeof(float), cudaMemcpyHostToDevice));

	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CK(cudaMemset2DAsync(dp, pitch, 0, W * sizeof(float), H, s));
	CK(cudaMemcpy2DAsync(dp, pitch, src.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice, s));
	CK(cudaMemcpy2DAsync(back.data(), W * sizeof(float), dp, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost, s));
	CK(cudaMemcpyToSymbolAsync(table, sym.data(), N * sizeof(float), 0, cudaMemcpyHostToDevice, s));
	CK(cudaMemcpyFromSymbolAsync(dx, table, N * sizeof(float), 0, cudaMemcpyDeviceToDevice, s));
	CK(cudaMemcpyAsync(dy, dx, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
	CK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));
	CK(cudaLaunchHostFunc(s, count_call, &calls));
	cudaStreamCaptureStatus st;
	const cudaGraphNode_t *deps;
	size_t ndeps = 0;
	CK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &ndeps));
	EXPECT(ndeps == 1, "%zu capture dependencies, want 1", ndeps);
	// the next node depends on nothing (a new root) once the set is emptied
	CK(cudaStreamUpdateCaptureDependencies(s, nullptr, nullptr, 0, cudaStreamSetCaptureDependencies));
	CK(cudaMemsetAsync(dflag, 0x7f, sizeof(flag), s));
	CK(cudaStreamEndCapture(s, &g));
	size_t cnt = 0, nroots = 0;
	CK(cudaGraphGetNodes(g, nullptr, &cnt));
	CK(cudaGraphGetRootNodes(g, nullptr, &nroots));
	EXPECT(cnt == 9 && nroots == 2, "%zu nodes, %zu roots; want 9, 2", cnt, nroots);
	CK(cudaGraphInstantiate(&x, g, 0));
	int before = calls;
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	EXPECT(memcmp(back.data(), src.data(), W * H * sizeof(float)) == 0, "2D copies in a graph");
	CK(cudaMemcpyFromSymbol(h.data(), table, N * sizeof(float)));
	same(h.data(), sym.data(), N, "copy into a __device__ variable");
	read_back(h, dx);
	same(h.data(), sym.data(), N, "copy out of a __device__ variable");
	read_back(h, dy);
	same(h.data(), sym.data(), N, "1D copy");
	CK(cudaMemcpy(flag, dflag, sizeof(flag), cudaMemcpyDeviceToHost));
	EXPECT(flag[0] == 0x7f && flag[15] == 0x7f, "1D set: %#x %#x", flag[0], flag[15]);
	EXPECT(cudaEventQuery(ev) == cudaSuccess, "the external event record node did not complete");
	EXPECT(calls == before + 1, "host node of the capture ran %d times", calls - before);

	// change the instantiated graph's 1D copy (now from dz), 1D set (0x01)
	// and host node (another counter), found by their parameters
	cudaGraphNode_t nodes[9];
	int other = 0, changed = 0;
	cnt = 9;
	CK(cudaGraphGetNodes(g, nodes, &cnt));
	for (size_t i = 0; i < cnt; i++) {
		cudaGraphNodeType t;

		CK(cudaGraphNodeGetType(nodes[i], &t));
		if (t == cudaGraphNodeTypeMemset) {
			cudaMemsetParams m;

			CK(cudaGraphMemsetNodeGetParams(nodes[i], &m));
			if (m.dst != dflag)
				continue;
			EXPECT(m.value == 0x7f && m.width == sizeof(flag) && m.height == 1, "set node read back wrong");
			m.value = 1;
			CK(cudaGraphExecMemsetNodeSetParams(x, nodes[i], &m));
			changed++;
		} else if (t == cudaGraphNodeTypeHost) {
			cudaHostNodeParams hp = { count_call, &other };

			CK(cudaGraphExecHostNodeSetParams(x, nodes[i], &hp));
			changed++;
		} else if (t == cudaGraphNodeTypeMemcpy) {
			cudaMemcpy3DParms p;

			CK(cudaGraphMemcpyNodeGetParams(nodes[i], &p));
			if (p.srcPtr.ptr != dx || p.dstPtr.ptr != dy)
				continue;
			EXPECT(p.extent.width == N * sizeof(float) && p.extent.height == 1 && p.extent.depth == 1 &&
			       p.kind == cudaMemcpyDeviceToDevice, "1D copy node read back wrong");
			CK(cudaGraphExecMemcpyNodeSetParams1D(x, nodes[i], dy, dz, N * sizeof(float),
							      cudaMemcpyDeviceToDevice));
			changed++;
		}
	}
	EXPECT(changed == 3, "found %d of the 3 nodes to change", changed);
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	read_back(h, dy);
	same(h.data(), iota.data(), N, "changed 1D copy node");
	CK(cudaMemcpy(flag, dflag, sizeof(flag), cudaMemcpyDeviceToHost));
	EXPECT(flag[0] == 1 && flag[15] == 1, "changed 1D set node: %#x %#x", flag[0], flag[15]);
	EXPECT(other == 1 && calls == before + 1, "changed host node: other %d, calls %d", other, calls - before);

	// an instantiated graph launched into a capturing stream: refused by CUDA
	// (cudaErrorStreamCaptureUnsupported on an H100, CUDA 13), which then
	// invalidates the capture
	cudaGraph_t outer = nullptr;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	cudaError_t e = cudaGraphLaunch(x, s);
	EXPECT(e == cudaErrorStreamCaptureUnsupported, "a graph launched into a capture: %s", cudaGetErrorName(e));
	e = cudaStreamEndCapture(s, &outer);
	EXPECT(e == cudaErrorStreamCaptureInvalidated && outer == nullptr, "the capture after it ended with %s",
	       cudaGetErrorName(e));
	cudaGetLastError();
	EXPECT(other == 1, "host node ran %d times in all, want 1", other);

	CK(cudaGraphExecDestroy(x));
	CK(cudaGraphDestroy(g));
	CK(cudaFree(dp));
	CK(cudaFree(dy));
	CK(cudaFree(dz));
	CK(cudaFree(dflag));
	CK(cudaEventDestroy(ev));
	CK(cudaStreamDestroy(s));
}

// explicit symbol copy nodes, removing an edge, disabling a node of an
// instantiated graph, kernel node attributes, the DOT picture, stream ids
static void misc_api(float *dx)
{
	cudaGraph_t g;
	cudaGraphNode_t to, from, k;
	cudaGraphExec_t x;
	cudaStream_t s, s2;
	std::vector<float> in(N), h(N), want(N);
	int n = N;
	float four = 4.0f;

	CK(cudaStreamCreate(&s));
	CK(cudaStreamCreate(&s2));
	unsigned long long id1 = 0, id2 = 0;
	CK(cudaStreamGetId(s, &id1));
	CK(cudaStreamGetId(s2, &id2));
	EXPECT(id1 != id2, "two streams with one id %llu", id1);
	for (int i = 0; i < N; i++)
		in[i] = (float)(i % 17);

	// host -> table, table -> dx, dx = 4 dx + i
	CK(cudaGraphCreate(&g, 0));
	CK(cudaGraphAddMemcpyNodeToSymbol(&to, g, nullptr, 0, table, in.data(), N * sizeof(float), 0,
					  cudaMemcpyHostToDevice));
	CK(cudaGraphAddMemcpyNodeFromSymbol(&from, g, &to, 1, dx, table, N * sizeof(float), 0,
					    cudaMemcpyDeviceToDevice));
	cudaKernelNodeParams kp = {};
	void *args[] = { &dx, &four, &n };
	kp.func = (void *)graphs_scale_add;
	kp.gridDim = dim3(G);
	kp.blockDim = dim3(B);
	kp.kernelParams = args;
	CK(cudaGraphAddKernelNode(&k, g, &from, 1, &kp));
	cudaLaunchAttributeValue v = {}, back = {};
	v.priority = -1;
	CK(cudaGraphKernelNodeSetAttribute(k, cudaLaunchAttributePriority, &v));
	CK(cudaGraphKernelNodeGetAttribute(k, cudaLaunchAttributePriority, &back));
	EXPECT(back.priority == -1, "kernel node priority read back %d", back.priority);
	cudaError_t e = cudaGraphKernelNodeSetAttribute(k, (cudaLaunchAttributeID)999, &v);
	EXPECT(e != cudaSuccess, "an unknown kernel node attribute was accepted");
	(void)cudaGetLastError();

	char path[] = "/tmp/graph_nodes_XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0) {
		close(fd);
		CK(cudaGraphDebugDotPrint(g, path, 0));
		FILE *f = fopen(path, "r");
		char line[256] = "";
		EXPECT(f && fgets(line, sizeof(line), f) && strstr(line, "digraph"), "DOT file starts with %s", line);
		if (f)
			fclose(f);
		unlink(path);
	}

	CK(cudaGraphInstantiate(&x, g, 0));
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	read_back(h, dx);
	for (int i = 0; i < N; i++)
		want[i] = in[i] * 4.0f + (float)i;
	same(h.data(), want.data(), N, "symbol copy nodes and a kernel");

	// the kernel node disabled: dx is what the copy left
	CK(cudaGraphNodeSetEnabled(x, k, 0));
	unsigned en = 1;
	CK(cudaGraphNodeGetEnabled(x, k, &en));
	EXPECT(en == 0, "disabled node reads enabled");
	CK(cudaGraphLaunch(x, s));
	CK(cudaStreamSynchronize(s));
	read_back(h, dx);
	same(h.data(), in.data(), N, "a disabled kernel node ran");
	CK(cudaGraphNodeSetEnabled(x, k, 1));
	CK(cudaGraphExecDestroy(x));

	// remove the edge from -> k: k becomes a root
	size_t nroots = 0, nedges = 0;
	CK(cudaGraphRemoveDependencies(g, &from, &k, nullptr, 1));
	CK(cudaGraphGetRootNodes(g, nullptr, &nroots));
	CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &nedges));
	EXPECT(nroots == 2 && nedges == 1, "after removing an edge: %zu roots, %zu edges; want 2, 1", nroots, nedges);
	e = cudaGraphRemoveDependencies(g, &from, &k, nullptr, 1);
	EXPECT(e == cudaErrorInvalidValue, "removing a missing edge: %s", cudaGetErrorName(e));
	(void)cudaGetLastError();
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(s));
	CK(cudaStreamDestroy(s2));
}

int main()
{
	float *dx;

	CK(cudaMalloc(&dx, N * sizeof(float)));
	child_and_events(dx);
	capture_pitched_and_symbols(dx);
	misc_api(dx);
	CK(cudaFree(dx));
	if (failures) {
		fprintf(stderr, "graph_nodes: %d failures\n", failures);
		return 1;
	}
	printf("graph_nodes: ok\n");
	return 0;
}
