# SPDX-License-Identifier: MIT
"""Transparency of cuSOLVER's dense API (issue 38):
tests/transparency/cusolver/cusolver_serve makes a handle (on a stream of its
own), every matrix and every workspace (of the size its _bufferSize gave) at
init. Each request runs getrf, getrs (N and T) in float, potrf and potrs
(lower) in double, potrf (upper) in float, geqrf, ormqr and orgqr in double,
syevd with vectors in double and without in float, getrf of a singular
matrix, and the 64-bit API's Xgetrf, Xgetrs, Xpotrf, Xpotrs, Xgeqrf and
Xsyevd (a params object, device and host workspaces), syevj, syevjBatched,
gesvdj (economy) and gesvdjBatched with their info objects, potrfBatched
and potrsBatched through device arrays of pointers, every answer checked by the program against a reference of its own
in double (residuals, Q R = A, A v = w v, LAPACK's info):

- under phos-fn, natively on a GPU, and after a snapshot at phos_fn_serve
  is restored, stop-the-world and on demand: the handle and the workspaces
  were made before the snapshot and the new executor serves them all (its
  own cusolverDn handle made at its first call);
- checkpoints of the running program (stw, cow, recopy) restored answer on,
  and checkpointed at random moments of a loop of cuSOLVER calls, the
  restored copy goes on where it was stopped and ends with every step right;
- the read/write set of every call is exactly the bytes LAPACK's rules give
  its operands, written out below: a matrix from its first element to its
  last (lda's gaps past the last column's rows are not in it), ipiv, tau
  and w of their lengths, the input of a solve read only, info's one int
  written, the workspace (of the size the library asked) read and written,
  a batched call's pointer arrays read and each matrix they name;
- the program's DT_RPATH to a copy of NVIDIA's libcusolver.so.12 in
  nvidia/cu13/lib (the layout of PyTorch's CUDA 13 wheels) serves it
  natively, and phos-fn's stand-in under phos-fn; a real libcusolver under
  another name (libcusolver.so.11) is refused by the guard before it runs;
- an export phos-fn does not implement (gesvd, a complex getrf) answers
  CUSOLVER_STATUS_NOT_SUPPORTED and is named once in the log
  (PHOS_LOG=warn), and an algorithm other than the default and
  potrsBatched of two right-hand sides are refused with one stderr line.
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

PROG = program("tests", "transparency", "cusolver", "cusolver_serve")
STANDIN = os.path.realpath(program("preload", "libcusolver.so.12"))
WHEEL = os.path.join(os.path.dirname(PROG), "nvidia", "cu13", "lib", "libcusolver.so.12")
REQS = "x\nx\nx\n"
NOT_SUPPORTED = 9   # CUSOLVER_STATUS_NOT_SUPPORTED
GUARD_EXIT = 121   # runtime/guard/guard.h
PROBE = program("tests", "transparency", "guard", "driver_probe")
# the program's sizes (cusolver_serve.cu)
LU_N, LU_LDA, LU_RHS, LU_LDB, CH_N, CH_LDA, CH_RHS = 6, 8, 2, 7, 5, 6, 3
QR_M, QR_N, QR_LDA, QR_C, EV_N, EN_N, EN_LDA, SG_N = 7, 4, 9, 2, 6, 4, 5, 3
XL_N, XL_LDA, XL_RHS, XC_N, XQ_M, XQ_N, XE_N = 5, 6, 2, 4, 6, 3, 5
EB_N, EB_LDA, EB_B = 4, 5, 3
JE_N, JB_N, JB_B, SV_M, SV_N, SB_M, SB_N, SB_B, PB_N = 5, 3, 2, 5, 3, 3, 4, 2, 4


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [1, 2, 3],
          f"cusolver_serve {what}: {ans}")


def served_by(stderr):
    lines = [l[len("cusolver: "):] for l in stderr.splitlines() if l.startswith("cusolver: ")]
    return lines[0] if lines else None


def mat(addr, rows, cols, ld, esize):
    """A column-major matrix from its first element to its last."""
    return [addr, ((cols - 1) * ld + rows) * esize]


def mats(addr, rows, cols, ld, batch, esize):
    """batch matrices ld cols elements apart: the first's first element to the last's last."""
    return [addr, ((batch - 1) * ld * cols + (cols - 1) * ld + rows) * esize]


def expected_sets(p):
    """The 25 calls of one request, in order: (op, reads, writes), each a
    sorted list of [address, bytes], from LAPACK's rules (the 64-bit API's
    pivots int64_t, its workspaces in bytes)."""
    f4, f8, i4, i8 = 4, 8, 4, 8

    def work(name, esize):
        return [[p["work_" + name], p["lwork_" + name] * esize]] if p["lwork_" + name] else []

    def xwork(name):
        return [[p["work_" + name], p["xwork_" + name]]] if p["xwork_" + name] else []

    def info(i):
        return [[p["info"] + 4 * i, 4]]

    lu = mat(p["lu"], LU_N, LU_N, LU_LDA, f4)
    ch = mat(p["ch"], CH_N, CH_N, CH_LDA, f8)
    qr = mat(p["qr"], QR_M, QR_N, QR_LDA, f8)
    tau = [p["tau"], QR_N * f8]
    calls = [
        ("solver_getrf", [lu] + work("getrf", f4), [lu, [p["ipiv"], LU_N * i4]] + info(0) + work("getrf", f4)),
        # a solve reads the factors and the pivots, and reads and writes B
        ("solver_getrs", [lu, [p["ipiv"], LU_N * i4], mat(p["bn"], LU_N, LU_RHS, LU_LDB, f4)],
         [mat(p["bn"], LU_N, LU_RHS, LU_LDB, f4)] + info(1)),
        ("solver_getrs", [lu, [p["ipiv"], LU_N * i4], mat(p["bt"], LU_N, LU_RHS, LU_LDB, f4)],
         [mat(p["bt"], LU_N, LU_RHS, LU_LDB, f4)] + info(2)),
        ("solver_potrf", [ch] + work("potrf_l", f8), [ch] + info(3) + work("potrf_l", f8)),
        ("solver_potrs", [ch, mat(p["cb"], CH_N, CH_RHS, CH_N, f8)], [mat(p["cb"], CH_N, CH_RHS, CH_N, f8)] + info(4)),
        ("solver_potrf", [mat(p["chu"], CH_N, CH_N, CH_N, f4)] + work("potrf_u", f4),
         [mat(p["chu"], CH_N, CH_N, CH_N, f4)] + info(5) + work("potrf_u", f4)),
        ("solver_geqrf", [qr] + work("geqrf", f8), [qr, tau] + info(6) + work("geqrf", f8)),
        # ormqr: the reflectors read and written (LAPACK may change A and put it back), tau read, C both
        ("solver_ormqr", [qr, tau, mat(p["qc"], QR_M, QR_C, QR_M, f8)] + work("ormqr", f8),
         [qr, mat(p["qc"], QR_M, QR_C, QR_M, f8)] + info(7) + work("ormqr", f8)),
        ("solver_orgqr", [mat(p["q"], QR_M, QR_N, QR_LDA, f8), tau] + work("orgqr", f8),
         [mat(p["q"], QR_M, QR_N, QR_LDA, f8)] + info(8) + work("orgqr", f8)),
        ("solver_syevd", [mat(p["ev"], EV_N, EV_N, EV_N, f8)] + work("syevd_v", f8),
         [mat(p["ev"], EV_N, EV_N, EV_N, f8), [p["evw"], EV_N * f8]] + info(9) + work("syevd_v", f8)),
        ("solver_syevd", [mat(p["en"], EN_N, EN_N, EN_LDA, f4)] + work("syevd_n", f4),
         [mat(p["en"], EN_N, EN_N, EN_LDA, f4), [p["enw"], EN_N * f4]] + info(10) + work("syevd_n", f4)),
        ("solver_getrf", [mat(p["sg"], SG_N, SG_N, SG_N, f8)] + work("singular", f8),
         [mat(p["sg"], SG_N, SG_N, SG_N, f8), [p["sgpiv"], SG_N * i4]] + info(11) + work("singular", f8)),
        ("solver_getrf", [mat(p["xl"], XL_N, XL_N, XL_LDA, f8)] + xwork("xgetrf"),
         [mat(p["xl"], XL_N, XL_N, XL_LDA, f8), [p["xpiv"], XL_N * i8]] + info(12) + xwork("xgetrf")),
        ("solver_getrs", [mat(p["xl"], XL_N, XL_N, XL_LDA, f8), [p["xpiv"], XL_N * i8],
                          mat(p["xb"], XL_N, XL_RHS, XL_N, f8)], [mat(p["xb"], XL_N, XL_RHS, XL_N, f8)] + info(13)),
        ("solver_potrf", [mat(p["xc"], XC_N, XC_N, XC_N, f4)] + xwork("xpotrf"),
         [mat(p["xc"], XC_N, XC_N, XC_N, f4)] + info(14) + xwork("xpotrf")),
        ("solver_potrs", [mat(p["xc"], XC_N, XC_N, XC_N, f4), [p["xcb"], XC_N * f4]],
         [[p["xcb"], XC_N * f4]] + info(15)),
        ("solver_geqrf", [mat(p["xq"], XQ_M, XQ_N, XQ_M, f8)] + xwork("xgeqrf"),
         [mat(p["xq"], XQ_M, XQ_N, XQ_M, f8), [p["xtau"], XQ_N * f8]] + info(16) + xwork("xgeqrf")),
        ("solver_syevd", [mat(p["xe"], XE_N, XE_N, XE_N, f4)] + xwork("xsyevd"),
         [mat(p["xe"], XE_N, XE_N, XE_N, f4), [p["xew"], XE_N * f4]] + info(17) + xwork("xsyevd")),
        # the Jacobi calls: a batched one's operands batch times, its info batch ints
        ("solver_syevj", [mat(p["je"], JE_N, JE_N, JE_N, f8)] + work("syevj", f8),
         [mat(p["je"], JE_N, JE_N, JE_N, f8), [p["jew"], JE_N * f8]] + info(18) + work("syevj", f8)),
        ("solver_syevj_batched", [mats(p["jb"], JB_N, JB_N, JB_N, JB_B, f4)] + work("syevjb", f4),
         [mats(p["jb"], JB_N, JB_N, JB_N, JB_B, f4), [p["jbw"], JB_N * JB_B * f4], [p["binfo"], JB_B * i4]] +
         work("syevjb", f4)),
        # economy U (5 x 3) and V (3 x 3), written only
        ("solver_gesvdj", [mat(p["sv"], SV_M, SV_N, SV_M, f8)] + work("gesvdj", f8),
         [mat(p["sv"], SV_M, SV_N, SV_M, f8), [p["svs"], SV_N * f8], mat(p["svu"], SV_M, SV_N, SV_M, f8),
          mat(p["svv"], SV_N, SV_N, SV_N, f8)] + info(20) + work("gesvdj", f8)),
        ("solver_gesvdj_batched", [mats(p["sb"], SB_M, SB_N, SB_M, SB_B, f4)] + work("gesvdjb", f4),
         [mats(p["sb"], SB_M, SB_N, SB_M, SB_B, f4), [p["sbs"], SB_M * SB_B * f4],
          mats(p["sbu"], SB_M, SB_M, SB_M, SB_B, f4), mats(p["sbv"], SB_N, SB_N, SB_N, SB_B, f4),
          [p["binfo"] + JB_B * i4, SB_B * i4]] + work("gesvdjb", f4)),
        # the batched Cholesky: the pointer arrays read, and each matrix they name
        ("solver_potrf_batched", [[p["pbaa"], 2 * 8], mat(p["pba0"], PB_N, PB_N, PB_N, f8),
                                  mat(p["pba1"], PB_N, PB_N, PB_N, f8)],
         [mat(p["pba0"], PB_N, PB_N, PB_N, f8), mat(p["pba1"], PB_N, PB_N, PB_N, f8),
          [p["binfo"] + (JB_B + SB_B) * i4, 2 * i4]]),
        ("solver_potrs_batched", [[p["pbaa"], 2 * 8], [p["pbba"], 2 * 8], mat(p["pba0"], PB_N, PB_N, PB_N, f8),
                                  mat(p["pba1"], PB_N, PB_N, PB_N, f8), [p["pbb0"], PB_N * f8], [p["pbb1"], PB_N * f8]],
         [[p["pbb0"], PB_N * f8], [p["pbb1"], PB_N * f8]] + info(23)),
        # XsyevBatched: three matrices lda * n apart, their eigenvalues, an info each
        ("solver_syev_batched", [mats(p["xeb"], EB_N, EB_N, EB_LDA, EB_B, f8)] + xwork("xsyevb"),
         [mats(p["xeb"], EB_N, EB_N, EB_LDA, EB_B, f8), [p["xebw"], EB_N * EB_B * f8], [p["xebinfo"], EB_B * i4]] +
         xwork("xsyevb")),
    ]
    return [(op, sorted(r), sorted(w)) for op, r, w in calls]


tmp = tempfile.mkdtemp(prefix="phos-cusolver-test-")
try:
    serve_everywhere(PROG, REQS, answers_ok, tmp)

    # which library serves it: natively the wheel-laid copy its RPATH names,
    # under phos-fn the stand-in
    p = run(PROG, stdin="x\n")
    check(p.returncode == 0 and served_by(p.stderr) and os.path.realpath(served_by(p.stderr)) == STANDIN,
          f"under phos-fn cuSOLVER is served by {served_by(p.stderr)}, not {STANDIN}: rc {p.returncode} "
          f"{p.stderr[-1500:]}")
    if DEVICE == "cuda":
        n = subprocess.run([PROG], input="x\n", capture_output=True, text=True, timeout=300)
        check(n.returncode == 0 and served_by(n.stderr) and
              os.path.realpath(os.path.dirname(served_by(n.stderr))) == os.path.realpath(os.path.dirname(WHEEL)),
              f"natively cuSOLVER is served by {served_by(n.stderr)}, not {WHEEL}: rc {n.returncode} "
              f"{n.stderr[-1500:]}")

    # a real cuSOLVER the guard cannot redirect (another major) is refused
    other = os.path.join(tmp, "libcusolver.so.11")
    os.symlink(os.path.realpath(WHEEL), other)
    p = run(PROBE, "dlopen", other)
    said = [l for l in p.stderr.splitlines() if "refusing" in l and "libcusolver.so.1" in l and STANDIN not in l]
    check(p.returncode == GUARD_EXIT and said and "driver ran natively" not in p.stdout,
          f"dlopen of a real libcusolver.so.11 under phos-fn: rc {p.returncode} {p.stdout} {p.stderr[-1500:]}")

    # the sets of every call, to the byte
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="x\n", trace=trace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"cusolver_serve pointers: rc {p.returncode} {p.stdout} "
                                                          f"{p.stderr[-2000:]}")
    line = [l for l in p.stderr.splitlines() if l.startswith("pointers ")]
    ptr = json.loads(line[0][len("pointers "):]) if line else {}
    recs = [r for r in read_trace(trace) if r.get("op", "").startswith("solver_")] if os.path.exists(trace) else []
    want = expected_sets(ptr) if ptr else []
    check(ptr and len(recs) == len(want), f"{len(want)} solver records, got {len(recs)}: "
                                          f"{[r.get('op') for r in recs]}")
    if DEVICE == "sim":   # (the sim asks 64 elements of every call that takes a workspace, in bytes in X)
        none = ("getrs", "potrs", "potrfb")   # (no workspace)
        check(all(ptr.get(k) == 64 for k in ptr if k.startswith("lwork_") and not any(w in k for w in none) and
                  not k.startswith("lwork_x")) and
              [ptr.get("xwork_" + k) for k in ("xgetrf", "xpotrf", "xgeqrf", "xsyevd")] == [512, 256, 512, 256],
              f"the sim's workspace sizes: {ptr}")
    for i, (rec, (op, reads, writes)) in enumerate(zip(recs, want)):
        check(rec["op"] == op and sorted(rec["reads"]) == reads and sorted(rec["writes"]) == writes and
              "sets" not in rec,
              f"call {i} ({rec['op']}): reads {sorted(rec['reads'])}, writes {sorted(rec['writes'])} "
              f"({rec.get('sets', 'exact')}); want {op} reads {reads}, writes {writes}")

    # checkpoints of the running program: restored, it serves on
    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [2, 3],
              f"cusolver_serve {what}: {ans}")

    checkpoint_everywhere(PROG, "x", restored_ok, tmp)

    # ... and in the middle of its cuSOLVER calls
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run-loop")}
    steps = 15000 if DEVICE == "sim" else 3000   # (the sim runs a step in 0.2 to 1.5 ms: seconds either way)
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
    check(p.returncode == 0 and got == {"gesvd": NOT_SUPPORTED, "again": NOT_SUPPORTED, "complex": NOT_SUPPORTED,
                                        "alg": NOT_SUPPORTED, "default": 0, "nrhs": NOT_SUPPORTED},
          f"cusolver_serve refused: rc {p.returncode} {got} {p.stderr[-1500:]}")
    for stub in ("cusolverDnSgesvd_bufferSize", "cusolverDnCgetrf_bufferSize"):
        named = [l for l in p.stderr.splitlines() if stub in l and "not supported" in l]
        check(len(named) == 1, f"the stub {stub} is named once in the log: {named} {p.stderr[-1500:]}")
    for what in ("other than CUSOLVER_ALG_0", "of more than one right-hand side"):
        said = [l for l in p.stderr.splitlines() if what in l]
        check(len(said) == 1, f"the refusal {what!r} is said once: {said} {p.stderr[-1500:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_cusolver")
