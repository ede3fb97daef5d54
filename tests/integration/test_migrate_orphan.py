# SPDX-License-Identifier: MIT
"""A move's target reclaims its pre-copy when the source dies mid-move
(issue 37, item 8), on the sim device: invokers A (source) and B (target,
PHOS_MIGRATE_ORPHAN_S=3: a pre-copy whose source says nothing for 3 s goes)
on one machine, long_call deployed on both as lc1 and lc2.

Before, a target kept a dead source's pre-copy (checkpoints/pre-M.tmp-precopy)
until its own restart and the executor it set aside for it for 900 s.

- a healthy slow move is not cut: lc1's instance, busy in an 8 s call while
  it is moved live, is held for its stop far longer than 3 s after its
  pre-copy landed on B; B keeps asking A for the move's record, A says it
  runs, and the move ends well, the state going on at B;
- A killed (SIGKILL) while its move of lc2 waits for the instance's busy call
  to end, its pre-copy on B: within the bound (3 s, plus one poll and the
  timeout of one request) B has removed the pre-copy directory and given
  back the executor it prepared (/metrics: phos_migrate_prepared 0,
  phos_migrate_precopies 0, phos_migrate_precopies_reclaimed_total 1); a
  final phase of that move that comes late gets 410;
- A restarted: a fresh live move of lc2 to B works (its executor prepared
  again), and the moved instance answers with its state.
"""
import os
import shutil
import tempfile
import threading
import time

from harness import DEVICE, Invoker, check, done, live_instances, procs, program
from harness import long_call_reference as reference

LONG = program("tests", "integration", "long_call")
ORPHAN_S = 3
tmp = tempfile.mkdtemp(prefix="phos-migrate-orphan-")


def token(inv, name="peer.token"):
    with open(os.path.join(inv.state, name)) as f:
        return f.read().strip()


def metric(inv, name):
    st, text = inv.call("GET", "/metrics")
    for ln in str(text).splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[-1])
    return None


def pre_dir(inv, mid):
    return os.path.join(inv.state, "checkpoints", f"pre-{mid}.tmp-precopy")


def busy_call(inv, name, steps, out):
    """A call of steps steps 10 ms apart, its answer (or the error) into out."""
    try:
        out["r"] = inv.call("POST", f"/function/{name}", {"steps": steps, "pause_us": 10000}, timeout=120)
    except OSError as e:
        out["r"] = (0, str(e))


def start_move(src, dst, name, iid):
    """An async live move of name's instance iid, followed until the source
    holds it for its stop (its pre-copy is on dst then): the migration id."""
    st, body = src.call("POST", f"/system/functions/{name}/instances/{iid}/migrate",
                        {"to": f"http://127.0.0.1:{dst.port}", "to_token": token(dst), "async": True})
    mid = body.get("migration", "") if isinstance(body, dict) else ""
    check(st == 202 and len(mid) == 32, f"{name}: an async move: {st} {body}")
    state = None
    for _ in range(600):
        st, m = src.call("GET", f"/system/migrations/{mid}")
        state = m.get("state") if isinstance(m, dict) else None
        if state not in ("starting", "precopy"):
            break
        time.sleep(0.05)
    check(state == "stopping", f"{name}: the move waits for the busy call, its pre-copy taken: {state}")
    return mid


def main():
    a = Invoker(os.path.join(tmp, "a"), tmp, device=DEVICE)
    b = Invoker(os.path.join(tmp, "b"), tmp, device=DEVICE, extra_env={"PHOS_MIGRATE_ORPHAN_S": str(ORPHAN_S)})
    for inv in (a, b):
        for name in ("lc1", "lc2"):
            st, body = inv.call("POST", "/system/functions", {"name": name, "program": LONG,
                                                              "limits": {"timeout_ms": 60000, "max_instances": 2}})
            check(st == 201, f"deploy {name} on {inv.port}: {st} {body}")

    # -- a healthy move whose stop outlasts ORPHAN_S is not cut
    st, body = a.call("POST", "/function/lc1", {"steps": 1})
    check(st == 200 and body == reference([1])[-1], f"lc1's first call on A: {st} {body}")
    iid = live_instances(a, "lc1")[0]["instance"]
    res = {}
    th = threading.Thread(target=busy_call, args=(a, "lc1", 800, res))
    th.start()
    for _ in range(200):
        if [i for i in live_instances(a, "lc1") if i["state"] == "busy"]:
            break
        time.sleep(0.02)
    mid = start_move(a, b, "lc1", iid)
    t_stop = time.monotonic()
    check(os.path.isdir(pre_dir(b, mid)), f"lc1: its pre-copy is on B: {os.listdir(os.path.join(b.state, 'checkpoints'))}")
    m = {}
    for _ in range(1200):
        st, m = a.call("GET", f"/system/migrations/{mid}")
        if m.get("state") in ("done", "failed", "aborted"):
            break
        time.sleep(0.05)
    held = time.monotonic() - t_stop
    th.join(60)
    print(f"lc1: held for its stop {held:.1f} s after its pre-copy landed", flush=True)
    check(m.get("state") == "done" and m.get("result", {}).get("target_executor") == "prepared",
          f"lc1: the slow move ends well on its prepared executor: {m}")
    check(held > 2 * ORPHAN_S, f"lc1: the stop outlasted the bound ({held:.1f} s > {2 * ORPHAN_S} s)")
    check(res.get("r", (0,))[0] == 200 and res["r"][1] == reference([1, 800])[-1], f"lc1: the busy call: {res}")
    st, body = b.call("POST", "/function/lc1", {"steps": 1})
    check(st == 200 and body == reference([1, 800, 1])[-1], f"lc1 goes on at B: {st} {body}")
    check(metric(b, "phos_migrate_precopies_reclaimed_total") == 0, "B reclaimed nothing of a healthy move")

    # -- the source killed mid-move: B reclaims the pre-copy and its executor
    st, body = a.call("POST", "/function/lc2", {"steps": 2})
    check(st == 200 and body == reference([2])[-1], f"lc2's first call on A: {st} {body}")
    iid = live_instances(a, "lc2")[0]["instance"]
    res = {}
    th = threading.Thread(target=busy_call, args=(a, "lc2", 3000, res))
    th.start()
    for _ in range(200):
        if [i for i in live_instances(a, "lc2") if i["state"] == "busy"]:
            break
        time.sleep(0.02)
    mid = start_move(a, b, "lc2", iid)
    check(os.path.isdir(pre_dir(b, mid)) and metric(b, "phos_migrate_prepared") == 1 and
          metric(b, "phos_migrate_precopies") == 1,
          f"lc2: its pre-copy and an executor wait on B: {os.listdir(os.path.join(b.state, 'checkpoints'))} "
          f"prepared {metric(b, 'phos_migrate_prepared')}")
    a.kill()
    t_kill = time.monotonic()
    gone = None
    while time.monotonic() - t_kill < 60:
        if (not os.path.exists(pre_dir(b, mid)) and metric(b, "phos_migrate_prepared") == 0 and
                metric(b, "phos_migrate_precopies") == 0):
            gone = time.monotonic() - t_kill
            break
        time.sleep(0.1)
    print(f"lc2: the pre-copy and its executor reclaimed {gone} s after the source's kill "
          f"(bound {ORPHAN_S} s of silence)", flush=True)
    check(gone is not None and gone < ORPHAN_S + 5,
          f"lc2: B reclaims the pre-copy and its executor within the bound: {gone} s "
          f"({os.listdir(os.path.join(b.state, 'checkpoints'))})")
    check(metric(b, "phos_migrate_precopies_reclaimed_total") == 1 and "reclaimed here" in b.logtext(),
          "B counts and logs the reclaim")
    check(live_instances(b, "lc2") == [], f"B holds no instance of lc2: {live_instances(b, 'lc2')}")
    th.join(60)
    # a final phase that comes late is refused, not restored from half a copy
    st, body = b.call("POST", "/system/functions/lc2/instances", {"phase": "final", "migration": mid})
    check(st == 410 and "reclaimed" in str(body), f"a late final phase: {st} {body}")

    # -- A restarted: a fresh move works
    a = Invoker(a.state, tmp, device=DEVICE, port=a.port)
    st, body = a.call("POST", "/function/lc2", {"steps": 2})
    check(st == 200 and body == reference([2])[-1], f"lc2 on the restarted A: {st} {body}")
    iid = live_instances(a, "lc2")[0]["instance"]
    st, body = a.call("POST", f"/system/functions/lc2/instances/{iid}/migrate",
                      {"to": f"http://127.0.0.1:{b.port}", "to_token": token(b)}, timeout=300)
    check(st == 200 and body.get("state") == "done" and body.get("target_executor") == "prepared",
          f"a fresh move of lc2 to B: {st} {body}")
    st, body = b.call("POST", "/function/lc2", {"steps": 1})
    check(st == 200 and body == reference([2, 1])[-1], f"lc2 goes on at B: {st} {body}")
    check(metric(b, "phos_migrate_prepared") == 0 and metric(b, "phos_migrate_precopies") == 0,
          "nothing waits on B after it")
    for inv in (a, b):
        inv.stop()


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
done("migrate_orphan")
