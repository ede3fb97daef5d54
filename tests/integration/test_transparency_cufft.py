# SPDX-License-Identifier: MIT
"""Transparency of cuFFT (issue 38): tests/transparency/cufft/cufft_serve
makes plans of every form at init (cufftPlan1d/2d/3d, cufftPlanMany with
strides and dists, cufftCreate + cufftMakePlan1d with its own work area,
cufftXtMakePlanMany as PyTorch does) and each request runs C2C, R2C, C2R,
Z2Z, D2Z and Z2D transforms (1D, 2D, batched, in place), every answer
checked by the program against a direct DFT of its own:

- under phos-fn, natively on a GPU, and after a snapshot at phos_fn_serve
  is restored, stop-the-world and on demand: every plan was made before the
  snapshot, and the new executor must make it again (an execution of a plan
  it lacks fails the program);
- checkpoints of the running program (stw, cow, recopy) restored answer on;
  and checkpointed at random moments of a loop of cuFFT calls (`loop N`),
  the original killed, the restored copy goes on where it was stopped and
  ends with every step right (a program holding plans is stopped only where
  no call naming one is half-done);
- the read/write set of every execution is exactly the bytes cuFFT's data
  layout gives its input and output (packed, strided, in place with padded
  rows), written out below from the documentation's rules; C2R and Z2D
  inputs are written too (cuFFT may overwrite them);
- the program's DT_RPATH to a copy of NVIDIA's libcufft.so.12 in
  nvidia/cu13/lib (the layout of PyTorch's CUDA 13 wheels) serves it
  natively, and phos-fn's stand-in under phos-fn; a real libcufft under
  another name (libcufft.so.11) is refused by the guard before it runs;
- an export phos-fn does not implement answers CUFFT_NOT_SUPPORTED and is
  named once in the log (PHOS_LOG=warn), and a half-precision plan is
  refused with one stderr line.
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

PROG = program("tests", "transparency", "cufft", "cufft_serve")
STANDIN = os.path.realpath(program("preload", "libcufft.so.12"))
WHEEL = os.path.join(os.path.dirname(PROG), "nvidia", "cu13", "lib", "libcufft.so.12")
REQS = "x\nx\nx\n"
NOT_SUPPORTED = 16   # CUFFT_NOT_SUPPORTED
GUARD_EXIT = 121   # runtime/guard/guard.h
PROBE = program("tests", "transparency", "guard", "driver_probe")


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [1, 2, 3],
          f"cufft_serve {what}: {ans}")


def served_by(stderr):
    lines = [l[len("cufft: "):] for l in stderr.splitlines() if l.startswith("cufft: ")]
    return lines[0] if lines else None


def expected_sets(p):
    """The 13 executions of one request, in order: (reads, writes), each a
    sorted list of [address, bytes], from cuFFT's layout rules."""
    c8, c16, r4, r8 = 8, 16, 4, 8   # complex float, complex double, float, double
    return [
        # c2c: 64 complex floats a -> b, then b -> b in place
        ([[p["a"], 64 * c8]], [[p["b"], 64 * c8]]),
        ([[p["b"], 64 * c8]], [[p["b"], 64 * c8]]),
        # r2c: 30 reals -> 16 complex; c2r: the 16 complex (read and written) -> 30 reals
        ([[p["r"], 30 * r4]], [[p["c"], 16 * c8]]),
        ([[p["c"], 16 * c8]], sorted([[p["c"], 16 * c8], [p["r2"], 30 * r4]])),
        # c2c_2d: 8 x 12 complex, packed
        ([[p["u"], 96 * c8]], [[p["v"], 96 * c8]]),
        # c2c_3d: 4 x 5 x 6 complex, in place
        ([[p["w"], 120 * c8]], [[p["w"], 120 * c8]]),
        # many: n 12, batch 3; input stride 2, dist 30: last element 2 * 30 + 11 * 2;
        # output stride 1, dist 16: last element 2 * 16 + 11 (the buffers are larger)
        ([[p["mi"], (2 * 30 + 11 * 2 + 1) * c8]], [[p["mo"], (2 * 16 + 11 + 1) * c8]]),
        # z2z: 40 complex doubles za -> zb -> zc
        ([[p["za"], 40 * c16]], [[p["zb"], 40 * c16]]),
        ([[p["zb"], 40 * c16]], [[p["zc"], 40 * c16]]),
        # d2z in place, 6 x 10 doubles in rows of 12: reads up to the last real
        # (5 * 12 + 9), writes 6 x 6 complex doubles; z2d back: reads and writes
        # the complex values, writes the reals
        ([[p["f"], (5 * 12 + 9 + 1) * r8]], [[p["f"], 36 * c16]]),
        ([[p["f"], 36 * c16]], sorted([[p["f"], 36 * c16], [p["f"], (5 * 12 + 9 + 1) * r8]])),
        # xt r2c: 2 x 16 floats -> 2 x 9 complex; c2r (embeds 9 and 16, dists 9
        # and 16): the complex values read and written, 2 x 16 floats written
        ([[p["gi"], 32 * r4]], [[p["go"], 18 * c8]]),
        ([[p["go"], 18 * c8]], sorted([[p["go"], 18 * c8], [p["gr"], 32 * r4]])),
    ]


tmp = tempfile.mkdtemp(prefix="phos-cufft-test-")
try:
    serve_everywhere(PROG, REQS, answers_ok, tmp)

    # which library serves it: natively the wheel-laid copy its RPATH names,
    # under phos-fn the stand-in
    p = run(PROG, stdin="x\n")
    check(p.returncode == 0 and served_by(p.stderr) and os.path.realpath(served_by(p.stderr)) == STANDIN,
          f"under phos-fn cuFFT is served by {served_by(p.stderr)}, not {STANDIN}: rc {p.returncode} "
          f"{p.stderr[-1500:]}")
    if DEVICE == "cuda":
        n = subprocess.run([PROG], input="x\n", capture_output=True, text=True, timeout=300)
        check(n.returncode == 0 and served_by(n.stderr) and
              os.path.realpath(os.path.dirname(served_by(n.stderr))) == os.path.realpath(os.path.dirname(WHEEL)),
              f"natively cuFFT is served by {served_by(n.stderr)}, not {WHEEL}: rc {n.returncode} {n.stderr[-1500:]}")

    # a real cuFFT the guard cannot redirect (another major) is refused: by
    # the loader's guard, or by phos-fn's scan of the process's mappings when
    # that sees the big library mapped first (each names the file)
    other = os.path.join(tmp, "libcufft.so.11")
    os.symlink(os.path.realpath(WHEEL), other)
    p = run(PROBE, "dlopen", other)
    said = [l for l in p.stderr.splitlines() if "refusing" in l and "libcufft.so.1" in l and STANDIN not in l]
    check(p.returncode == GUARD_EXIT and said and "driver ran natively" not in p.stdout,
          f"dlopen of a real libcufft.so.11 under phos-fn: rc {p.returncode} {p.stdout} {p.stderr[-1500:]}")

    # the sets of every execution, to the byte
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="x\n", trace=trace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"cufft_serve pointers: rc {p.returncode} {p.stdout} "
                                                          f"{p.stderr[-2000:]}")
    line = [l for l in p.stderr.splitlines() if l.startswith("pointers ")]
    ptr = json.loads(line[0][len("pointers "):]) if line else {}
    recs = [r for r in read_trace(trace) if r.get("op") == "fft_exec"] if os.path.exists(trace) else []
    want = expected_sets(ptr) if ptr else []
    check(ptr and len(recs) == len(want), f"{len(want)} fft_exec records, got {len(recs)}")
    for i, (rec, (reads, writes)) in enumerate(zip(recs, want)):
        check(sorted(rec["reads"]) == reads and sorted(rec["writes"]) == writes and "sets" not in rec,
              f"execution {i}: reads {rec['reads']}, writes {rec['writes']} ({rec.get('sets', 'exact')}); "
              f"want reads {reads}, writes {writes}")

    # checkpoints of the running program: restored, it serves on (its plans
    # made again in the new executor)
    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [2, 3],
              f"cufft_serve {what}: {ans}")

    checkpoint_everywhere(PROG, "x", restored_ok, tmp)

    # ... and in the middle of its cuFFT calls (plans made again, executions
    # posted, copies in between)
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run-loop")}
    steps = 3000 if DEVICE == "sim" else 20000
    rng = random.Random(38)
    for rnd in range(2):
        for mode in ("stw", "cow", "recopy"):
            out = os.path.join(tmp, f"ck-loop-{mode}-{rnd}")
            p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", PROG, "loop",
                                  str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=fn_env(run_env))
            try:
                first = p.stdout.readline() if select.select([p.stdout], [], [], 120)[0] else ""
                check(first.startswith("{"), f"loop, round {rnd}: the program runs its loop: {first!r}")
                time.sleep(rng.uniform(0.0, 0.4))
                c = subprocess.run([PHOS_FN, "checkpoint", "--mode", mode, "-o", out, str(p.pid)],
                                   capture_output=True, text=True, timeout=300, env=fn_env(run_env))
            finally:
                p.kill()
                before = [json.loads(l) for l in ([first] if first.startswith("{") else []) +
                          p.communicate()[0].splitlines() if l.startswith("{")]
            if not check(c.returncode == 0, f"loop, round {rnd}: checkpoint ({mode}): rc {c.returncode} "
                                            f"{c.stderr[-1500:]}"):
                continue
            r = subprocess.run([PHOS_FN, "restore", "--device", DEVICE, out], capture_output=True, text=True,
                               timeout=300, env=fn_env())
            lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            check(r.returncode == 0 and lines and lines[-1] == {"step": steps, "failures": 0, "done": True},
                  f"loop, round {rnd}: restored from a {mode} checkpoint: rc {r.returncode} "
                  f"{lines[-1:] if lines else r.stdout[-300:]} {r.stderr[-1500:]}")
            # it goes on where the original was (killed after the checkpoint)
            check(not lines or not before or lines[0]["step"] <= before[-1]["step"] + 100,
                  f"loop, round {rnd}: the restored copy starts at {lines[:1]}, the original was at {before[-1:]}")
            check(not lines or not before or before[-1]["step"] < 100 or lines[0]["step"] > 100,
                  f"loop, round {rnd}: the restored copy starts over: {lines[:1]}, the original was at {before[-1:]}")
            shutil.rmtree(out, ignore_errors=True)

    # what phos-fn does not forward
    p = run(PROG, "refused", env={"PHOS_LOG": "warn"})
    got = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    check(p.returncode == 0 and got == {"setgpus": NOT_SUPPORTED, "again": NOT_SUPPORTED, "half": NOT_SUPPORTED},
          f"cufft_serve refused: rc {p.returncode} {got} {p.stderr[-1500:]}")
    named = [l for l in p.stderr.splitlines() if "cufftXtSetGPUs" in l and "not supported" in l]
    check(len(named) == 1, f"the stub is named once in the log: {named} {p.stderr[-1500:]}")
    half = [l for l in p.stderr.splitlines() if "half or bfloat16" in l]
    check(len(half) == 1, f"the half-precision plan's refusal is said once: {half} {p.stderr[-1500:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_cufft")
