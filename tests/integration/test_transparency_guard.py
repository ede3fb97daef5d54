# SPDX-License-Identifier: MIT
"""Issue 12, forwarded or refused, never native (preload/guard/guard.c,
runtime/guard/guard.h): programs that would reach a real CUDA runtime or driver
behind phos-fn's back (tests/transparency/guard/).

- rpath_cudart carries a DT_RPATH to its own copy of the real libcudart.so.13:
  natively that copy serves it; under phos-fn the stand-in does and its calls
  reach the executor (trace);
- dlopen_cudart dlopen()s the real copy by absolute path: the same;
- a real libcudart of another name (libcudart.so.12) is refused;
- driver_probe dlopen()ing a libcuda.so.1 by its path or by soname, and
  rpath_driver, whose DT_NEEDED libcuda.so.1 has a DT_RPATH to a copy, get
  phos-fn's driver stand-in (preload/driver/libcuda.c), whose calls reach the
  executor (trace);
- driver_probe dlopen()ing NVML (libnvidia-ml.so.1, by path or soname) is
  not found (its dlopen fails, as without a driver; PyTorch goes on without
  NVML), with one stderr line that says so;
- a part of NVIDIA's cuDNN (libcudnn_graph.so.9) is refused: only NVIDIA's
  libcudnn.so.9 loads them, and a function gets phos-fn's stand-in for that;
- cuGetExportTable (NVIDIA's private tables, which cuDNN's static runtime
  asks for) answers CUDA_ERROR_NOT_SUPPORTED with one stderr line;
- driver_probe mapping a libcuda.so.1 by hand (no loader: phos-fn's scan of
  /proc/PID/maps), in the program or in a child of it, is refused with the
  library named and PHOS_GUARD_EXIT, and never runs natively; phos-fn
  snapshot refuses the libcudart.so.12 program the same way, and a program
  that maps a driver by hand and then reaches phos_fn_serve is refused at
  the snapshot point (the same scan), nothing written; an instance of the
  invoker that maps a driver by hand during a call is killed by the
  invoker's periodic scan, and its log says why.
"""
import os
import shutil
import subprocess
import tempfile

import time

from harness import DEVICE, Invoker, check, done, phos, program, read_trace, run

GUARD_EXIT = 121   # runtime/guard/guard.h
DIR = program("tests", "transparency", "guard")
RPATH = os.path.join(DIR, "rpath_cudart")
DLOPEN = os.path.join(DIR, "dlopen_cudart")
PROBE = os.path.join(DIR, "driver_probe")
RPATH_DRIVER = os.path.join(DIR, "rpath_driver")
REAL = os.path.join(DIR, "lib", "libcudart.so.13")
FAKE_DRIVER = os.path.join(DIR, "libcuda.so.1")
FAKE_NVML = os.path.join(DIR, "libnvidia-ml.so.1")
FAKE_CUDNN_PART = os.path.join(DIR, "libcudnn_graph.so.9")
STANDIN = os.path.realpath(program("preload", "libcudart.so.13"))
STANDIN_DRIVER = os.path.realpath(program("preload", "libcuda.so.1"))


def native(*cmd):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_AUDIT")}
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, env=env)


def served_by(p):
    for line in p.stdout.splitlines():
        if line.startswith("cudart: "):
            return os.path.realpath(line[8:])
    return None


tmp = tempfile.mkdtemp(prefix="phos-guard-test-")
try:
    # Natively the program's own copy wins (what phos-fn must prevent); it
    # fails here without a driver, and passes on a GPU.
    for cmd in ([RPATH], [DLOPEN, REAL]):
        name = os.path.basename(cmd[0])
        p = native(*cmd)
        check(served_by(p) == os.path.realpath(REAL), f"{name} natively: served by {served_by(p)}")
        if DEVICE == "cuda":
            check(p.returncode == 0 and f"{name}: ok" in p.stdout, f"{name} natively: rc {p.returncode} {p.stderr[-2000:]}")

    # Under phos-fn: the stand-in serves, and the calls are in the executor's trace.
    for cmd, ops in (([RPATH], {"launch", "memcpy_h2d", "memcpy_d2h"}),
                     ([DLOPEN, REAL], {"memset", "memcpy_h2d", "memcpy_d2h"})):
        name = os.path.basename(cmd[0])
        trace = os.path.join(tmp, name + ".trace")
        p = run(*cmd, trace=trace)
        check(p.returncode == 0 and f"{name}: ok" in p.stdout,
              f"{name} under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        check(served_by(p) == STANDIN, f"{name} under phos-fn: served by {served_by(p)}, not {STANDIN}")
        seen = {r.get("op") for r in read_trace(trace)} if os.path.exists(trace) else set()
        check(ops <= seen, f"{name} under phos-fn: forwarded ops {sorted(seen)}, want {sorted(ops)}")

    # A real runtime the guard cannot redirect (another major) is refused.
    other = os.path.join(tmp, "libcudart.so.12")
    os.symlink(REAL, other)
    p = run(DLOPEN, other)
    # (named as asked, or as the file it maps, when the mapping scan sees it first)
    check(p.returncode == GUARD_EXIT and "refusing" in p.stderr
          and ("libcudart.so.12" in p.stderr or os.path.basename(REAL) in p.stderr) and "ok" not in p.stdout, f"dlopen of libcudart.so.12: rc {p.returncode}\n{p.stdout}\n{p.stderr[-2000:]}")

    # The driver through the loader: natively the file asked for serves; under
    # phos-fn the driver stand-in does, and its calls are forwarded.
    p = native(PROBE, "dlopen", FAKE_DRIVER)
    check(p.returncode == 0 and "driver ran natively" in p.stdout and f"libcuda: {FAKE_DRIVER}" in p.stdout,
          f"probe dlopen natively: {p.returncode} {p.stdout} {p.stderr}")
    trace = os.path.join(tmp, "probe.trace")
    p = run(PROBE, "dlopen", FAKE_DRIVER, trace=trace)
    served = [os.path.realpath(line[9:]) for line in p.stdout.splitlines() if line.startswith("libcuda: ")]
    check(p.returncode == 0 and "driver: forwarded ok" in p.stdout and "driver ran natively" not in p.stdout,
          f"probe dlopen under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    check(served == [STANDIN_DRIVER], f"probe dlopen under phos-fn: served by {served}, not {STANDIN_DRIVER}")
    seen = {r.get("op") for r in read_trace(trace)} if os.path.exists(trace) else set()
    check({"memset", "memcpy_d2h"} <= seen, f"probe dlopen under phos-fn: forwarded ops {sorted(seen)}")

    # The driver by soname, and as a DT_NEEDED behind a DT_RPATH to the fake
    # copy (which beats LD_LIBRARY_PATH): the stand-in serves both.
    p = native(RPATH_DRIVER)
    check(p.returncode == 0 and "driver ran natively" in p.stdout and f"libcuda: {FAKE_DRIVER}" in p.stdout,
          f"rpath_driver natively: {p.returncode} {p.stdout} {p.stderr}")
    for cmd in ([PROBE, "dlopen", "libcuda.so.1"], [RPATH_DRIVER]):
        trace = os.path.join(tmp, os.path.basename(cmd[0]) + "-soname.trace")
        p = run(*cmd, trace=trace)
        served = [os.path.realpath(line[9:]) for line in p.stdout.splitlines() if line.startswith("libcuda: ")]
        check(p.returncode == 0 and "driver: forwarded ok" in p.stdout and served == [STANDIN_DRIVER],
              f"{cmd} under phos-fn: rc {p.returncode}, served by {served}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        seen = {r.get("op") for r in read_trace(trace)} if os.path.exists(trace) else set()
        check({"memset", "memcpy_d2h"} <= seen, f"{cmd} under phos-fn: forwarded ops {sorted(seen)}")

    # NVML through the loader: not found (dlopen fails, the program goes on), and said once.
    p = native(PROBE, "dlopen", FAKE_NVML)
    check(p.returncode == 0 and "driver ran natively" in p.stdout, f"probe dlopen NVML natively: {p.returncode} {p.stderr}")
    for lib in (FAKE_NVML, "libnvidia-ml.so.1"):
        p = run(PROBE, "dlopen", lib)
        check(p.returncode == 1 and "driver ran natively" not in p.stdout and "dlopen: " in p.stderr,
              f"probe dlopen {lib} under phos-fn: the load must fail: rc {p.returncode} {p.stdout} {p.stderr[-1000:]}")
        said = [l for l in p.stderr.splitlines() if "(NVML) is not available inside a function" in l]
        check(len(said) == 1, f"probe dlopen {lib}: one stderr line says why: {p.stderr[-1000:]}")
    # A part of NVIDIA's cuDNN (only its libcudnn.so.9 loads them): refused
    # before it runs, the library named.
    p = native(PROBE, "dlopen", FAKE_CUDNN_PART)
    check(p.returncode == 0 and "driver ran natively" in p.stdout, f"probe dlopen cuDNN part natively: {p.stderr}")
    p = run(PROBE, "dlopen", FAKE_CUDNN_PART)
    check(p.returncode == GUARD_EXIT and "driver ran natively" not in p.stdout and "libcudnn_graph.so.9" in p.stderr,
          f"a cuDNN part under phos-fn is refused: rc {p.returncode} {p.stdout} {p.stderr[-1000:]}")
    # NVIDIA's private export tables (cuDNN's static runtime asks for them): not
    # available, said once on stderr, the caller gets CUDA_ERROR_NOT_SUPPORTED.
    p = run(PROBE, "exporttable", "libcuda.so.1")
    check(p.returncode == 0 and "export table: 801 null" in p.stdout, f"cuGetExportTable: {p.stdout} {p.stderr[-800:]}")
    said = [l for l in p.stderr.splitlines() if "cuGetExportTable is not available" in l]
    check(len(said) == 1, f"one stderr line about cuGetExportTable: {p.stderr[-800:]}")
    # The driver by hand: refused.
    for how, lib, says in (("mmap", FAKE_DRIVER, "mapped or opened"),
                           ("forkmmap", FAKE_DRIVER, "mapped or opened")):
        p = native(PROBE, how, lib)
        check(p.returncode == 0 and "driver ran natively" in p.stdout, f"probe {how} {lib} natively: {p.returncode} {p.stderr}")
        p = run(PROBE, how, lib)
        check(p.returncode == GUARD_EXIT, f"probe {how} {lib} under phos-fn: rc {p.returncode}, want {GUARD_EXIT}")
        check("driver ran natively" not in p.stdout, f"probe {how} {lib} under phos-fn ran natively: {p.stdout}")
        check(says in p.stderr and "refusing" in p.stderr and lib in p.stderr,
              f"probe {how} {lib} under phos-fn: no clear refusal: {p.stderr[-2000:]}")

    # phos-fn snapshot runs functions with the same guard.
    p = phos("snapshot", "--device", DEVICE, "-o", os.path.join(tmp, "snap"), "--", DLOPEN, other)
    check(p.returncode != 0 and "refusing" in p.stderr and "libcudart.so.12" in p.stderr and "status 121" in p.stderr,
          f"snapshot of the probe: rc {p.returncode}: {p.stderr[-2000:]}")
    check(not os.path.exists(os.path.join(tmp, "snap", "manifest.json")), "a snapshot of a refused program was written")
    # A driver mapped by hand by a program that then reaches the snapshot point: refused, nothing written.
    p = phos("snapshot", "--device", DEVICE, "-o", os.path.join(tmp, "snap2"), "--", PROBE, "mmapserve", FAKE_DRIVER)
    check(p.returncode != 0 and "refusing to snapshot" in p.stderr and FAKE_DRIVER in p.stderr,
          f"snapshot of a program that mapped a driver by hand: rc {p.returncode}: {p.stderr[-2000:]}")
    check(not os.path.exists(os.path.join(tmp, "snap2")), "a snapshot of a refused program was written")

    # An instance of the invoker that maps a driver by hand during a call:
    # the invoker's scan kills it (the call fails long before the handler's
    # three seconds), says so in its log, and the next call gets a new instance.
    inv = Invoker(os.path.join(tmp, "inv"), tmp, device=DEVICE)
    try:
        st, desc = inv.call("POST", "/system/functions",
                            {"name": "latemap", "program": PROBE, "args": ["servemap", FAKE_DRIVER]})
        check(st == 201, f"deploy of a program that maps a driver in its calls: {st} {desc}")
        t0 = time.monotonic()
        st, body = inv.call("POST", "/function/latemap", {})
        took = time.monotonic() - t0
        check(st >= 500 and took < 2.5, f"the call of an instance that mapped a driver: {st} {body} in {took:.2f} s")
        log = ""
        for _ in range(40):
            log = inv.logtext()
            if "reaches the GPU driver directly" in log:
                break
            time.sleep(0.1)
        said = [l for l in log.splitlines() if "latemap: instance" in l and "killed" in l]
        check(len(said) == 1 and FAKE_DRIVER in said[0], f"the invoker's log names it: {said or log[-2000:]}")
    finally:
        inv.stop()
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_guard")
