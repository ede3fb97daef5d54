# SPDX-License-Identifier: MIT
"""Transparency of cuRAND (issue 38): tests/transparency/curand/curand_serve
makes device generators of every pseudorandom type at init (XORWOW with the
legacy ordering, Philox at an offset and on a stream, MRG32k3a, MTGP32,
MT19937, the default), uses two of them there, and each request draws every
kind of number from each (bits, uniform and normal and log-normal in float
and double, Poisson), every buffer checked by the program against its
distribution and answered as a hash:

- under phos-fn, natively on a GPU, and after a snapshot at phos_fn_serve
  is restored, stop-the-world and on demand, the hashes of every request are
  those of the first run's, byte for byte: a restored generator is made
  again where the program left it (its calls replayed in the new executor),
  and on a GPU the forwarded numbers are NVIDIA's native ones;
- checkpoints of the running program (stw, cow, recopy), restored, answer
  requests 2 and 3 with an uninterrupted run's hashes; and checkpointed at
  random moments of a loop of generate calls (`loop N`), the original
  killed, the restored copy ends with the hash of an uninterrupted run's
  every buffer (and no failed distribution check);
- the write set of every generate call is exactly its n elements at its
  output, nothing read (the generator's state is the executor's);
- the program's DT_RPATH to a copy of NVIDIA's libcurand.so.10 in
  nvidia/cu13/lib serves it natively, and phos-fn's stand-in under phos-fn;
  a real libcurand under another name (libcurand.so.11) is refused by the
  guard before it runs;
- host generators, quasirandom generators and an export phos-fn does not
  implement answer CURAND_STATUS_TYPE_ERROR, the first two said once on
  stderr, the stub named once in the log (PHOS_LOG=warn).
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

PROG = program("tests", "transparency", "curand", "curand_serve")
STANDIN = os.path.realpath(program("preload", "libcurand.so.10"))
WHEEL = os.path.join(os.path.dirname(PROG), "nvidia", "cu13", "lib", "libcurand.so.10")
REQS = "x\nx\nx\n"
TYPE_ERROR = 103   # CURAND_STATUS_TYPE_ERROR
GUARD_EXIT = 121   # runtime/guard/guard.h
PROBE = program("tests", "transparency", "guard", "driver_probe")
ESIZE = {"bits": 4, "uniform": 4, "uniform_double": 8, "normal": 4, "normal_double": 8, "log_normal": 4,
         "log_normal_double": 8, "poisson": 4}
HASHES_PER_REQUEST = 6 * 8   # generators x kinds

reference = []   # the hashes of requests 1, 2, 3 of the first run


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [1, 2, 3] and
          all(len(a.get("hashes", [])) == HASHES_PER_REQUEST for a in ans), f"curand_serve {what}: {ans}")
    got = [a.get("hashes") for a in ans]
    if not reference:
        reference.extend(got)
        check(len(set(h for r in got for h in r)) == 3 * HASHES_PER_REQUEST,
              f"curand_serve {what}: every buffer of every request differs: {got}")
        return
    for i, (g, w) in enumerate(zip(got, reference)):
        check(g == w, f"curand_serve {what}: request {i + 1}'s numbers are not the first run's: "
                      f"{[k for k, (a, b) in enumerate(zip(g, w)) if a != b]} differ")


def served_by(stderr):
    lines = [l[len("curand: "):] for l in stderr.splitlines() if l.startswith("curand: ")]
    return lines[0] if lines else None


def loop_last(stdout):
    lines = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]
    return lines


tmp = tempfile.mkdtemp(prefix="phos-curand-test-")
try:
    serve_everywhere(PROG, REQS, answers_ok, tmp)

    # which library serves it: natively the wheel-laid copy its RPATH names,
    # under phos-fn the stand-in; what the offsets did, for the docs
    p = run(PROG, stdin="x\n")
    check(p.returncode == 0 and served_by(p.stderr) and os.path.realpath(served_by(p.stderr)) == STANDIN,
          f"under phos-fn cuRAND is served by {served_by(p.stderr)}, not {STANDIN}: rc {p.returncode} "
          f"{p.stderr[-1500:]}")
    said = [l for l in p.stderr.splitlines() if l.startswith("offset-contiguous")]
    # the sim's positions move by the words taken (rand_dev.h), for every type
    check(said and (DEVICE != "sim" or said[0].count("=offset:yes,call:yes") == 6),
          f"under phos-fn: {said}")
    print(f"phos-fn ({DEVICE}): {said[0] if said else None}")
    odd = [l for l in p.stderr.splitlines() if l.startswith("odd-n ")]
    # the sim follows cuRAND's docs; a GPU's library is held against native below
    check(odd and (DEVICE != "sim" or odd[0] == "odd-n philox normal=105 log_normal_double=105"),
          f"an odd n of Box-Muller calls under phos-fn: {odd}")
    if DEVICE == "cuda":
        n = subprocess.run([PROG], input="x\n", capture_output=True, text=True, timeout=300)
        check(n.returncode == 0 and served_by(n.stderr) and
              os.path.realpath(os.path.dirname(served_by(n.stderr))) == os.path.realpath(os.path.dirname(WHEEL)),
              f"natively cuRAND is served by {served_by(n.stderr)}, not {WHEEL}: rc {n.returncode} {n.stderr[-1500:]}")
        native_said = [l for l in n.stderr.splitlines() if l.startswith("offset-contiguous")]
        print(f"native: {native_said[0] if native_said else None}")
        check(native_said == said, f"the offsets natively {native_said}, forwarded {said}")
        native_odd = [l for l in n.stderr.splitlines() if l.startswith("odd-n ")]
        check(native_odd == odd, f"an odd n natively {native_odd}, forwarded {odd}")

    # a real cuRAND the guard cannot redirect (another major) is refused
    other = os.path.join(tmp, "libcurand.so.11")
    os.symlink(os.path.realpath(WHEEL), other)
    p = run(PROBE, "dlopen", other)
    said = [l for l in p.stderr.splitlines() if "refusing" in l and "libcurand.so.1" in l and STANDIN not in l]
    check(p.returncode == GUARD_EXIT and said and "driver ran natively" not in p.stdout,
          f"dlopen of a real libcurand.so.11 under phos-fn: rc {p.returncode} {p.stdout} {p.stderr[-1500:]}")

    # the sets of every generate call, to the byte
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="x\n", trace=trace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"curand_serve pointers: rc {p.returncode} "
                                                          f"{p.stdout[-500:]} {p.stderr[-2000:]}")
    calls = [json.loads(l[len("call "):]) for l in p.stderr.splitlines() if l.startswith("call ")]
    recs = [r for r in read_trace(trace) if r.get("op") == "rand_generate"] if os.path.exists(trace) else []
    check(len(calls) == 3 + HASHES_PER_REQUEST and len(recs) >= len(calls),
          f"{len(calls)} calls said, {len(recs)} rand_generate records")
    for r in recs:
        check(r["reads"] == [] and len(r["writes"]) == 1 and "sets" not in r, f"a generate call's sets: {r}")
    for i, (rec, c) in enumerate(zip(recs[len(recs) - len(calls):], calls)):
        want = [[c["ptr"], c["n"] * ESIZE[c["kind"]]]]
        check(rec["writes"] == want and rec["reads"] == [],
              f"call {i} ({c}): reads {rec['reads']}, writes {rec['writes']}; want writes {want}")

    # checkpoints of the running program: restored, it answers requests 2
    # and 3 with the uninterrupted run's numbers
    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("requests") for a in ans] == [2, 3],
              f"curand_serve {what}: {ans}")
        check(len(reference) == 3 and [a.get("hashes") for a in ans] == reference[1:],
              f"curand_serve {what}: requests 2 and 3 are not an uninterrupted run's")

    checkpoint_everywhere(PROG, "x", restored_ok, tmp)

    # ... and in the middle of its generate calls: the restored copy ends
    # with an uninterrupted run's hash of every buffer
    # (long enough that a checkpoint within 0.4 s of the first line, plus
    # its own start, comes before the end: 200 sim steps of Philox's two
    # lambdas in turn took 1.5 s, and once in CI the checkpoint came after)
    steps = 600 if DEVICE == "sim" else 3000
    p = run(PROG, "loop", steps)
    whole = loop_last(p.stdout)
    check(p.returncode == 0 and whole and whole[-1]["done"] and whole[-1]["failures"] == 0,
          f"loop {steps} uninterrupted: rc {p.returncode} {whole[-1:]} {p.stderr[-1500:]}")
    if DEVICE == "cuda":
        n = subprocess.run([PROG, "loop", str(steps)], capture_output=True, text=True, timeout=600)
        native = loop_last(n.stdout)
        check(n.returncode == 0 and native and whole and native[-1] == whole[-1],
              f"loop natively {native[-1:]}, forwarded {whole[-1:]}")
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run-loop")}
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
                               timeout=600, env=fn_env())
            lines = loop_last(r.stdout)
            check(r.returncode == 0 and lines and whole and lines[-1] == whole[-1],
                  f"loop, round {rnd}: restored from a {mode} checkpoint: rc {r.returncode} "
                  f"{lines[-1:] if lines else r.stdout[-300:]}, uninterrupted {whole[-1:]} {r.stderr[-1500:]}")
            # it goes on where the original was (killed after the checkpoint)
            check(not lines or not before or lines[0]["step"] <= before[-1]["step"] + 20,
                  f"loop, round {rnd}: the restored copy starts at {lines[:1]}, the original was at {before[-1:]}")
            check(not lines or not before or before[-1]["step"] < 20 or lines[0]["step"] > 20,
                  f"loop, round {rnd}: the restored copy starts over: {lines[:1]}, the original was at {before[-1:]}")
            shutil.rmtree(out, ignore_errors=True)

    # what phos-fn does not forward
    p = run(PROG, "refused", env={"PHOS_LOG": "warn"})
    got = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    check(p.returncode == 0 and got == {"host": TYPE_ERROR, "sobol": TYPE_ERROR, "stub": TYPE_ERROR,
                                        "again": TYPE_ERROR},
          f"curand_serve refused: rc {p.returncode} {got} {p.stderr[-1500:]}")
    named = [l for l in p.stderr.splitlines() if "curandGetScrambleConstants32" in l and "not supported" in l]
    check(len(named) == 1, f"the stub is named once in the log: {named} {p.stderr[-1500:]}")
    for what in ("host generator", "quasirandom generator"):
        said = [l for l in p.stderr.splitlines() if what in l]
        check(len(said) == 1, f"the refusal of a {what} is said once: {said} {p.stderr[-1500:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_curand")
