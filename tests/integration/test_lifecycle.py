# SPDX-License-Identifier: MIT
"""Faults in the life of instances, deploys and the invoker (issue 10, items
6, 10 and 12), over real HTTP on loopback (sim device):

- kill -9 of the executor behind a busy instance: that call is 502 at once,
  the next call is served right from a fresh instance;
- kill -9 of an idle instance's executor, of an idle instance's function
  process, of a parked standby process: the next call succeeds with the right
  answer;
- after each: no zombie children of the invoker, and the pool's counts in
  /metrics come back (every executor idle or busy, none lost);
- SIGTERM with --drain-timeout 2 during a long call: that call gets a 503 JSON
  answer, a keep-alive request on an open connection gets 503 (not a reset),
  and the invoker exits soon after the limit;
- random rounds (fixed seeds; PHOS_LIFECYCLE_ROUNDS, default 200): sync and
  async calls to two functions and deploys and removes of a third
  (PHOS_LIFECYCLE_CHURN=0: without them), while an executor, an instance's
  function, a standby process or (about one round in twelve) the invoker
  itself is killed at a random moment, a killed invoker being started again
  at once on the same state dir and port; every call gets a final answer
  (200, or 502/503 only when its own instance or restore was hit, or a lost
  connection only when the invoker was killed), an accepted async call
  reaches done or failed across the restart, the next calls all succeed,
  nothing the killed invoker started outlives the restart, and at the end no
  zombies, the pool whole, the state dir holding exactly the registered
  functions' snapshots, and each invoker's fds, threads and RSS back to where
  they were when it was quiet first (checked before each invoker kill and at
  the end);
- a program that never reaches phos_fn_serve: its deploy fails after
  limits.deploy_timeout_ms, describe shows "deploying" with a phase meanwhile,
  and DELETE during such a deploy cancels it and leaves no snapshot behind.
"""
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import check, done, Invoker, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
NEVER_SERVES = program("tests", "integration", "never_serves")
H = "127.0.0.1"

tmp = tempfile.mkdtemp(prefix="phos-lifecycle-test-")
def metric(inv, name):
    text = inv.request("GET", "/metrics")[1]
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def proc_stat(pid):
    """(state, ppid) of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[1])


def comm(pid):
    """The command name of pid (kept by a zombie, unlike its cmdline)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def children(ppid):
    """{pid: cmdline} of ppid's children."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = proc_stat(int(d))
        if st and st[1] == ppid:
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    out[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return out


# Under ASan (the sanitizer pass, PHOS_TEST_PRELOAD set), LeakSanitizer's
# exit-time check clones a tracer task (not a thread) of the exiting process;
# when a test kill lands on an executor during that check, the tracer outlives
# it, is reparented to the invoker (a child subreaper) and ends as a zombie
# that is nobody's to reap, named like the executor. That is the sanitizer's,
# not ours: ignored in that pass only (the plain pass checks every zombie).
ASAN = bool(os.environ.get("PHOS_TEST_PRELOAD"))


def zombies(ppid):
    return [pid for pid in children(ppid) if (proc_stat(pid) or ("",))[0] == "Z"
            and not (ASAN and comm(pid) == "phos-executor")]


def executors(ppid):
    return [pid for pid, cmd in children(ppid).items() if "phos-executor" in cmd]


def instance_executors(ppid, inst):
    """The executor behind instance inst (as /system/logs shows it), when it is ppid's child."""
    pid = inst.get("executor_pid") if inst else None
    return [pid] if pid in executors(ppid) else []


def kill_and_wait(pid):
    """SIGKILL pid and wait (bounded) until it has exited (zombie or gone)."""
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        st = proc_stat(pid)
        if st is None or st[0] in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def settle(inv, pool, what):
    """After a fault: no zombie children, and every pooled executor idle or busy."""
    z, counts = [], None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        z = zombies(inv.p.pid)
        counts = [metric(inv, f'phos_pool_executors{{state="{s}"}}') for s in ("idle", "busy", "starting")]
        if not z and counts[0] + counts[1] == pool and counts[2] == 0:
            break
        time.sleep(0.05)
    check(not z, f"{what}: no zombie children of the invoker ({[(pid, comm(pid)) for pid in z]})")
    check(counts[0] + counts[1] == pool and counts[2] == 0, f"{what}: pool counts recovered {counts}")


def instances(inv, name):
    st, body, _ = inv.request("GET", f"/system/logs?name={name}&tail=1")
    if st != 200:
        return []
    items = body if isinstance(body, list) else body.get("instances", [])
    return [i for i in items if i.get("state") in ("idle", "busy", "starting")]


def dropped(inv, name, inst):
    """Waits (bounded) until the invoker dropped instance inst by itself."""
    for _ in range(200):
        if inst not in [i["instance"] for i in instances(inv, name)]:
            return True
        time.sleep(0.05)
    return False


def faults(state):
    """Item 6: dead executors, instances and standbys never poison a function."""
    inv = Invoker(state, tmp, extra=["--pool", "1"])
    st, body, _ = inv.request("POST", "/system/functions", {
        "name": "mb", "program": MISBEHAVE, "limits": {"max_instances": 1, "timeout_ms": 20000}})
    check(st == 201, f"deploy mb: {st} {body}")
    settle(inv, 1, "baseline")
    st, body, _ = inv.request("POST", "/function/mb", {})
    check(st == 200 and body.get("gpu") == 1234, f"first call: {st} {body}")

    # 1. the executor behind a busy instance
    res = {}

    def slow():
        t = time.time()
        res["r"] = inv.request("POST", "/function/mb", {"sleep_ms": 8000})
        res["t"] = time.time() - t

    th = threading.Thread(target=slow)
    th.start()
    busy = []
    for _ in range(200):
        busy = [i for i in instances(inv, "mb") if i["state"] == "busy"]
        if busy:
            break
        time.sleep(0.02)
    time.sleep(0.2)  # the request is in the function now
    exe = instance_executors(inv.p.pid, busy[0] if busy else None)
    check(busy and len(exe) == 1, f"one busy instance on one executor: {busy} {exe}")
    if exe:
        check(kill_and_wait(exe[0]), "executor killed")
    th.join(timeout=30)
    st, body, _ = res.get("r", (0, {}, {}))
    check(st == 502 and "executor" in str(body), f"the running call failed with 502: {st} {body}")
    check(res.get("t", 99) < 7, f"... as soon as the executor died, not when the call ended ({res.get('t')} s)")
    settle(inv, 1, "busy executor killed")
    st, body, h = inv.request("POST", "/function/mb", {})
    check(st == 200 and body.get("gpu") == 1234 and body.get("calls") == 1 and h.get("x-cold-start") == "true",
          f"the next call ran on a fresh instance: {st} {body} {h}")

    # 2. an idle instance's executor
    idle = [i for i in instances(inv, "mb") if i["state"] == "idle"]
    exe = instance_executors(inv.p.pid, idle[0] if idle else None)
    check(len(idle) == 1 and len(exe) == 1, f"one idle instance on one executor: {idle} {exe}")
    if exe:
        check(kill_and_wait(exe[0]), "idle instance's executor killed")
    if idle:
        check(dropped(inv, "mb", idle[0]["instance"]), "the invoker dropped the instance by itself")
    st, body, h = inv.request("POST", "/function/mb", {})
    check(st == 200 and body.get("gpu") == 1234 and body.get("calls") == 1,
          f"after the idle instance's executor died: {st} {body} {h}")
    settle(inv, 1, "idle executor killed")

    # 3. an idle instance's function process
    idle = [i for i in instances(inv, "mb") if i["state"] == "idle"]
    check(len(idle) == 1, f"one idle instance: {idle}")
    if idle:
        check(kill_and_wait(idle[0]["pid"]), "idle instance's function killed")
        check(dropped(inv, "mb", idle[0]["instance"]), "the invoker dropped the instance by itself")
    st, body, h = inv.request("POST", "/function/mb", {})
    check(st == 200 and body.get("gpu") == 1234 and body.get("calls") == 1,
          f"after the idle instance's function died: {st} {body} {h}")
    settle(inv, 1, "idle function killed")

    # the same, with the call right after the kill (no time for the reaper)
    for what in ("function", "executor"):
        idle = [i for i in instances(inv, "mb") if i["state"] == "idle"]
        exe = instance_executors(inv.p.pid, idle[0] if idle else None)
        check(len(idle) == 1 and len(exe) == 1, f"one idle instance on one executor: {idle} {exe}")
        if idle and exe:
            check(kill_and_wait(idle[0]["pid"] if what == "function" else exe[0]), f"{what} killed")
        st, body, h = inv.request("POST", "/function/mb", {})
        check(st == 200 and body.get("gpu") == 1234 and body.get("calls") == 1,
              f"a call right after the idle instance's {what} died: {st} {body} {h}")
        settle(inv, 1, f"idle {what} killed, called at once")
    check(inv.request("DELETE", "/system/functions/mb")[0] == 200, "remove mb")
    settle(inv, 1, "mb removed")

    # an idle pooled executor (serving nothing): replaced, not handed to a cold start
    exe = executors(inv.p.pid)
    check(len(exe) == 1, f"one idle pooled executor: {exe}")
    if exe:
        check(kill_and_wait(exe[0]), "idle pooled executor killed")
    settle(inv, 1, "idle pooled executor killed")
    # the pool's counts may still show the dead one for a moment: wait (bounded)
    # for its replacement to run
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (executors(inv.p.pid) and executors(inv.p.pid) != exe):
        time.sleep(0.05)
    check(executors(inv.p.pid) and executors(inv.p.pid) != exe, f"a new executor took its place: {exe} "
                                                                f"{executors(inv.p.pid)}")

    # 4. a parked standby process (no instance: the next call is a cold start)
    st, body, _ = inv.request("POST", "/system/functions", {"name": "sb", "program": MISBEHAVE})
    check(st == 201, f"deploy sb: {st} {body}")
    parked = []
    for _ in range(600):
        parked = [pid for pid, cmd in children(inv.p.pid).items() if "misbehave" in cmd]
        if parked:
            break
        time.sleep(0.05)
    check(len(parked) == 1, f"a standby process is parked: {parked}")
    if parked:
        check(kill_and_wait(parked[0]), "standby killed")
    st, body, h = inv.request("POST", "/function/sb", {})
    check(st == 200 and body.get("gpu") == 1234 and body.get("calls") == 1 and h.get("x-cold-start") == "true",
          f"after the standby died: {st} {body} {h}")
    settle(inv, 1, "standby killed")
    st, body, _ = inv.request("POST", "/function/sb", {})
    check(st == 200 and body.get("calls") == 2, f"sb warm: {st} {body}")
    inv.p.terminate()
    check(inv.p.wait(timeout=60) == 0, "invoker stopped cleanly")


def drain(state):
    """Item 10: --drain-timeout caps SIGTERM's wait; calls still running get 503."""
    inv = Invoker(state, tmp, extra=["--drain-timeout", "2"])
    st, body, _ = inv.request("POST", "/system/functions", {
        "name": "mb", "program": MISBEHAVE, "limits": {"max_instances": 2, "timeout_ms": 60000}})
    check(st == 201, f"deploy mb: {st} {body}")
    # a keep-alive connection with one answered request on it
    ka = http.client.HTTPConnection(H, inv.port, timeout=60)
    ka.request("POST", "/function/mb", body="{}", headers={"Content-Type": "application/json"})
    r = ka.getresponse()
    check(r.status == 200 and json.loads(r.read()).get("gpu") == 1234, f"keep-alive call: {r.status}")
    res = {}

    def long_call():
        res["r"] = inv.request("POST", "/function/mb", {"sleep_ms": 30000}, timeout=120)
        res["t"] = time.time()

    th = threading.Thread(target=long_call)
    th.start()
    for _ in range(200):
        if [i for i in instances(inv, "mb") if i["state"] == "busy"]:
            break
        time.sleep(0.02)
    time.sleep(0.2)
    t0 = time.time()
    inv.p.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    # a request on the open keep-alive connection during the drain: 503, not a reset
    try:
        ka.request("POST", "/function/mb", body="{}", headers={"Content-Type": "application/json"})
        r = ka.getresponse()
        data = r.read()
        check(r.status == 503 and "error" in json.loads(data), f"keep-alive request while draining: {r.status} {data}")
        check((r.getheader("Connection") or "").lower() == "close", "... with Connection: close")
    except (OSError, http.client.HTTPException) as e:
        check(False, f"keep-alive request while draining was cut: {e!r}")
    ka.close()
    th.join(timeout=60)
    st, body, _ = res.get("r", (0, {}, {}))
    check(st == 503 and "drain" in str(body), f"the long call got 503 at the drain limit: {st} {body}")
    check(res.get("t", t0 + 99) - t0 < 15, f"... soon after the 2 s limit, not after its 30 s ({res.get('t', 0) - t0:.1f} s)")
    try:
        rc = inv.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"the invoker exited after the drain limit: {rc}")
    check(not [pid for pid, cmd in children(inv.p.pid).items()], "nothing of it left running")


def leftovers(state, name):
    snaps = os.path.join(state, "snapshots")
    return [d for d in os.listdir(snaps) if d == name or d.startswith(name + ".")] + \
        [f for f in os.listdir(os.path.join(state, "functions")) if f.startswith(name + ".")]


def deploys(state):
    """Item 12: a deploy timeout, cancel by DELETE, progress in describe/list."""
    inv = Invoker(state, tmp)
    st, body, _ = inv.request("POST", "/system/functions", {
        "name": "x", "program": NEVER_SERVES, "limits": {"deploy_timeout_ms": 10}})
    check(st == 400 and "deploy_timeout_ms" in body.get("error", ""), f"deploy_timeout_ms bounded: {st} {body}")

    # never reaches phos_fn_serve: fails after its deploy_timeout_ms
    t = time.time()
    st, body, _ = inv.request("POST", "/system/functions", {
        "name": "hang", "program": NEVER_SERVES, "limits": {"deploy_timeout_ms": 1500}})
    took = time.time() - t
    check(st == 422 and "phos_fn_serve" in body.get("error", "") and "1500 ms" in body.get("error", ""),
          f"deploy of a program that never serves: {st} {body}")
    check(1.4 < took < 30, f"... after its deploy_timeout_ms ({took:.1f} s)")
    check(inv.request("GET", "/system/functions/hang")[0] == 404, "the timed-out function is not listed")
    check(not leftovers(state, "hang"), f"nothing left of it: {leftovers(state, 'hang')}")
    check(not [c for c in children(inv.p.pid).values() if "never_serves" in c], "its process is gone")

    # a deploy in progress shows its phase; DELETE cancels it
    res = {}

    def deploy():
        res["r"] = inv.request("POST", "/system/functions", {"name": "hang2", "program": NEVER_SERVES}, timeout=120)

    th = threading.Thread(target=deploy)
    th.start()
    desc = {}
    for _ in range(400):
        st, desc, _ = inv.request("GET", "/system/functions/hang2")
        if st == 200 and desc.get("progress", {}).get("phase") == "init":
            break
        time.sleep(0.05)
    check(desc.get("status") == "deploying" and desc.get("progress", {}).get("phase") == "init" and
          desc["progress"].get("timeout_ms") == 60000 and desc["limits"].get("deploy_timeout_ms") == 60000,
          f"describe shows the deploy's progress: {desc}")
    st, lst, _ = inv.request("GET", "/system/functions")
    check(st == 200 and [f.get("progress", {}).get("phase") for f in lst if f["name"] == "hang2"] == ["init"],
          f"list shows it too: {lst}")
    for _ in range(100):  # the program is running
        if [c for c in children(inv.p.pid).values() if "never_serves" in c]:
            break
        time.sleep(0.05)
    t = time.time()
    st, body, _ = inv.request("DELETE", "/system/functions/hang2")
    check(st == 200 and body.get("status") == "removed", f"DELETE during the deploy: {st} {body}")
    th.join(timeout=60)
    st, body, _ = res.get("r", (0, {}, {}))
    check(st == 409 and "cancelled" in body.get("error", ""), f"the deploy was cancelled: {st} {body}")
    check(time.time() - t < 30, "... soon")
    check(inv.request("GET", "/system/functions/hang2")[0] == 404, "the cancelled function is gone")
    check(not leftovers(state, "hang2"), f"nothing left of it: {leftovers(state, 'hang2')}")
    gone = False
    for _ in range(100):
        gone = not [c for c in children(inv.p.pid).values() if "never_serves" in c] and not zombies(inv.p.pid)
        if gone:
            break
        time.sleep(0.05)
    check(gone, f"its process is gone, no zombies: {children(inv.p.pid)}")
    st, body, _ = inv.request("POST", "/system/functions", {"name": "hang2", "program": MISBEHAVE})
    check(st == 201 and "progress" not in body, f"the name is free again: {st} {body}")
    st, body, _ = inv.request("POST", "/function/hang2", {})
    check(st == 200 and body.get("gpu") == 1234, f"and serves: {st} {body}")
    inv.p.terminate()
    check(inv.p.wait(timeout=60) == 0, "invoker stopped cleanly")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def fds_threads(pid):
    """The invoker's fds, threads and RSS (KiB), the least seen over 1 s (a
    connection thread of the last HTTP request may still be on its way out)."""
    seen = []
    for _ in range(10):
        seen.append((len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task")), rss_kib(pid)))
        time.sleep(0.1)
    return tuple(min(x[i] for x in seen) for i in range(3))


# RSS may grow by what malloc keeps for reuse (arenas of connection threads,
# the bounded call records), not with the number of rounds: 200 rounds (22
# invoker lives) grew it by 1.5 MiB at most, most lives by under 1 MiB
# (2026-11-26). Not checked under ASan (its quarantine keeps freed memory).
RSS_SLACK_KIB = 8 * 1024


def back_to(inv, base, what):
    """fds and threads back to base, RSS within RSS_SLACK_KIB of it."""
    now = base

    def ok():
        return now[0] <= base[0] and now[1] <= base[1] and (ASAN or now[2] <= base[2] + RSS_SLACK_KIB)
    for _ in range(10):
        now = fds_threads(inv.p.pid)
        if ok():
            break
    check(ok(), f"{what}: fds, threads and RSS (KiB) back to the start: {base} -> {now}")
    rss_growth.append(now[2] - base[2])
    return now


rss_growth = []   # KiB, of each invoker's life (printed)


def marked(state):
    """Processes carrying this state dir's PHOS_INVOKER_STATE mark."""
    mark = f"PHOS_INVOKER_STATE={os.path.realpath(state)}".encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        out.append(int(d))
            except OSError:
                pass
    return out


def descends(pid, root):
    while pid > 1:
        if pid == root:
            return True
        st = proc_stat(pid)
        if not st:
            return False
        pid = st[1]
    return False


def no_orphans(inv, state, what):
    """Waits (bounded) until every process marked as state's is the invoker's or its descendants'.
    The bound, 40 s, covers the invoker's late sweeps (orphans.c: 1, 3, 10 and 30 s after its
    start) for a process of the old invoker that appears late (a restore it had started);
    10 s, the old bound, was the third sweep's own time."""
    strays = []
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        strays = [p for p in marked(state) if p != inv.p.pid and not descends(p, inv.p.pid)
                  and (proc_stat(p) or ("Z",))[0] not in ("Z", "X")]
        if not strays:
            break
        time.sleep(0.05)
    check(not strays, f"{what}: nothing of the killed invoker lives on ({[(p, comm(p)) for p in strays]})")


def quiet(inv, names, pool):
    """Waits (bounded: 60 s, an invoker restarted under ASan on a busy CI machine
    restores its standbys and pool slowly) until no instance runs and every
    function has its standby parked."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        fns = [c for c in children(inv.p.pid).values() if "misbehave" in c]
        if not any(instances(inv, n) for n in names) and len(fns) == len(names) and not zombies(inv.p.pid):
            idle = metric(inv, 'phos_pool_executors{state="idle"}')
            if idle == pool:
                return True
        time.sleep(0.05)
    return False


# Deploys and removes of a third function beside the load (on by default;
# PHOS_LIFECYCLE_CHURN=0 turns them off). 200 rounds took about 3 minutes on
# 2 cores either way (2026-11-26). It found: a remove that stayed
# "being removed" (a deploy whose executor was killed mid-snapshot committed
# an image CRIU hung restoring), and dumps failing in a row after a kill (a
# proc mount left at proc.crtools); test_image_faults covers both
# deterministically.
CHURN = os.environ.get("PHOS_LIFECYCLE_CHURN", "1") == "1"


def function_list(inv):
    st, body, _ = inv.request("GET", "/system/functions")
    if st != 200:
        return []
    return body.get("functions", body) if isinstance(body, dict) else body


LOST = (OSError, http.client.HTTPException)


def chaos(state, first, last):
    """Kills at random points during a mixed load, rounds first..last (their
    seeds); nothing is lost or leaked."""
    pool = 2
    extra = ["--pool", str(pool)]
    inv = Invoker(state, tmp, extra=extra)
    names = ["ca", "cb"]
    for name, mi in zip(names, (2, 1)):
        st, body, _ = inv.request("POST", "/system/functions", {
            "name": name, "program": MISBEHAVE,
            "limits": {"max_instances": mi, "max_inflight": 8, "timeout_ms": 20000, "idle_ms": 300}})
        check(st == 201, f"deploy {name}: {st} {body}")
    check(quiet(inv, names, pool), "quiet before the rounds")
    base = fds_threads(inv.p.pid)
    bad, kills, failed, total, why = [], {}, 0, 0, []
    churn, cc_up = [], [False]
    rounds = last - first + 1
    for seed in range(first, last + 1):
        rng = random.Random(seed)
        results = []
        lock = threading.Lock()
        kill_invoker = rng.random() < 1 / 12
        if kill_invoker:  # this invoker's life ends: nothing leaked in it (as at its start, without cc)
            if cc_up[0]:
                st, body, _ = inv.request("DELETE", "/system/functions/cc")
                check(st in (200, 404), f"seed {seed}: remove cc before the invoker is killed: {st} {body}")
                cc_up[0] = False
            check(quiet(inv, names, pool), f"seed {seed}: quiet before the invoker is killed")
            back_to(inv, base, f"seed {seed}: before the invoker is killed")

        def client(name, sleeps):
            for ms in sleeps:
                try:
                    r = inv.request("POST", f"/function/{name}", {"sleep_ms": ms}, timeout=60)
                except LOST as e:
                    r = (None, f"connection lost: {e!r}")
                with lock:
                    results.append(("sync", r[0], r[1]))

        def async_client(name, ms):
            try:
                st, body, _ = inv.request("POST", f"/async-function/{name}", {"sleep_ms": ms})
            except LOST as e:
                st, body = None, f"connection lost: {e!r}"
            if st != 202:
                with lock:
                    results.append(("async-submit", st, body))
                return
            # accepted: it must end, across a restart of the invoker too
            for _ in range(1200):
                try:
                    st2, rec, _ = inv.request("GET", f"/system/calls/{body['call_id']}")
                except LOST:
                    st2, rec = None, None
                if st2 == 200 and rec.get("status") in ("done", "failed"):
                    with lock:
                        results.append(("async", rec.get("code"), rec.get("body")))
                    return
                check(st2 in (200, None), f"seed {seed}: an accepted async call is known: {st2} {rec}")
                time.sleep(0.05)
            with lock:
                results.append(("async", None, "no final status"))

        ts = [threading.Thread(target=client, args=(rng.choice(names), [rng.randrange(0, 300) for _ in range(3)]))
              for _ in range(3)]
        ts.append(threading.Thread(target=async_client, args=(rng.choice(names), rng.randrange(0, 300))))

        def deploy_or_remove(deploy):
            # a third function comes and goes beside the load
            try:
                if deploy:
                    st, body, _ = inv.request("POST", "/system/functions", {
                        "name": "cc", "program": MISBEHAVE, "limits": {"max_instances": 1, "idle_ms": 300}})
                    ok = st == 201 or (st == 409 and "exists" in str(body))
                else:
                    st, body, _ = inv.request("DELETE", "/system/functions/cc")
                    ok = st in (200, 404)
            except LOST as e:
                st, body, ok = None, f"connection lost: {e!r}", kill_invoker
            with lock:
                churn.append((deploy, st, ok, str(body)[:160]))

        churned = len(churn)
        deploying = False
        if CHURN and rng.random() < 0.3:
            deploying = not cc_up[0]
            ts.append(threading.Thread(target=deploy_or_remove, args=(not cc_up[0],)))
            cc_up[0] = not cc_up[0]
        for t in ts:
            t.start()
        time.sleep(rng.uniform(0, 0.6))
        if kill_invoker:
            kills["invoker"] = kills.get("invoker", 0) + 1
            inv.kill()
            inv = Invoker(state, tmp, extra=extra, port=inv.port)  # as a supervisor would
            no_orphans(inv, state, f"seed {seed}")
        kind = rng.choice(["executor", "function", "function", "executor", "any"])
        kids = children(inv.p.pid) if not kill_invoker else {}
        cands = [pid for pid, c in kids.items()
                 if (kind in ("executor", "any") and "phos-executor" in c) or
                 (kind in ("function", "any") and "misbehave" in c)]
        victim = rng.choice(sorted(cands)) if cands else None
        # a deploy whose own snapshot was hit (its executor, or any function
        # while one is being snapshotted) may fail, with its reason. A deploy
        # this round counts as snapshotting even before its executor shows
        # "--snapshot-to" (a pooled one never does): its program, a
        # misbehave child of the invoker, may be the victim (CI9 under ASan)
        snapshotting = deploying or any("--snapshot-to" in c for c in kids.values())
        deploy_hit = bool(victim) and snapshotting and ("--snapshot-to" in kids[victim] or "misbehave" in kids[victim])
        if victim:
            what = "executor" if "phos-executor" in kids[victim] else "function"
            kills[what] = kills.get(what, 0) + 1
            kill_and_wait(victim)
        for t in ts:
            t.join(timeout=120)
        total += len(results)
        failed += sum(1 for r in results if r[1] != 200)
        why += [f"{r[0]} {r[1]} {r[2]}"[:160] for r in results if r[1] != 200]
        for kind_, st, body in results:
            # a call whose own instance or restore was hit may fail, with a
            # clear status; one whose invoker was killed may lose its connection
            if st != 200 and not (st in (502, 503) and "error" in str(body)) and \
                    not (kill_invoker and st is None and kind_ != "async"):
                bad.append((seed, kind_, st, body))
        check(len(results) == 10, f"seed {seed}: every call has a final answer ({len(results)} of 10)")
        if len(churn) > churned and not churn[-1][2] and not (deploy_hit and churn[-1][0] and churn[-1][1] in (422, 500, 502, 503)
                                               and "error" in churn[-1][3]):
            bad.append((seed, "churn", churn[-1]))
        cc_up[0] = "cc" in [fn.get("name") for fn in function_list(inv)]
        for name in names:
            st, body, _ = inv.request("POST", f"/function/{name}", {})
            if not (st == 200 and body.get("gpu") == 1234):
                bad.append((seed, "after", name, st, body))
        if kill_invoker:  # the new invoker's life starts
            check(quiet(inv, names + ["cc"] * cc_up[0], pool), f"seed {seed}: quiet after the invoker's restart")
            base = fds_threads(inv.p.pid)
    print(f"chaos: {rounds} rounds, kills {kills}, {failed} of {total} calls failed with a cause, "
          f"{len(churn)} deploys/removes of a third function", flush=True)
    # the third function goes, then the state dir holds nothing that no function owns
    st, body, _ = inv.request("DELETE", "/system/functions/cc")
    check(st in (200, 404), f"remove cc after the rounds: {st} {body}")
    for _ in range(100):
        owned = sorted(f[:-5] for f in os.listdir(os.path.join(state, "functions")) if f.endswith(".json"))
        snaps = sorted(os.listdir(os.path.join(state, "snapshots")))
        if owned == snaps:
            break
        time.sleep(0.05)
    check(owned == snaps and sorted(fn.get("name") for fn in function_list(inv)) == owned,
          f"state dir after the rounds: registry {owned}, snapshots {snaps}")
    if os.environ.get("PHOS_LIFECYCLE_VERBOSE"):
        print("\n".join(sorted(set(why))), flush=True)
    check(not bad, f"calls failed without cause, or after the round: {bad[:5]}")
    settle(inv, pool, "after the rounds")
    check(quiet(inv, names, pool), "quiet after the rounds")
    now = back_to(inv, base, "after the rounds")
    print(f"chaos: the last invoker's fds, threads, RSS (KiB): {base} -> {now}; RSS growth of each "
          f"invoker's life (KiB): {rss_growth}", flush=True)
    inv.p.terminate()
    check(inv.p.wait(timeout=60) == 0, "invoker stopped cleanly")


def main():
    """The parts named on the command line (all when none): faults, drain,
    deploys, chaos (rounds 1..PHOS_LIFECYCLE_ROUNDS, default 200) or
    chaos:A-B (rounds A..B of those). meson runs them as separate tests, so
    that the rounds go on side by side."""
    rounds = int(os.environ.get("PHOS_LIFECYCLE_ROUNDS", "200"))
    for part in sys.argv[1:] or ["faults", "chaos", "drain", "deploys"]:
        if part.startswith("chaos"):
            a, _, b = part[6:].partition("-") if part != "chaos" else ("1", "", str(rounds))
            first, last = int(a), min(int(b), rounds)
            chaos(os.path.join(tmp, f"state-chaos-{first}"), first, last)
        elif part in ("faults", "drain", "deploys"):
            globals()[part](os.path.join(tmp, f"state-{part}"))
        else:
            sys.exit(f"unknown part {part!r}")


import harness  # noqa: E402

ok = False
try:
    main()
    ok = not harness.failures
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not ok:  # what the invokers said: the latest lives last (meson shows a log's end)
        logs = sorted((f for f in os.listdir(tmp) if f.startswith("invoker-")),
                      key=lambda f: os.path.getmtime(os.path.join(tmp, f)))
        for f in logs[-6:]:
            with open(os.path.join(tmp, f), errors="replace") as lf:
                print(f"--- {f} (last 40 lines) ---\n" + "".join(lf.readlines()[-40:]), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
done("lifecycle")
