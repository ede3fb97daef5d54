# SPDX-License-Identifier: MIT
"""Transparency of cuBLAS (issue 12): public-style CUDA programs that use the
Set/Get helpers, every precision of the level 1-3 routines (symv, hemv, syrk,
herk and the rotations included, blas_sym), mixed-precision
GEMMs, batched LU and least squares (blas_lu), batched trsm and QR (blas_batched), the 64-bit-integer _64 forms (blas_64) and cublasXt run under phos-fn and give the answers their own CPU
references expect; cublasXt is refused loudly; the executor's read/write sets
of a few routines are exactly the bytes cuBLAS defines. With
PHOS_TEST_DEVICE=cuda (tools/gpu-check) the programs also run natively, so
that the same checks hold for the real libraries."""
import json
import os
import re
import subprocess
import tempfile

from harness import DEVICE, check, done, program, read_trace, run


def prog(name):
    return program("tests", "transparency", "blas", name)


def native(name):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([prog(name)], capture_output=True, text=True, timeout=300, env=env)


OK_LINE = {"blas_helpers": "blas_helpers: ok", "blas_level": "blas_level: all precisions ok",
           "blas_ex": "blas_ex: ok", "blas_lu": "blas_lu: ok", "blas_batched": "blas_batched: ok",
           "blas_sym": "blas_sym: ok",
           "blas_64": "blas_64: ok"}

for name, line in OK_LINE.items():
    p = run(prog(name))
    print(p.stdout[-3000:])
    check(p.returncode == 0 and line in p.stdout,
          f"{name} under phos-fn ({DEVICE}) exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    if DEVICE == "cuda":
        n = native(name)
        check(n.returncode == 0 and line in n.stdout, f"{name} natively exited {n.returncode}: {n.stdout[-2000:]}")

# cublasXt (preload/cublas/cublas_xt.c): gemms of every type on host and
# device matrices run whole on one device through the forwarded cuBLAS, their
# answers checked in the program; syrk, not run, is refused with NOT_SUPPORTED
# and one stderr line naming it
p = run(prog("blas_xt"))
check(p.returncode == 0 and "xt: ok (syrk refused)" in p.stdout,
      f"blas_xt under phos-fn: {p.returncode} {p.stdout} {p.stderr[-2000:]}")
lines = [l for l in p.stderr.splitlines() if "cublasXtSsyrk " in l and "not supported" in l]
check(len(lines) == 1, f"one stderr line names cublasXtSsyrk: {p.stderr[-2000:]}")
refused_calls = re.findall(r"phos-fn: (cublasXt\w+) is not supported", p.stderr)
check(refused_calls == ["cublasXtSsyrk"], f"only the syrk refused: {refused_calls}")
if DEVICE == "cuda":
    n = native("blas_xt")
    check(n.returncode == 0 and "xt: ok" in n.stdout and "refused" not in n.stdout,
          f"blas_xt natively: {n.returncode} {n.stdout}")
# `blas_xt refused` makes no forwarded call (cublasXtCreate makes no cuBLAS
# handle until the first gemm), so it never takes its channel (modules go
# out at first use): when it ends before the executor hands the channel over
# (a slow device open; PHOS_FAULT=channel_late waits 1 s), its exit is its own.
p = run(prog("blas_xt"), "refused", env={"PHOS_FAULT": "channel_late"})
check(p.returncode == 0 and "xt: refused" in p.stdout and "executor failed" not in p.stderr,
      f"blas_xt ending before its channel: rc {p.returncode} {p.stdout} {p.stderr[-1500:]}")

# read/write sets in the trace
with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(prog("blas_sets"), trace=trace)
    check(p.returncode == 0, f"blas_sets exited {p.returncode}: {p.stdout} {p.stderr}")
    ptr = json.loads(p.stdout.strip().splitlines()[-1])
    recs = read_trace(trace)


def one(op, kernel=None):
    r = [x for x in recs if x["op"] == op and (kernel is None or x.get("kernel") == kernel)]
    check(len(r) == 1, f"one {op} {kernel or ''} in the trace, got {len(r)}")
    return r[0] if r else {"reads": None, "writes": None}


def sets(rec, reads, writes, what):
    check(sorted(rec["reads"]) == sorted(reads), f"{what} reads {rec['reads']}, want {reads}")
    check(sorted(rec["writes"]) == sorted(writes), f"{what} writes {rec['writes']}, want {writes}")


def at(name, size, off=0):
    return [ptr[name] + off, size]


sets(one("blas_set_matrix"), [], [at("sv", 76)], "SetVector (n 10, incy 2)")
sets(one("blas_get_matrix"), [at("sv", 72)], [], "GetMatrix (3 x 4, ld 5)")
sets(one("blas_call", "Daxpy"), [at("dx", 120), at("dy", 176)], [at("dy", 176)], "Daxpy (n 8, inc 2 and 3)")
sets(one("blas_call", "Zdotc"), [at("zx", 80), at("zy", 80)], [], "Zdotc (n 5)")
sets(one("blas_call", "Cgemv"), [at("ca", 216), at("cx", 48)], [at("cy", 32)], "Cgemv T (6 x 4, lda 7, beta 0)")
sets(one("blas_call", "Strsm"), [at("ta", 116), at("tb", 84)], [at("tb", 84)], "Strsm left (5 x 3, lda 6, ldb 8)")
sets(one("blas_call", "Snrm2"), [at("nx", 64)], [at("nr", 4)], "Snrm2, device result")
sets(one("blas_gemm"), [at("gs", 8), at("gs", 8, 8), at("ga", 128), at("ga", 128, 128), at("ga", 128, 256)],
     [at("ga", 128, 256)], "Dgemm, device scalars")
sets(one("blas_lu", "Sgetrf"), [at("la", 16), at("lm", 44), at("lm", 44, 1024)],
     [at("lm", 44), at("lm", 44, 1024), at("lp", 24), at("li", 8)], "Sgetrf batched (2 of 3 x 3, lda 4)")
sets(one("blas_call", "StrsmBatched"), [at("tba", 16), at("tbb", 16), at("tbm", 44), at("tbm", 44, 1024),
                                        at("tbm", 32, 2048), at("tbm", 32, 3072)],
     [at("tbm", 32, 2048), at("tbm", 32, 3072)], "StrsmBatched left (2 of A 3 x 3, lda 4; B 3 x 2, ldb 5)")
sets(one("blas_lu", "Dgeqrf"), [at("qa", 16), at("qt", 16), at("qm", 112), at("qm", 112, 1024)],
     [at("qm", 112), at("qm", 112, 1024), at("qm", 24, 2048), at("qm", 24, 3072)],
     "Dgeqrf batched (2 of 4 x 3, lda 5; tau 3)")
sets(one("blas_lu", "Sgels"), [at("lsa", 16), at("lsc", 16), at("lsm", 56), at("lsm", 56, 1024),
                               at("lsm", 40, 2048), at("lsm", 40, 3072)],
     [at("lsm", 56), at("lsm", 56, 1024), at("lsm", 40, 2048), at("lsm", 40, 3072), at("lsi", 8)],
     "Sgels batched (2 of A 4 x 3, lda 5; C 4 x 2, ldc 6; devInfo)")
done("transparency_blas")
