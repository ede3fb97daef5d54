# SPDX-License-Identifier: MIT
"""Warm executors for phos-fn run (issue 12): `phos-fn pool` and an
invoker lend theirs through a lending socket (snapshotter/lend.c).

- phos-fn pool --size 1: its socket is 0600; `phos-fn run --executor SOCKET`
  runs vecadd right on the pool's executor (its log shows the program
  connecting to it, and no executor is started beside the run), twice in a
  row on the same executor (scrubbed in between: the second run sees no
  state of the first), and a program with arrays and texture objects runs on
  it after another did (their handles start again from 1);
- auto: with PHOS_EXECUTOR_SOCKET pointing at the pool, a plain phos-fn run
  takes the pool's executor; with the pool's one executor busy, a second run
  does not wait for it past a bound: named explicitly it fails saying "busy",
  in auto it starts a fresh executor and answers right;
- another GPU than the pool's is refused by name ("this pool is"), and so is
  a request that is not LEND 1 DEVICE GPU; a file at the socket path that is
  not a socket is never replaced;
- an invoker with --pool 1 lends through STATE/executors.sock (0600): a run
  there answers right, and the invoker's pool has its executor back, idle,
  afterwards; with --lend-executors 0 there is no socket.
"""
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

from harness import Invoker, PHOS_FN, answers, check, done, fn_env, procs, program

VECADD = program("functions", "examples", "vecadd")
TEXTURES = program("tests", "transparency", "textures", "textures")
REQ = '{"n":1024,"seed":1}\n'

tmp = tempfile.mkdtemp(prefix="phos-lend-test-")


def start_pool(sock, size=1):
    log = open(os.path.join(tmp, "pool.log"), "w")
    p = subprocess.Popen([PHOS_FN, "pool", "--device", "sim", "--size", str(size), "--socket", sock],
                         stdout=log, stderr=subprocess.STDOUT, env=fn_env({"PHOS_LOG": "info"}))
    procs.append(p)
    for _ in range(400):
        if os.path.exists(sock) and "warm sim executors" in open(log.name).read():
            break
        time.sleep(0.05)
    return p, log.name


def run(prog, *args, stdin="", executor=None, env=None, timeout=120):
    cmd = [PHOS_FN, "run", "--device", "sim", *(["--executor", executor] if executor else []), "--", prog, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=fn_env(dict(env or {}, PHOS_RUN_EXECUTOR="auto")))


def connected(logname):
    """(executor pid, function pid) of each 'function pid N connected' line of the pool's log."""
    out = []
    for line in open(logname):
        if "function pid" in line and "connected" in line:
            exe = int(line.split("[", 1)[1].split("]", 1)[0])
            fn = int(line.split("function pid", 1)[1].split()[0])
            out.append((exe, fn))
    return out


def executors_beside(ppid):
    """phos-executor children of ppid."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
                if int(st[st.rindex(")") + 2:].split()[1]) == ppid and "phos-executor" in st:
                    kids.append(int(d))
            except (OSError, ValueError):
                pass
    return kids


def ok_answer(p):
    a = answers(p)
    return p.returncode == 0 and len(a) == 1 and a[0].get("ok") is True


try:
    sock = os.path.join(tmp, "executors.sock")
    pool, log = start_pool(sock)
    check(stat.S_ISSOCK(os.stat(sock).st_mode) and stat.S_IMODE(os.stat(sock).st_mode) == 0o600,
          f"the socket is there, 0600: {oct(os.stat(sock).st_mode)}")

    # explicitly, twice on the same executor
    for i in range(2):
        p = run(VECADD, stdin=REQ, executor=sock)
        check(ok_answer(p), f"run {i} on the pool's executor: rc {p.returncode} {p.stdout[-500:]} {p.stderr[-1500:]}")
    seen = connected(log)
    check(len(seen) == 2 and seen[0][0] == seen[1][0], f"both runs connected to the pool's one executor: {seen}")

    # no executor beside a lent run: watch the run's children while it runs
    holder = subprocess.Popen([PHOS_FN, "run", "--device", "sim", "--executor", sock, "--", VECADD],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=fn_env())
    procs.append(holder)
    for _ in range(200):
        if len(connected(log)) == 3:
            break
        time.sleep(0.05)
    check(len(connected(log)) == 3, "the held run connected to the pool")
    check(executors_beside(holder.pid) == [], f"no executor started by a lent run: {executors_beside(holder.pid)}")

    # the pool's one executor is busy now: named, a second run fails soon and says why
    t0 = time.monotonic()
    p = run(VECADD, stdin=REQ, executor=sock)
    took = time.monotonic() - t0
    check(p.returncode != 0 and "busy" in p.stderr, f"busy pool, named: rc {p.returncode} {p.stderr[-500:]}")
    check(took < 30, f"it did not wait for the busy executor ({took:.1f} s)")
    # in auto, it starts its own
    p = run(VECADD, stdin=REQ, env={"PHOS_EXECUTOR_SOCKET": sock})
    check(ok_answer(p), f"busy pool, auto: a fresh executor answers: rc {p.returncode} {p.stderr[-800:]}")
    out, err = holder.communicate(REQ, timeout=60)
    check(holder.returncode == 0 and '"ok":true' in out, f"the held run answered: {holder.returncode} {err[-500:]}")

    # auto with the pool free again: lent
    n = len(connected(log))
    p = run(VECADD, stdin=REQ, env={"PHOS_EXECUTOR_SOCKET": sock})
    check(ok_answer(p) and len(connected(log)) == n + 1, f"auto takes the pool's executor: {connected(log)[n:]}")

    # objects of one program do not reach the next: texture handles from 1 again
    for i in range(2):
        p = run(TEXTURES, executor=sock)
        check(p.returncode == 0 and "textures: ok" in p.stdout + p.stderr,
              f"textures, run {i}, on the lent executor: rc {p.returncode} {p.stderr[-1500:]}")

    # refusals: another GPU, a bad request, a path that is not a socket
    p = run(VECADD, stdin=REQ, executor=sock, env={"PHOS_GPU": "1"})
    check(p.returncode != 0 and "this pool is sim GPU 0" in p.stderr, f"another GPU refused: {p.stderr[-500:]}")
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"GIVE ME A GPU\n")
    got = s.recv(200)
    s.close()
    check(got.startswith(b"ERR a request is LEND 1"), f"a bad request: {got!r}")
    plain = os.path.join(tmp, "plain")
    with open(plain, "w") as f:
        f.write("keep me")
    p2 = subprocess.run([PHOS_FN, "pool", "--device", "sim", "--socket", plain], capture_output=True, text=True,
                        timeout=60, env=fn_env())
    check(p2.returncode != 0 and "not a socket" in p2.stderr and open(plain).read() == "keep me",
          f"a file that is not a socket is kept: {p2.returncode} {p2.stderr[-300:]}")

    pool.send_signal(signal.SIGTERM)
    check(pool.wait(timeout=60) == 0 and not os.path.exists(sock), "the pool stops and removes its socket")

    # an invoker lends its pool
    state = os.path.join(tmp, "state")
    inv = Invoker(state, tmp, extra=["--pool", "1"])
    isock = os.path.join(state, "executors.sock")
    check(stat.S_ISSOCK(os.stat(isock).st_mode) and stat.S_IMODE(os.stat(isock).st_mode) == 0o600,
          "the invoker's socket is there, 0600")
    p = run(VECADD, stdin=REQ, executor=isock)
    check(ok_answer(p), f"a run on the invoker's executor: rc {p.returncode} {p.stderr[-800:]}")
    idle = 0
    for _ in range(200):
        st, text, _ = inv.request("GET", "/metrics")
        idle = [float(x.split()[-1]) for x in text.splitlines() if x.startswith('phos_pool_executors{state="idle"}')]
        if idle and idle[0] == 1:
            break
        time.sleep(0.05)
    check(idle and idle[0] == 1, f"the invoker's executor is back, idle: {idle}")
    inv.stop()
    inv2 = Invoker(os.path.join(tmp, "state2"), tmp, extra=["--pool", "1", "--lend-executors", "0"])
    check(not os.path.exists(os.path.join(tmp, "state2", "executors.sock")), "--lend-executors 0: no socket")
    inv2.stop()
finally:
    for pr in procs:
        if pr.poll() is None:
            pr.kill()
            pr.wait()
    shutil.rmtree(tmp, ignore_errors=True)

done("lend")
