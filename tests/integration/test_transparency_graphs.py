# SPDX-License-Identifier: MIT
"""Issue 12, CUDA graphs, extended and cooperative launches and the
per-thread default stream, run as ordinary CUDA programs
(tests/transparency/graphs/):

- graphs: stream capture (one stream; a fork and join through events;
  capture status and info; errors: a synchronizing call invalidates a
  capture, the legacy stream cannot capture, an unjoined fork), explicit
  graphs (kernel, 1D memcpy, memset, host and empty nodes, dependencies added
  later, node and root counts), launching many times, a kernel node's
  parameters changed in the instantiated graph, cudaGraphExecUpdate;
- graph_nodes: child graph nodes, event record and wait nodes, 2D copies and
  sets and __device__ variable copies captured from a stream, an external
  event record, cudaStreamUpdateCaptureDependencies, clone, node removal,
  dependencies and edges, the instantiated graph's copy, set and host nodes
  changed, cudaGraphInstantiateWithParams, a graph launched into a capture
  refused as CUDA refuses it (the capture invalidated);
- launch_ex: cudaLaunchCooperativeKernel with a grid-wide sync,
  cudaLaunchKernelEx with cooperative, cluster, priority and programmatic
  serialization attributes, an unknown attribute refused, an oversized
  cooperative grid refused, the occupancy calculator;
- ptds: built with --default-stream per-thread, four host threads each on its
  own default stream (the _ptsz entry points), one capturing a graph there,
  all sharing a cuBLAS handle set to cudaStreamPerThread;
- graph_serve: graphs instantiated before phos_fn_serve launch after a
  snapshot is restored (stop-the-world and on demand), their copies to and
  from a __device__ variable included;
- graph_mem: memory nodes: cudaMallocAsync and cudaFreeAsync captured (a
  scratch buffer inside the graph), explicit allocation nodes whose memory
  outlives the launch (freed by cudaFreeAsync, cudaFree, a free node or
  AutoFreeOnLaunch), CUDA's rules for them (a relaunch while the allocation
  lives, clone, child graph, a second instantiation, bad and double free
  nodes: refused), the graph memory attributes, such a graph built through
  cudaGraphAddNode; and `graph_mem serve`
  snapshotted with both graphs instantiated, restored both ways: the
  allocations' addresses, fixed at the nodes' making, still hold.

- graph_cond: conditional nodes (while with an explicit body and with a
  body captured by cudaStreamBeginCaptureToGraph, if/else, switch, a while
  holding an if whose handle was made on the body with
  cudaGraphCondAssignDefault, a kernel node's parameters changed after
  instantiation); `graph_cond serve` snapshotted with two such graphs
  instantiated, restored both ways; `graph_cond host` (a host node beside a
  conditional node) refused at cudaGraphInstantiate, with the reason on
  stderr; `graph_cond loop` checkpointed while it launches, every mode, each
  checkpoint restored.

Each launch of a replayed graph reaches the executor as its nodes' own
records, each with its own read/write set: the trace shows them. A graph
with conditional nodes is made on the device and each launch is one
"graph" record whose set holds every node's, its bodies' included.
"""
import os
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, checkpoint_while_running, done, phos, program, read_trace, run, serve_everywhere

GRAPHS = program("tests", "transparency", "graphs", "graphs")
NODES = program("tests", "transparency", "graphs", "graph_nodes")
LAUNCH_EX = program("tests", "transparency", "graphs", "launch_ex")
PTDS = program("tests", "transparency", "graphs", "ptds")
SERVE = program("tests", "transparency", "graphs", "graph_serve")
MEM = program("tests", "transparency", "graphs", "graph_mem")
COND = program("tests", "transparency", "graphs", "graph_cond")
REQS = "x\nx\nx\n"


def native(prog, *args, stdin=""):
    return subprocess.run([prog, *args], input=stdin, capture_output=True, text=True, timeout=300)


tmp = tempfile.mkdtemp(prefix="phos-graphs-test-")
try:
    for prog, name in ((GRAPHS, "graphs"), (NODES, "graph_nodes"), (LAUNCH_EX, "launch_ex"), (PTDS, "ptds"),
                       (MEM, "graph_mem"), (COND, "graph_cond")):
        trace = os.path.join(tmp, name + ".trace")
        p = run(prog, trace=trace)
        check(p.returncode == 0 and f"{name}: ok" in p.stdout + p.stderr,
              f"{name} under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        if DEVICE == "cuda":
            p = native(prog)
            check(p.returncode == 0 and f"{name}: ok" in p.stdout,
                  f"{name} natively: rc {p.returncode}\n{p.stderr[-3000:]}")
        if not os.path.exists(trace):
            check(False, f"{name}: no trace")
            continue
        recs = read_trace(trace)
        launches = [r for r in recs if r.get("op") == "launch"]
        if name == "graphs":
            # capture_one_stream: 2 kernels x (5 launches + 1 on cudaStreamPerThread);
            # fork/join: 3 x 3; the invalidated capture ran none; explicit: 2 x 4
            # (the fork/join graph, its copies in pinned memory, is made on
            # the device unless PHOS_GRAPHS=replay: 3 graph launches)
            by = {}
            for r in launches:
                by[r.get("kernel")] = by.get(r.get("kernel"), 0) + 1
            graph_recs = [r for r in recs if r.get("op") == "graph"]
            if os.environ.get("PHOS_GRAPHS") == "replay":
                check(by.get("_Z12graphs_saxpyfPKfPfi") == 6 + 4 and by.get("_Z16graphs_scale_addPffi") == 6 + 6 + 4
                      and by.get("_Z10graphs_addPKfS0_Pfi") == 3 and not graph_recs,
                      f"graphs: launches by kernel {by}, {len(graph_recs)} graph launches")
            else:
                check(by.get("_Z12graphs_saxpyfPKfPfi") == 6 + 4 and by.get("_Z16graphs_scale_addPffi") == 6 + 4
                      and "_Z10graphs_addPKfS0_Pfi" not in by and len(graph_recs) == 3 and
                      all(r.get("sets") == "exact" for r in graph_recs),
                      f"graphs: launches by kernel {by}, graph launches {graph_recs}")
            # every replayed node kept its exact sets
            check(launches and all(r.get("sets") == "exact" for r in launches),
                  f"graphs: sets {[r.get('sets') for r in launches][:8]}")
        if name == "graph_nodes":
            # two child graph nodes, the clone with one, the original again; then
            # misc_api's kernel once enabled, once disabled
            copies_2d = len([r for r in recs if r.get("op") == "memcpy_2d"])
            check(len(launches) == 6 and copies_2d == 4,
                  f"graph_nodes: {len(launches)} launches, want 6; {copies_2d} 2D copies, want 4")
        if name == "graph_mem":
            # 4 rounds of the scratch graph (2 kernels) and of the kept one
            # (2 kernels), 2 more launches of the kept one in the rules, 2 of
            # the graph built with cudaGraphAddNode, 2 after its kernel's
            # parameters were changed by the generic setters, and 2 launches
            # of the graph captured across two streams (2 saxpy each); each
            # kernel's set is exact and names the graph's allocation, an
            # ordinary buffer of the executor
            by = {}
            for r in launches:
                by[r.get("kernel")] = by.get(r.get("kernel"), 0) + 1
            check(by.get("_Z12graphs_saxpyfPKfPfi") == 4 + 4 + 2 + 2 + 2 + 4 and
                  by.get("_Z10graphs_addPKfS0_Pfi") == 4 + 4 + 2 + 2 + 2,
                  f"graph_mem: launches by kernel {by}")
            check(launches and all(r.get("sets") == "exact" for r in launches),
                  f"graph_mem: sets {[r.get('sets') for r in launches][:8]}")
        if name == "graph_cond":
            # every launch is one record on the device: while 4, captured
            # while 1, if/else 3, switch 4, nested 1, the plain graph 3
            # times, the one with pinned copies twice, the child graph
            # twice, and the plain one once more after its copy node
            # changed buffers (replayed with PHOS_GRAPHS=replay: 3 kernels
            # a launch, or 1); no other kernel is posted on its own
            graphs = [r for r in recs if r.get("op") == "graph"]
            replay = os.environ.get("PHOS_GRAPHS") == "replay"
            want = (13, 20) if replay else (21, 0)
            check((len(graphs), len(launches)) == want,
                  f"graph_cond: {len(graphs)} graph launches, {len(launches)} kernel launches: want {want}")
            # the plain graph's last launch writes y from x (the copy) and x
            # (the kernels), and sets y
            if not replay and len(graphs) == 21:
                check(len(graphs[-2].get("writes", [])) == 2 and graphs[-2].get("sets") == "exact",
                      f"graph_cond: the child graph's launch: {graphs[-2]}")
                # made again after the change: its copy writes z, a third buffer
                check(len(graphs[-1].get("writes", [])) == 3,
                      f"graph_cond: the changed graph's launch: {graphs[-1]}")
            # the while loop's set holds the body's buffers (its counter and x)
            check(graphs and all(r.get("writes") for r in graphs),
                  f"graph_cond: sets {[(r.get('sets'), r.get('writes')) for r in graphs][:3]}")
        if name == "launch_ex":
            coop = [r for r in launches if r.get("kernel") == "_Z8coop_sumPKiPiS1_i"]
            check(len(coop) == 2, f"launch_ex: {len(coop)} cooperative launches, want 2")
        if name == "ptds":
            # one thread's graph of one kernel, launched twice on its own
            # stream: two kernel launches replayed, two graph launches made
            # on the device
            streams = {r.get("stream") for r in launches}
            graphs = [r for r in recs if r.get("op") == "graph"]
            check(len(launches) + len(graphs) == 4 * 3 * 2 + 2 and 0 not in streams and len(streams) == 4 and
                  len(graphs) == (0 if os.environ.get("PHOS_GRAPHS") == "replay" else 2) and
                  {r.get("stream") for r in graphs} <= streams,
                  f"ptds: {len(launches)} launches on streams {sorted(streams)}, {len(graphs)} graph launches on "
                  f"{sorted({r.get('stream') for r in graphs})}: want 26 on 4 own streams")
            # the shared cuBLAS handle set to cudaStreamPerThread ran each
            # thread's call on that thread's stream, not on the stream of the
            # thread that set it
            blas = [r.get("stream") for r in recs if r.get("op") == "blas_call"]
            check(len(blas) == 12 and set(blas) == streams,
                  f"ptds: cuBLAS calls on streams {sorted(set(blas))}, launches on {sorted(streams)}")
    # the program calls the per-thread entry points
    syms = subprocess.run(["nm", "-D", "--undefined-only", PTDS], capture_output=True, text=True).stdout
    check("cudaMemcpyAsync_ptsz" in syms and "cudaStreamSynchronize_ptsz" in syms,
          f"ptds does not import the _ptsz forms:\n{syms}")

    def check_answers(got, what):
        check(len(got) == 3, f"{what}: {len(got)} of 3 answers")
        for i, a in enumerate(got):
            check(a.get("ok") is True and a.get("host_calls") == i + 1, f"{what}: answer {i}: {a}")

    serve_everywhere(SERVE, REQS, check_answers, tmp)

    def mem_answers(got, what):
        check([a.get("ok") for a in got] == [True] * 3 and [a.get("requests") for a in got] == [1, 2, 3],
              f"graph_mem serve, {what}: {got}")

    serve_everywhere(MEM, REQS, mem_answers, tmp, args=("serve",))

    def cond_answers(got, what):
        check([a.get("ok") for a in got] == [True] * 3 and [a.get("requests") for a in got] == [1, 2, 3],
              f"graph_cond serve, {what}: {got}")

    serve_everywhere(COND, REQS, cond_answers, tmp, args=("serve",))

    # checkpoints of a program launching a conditional graph, every mode: the
    # program goes on, and each checkpoint restored makes the graph again in
    # its executor and goes on with the right results
    checkpoint_while_running(COND, ("loop", "2000"), "graph_cond: ok", tmp, "graph_cond loop")

    # what phos-fn cannot make on the device is refused where CUDA reports
    # errors of a graph's making, and said on stderr; natively it runs
    p = run(COND, "host")
    check(p.returncode == 0 and "instantiate cudaErrorNotSupported" in p.stdout and
          "a CUDA graph with conditional nodes holds a host node" in p.stderr,
          f"graph_cond host under phos-fn: rc {p.returncode}\n{p.stdout[-1000:]}\n{p.stderr[-2000:]}")
    if DEVICE == "cuda":
        p = native(COND, "host")
        check(p.returncode == 0 and "instantiate cudaSuccess" in p.stdout,
              f"graph_cond host natively: rc {p.returncode}\n{p.stdout[-1000:]}\n{p.stderr[-2000:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_graphs")
