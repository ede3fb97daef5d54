# SPDX-License-Identifier: MIT
"""Issue 16, the driver API stand-in (preload/driver/libcuda.c): driver
(tests/transparency/driver/) links libcuda only, loads its kernels from an
embedded PTX text, fatbin and cubin, launches them with kernelParams, with
extra's packed buffer and through cuLaunchKernelEx, and checks every answer
against a CPU reference, with memory, streams, events, pointer attributes,
module variables, cuGetProcAddress and bad images besides, modules read
from files (cuModuleLoad) and PTX linked at run time (cuLink*), of one
input and of several (relocatable device code, linked by nvJitLink).

Under phos-fn (the test device) it must pass with its phos-only checks, be
served by the stand-in (never the real driver: the guard would refuse it),
and its modules, launches and copies must be in the executor's trace, with
the launches' read/write sets; on a GPU (PHOS_TEST_DEVICE=cuda) it runs
natively too, so that its checks are checked against the real driver.
entry_point, a runtime program, reaches the same entry points through
cudaGetDriverEntryPoint and uses them on the runtime's memory and kernels.
driver_serve, a function on the driver API, is snapshotted and restored.
driver_2d makes pitched copies (cuMemcpy2D/3D, with offsets, host, device,
async) and 2D sets of 8, 16 and 32 bits, checking every byte, padding too;
driver_array makes CUDA arrays (2D, 1D, layered) and copies with array sides.
driver_graph launches driver-API kernels into a runtime-API capture (as
torch.compile's reduce-overhead mode does with Triton's kernels) and replays
the graph with new inputs."""
import json
import os
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, done, fn_env, phos, program, read_trace, run

exe = program("tests", "transparency", "driver", "driver")
entry = program("tests", "transparency", "driver", "entry_point")
exe2d = program("tests", "transparency", "driver", "driver_2d")
exegraph = program("tests", "transparency", "driver", "driver_graph")
exearr = program("tests", "transparency", "driver", "driver_array")
tmp = tempfile.mkdtemp(prefix="phos-driver-test-")
try:
    trace = os.path.join(tmp, "driver.trace")
    p = run(exe, "phos", trace=trace, device=DEVICE, timeout=300, env={"PHOS_LOG": "warn"})
    check(p.returncode == 0 and "driver: ok" in p.stdout,
          f"driver under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    # an export it does not forward (cuGraphCreate, called twice) is named once
    check(p.stderr.count("cuGraphCreate is not supported") == 1,
          f"cuGraphCreate named {p.stderr.count('cuGraphCreate is not supported')} times in the log")
    recs = read_trace(trace) if os.path.exists(trace) else []
    ops = {r.get("op") for r in recs}
    for op in ("launch", "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memset"):
        check(op in ops, f"no {op} in the trace: {sorted(ops)}")
    # Launches carry read/write sets like the runtime's. saxpy (y = a*x + y,
    # 1000 floats each) ran twice from each module: from PTX and the fatbin
    # (which carries PTX) the access analysis proves its sets exact, x and y
    # read, y written; from the cubin (SASS only) it is opaque; then twice
    # more from PTX loaded with JIT options; then from files (cuModuleLoad:
    # PTX exact, the cubin opaque), and from PTX linked at run
    # time, from memory and from its file (cuLinkComplete gives the PTX
    # itself back: still exact).
    launches = [r for r in recs if r.get("op") == "launch"]
    saxpy = [r for r in launches if r.get("kernel") == "_Z9drv_saxpyfPKfPfi"]
    fill = [r for r in launches if r.get("kernel") == "drv_fill"]
    check(len(saxpy) == 18 and len(fill) == 1, f"launches: {[r.get('kernel') for r in launches]}")
    # ... and last, twice through the legacy API (cuParamSet*, cuLaunchGrid[Async]: the packed buffer)
    want_sets = (["exact"] * 4 + ["opaque"] * 2 + ["exact"] * 2 + ["exact"] * 2 + ["opaque"] * 2 + ["exact"] * 4 +
                 ["exact"] * 2)
    check([r.get("sets") for r in saxpy] == want_sets, f"saxpy sets: {[r.get('sets') for r in saxpy]}")
    for r in [r for r, want in zip(saxpy, want_sets) if want == "exact"]:
        writes, reads = r.get("writes", []), r.get("reads", [])
        check(len(writes) == 1 and writes[0][1] == 4000 and writes[0] in reads and len(reads) == 2
              and all(n == 4000 for _, n in reads), f"saxpy sets: reads {reads} writes {writes}")
    for r in fill:
        check(len(r.get("writes", [])) == 1 and r["writes"][0][1] == 4000, f"fill writes {r.get('writes')}")
    # relocatable code linked from several inputs (PTX with PTX, a cubin, a
    # library) by nvJitLink: a cubin, so its kernel is opaque
    linked = [r for r in launches if r.get("kernel") == "_Z10drv_linkedPfi"]
    check([r.get("sets") for r in linked] == ["opaque"] * 3, f"linked launches: {[r.get('sets') for r in linked]}")

    # The runtime's way to the driver: cudaGetDriverEntryPoint gives the
    # stand-in's entry points, which work on the runtime's allocations.
    ep_trace = os.path.join(tmp, "entry_point.trace")
    p = run(entry, "phos", trace=ep_trace, device=DEVICE, timeout=300)
    check(p.returncode == 0 and "entry_point: ok" in p.stdout,
          f"entry_point under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    ops = {r.get("op") for r in read_trace(ep_trace)} if os.path.exists(ep_trace) else set()
    # cuMemsetD32 of 3 (bytes that differ): a copy of the pattern, no memset
    check({"launch", "memcpy_h2d", "memcpy_d2h"} <= ops, f"entry_point forwarded ops {sorted(ops)}")

    # Pitched copies and 2D sets of the driver API: each one forwarded as a
    # pitched record (memcpy_2d, memset_2d), every byte right.
    d2_trace = os.path.join(tmp, "driver_2d.trace")
    p = run(exe2d, "phos", trace=d2_trace, device=DEVICE, timeout=300)
    check(p.returncode == 0 and "driver_2d: ok" in p.stdout,
          f"driver_2d under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    ops = {r.get("op") for r in read_trace(d2_trace)} if os.path.exists(d2_trace) else set()
    check({"memcpy_2d", "memset_2d"} <= ops, f"driver_2d forwarded ops {sorted(ops)}")
    check("not supported" not in p.stderr, f"driver_2d met an unsupported call: {p.stderr[-1500:]}")
    # CUDA arrays through the driver: made, described, copied with array sides
    # (2D, layered 3D, the 1D forms), every element right
    arr_trace = os.path.join(tmp, "driver_array.trace")
    p = run(exearr, trace=arr_trace, device=DEVICE, timeout=300)
    check(p.returncode == 0 and "driver_array: ok" in p.stdout and "not supported" not in p.stderr,
          f"driver_array under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    ops = {r.get("op") for r in read_trace(arr_trace)} if os.path.exists(arr_trace) else set()
    check("array_copy" in ops, f"driver_array forwarded ops {sorted(ops)}")

    # A function written against the driver API, snapshotted at phos_fn_serve:
    # its module (loaded from PTX), kernel and device buffers come back in a
    # restored executor, stop-the-world and on demand, and it answers what the
    # original process answers.
    serve = program("tests", "transparency", "driver", "driver_serve")
    reqs = "{}\n{}\n{}\n"
    ref = [json.loads(line) for line in run(serve, stdin=reqs).stdout.splitlines() if line.startswith("{")]
    check(len(ref) == 3 and ref[0]["sum"] == 750250.0 and ref[2]["sum"] == 1249750.0, f"driver_serve answered {ref}")
    snap = os.path.join(tmp, "snap")
    p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", serve)
    check(p.returncode == 0, f"driver_serve snapshot: rc {p.returncode}: {p.stderr[-3000:]}")
    for mode in ([], ["--on-demand"]):
        p = phos("restore", "--device", DEVICE, *mode, snap, stdin=reqs)
        got = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        check(p.returncode == 0 and got == ref, f"driver_serve restored {mode}: {got}, want {ref}: {p.stderr[-3000:]}")

    # driver-API launches into a runtime capture (torch.compile's reduce-overhead):
    # record nodes, a kernel node each of the graph made on the device (one
    # graph record a launch), or with PHOS_GRAPHS=replay posted again on the
    # launch stream at each launch
    for mode in ("device", "replay"):
        gtrace = os.path.join(tmp, f"graph-{mode}.jsonl")
        p = run(exegraph, trace=gtrace, device=DEVICE, timeout=300,
                env={"PHOS_GRAPHS": "replay"} if mode == "replay" else None)
        check(p.returncode == 0 and "driver_graph: ok" in p.stdout,
              f"driver_graph under phos-fn ({mode}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        recs = read_trace(gtrace) if os.path.exists(gtrace) else []
        launches = [r for r in recs if r.get("op") == "launch"]
        graphs = [r for r in recs if r.get("op") == "graph"]
        got = launches if mode == "replay" else graphs
        check(len(got) == (6 if mode == "replay" else 3) and len(launches + graphs) == len(got) and
              len({r.get("stream") for r in got}) == 1 and all(r.get("sets") != "opaque" for r in got),
              f"driver_graph ({mode}): two launches a graph launch or one graph record, on its stream: "
              f"{[(r.get('op'), r.get('stream'), r.get('sets')) for r in launches + graphs]}")

    if DEVICE == "cuda":
        env = fn_env()
        env.pop("LD_PRELOAD", None)
        for prog, name in ((exe, "driver"), (entry, "entry_point"), (exe2d, "driver_2d"),
                           (exearr, "driver_array"), (exegraph, "driver_graph")):
            n = subprocess.run([prog], capture_output=True, text=True, timeout=300, env=env)
            check(n.returncode == 0 and f"{name}: ok" in n.stdout,
                  f"{name} natively: exit {n.returncode}\n{n.stdout[-2000:]}\n{n.stderr[-3000:]}")
        n = subprocess.run([serve], input=reqs, capture_output=True, text=True, timeout=300, env=env)
        got = [json.loads(line) for line in n.stdout.splitlines() if line.startswith("{")]
        check(n.returncode == 0 and got == ref, f"driver_serve natively: {got}, want {ref}: {n.stderr[-2000:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("transparency_driver")
