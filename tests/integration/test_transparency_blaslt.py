# SPDX-License-Identifier: MIT
"""Transparency of cuBLASLt (issues 12 and 16): a program that uses the matmul
API as its users do (FP32 with the heuristic's algorithm and a workspace,
FP16 with bias + ReLU and bias + GELU epilogues, BF16 row-major strided
batches with descriptors in its own storage, FP64 with device scalars,
attributes read back) gets its CPU reference's answers under phos-fn;
cuBLAS and cuBLASLt calls captured into a CUDA graph (blas_graph) replay
with each launch on the launch stream, and the handle runs eagerly after; the
executor's read/write sets of two matmuls are exactly the bytes cuBLASLt
defines; an attribute phos cannot forward (TRANSC) is refused loudly. With
PHOS_TEST_DEVICE=cuda (tools/gpu-check) the program also runs natively."""
import json
import os
import subprocess
import tempfile

from harness import DEVICE, check, done, program, read_trace, run


def prog(name):
    return program("tests", "transparency", "blaslt", name)


p = run(prog("blaslt"))
print(p.stdout[-3000:])
check(p.returncode == 0 and "blaslt: ok" in p.stdout,
      f"blaslt under phos-fn ({DEVICE}) exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
if DEVICE == "cuda":
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    n = subprocess.run([prog("blaslt")], capture_output=True, text=True, timeout=300, env=env)
    check(n.returncode == 0 and "blaslt: ok" in n.stdout, f"blaslt natively exited {n.returncode}: {n.stdout[-2000:]}")

# cuBLAS and cuBLASLt captured into a graph (as PyTorch's CUDA graphs do):
# each launch posts the calls again on the launch stream, each with its own
# set; the handle answers eagerly afterwards
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "graph.jsonl")
    p = run(prog("blas_graph"), "strict", trace=trace)
    check(p.returncode == 0 and "blas_graph: ok" in p.stdout,
          f"blas_graph under phos-fn ({DEVICE}) exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    recs = read_trace(trace) if os.path.exists(trace) else []
    lt = [r for r in recs if r.get("op") == "blaslt_matmul"]
    # 4 launches of the graph: its matmul 4 times, each on the launch stream, with an exact set
    check(len(lt) == 4 and len({r.get("stream") for r in lt}) == 1 and all(r.get("sets") != "opaque" for r in lt),
          f"blas_graph: the captured matmul ran once a launch: {[(r.get('stream'), r.get('sets')) for r in lt]}")
if DEVICE == "cuda":
    n = subprocess.run([prog("blas_graph")], capture_output=True, text=True, timeout=300, env=env)
    check(n.returncode == 0 and "blas_graph: ok" in n.stdout,
          f"blas_graph natively exited {n.returncode}: {n.stdout[-2000:]}")

# TRANSC has no exact set here: NOT_SUPPORTED, and one stderr line that says why
p = run(prog("blaslt_sets"), "transc")
check(p.returncode == 0 and "transc: CUBLAS_STATUS_NOT_SUPPORTED" in p.stdout,
      f"a matmul with TRANSC is refused: {p.returncode} {p.stdout} {p.stderr[-1000:]}")
lines = [l for l in p.stderr.splitlines() if "CUBLASLT_MATMUL_DESC_TRANSC" in l and "not supported" in l]
check(len(lines) == 1, f"one stderr line names TRANSC: {p.stderr[-2000:]}")

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(prog("blaslt_sets"), trace=trace)
    check(p.returncode == 0, f"blaslt_sets exited {p.returncode}: {p.stdout} {p.stderr}")
    lines = p.stdout.strip().splitlines()
    ptr = json.loads(lines[-1]) if p.returncode == 0 and lines else {}
    recs = [r for r in read_trace(trace) if r["op"] == "blaslt_matmul"] if ptr else []


def at(name, size, off=0):
    return [ptr[name] + off, size]


def sets(rec, reads, writes, what):
    check(sorted(rec["reads"]) == sorted(reads), f"{what} reads {rec['reads']}, want {reads}")
    check(sorted(rec["writes"]) == sorted(writes), f"{what} writes {rec['writes']}, want {writes}")


check(len(recs) == 2, f"two blaslt_matmul records in the trace, got {len(recs)}")
if len(recs) == 2:
    # A 8 x 6 (ld 10), B 6 x 5 (ld 6), D 8 x 5 (ld 9), fp32; beta 0: C not read
    sets(recs[0], [at("a", 232), at("b", 120), at("bias", 32)], [at("d", 176), at("ws", 1 << 20)],
         "column order, bias epilogue, workspace")
    # row order, 2 batches: A 4 x 3 ld 5 stride 30, B 3 x 2 ld 2 stride 6, C = D 4 x 2 ld 2 stride 8
    sets(recs[1], [at("a2", 192), at("b2", 48), at("cd2", 64), at("s2", 4), at("s2", 4, 8)], [at("cd2", 64)],
         "row order, batched, device scalars")
done("transparency_blaslt")
