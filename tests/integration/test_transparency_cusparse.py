# SPDX-License-Identifier: MIT
"""Transparency of cuSPARSE's generic API (issue 38):
tests/transparency/cusparse/cusparse_serve makes a handle (on a stream of its
own) and every descriptor at init: CSR of 32-bit and of one-based 64-bit
indices, COO, a two-batch CSR made with NULL pointers and given them later,
dense vectors and matrices of both orders, a batched one. Each request runs
SpMV (float, double, transposed, COO, alpha and beta in device memory),
SpMM (column- and row-major, A^T B^T, batched, after SpMM_preprocess), SDDMM
(after SDDMM_preprocess), SparseToDense, Xcoo2csr, CreateIdentityPermutation,
XcoosortByRow and Xcsrsort (a legacy MatDescr), and SpGEMM (work estimation,
compute, C's size, CsrSetPointers, copy), every answer checked by the
program against a plain product of its own:

- under phos-fn, natively on a GPU, and after a snapshot at phos_fn_serve
  is restored, stop-the-world and on demand: the handle and descriptors
  were made before the snapshot and the new executor serves them all;
- checkpoints of the running program (stw, cow, recopy) restored answer on,
  and checkpointed at random moments of a loop of cuSPARSE calls, the
  restored copy goes on where it was stopped and ends with every step right;
- the read/write set of every call is exactly the bytes cuSPARSE's rules
  give its operands, written out below from the documentation: CSR offsets
  rows + 1 entries, columns and values nnz of their types, a dense matrix
  from its first element to its last (the gaps past ld's rows are not in
  it), the output read only when beta is non-zero, alpha and beta in device
  mode, the external buffer (of the size the library asked) read and
  written;
- the program's DT_RPATH to a copy of NVIDIA's libcusparse.so.12 in
  nvidia/cu13/lib (the layout of PyTorch's CUDA 13 wheels) serves it
  natively, and phos-fn's stand-in under phos-fn; a real libcusparse under
  another name (libcusparse.so.11) is refused by the guard before it runs;
- SpGEMM's compute reads A and B only (C's count, computed in the
  executor), and its copy writes C's three arrays at C's nnz;
- an export phos-fn does not implement (SpSV) answers
  CUSPARSE_STATUS_NOT_SUPPORTED and is named once in the log (PHOS_LOG=warn),
  and a complex matrix is refused with one stderr line.
"""
import json
import os
import random
import select
import shutil
import subprocess
import tempfile
import time

from harness import (DEVICE, PHOS_FN, check, checkpoint_everywhere, done, fn_env, program, read_trace, run,
                     serve_everywhere)

PROG = program("tests", "transparency", "cusparse", "cusparse_serve")
STANDIN = os.path.realpath(program("preload", "libcusparse.so.12"))
WHEEL = os.path.join(os.path.dirname(PROG), "nvidia", "cu13", "lib", "libcusparse.so.12")
REQS = "x\nx\nx\n"
NOT_SUPPORTED = 10   # CUSPARSE_STATUS_NOT_SUPPORTED
GUARD_EXIT = 121   # runtime/guard/guard.h
PROBE = program("tests", "transparency", "guard", "driver_probe")
M, K, N, L, LDB, BATCH = 7, 5, 3, 4, 7, 2


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [1, 2, 3],
          f"cusparse_serve {what}: {ans}")


def served_by(stderr):
    lines = [l[len("cusparse: "):] for l in stderr.splitlines() if l.startswith("cusparse: ")]
    return lines[0] if lines else None


def expected_sets(p):
    """The 18 calls of one request, in order: (op, reads, writes), each a
    sorted list of [address, bytes], from cuSPARSE's rules."""
    z = p["nnz"]
    f4, f8, i4, i8 = 4, 8, 4, 8

    def buf(name):
        return [[p["buf_" + name], p["size_" + name]]] if p["size_" + name] else []

    csr = [[p["off"], (M + 1) * i4], [p["col"], z * i4], [p["val"], z * f4]]
    csr64 = [[p["off64"], (M + 1) * i8], [p["col64"], z * i8], [p["val64"], z * f8]]
    # B: K x N column-major with ld 7: from (0, 0) to (K-1, N-1), (N-1) 7 + K elements
    mb = [p["mb"], ((N - 1) * LDB + K) * f4]
    g = [[p["offg"], (K + 1) * i4], [p["colg"], p["nnz_g"] * i4], [p["valg"], p["nnz_g"] * f4]]
    # C = A G: (i, l) when some k has A(i, k) ((i + 2k) % 3 == 0, i < 6) and G(k, l) ((k + l) % 2 == 0)
    zc = sum(1 for i in range(M) for l in range(L)
             if any(i < 6 and (i + 2 * k) % 3 == 0 and (k + l) % 2 == 0 for k in range(K)))
    calls = [
        ("sparse_spmv", csr + [[p["vx"], K * f4]] + buf("spmv"), [[p["vy"], M * f4]] + buf("spmv")),
        # beta 0.5: y read too
        ("sparse_spmv", csr + [[p["vxt"], M * f4], [p["vyt"], K * f4]] + buf("spmv_t"),
         [[p["vyt"], K * f4]] + buf("spmv_t")),
        # pointer mode device: alpha and beta read from device memory, y read (beta unknown here)
        ("sparse_spmv", csr64 + [[p["vxd"], K * f8], [p["scal"], f8], [p["scal"] + 8, f8], [p["vyd"], M * f8]] +
         buf("spmv_d"), [[p["vyd"], M * f8]] + buf("spmv_d")),
        ("sparse_spmv", [[p["row"], z * i4], [p["col"], z * i4], [p["val"], z * f4], [p["vxc"], K * f4]] +
         buf("spmv_coo"), [[p["vyc"], M * f4]] + buf("spmv_coo")),
        # a preprocess reads the inputs and the buffer, and does not touch C
        ("sparse_spmm_preprocess", csr + [mb] + buf("spmm_pre"), buf("spmm_pre")),
        ("sparse_spmm", csr + [mb] + buf("spmm"), [[p["mc"], M * N * f4]] + buf("spmm")),
        ("sparse_spmm", csr64 + [[p["mbr"], K * N * f8], [p["mcr"], M * N * f8]] + buf("spmm_row"),
         [[p["mcr"], M * N * f8]] + buf("spmm_row")),
        ("sparse_spmm", csr + [[p["mbt"], N * M * f4]] + buf("spmm_tt"), [[p["mct"], K * N * f4]] + buf("spmm_tt")),
        # two batches: offsets M + 1 apart, columns and values nnz apart
        ("sparse_spmm", [[p["offb"], BATCH * (M + 1) * i4], [p["colb"], BATCH * z * i4],
                         [p["valb"], BATCH * z * f4], [p["mbb"], BATCH * K * N * f4]] + buf("spmm_b"),
         [[p["mcb"], BATCH * M * N * f4]] + buf("spmm_b")),
        ("sparse_sddmm_preprocess", [[p["mdx"], M * L * f4], [p["mdy"], L * K * f4], [p["off"], (M + 1) * i4],
                                     [p["col"], z * i4], [p["sval"], z * f4]] + buf("sddmm_pre"),
         buf("sddmm_pre")),
        # beta 0: C's values written, not read
        ("sparse_sddmm", [[p["mdx"], M * L * f4], [p["mdy"], L * K * f4], [p["off"], (M + 1) * i4],
                          [p["col"], z * i4]] + buf("sddmm"), [[p["sval"], z * f4]] + buf("sddmm")),
        ("sparse_to_dense", csr + buf("dense"), [[p["md"], M * K * f4]] + buf("dense")),
        ("sparse_coo2csr", [[p["row"], z * i4]], [[p["csr2"], (M + 1) * i4]]),
        ("sparse_identity", [], [[p["perm"], z * i4]]),
        # the sorts: rows (COO) or columns and P read and written in place
        ("sparse_coosort", [[p["rsh"], z * i4], [p["csh"], z * i4], [p["perm"], z * i4]] + buf("coosort"),
         [[p["rsh"], z * i4], [p["csh"], z * i4], [p["perm"], z * i4]] + buf("coosort")),
        ("sparse_csrsort", [[p["off"], (M + 1) * i4], [p["colr"], z * i4], [p["perm2"], z * i4]] + buf("csrsort"),
         [[p["colr"], z * i4], [p["perm2"], z * i4]] + buf("csrsort")),
        # SpGEMM: compute's count reads A and G; copy writes C's arrays (of C's nnz); no buffer of the program's
        ("sparse_spgemm_nnz", csr + g, []),
        ("sparse_spgemm", csr + g, [[p["offc"], (M + 1) * i4], [p["colc"], zc * i4], [p["valc"], zc * f4]]),
    ]
    return [(op, sorted(r), sorted(w)) for op, r, w in calls]


tmp = tempfile.mkdtemp(prefix="phos-cusparse-test-")
try:
    serve_everywhere(PROG, REQS, answers_ok, tmp)

    # which library serves it: natively the wheel-laid copy its RPATH names,
    # under phos-fn the stand-in
    p = run(PROG, stdin="x\n")
    check(p.returncode == 0 and served_by(p.stderr) and os.path.realpath(served_by(p.stderr)) == STANDIN,
          f"under phos-fn cuSPARSE is served by {served_by(p.stderr)}, not {STANDIN}: rc {p.returncode} "
          f"{p.stderr[-1500:]}")
    if DEVICE == "cuda":
        n = subprocess.run([PROG], input="x\n", capture_output=True, text=True, timeout=300)
        check(n.returncode == 0 and served_by(n.stderr) and
              os.path.realpath(os.path.dirname(served_by(n.stderr))) == os.path.realpath(os.path.dirname(WHEEL)),
              f"natively cuSPARSE is served by {served_by(n.stderr)}, not {WHEEL}: rc {n.returncode} "
              f"{n.stderr[-1500:]}")

    # a real cuSPARSE the guard cannot redirect (another major) is refused
    other = os.path.join(tmp, "libcusparse.so.11")
    os.symlink(os.path.realpath(WHEEL), other)
    p = run(PROBE, "dlopen", other)
    said = [l for l in p.stderr.splitlines() if "refusing" in l and "libcusparse.so.1" in l and STANDIN not in l]
    check(p.returncode == GUARD_EXIT and said and "driver ran natively" not in p.stdout,
          f"dlopen of a real libcusparse.so.11 under phos-fn: rc {p.returncode} {p.stdout} {p.stderr[-1500:]}")

    # the sets of every call, to the byte
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="x\n", trace=trace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"cusparse_serve pointers: rc {p.returncode} {p.stdout} "
                                                          f"{p.stderr[-2000:]}")
    line = [l for l in p.stderr.splitlines() if l.startswith("pointers ")]
    ptr = json.loads(line[0][len("pointers "):]) if line else {}
    recs = [r for r in read_trace(trace) if r.get("op", "").startswith("sparse_")] if os.path.exists(trace) else []
    want = expected_sets(ptr) if ptr else []
    check(ptr and len(recs) == len(want), f"{len(want)} sparse records, got {len(recs)}: "
                                          f"{[r.get('op') for r in recs]}")
    if DEVICE == "sim":   # (the sim asks 256 bytes of every call but coo2csr: the buffers are in the sets)
        check(all(ptr.get(k) == 256 for k in ptr if k.startswith("size_")), f"the sim's buffer sizes: {ptr}")
    for i, (rec, (op, reads, writes)) in enumerate(zip(recs, want)):
        check(rec["op"] == op and sorted(rec["reads"]) == reads and sorted(rec["writes"]) == writes and
              "sets" not in rec,
              f"call {i} ({rec['op']}): reads {sorted(rec['reads'])}, writes {sorted(rec['writes'])} "
              f"({rec.get('sets', 'exact')}); want {op} reads {reads}, writes {writes}")

    # checkpoints of the running program: restored, it serves on
    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [2, 3],
              f"cusparse_serve {what}: {ans}")

    checkpoint_everywhere(PROG, "x", restored_ok, tmp)

    # ... and in the middle of its cuSPARSE calls
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run-loop")}
    steps = 60000 if DEVICE == "sim" else 10000   # (the sim runs a step in about 0.1 ms: seconds either way)
    rng = random.Random(38)
    for mode in ("stw", "cow", "recopy"):
        out = os.path.join(tmp, f"ck-loop-{mode}")
        p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", PROG, "loop",
                              str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=fn_env(run_env))
        try:
            first = p.stdout.readline() if select.select([p.stdout], [], [], 120)[0] else ""
            check(first.startswith("{"), f"loop ({mode}): the program runs its loop: {first!r}")
            time.sleep(rng.uniform(0.0, 0.4))
            c = subprocess.run([PHOS_FN, "checkpoint", "--mode", mode, "-o", out, str(p.pid)],
                               capture_output=True, text=True, timeout=300, env=fn_env(run_env))
        finally:
            p.kill()
            before = [json.loads(l) for l in ([first] if first.startswith("{") else []) +
                      p.communicate()[0].splitlines() if l.startswith("{")]
        if not check(c.returncode == 0, f"loop: checkpoint ({mode}): rc {c.returncode} {c.stderr[-1500:]}"):
            continue
        r = subprocess.run([PHOS_FN, "restore", "--device", DEVICE, out], capture_output=True, text=True,
                           timeout=300, env=fn_env())
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        check(r.returncode == 0 and lines and lines[-1] == {"step": steps, "failures": 0, "done": True},
              f"loop: restored from a {mode} checkpoint: rc {r.returncode} "
              f"{lines[-1:] if lines else r.stdout[-300:]} {r.stderr[-1500:]}")
        check(not lines or not before or lines[0]["step"] <= before[-1]["step"] + 100,
              f"loop: the restored copy starts at {lines[:1]}, the original was at {before[-1:]}")
        check(not lines or not before or before[-1]["step"] < 100 or lines[0]["step"] > 100,
              f"loop: the restored copy starts over: {lines[:1]}, the original was at {before[-1:]}")
        shutil.rmtree(out, ignore_errors=True)

    # what phos-fn does not forward
    p = run(PROG, "refused", env={"PHOS_LOG": "warn"})
    got = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    check(p.returncode == 0 and got == {"spsv": NOT_SUPPORTED, "again": NOT_SUPPORTED, "complex": NOT_SUPPORTED},
          f"cusparse_serve refused: rc {p.returncode} {got} {p.stderr[-1500:]}")
    named = [l for l in p.stderr.splitlines() if "cusparseSpSV_createDescr" in l and "not supported" in l]
    check(len(named) == 1, f"the stub is named once in the log: {named} {p.stderr[-1500:]}")
    cplx = [l for l in p.stderr.splitlines() if "complex, half or bfloat16" in l]
    check(len(cplx) == 1, f"the complex matrix's refusal is said once: {cplx} {p.stderr[-1500:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_cusparse")
