# SPDX-License-Identifier: MIT
"""A CRIU that hangs is refused at start, and a restore that hangs costs a
call its timeout_ms, not CRIU's 300 s (issue 36).

Debian trixie's CRIU 4.1.1 hangs on some hosts (AMD, kernel 6.18: the
hardware-breakpoint stop it waits for never comes); every restore then waited
PHOS_CRIU_TIMEOUT. CRIU runs here through wrappers (PHOS_CRIU) that hang:

- one that hangs in everything, `--version` included, and one that answers
  `--version` but hangs in dump and restore (as 4.1.1 did): the invoker
  refuses to start within seconds, with a message naming that CRIU; so do
  `phos-fn criu-check` and `phos-fn restore`;
- one that hangs in `criu restore` only while a flag file exists: a cold
  start of a function with timeout_ms 3000 answers 503 within 3 + 1 s, and
  the hung CRIU is gone; SIGTERM with --drain-timeout 2 while a cold start
  (timeout_ms 60000) hangs in CRIU: the call gets 503 and the invoker exits
  within the drain cap (+ 3 s), its CRIU gone;
- the work directory of a restore whose invoker was SIGKILLed goes at the
  invoker's next start.
"""
import os
import shutil
import subprocess
import tempfile
import threading
import time

from harness import BUILD, check, done, fn_env, Invoker, PHOS_FN, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
CRIU = os.environ.get("PHOS_CRIU") or os.path.join(BUILD, "criu", "criu")   # (tools/gpu-check sets it)

tmp = tempfile.mkdtemp(prefix="phos-criu-hang-test-")
mark = f"37{os.getpid() % 100000:05d}"   # the hanging `sleep`'s argument, unique to this run
flag = os.path.join(tmp, "hang-restore")


def wrapper(name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\n{body}\nexec {CRIU} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


HANG_ALL = wrapper("criu-hang-all", f"exec sleep {mark}")
HANG_WORK = wrapper("criu-hang-work", f'[ "$1" = dump ] || [ "$1" = restore ] && exec sleep {mark}')
HANG_RESTORE = wrapper("criu-hang-restore", f'[ "$1" = restore ] && [ -e {flag} ] && exec sleep {mark}')


def hung():
    """pids of the wrappers' hanging sleeps."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] == [b"sleep", mark.encode()]:
                        out.append(int(d))
            except OSError:
                pass
    return out


def env_for(criu):
    # a short probe bound keeps the test quick; the cache is per binary, and
    # each wrapper here is new
    return fn_env({"PHOS_CRIU": criu, "PHOS_CRIU_PROBE_TIMEOUT": "3000"})


def refused_at_start(criu, what):
    state = os.path.join(tmp, f"state-{os.path.basename(criu)}")
    t = time.time()
    p = subprocess.run([INVOKER, "--listen", "127.0.0.1:0", "--state-dir", state, "--device", "sim"],
                       capture_output=True, text=True, timeout=60, env=env_for(criu), cwd=tmp)
    took = time.time() - t
    print(f"{what}: the invoker exited {p.returncode} after {took:.2f} s", flush=True)
    check(p.returncode != 0, f"{what}: the invoker refuses to start ({p.returncode})")
    check(took < 12, f"{what}: ... within seconds ({took:.1f} s)")
    check(criu in p.stderr and "hangs on this machine" in p.stderr,
          f"{what}: ... saying the CRIU hangs, naming it: {p.stderr[-600:]}")
    t = time.time()
    p = subprocess.run([PHOS_FN, "criu-check"], capture_output=True, text=True, timeout=60, env=env_for(criu))
    check(p.returncode == 1 and criu in p.stderr and time.time() - t < 12,
          f"{what}: phos-fn criu-check says no, naming it ({p.returncode}, {time.time() - t:.1f} s): {p.stderr[-400:]}")
    p = subprocess.run([PHOS_FN, "restore", "--device", "sim", os.path.join(tmp, "no-such-snapshot")],
                       capture_output=True, text=True, timeout=60, env=env_for(criu))
    check(p.returncode != 0 and criu in p.stderr, f"{what}: phos-fn restore refuses it: {p.stderr[-400:]}")
    check(not hung(), f"{what}: no hung CRIU is left: {hung()}")


def cold_start_bounded():
    state = os.path.join(tmp, "state-restore")
    inv = Invoker(state, tmp, extra=["--standby", "0", "--drain-timeout", "2"], extra_env=env_for(HANG_RESTORE))
    st, body = inv.call("POST", "/system/functions", {"name": "quick", "program": MISBEHAVE,
                                                      "limits": {"timeout_ms": 3000}}, timeout=300)
    check(st == 201, f"deploy (CRIU works while the flag is absent): {st} {body}")
    st, body = inv.call("POST", "/system/functions", {"name": "slow", "program": MISBEHAVE,
                                                      "limits": {"timeout_ms": 60000}}, timeout=300)
    check(st == 201, f"deploy of a second function: {st} {body}")

    open(flag, "w").close()
    t = time.time()
    st, body = inv.call("POST", "/function/quick", {}, timeout=120)
    took = time.time() - t
    print(f"cold start with a hung restore: {st} after {took:.2f} s: {body}", flush=True)
    check(st == 503 and "timeout_ms" in str(body), f"a cold start whose restore hangs: 503: {st} {body}")
    check(took < 3 + 1, f"... within timeout_ms + 1 s ({took:.2f} s)")
    gone = False
    for _ in range(100):
        gone = not hung()
        if gone:
            break
        time.sleep(0.05)
    check(gone, f"... and the hung CRIU is gone: {hung()}")

    res = {}

    def call():
        res["r"] = inv.call("POST", "/function/slow", {}, timeout=120)

    th = threading.Thread(target=call)
    th.start()
    for _ in range(400):
        if hung():
            break
        time.sleep(0.05)
    check(hung(), "the second cold start hangs in CRIU")
    t = time.time()
    inv.p.terminate()
    try:
        inv.p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    took = time.time() - t
    print(f"SIGTERM during a hung restore: exited {inv.p.returncode} after {took:.2f} s", flush=True)
    check(inv.p.returncode is not None and took < 2 + 3,
          f"SIGTERM during a hung restore: the invoker exits within the drain cap ({inv.p.returncode}, {took:.1f} s)")
    th.join(timeout=60)
    st, body = res.get("r", (0, {}))
    check(st == 503, f"... and the call got 503: {st} {body}")
    check(not hung(), f"... no hung CRIU is left: {hung()}")


def work_dirs(tdir, pid):
    return [d for d in os.listdir(tdir) if d.startswith(f"phos-criu-{pid}-")]


def sigkill_sweep():
    """A restore's CRIU work directory left by a SIGKILL of its invoker goes
    at the next start (issue 37, item 9)."""
    tdir = os.path.join(tmp, "tmpdir")
    os.makedirs(tdir)
    if os.path.exists(flag):
        os.unlink(flag)
    env = {"PHOS_CRIU": HANG_RESTORE, "PHOS_CRIU_PROBE_TIMEOUT": "3000", "TMPDIR": tdir}
    state = os.path.join(tmp, "state-kill")
    inv = Invoker(state, tmp, extra=["--standby", "0"], extra_env=env)
    st, body = inv.call("POST", "/system/functions", {"name": "k", "program": MISBEHAVE,
                                                      "limits": {"timeout_ms": 60000}}, timeout=300)
    check(st == 201, f"deploy k: {st} {body}")
    open(flag, "w").close()
    def call():
        try:
            inv.call("POST", "/function/k", {}, timeout=120)
        except OSError:   # (its invoker is killed under it)
            pass

    th = threading.Thread(target=call, daemon=True)
    th.start()
    for _ in range(400):
        if hung() and work_dirs(tdir, inv.p.pid):
            break
        time.sleep(0.05)
    dead = inv.p.pid
    check(work_dirs(tdir, dead), f"a hung restore has its work directory: {os.listdir(tdir)}")
    inv.kill()
    for pid in hung():
        os.kill(pid, 9)
    check(work_dirs(tdir, dead), "SIGKILL leaves it")
    os.unlink(flag)
    inv = Invoker(state, tmp, extra=["--standby", "0"], extra_env=env)
    check(not work_dirs(tdir, dead), f"the next start removed it: {os.listdir(tdir)}")
    check("CRIU work directories" in inv.logtext(), "and said so")
    inv.stop()


try:
    refused_at_start(HANG_ALL, "a CRIU that hangs in everything")
    refused_at_start(HANG_WORK, "a CRIU that answers --version but hangs in dump and restore")
    cold_start_bounded()
    sigkill_sweep()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for pid in hung():
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)
done("criu_hang")
