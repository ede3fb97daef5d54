# SPDX-License-Identifier: MIT
"""Moving an instance with its state between two invokers (issue 13), on the
sim device: invokers A and B on one machine (two ports, two state dirs),
long_call deployed on both (a session: its GPU buffer and its call count
live on across calls).

- POST /system/functions/lc/instances/ID/migrate {"to": B, "to_token"} in
  every checkpoint mode (recopy: live, a pre-copy while it serves, then a
  short stop), and phos-fn migrate: B's instance answers the next call exactly as A's
  would have (the state came along), A's instance and its checkpoint are
  gone, B's is idle and holds the moved checkpoint; moved back from B to A it
  goes on again;
- refused or failed moves leave exactly one live copy, A's, serving on with
  its state: B unreachable, B refusing the token, B at
  max_instances, bad input (400/404/405), a target whose GPU has too little
  memory free (refused before the stop); a target refuses a source of
  another stand-in build or driver, and one that does not say (422/400); a
  busy instance moves once its call is done, which is not disturbed;
- lc not deployed on B: B pulls it from A first, then takes the instance;
- a live move's target restores on a warm executor it set aside with the
  pre-copy pinned ("prepared"; stw and cow: "pooled"), also when that
  pre-copy was stale and rewritten in place after it was pinned; a pooled
  executor that refuses a checkpoint leaves it to one of the target's own;
  failed and aborted moves leave every executor idle;
- the checkpoint file route serves only a checkpoint being moved, with its
  migration id;
- the link cut mid-transfer (the source's file route fails) and the target
  killed mid-transfer: the source serves on with its state, and the
  target holds nothing of the move (after its restart too); a pre-copy
  found stale at the stop is fetched again;
- the source killed after the switch (migrate_source_kill): the target
  serves the instance with its state; the source, restarted, holds no copy;
- functions/examples/session (max_instances 1) moved A->B while a client
  calls A without pause, then moved back: every call is answered once and
  right, the call counter goes on without a gap (calls during the move wait,
  then A forwards them to B), A says where it went, and forwards no more
  once it holds the session again.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from harness import DEVICE, PHOS_FN, Invoker, check, done, free_port, live_instances, program
from harness import long_call_reference as reference

LONG = program("tests", "integration", "long_call")
SESSION = program("functions", "examples", "session")


live = live_instances


def token(inv):
    with open(os.path.join(inv.state, "admin.token")) as f:
        return f.read().strip()


def url(inv):
    return f"http://127.0.0.1:{inv.port}"


def deploy_lc(inv, max_instances=2, timeout_ms=120000):
    """Deploys long_call as lc on inv (201), its limits as given."""
    st, body = inv.call("POST", "/system/functions", {"name": "lc", "program": LONG,
                                                      "limits": {"timeout_ms": timeout_ms,
                                                                 "max_instances": max_instances}})
    check(st == 201, f"deploy lc on {inv.port}: {st} {body}")
    return st


def driver_version():
    """The NVIDIA kernel module's version, as the invoker reads it ("" without one)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
    except OSError:
        return ""
    at = line.find("Kernel Module")
    words = line[at + len("Kernel Module"):].split() if at >= 0 else []
    return next((w for w in words if "." in w and all(c in "0123456789." for c in w)), "")


def gpu_models():
    """This host's GPU models, one a line, as the invoker reads them ("" without the driver)."""
    base = "/proc/driver/nvidia/gpus"
    out = []
    for d in (os.listdir(base) if os.path.isdir(base) else []):
        try:
            with open(os.path.join(base, d, "information")) as f:
                out += [ln[6:].strip() for ln in f if ln.startswith("Model:")]
        except OSError:
            pass
    return "\n".join(out)


def metric(inv, name):
    """The value of an unlabelled metric in inv's /metrics, or None."""
    st, text = inv.call("GET", "/metrics")
    for ln in str(text).splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[-1])
    return None


def pool_idle(inv, want, within=30):
    """Whether inv's warm executors are all idle again (want of them), as
    /metrics says, within some seconds: none left set aside for a move."""
    end = time.time() + within
    while True:
        st, text = inv.call("GET", "/metrics")
        idle = [ln for ln in str(text).splitlines() if ln.startswith('phos_pool_executors{state="idle"}')]
        if idle and idle[0].split()[-1] == str(want):
            return True
        if time.time() > end:
            print(f"pool not idle: {idle}")
            return False
        time.sleep(0.2)


tmp = tempfile.mkdtemp(prefix="phos-migrate-")
a = b = None
try:
    a = Invoker(os.path.join(tmp, "a"), tmp, device=DEVICE)
    b = Invoker(os.path.join(tmp, "b"), tmp, device=DEVICE)
    for inv in (a, b):
        deploy_lc(inv)
    plan = [3]
    st, body = a.call("POST", "/function/lc", {"steps": 3})
    check(st == 200 and body == reference(plan)[-1], f"first call on A: {body}")

    def migrate(src, dst, iid, **extra):
        req = {"to": url(dst), "to_token": token(dst)}
        req.update(extra)
        return src.call("POST", f"/system/functions/lc/instances/{iid}/migrate", req, timeout=300)

    # --- moves in every mode, there and back ---------------------------------
    src, dst = a, b
    for k, mode in enumerate(("recopy", "stw", "cow")):
        insts = live(src, "lc")
        check(len(insts) == 1 and insts[0]["state"] == "idle", f"{mode}: one idle instance on the source: {insts}")
        iid = insts[0]["instance"] if insts else 0
        st, body = migrate(src, dst, iid, mode=mode)
        check(st == 200 and body.get("state") == "done" and body.get("mode") == mode and body.get("bytes", 0) > 0
              and body.get("downtime_s", 0) > 0 and isinstance(body.get("target_instance"), int),
              f"{mode}: move {iid}: {st} {body}")
        # B has warm executors free: the moved instance takes one (no context made on the switch);
        # a live move's target set one aside with the pre-copy pinned, before the stop
        want = "prepared" if mode == "recopy" else "pooled"
        check(body.get("target_executor") == want, f"{mode}: restored on a {want} executor: {body}")
        if mode == "recopy":   # the pre-copy was hashed by item before the stop: not read again then
            check(body.get("prehashed_items", 0) >= 1, f"recopy: items hashed before the stop: {body}")
        check(live(src, "lc") == [], f"{mode}: the source's instance is gone: {live(src, 'lc')}")
        left = os.listdir(os.path.join(src.state, "checkpoints"))
        check(left == [], f"{mode}: and its checkpoint: {left}")
        there = live(dst, "lc")
        check(len(there) == 1 and there[0]["state"] == "idle" and there[0]["instance"] == body.get("target_instance"),
              f"{mode}: the target has it, idle: {there}")
        check(os.listdir(os.path.join(dst.state, "checkpoints")) == [f"lc-{body.get('target_instance')}"],
              f"{mode}: the target holds the moved checkpoint: {os.listdir(os.path.join(dst.state, 'checkpoints'))}")
        plan.append(k + 1)
        st, got = dst.call("POST", "/function/lc", {"steps": k + 1})
        check(st == 200 and got == reference(plan)[-1], f"{mode}: the moved instance goes on: {got} "
              f"(want {reference(plan)[-1]})")
        src, dst = dst, src
    # (three moves: the instance is on B now)
    check(live(a, "lc") == [] and len(live(b, "lc")) == 1, "after three moves the instance is on B")

    # the CLI: phos-fn migrate NAME --to URL (its only instance), there and back
    def cli(src, *args):
        tf = os.path.join(tmp, "to.token")
        with open(tf, "w") as f:
            f.write(token(a if src is b else b))
        os.chmod(tf, 0o600)
        return subprocess.run([PHOS_FN, "migrate", "lc", "--gateway", url(src), "--state-dir", src.state, *args,
                               "--to-token-file", tf], capture_output=True, text=True, timeout=300)

    for s_, d_ in ((b, a), (a, b)):
        r = cli(s_, "--to", url(d_), "--mode", "stw")
        check(r.returncode == 0 and json.loads(r.stdout or "{}").get("state") == "done",
              f"phos-fn migrate: {r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}")
    plan.append(1)
    st, got = b.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"moved by the CLI there and back, it goes on: {got}")
    r = subprocess.run([PHOS_FN, "migrate", "lc", "--gateway", url(b), "--state-dir", b.state, "--to", url(a)],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "to-token-file" in r.stderr, f"phos-fn migrate without a token: {r.returncode} {r.stderr}")
    r = cli(b, "--to", url(a), "--instance", "0")
    check(r.returncode == 2 and "--instance" in r.stderr, f"phos-fn migrate --instance 0: {r.returncode} {r.stderr}")
    src, dst = b, a

    def serves_on(what):
        plan.append(1)
        st, got = src.call("POST", "/function/lc", {"steps": 1})
        check(st == 200 and got == reference(plan)[-1], f"{what}: the source's instance serves on with its "
              f"state: {got} (want {reference(plan)[-1]})")
        check(len(live(src, "lc")) == 1, f"{what}: one instance on the source: {live(src, 'lc')}")

    iid = live(src, "lc")[0]["instance"]

    # --- refused and failed moves: one live copy, the source's ----------------------
    st, body = src.call("POST", f"/system/functions/lc/instances/{iid}/migrate",
                        {"to": f"http://127.0.0.1:{free_port()}", "to_token": token(dst)})
    check(st == 502 and "serves on here" in str(body), f"target down: {st} {body}")
    serves_on("target down")
    st, body = src.call("POST", f"/system/functions/lc/instances/{iid}/migrate",
                        {"to": url(dst), "to_token": "x" * 32})
    check(st == 502 and "401" in str(body), f"bad token: {st} {body}")
    serves_on("bad token")
    st, body = dst.call("DELETE", "/system/functions/lc")
    check(st == 200, f"remove lc from the target: {st} {body}")
    # lc not deployed on the target: it pulls lc from the source first (its
    # snapshot, verified; the program not run there), then takes the instance
    st, body = migrate(src, dst, iid)
    check(st == 200 and body.get("state") == "done", f"lc not on the target: pulled, then moved: {st} {body}")
    st, fn = dst.call("GET", "/system/functions/lc")
    check(st == 200 and fn.get("program") == LONG and fn.get("limits", {}).get("max_instances") == 2,
          f"lc deployed on the target as the source has it: {st} {fn}")
    plan.append(1)
    st, got = dst.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"moved with a pull: the state came along: {got}")
    st, body = migrate(dst, src, body.get("target_instance", 0))
    check(st == 200, f"and back: {st} {body}")
    iid = body.get("target_instance", iid)
    st, body = dst.call("DELETE", "/system/functions/lc")
    check(st == 200, f"remove the pulled lc from the target: {st} {body}")
    deploy_lc(dst, max_instances=1)
    st, body = dst.call("POST", "/function/lc", {"steps": 1})   # its one instance is taken
    check(st == 200 and body["calls"] == 1, f"a fresh instance on the target: {body}")
    st, body = migrate(src, dst, iid)
    check(st == 502 and "max_instances" in str(body), f"target full: {st} {body}")
    serves_on("target full")
    check(len(live(dst, "lc")) == 1, f"the target kept only its own instance: {live(dst, 'lc')}")
    check(not [n for n in os.listdir(os.path.join(dst.state, "checkpoints"))],
          f"refused moves leave nothing on the target: {os.listdir(os.path.join(dst.state, 'checkpoints'))}")

    # bad input
    good = {"to": url(dst), "to_token": token(dst)}
    cases = [
        ({"to": url(dst)}, 400, "to_token"),
        ({"to_token": token(dst)}, 400, "to must be"),
        ({**good, "to": "ftp://x"}, 400, "scheme"),
        ({**good, "to": url(dst) + "/path"}, 400, "without a path"),
        ({**good, "mode": "fast"}, 400, "mode must be"),
        ({**good, "x": 1}, 400, "unknown field"),
        ({**good, "advertise": "nope"}, 400, "advertise"),
    ]
    for req, code, msg in cases:
        st, body = src.call("POST", f"/system/functions/lc/instances/{iid}/migrate", req)
        check(st == code and msg in str(body), f"{req}: {st} {body}")
    st, body = src.call("POST", "/system/functions/lc/instances/999/migrate", good)
    check(st == 404, f"no such instance: {st} {body}")
    st, body = src.call("GET", f"/system/functions/lc/instances/{iid}/migrate")
    check(st == 405, f"GET migrate: {st}")
    st, body = src.call("GET", f"/system/functions/lc/instances/{iid}/checkpoint/file?snapshot={'0' * 32}"
                        "&path=gpu.data&offset=0&length=1")
    check(st == 409 and "not being moved" in str(body), f"file route outside a move: {st} {body}")
    # a target checks its source's host first: stand-in build, driver, GPU models
    st, exp = dst.call("GET", "/system/functions/lc/export")
    facts = {"standin": exp.get("standin", "") if isinstance(exp, dict) else "", "driver": driver_version(),
             "gpus": gpu_models()}
    recv = {"from": url(src), "from_token": token(src), "instance": iid, "migration": "0" * 32, "manifest": "{}"}
    st, body = dst.call("POST", "/system/functions/lc/instances", {**recv, "host": facts})
    check(st == 400 and "manifest" in str(body), f"a receive with a bad manifest: {st} {body}")
    for bad, code, msg in (({}, 400, "host must be"), ({**facts, "standin": "0" * 16}, 422, "another build"),
                           ({**facts, "driver": "1.2.3"}, 422, "driver"), ({**facts, "extra": 1}, 400, "host must")):
        st, body = dst.call("POST", "/system/functions/lc/instances", {**recv, "host": bad})
        check(st == code and msg in str(body), f"a receive from a host with {bad}: {st} {body}")
    st, body = dst.call("POST", "/system/functions/lc/instances", recv)
    check(st == 400 and "host must be" in str(body), f"a receive without host: {st} {body}")
    st, body = dst.call("POST", "/system/functions/lc/instances", {"from": url(src)})
    check(st == 400, f"a receive without its fields: {st} {body}")
    serves_on("after bad input")

    # a busy instance moves once its call is done (no new call takes it meanwhile)
    res = {}
    th = threading.Thread(target=lambda: res.update(r=src.call("POST", "/function/lc",
                                                                {"steps": 100, "pause_us": 10000})))
    th.start()
    for _ in range(200):
        if [i for i in live(src, "lc") if i["state"] == "busy"]:
            break
        time.sleep(0.02)
    st, body = dst.call("DELETE", "/system/functions/lc")   # room for it on the target again
    deploy_lc(dst)
    st, body = migrate(src, dst, iid)
    th.join()
    plan.append(100)
    check(res["r"][0] == 200 and res["r"][1] == reference(plan)[-1], f"the busy call was not disturbed: {res}")
    check(st == 200 and body.get("state") == "done", f"busy: moved after its call: {st} {body}")
    plan.append(2)
    st, got = dst.call("POST", "/function/lc", {"steps": 2})
    check(st == 200 and got == reference(plan)[-1], f"moved after its call, it goes on there: {got}")

    # --- a session moved while a client calls it without pause ---------------------
    # (max_instances 1: calls that come during the move wait, and the source
    # forwards them, and all later ones, to where the session went)
    for inv in (a, b):
        st, body = inv.call("POST", "/system/functions", {"name": "sess", "program": SESSION,
                                                          # 32 blocks: a call writes 16 KiB, so writing them all
                                                          # takes 2048 calls, far more than the move leaves time for
                                                          "args": ["--state-mib", "32", "--block-mib", "1", "--write-kib", "16"],
                                                          "limits": {"timeout_ms": 60000, "max_instances": 1}})
        check(st == 201, f"deploy sess on {inv.port}: {st} {body}")
    seen = []
    stop = threading.Event()

    def client(inv):
        while not stop.is_set():
            st, body = inv.call("POST", "/function/sess", {})
            seen.append((st, body))

    st, body = a.call("POST", "/function/sess", {})
    seen.append((st, body))
    th = threading.Thread(target=client, args=(a,))
    th.start()
    time.sleep(0.3)
    sid = live(a, "sess")[0]["instance"]
    st, body = a.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(b), "to_token": token(b)}, timeout=300)
    check(st == 200 and body.get("state") == "done", f"session moved under load: {st} {body}")
    # recopy (the default) pre-copies while the session serves: the stop is a part of the move, and the
    # buffers the calls wrote meanwhile were fetched again at the stop
    check(body.get("precopy_bytes", 0) + body.get("precopy_reused_bytes", 0) >= 4 << 20 and
          0 < body.get("downtime_s", 0) < body.get("total_s", 0) and
          body.get("refetched_bytes", -1) < 4 << 20,
          f"a live move: pre-copy, then a short stop fetching again only the blocks written since: {body}")
    # content-addressed: the blocks no call wrote yet are as in B's own snapshot of sess,
    # and come from there, not over the link
    check(body.get("precopy_reused_bytes", 0) >= 16 << 20 and
          body.get("precopy_bytes", 1 << 30) + body.get("precopy_reused_bytes", 0) >= 32 << 20 and
          body.get("precopy_bytes", 1 << 30) < 16 << 20,
          f"the blocks B holds already (most: few were written yet) were not fetched: {body}")
    moved_at = len(seen)
    time.sleep(0.5)
    stop.set()
    th.join()
    st, body = a.call("GET", "/system/functions/sess")
    check(body.get("moved_to") == url(b), f"A says where sess went: {body.get('moved_to')}")
    # A restarted still knows (STATE/moves/sess.json): its calls go on at B,
    # not on a second copy started here from the snapshot (issue 37, item 7:
    # a restarted source started the session again, counter 1)
    a.stop()
    a = Invoker(a.state, tmp, device=DEVICE, port=a.port)
    st, body = a.call("GET", "/system/functions/sess")
    check(body.get("moved_to") == url(b), f"A, restarted, says where sess went: {body.get('moved_to')}")
    st, via_a = a.call("POST", "/function/sess", {})
    seen.append((st, via_a))
    check(st == 200 and live(a, "sess") == [], f"A, restarted, forwards the session's call: {st} {via_a} "
          f"{live(a, 'sess')}")
    st, via_b = b.call("POST", "/function/sess", {})
    seen.append((st, via_b))
    # and back: B forwards, A serves it again
    sid = live(b, "sess")[0]["instance"]
    st, body = b.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(a), "to_token": token(a), "mode": "stw"}, timeout=300)
    check(st == 200, f"session moved back: {st} {body}")
    for inv in (a, b, a):
        seen.append(inv.call("POST", "/function/sess", {}))
    st, body = a.call("GET", "/system/functions/sess")
    check("moved_to" not in body, f"A holds sess again: no forwarding: {body.get('moved_to')}")
    check(not os.path.exists(os.path.join(a.state, "moves", "sess.json")), "and its note of the move is gone")
    bad = [x for x in seen if x[0] != 200 or not x[1].get("ok")]
    check(not bad, f"every call of the session answered right: {bad[:3]}")
    counters = [x[1].get("counter") for x in seen if x[0] == 200]
    check(counters == list(range(1, len(seen) + 1)),
          f"each call answered once, the counter going on across the moves ({len(seen)} calls, "
          f"{moved_at} before the first move ended): {counters[:5]}...{counters[-5:]}")
    check(moved_at > 2 and len(seen) > moved_at + 3, f"calls ran before and after the move: {moved_at} {len(seen)}")
    for inv in (a, b):
        inv.stop()

    # --- the link cut mid-transfer, the target killed mid-transfer ------------------
    # c: a source whose file route fails its 3rd range (the link cut: after the
    # pre-copy and its item places, in the stop); d, e: targets
    c = Invoker(os.path.join(tmp, "c"), tmp, device=DEVICE, fault="migrate_file_cut:2")
    d = Invoker(os.path.join(tmp, "d"), tmp, device=DEVICE)
    for inv in (c, d):
        deploy_lc(inv)
    plan = [2]
    st, body = c.call("POST", "/function/lc", {"steps": 2})
    check(st == 200 and body == reference(plan)[-1], f"first call on c: {body}")
    iid = live(c, "lc")[0]["instance"]
    st, body = migrate(c, d, iid)
    check(st == 502 and "serves on here" in str(body) and "migrate_file_cut" in str(body),
          f"link cut mid-transfer: {st} {body}")
    check(live(d, "lc") == [] and os.listdir(os.path.join(d.state, "checkpoints")) == [],
          f"the target holds nothing half-done: {live(d, 'lc')} {os.listdir(os.path.join(d.state, 'checkpoints'))}")
    check(metric(d, "phos_migrate_prepared_total") == 1 and metric(d, "phos_migrate_prepared") == 0
          and pool_idle(d, 2), "the executor the target set aside for the move is back in its pool")
    plan.append(1)
    st, got = c.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"link cut: the source serves on with its state: {got}")
    d.stop()
    e = Invoker(os.path.join(tmp, "e"), tmp, device=DEVICE, fault="migrate_stall")
    deploy_lc(e)
    res = {}
    th = threading.Thread(target=lambda: res.update(r=migrate(c, e, iid)))
    th.start()
    time.sleep(3)
    e.kill()
    th.join()
    check(res["r"][0] == 502 and "serves on here" in str(res["r"][1]), f"target killed mid-transfer: {res['r']}")
    plan.append(1)
    st, got = c.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"target killed: the source serves on with its state: {got}")
    e = Invoker(os.path.join(tmp, "e"), tmp, device=DEVICE, fault="migrate_stall")   # restarted
    left = os.listdir(os.path.join(e.state, "checkpoints"))
    check(left == [] and live(e, "lc") == [], f"the killed target, restarted, holds nothing of the move: {left}")

    # an async move, followed and aborted (the target stalls 10 s before its pre-copy's fetch)
    st, body = c.call("POST", f"/system/functions/lc/instances/{iid}/migrate",
                      {"to": url(e), "to_token": token(e), "async": True})
    mid = body.get("migration", "") if isinstance(body, dict) else ""
    check(st == 202 and len(mid) == 32, f"an async move: {st} {body}")
    for _ in range(100):
        st, m = c.call("GET", f"/system/migrations/{mid}")
        if m.get("state") == "precopy":
            break
        time.sleep(0.05)
    check(st == 200 and m.get("state") == "precopy" and m.get("instance") == iid, f"followed: {st} {m}")
    st, m = c.call("DELETE", f"/system/migrations/{mid}")
    check(st == 202, f"abort: {st} {m}")
    for _ in range(400):
        st, m = c.call("GET", f"/system/migrations/{mid}")
        if m.get("state") in ("done", "failed", "aborted"):
            break
        time.sleep(0.05)
    check(m.get("state") == "aborted" and "serves on here" in str(m.get("result")), f"aborted: {m}")
    check(metric(e, "phos_migrate_prepared") == 0 and pool_idle(e, 2),
          "aborted: no executor of the target stays set aside")
    st, m2 = c.call("DELETE", f"/system/migrations/{mid}")
    check(st == 409, f"an ended move cannot be aborted: {st} {m2}")
    check(c.call("GET", "/system/migrations/" + "0" * 32)[0] == 404, "no such migration: 404")
    check(c.call("GET", "/system/migrations/nothex")[0] == 404, "a bad migration id: 404")
    plan.append(1)
    st, got = c.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"aborted: the source serves on with its state: {got}")
    time.sleep(0.5)
    check(os.listdir(os.path.join(e.state, "checkpoints")) == [] and live(e, "lc") == [],
          f"aborted: nothing on the target: {os.listdir(os.path.join(e.state, 'checkpoints'))}")
    e.stop()
    # a target whose GPU has too little memory free for the instance (its
    # prepared executor says so: prepare_gpu_full) refuses the move before the
    # stop (its 507, which the source's 502 names), the source serves on, the
    # target holds nothing
    g = Invoker(os.path.join(tmp, "g"), tmp, device=DEVICE, fault="prepare_gpu_full")
    deploy_lc(g)
    check(pool_idle(g, 2), "g's warm executors are up")
    st, body = migrate(c, g, iid)
    check(st == 502 and "507: not enough GPU memory" in str(body) and "serves on here" in str(body),
          f"no GPU memory on the target: {st} {body}")
    check(live(g, "lc") == [] and os.listdir(os.path.join(g.state, "checkpoints")) == []
          and metric(g, "phos_migrate_prepared") == 0 and pool_idle(g, 2),
          f"the target holds nothing, its executors idle: {os.listdir(os.path.join(g.state, 'checkpoints'))}")
    plan.append(1)
    st, got = c.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"no GPU memory there: the source serves on with its state: {got}")
    g.stop()
    # e keeps one warm executor, whose first restore of a checkpoint is refused
    # (pool_adopt_refused)
    e = Invoker(os.path.join(tmp, "e"), tmp, extra=("--pool", "1"), device=DEVICE,
                fault="migrate_precopy_stale,pool_adopt_refused")
    check(pool_idle(e, 1), "e's warm executor is up")
    # an async move that ends well, followed to its end: the pooled executor
    # refuses it, and one of its own restores it
    st, body = c.call("POST", f"/system/functions/lc/instances/{iid}/migrate",
                      {"to": url(e), "to_token": token(e), "async": True, "mode": "stw"})
    mid = body.get("migration", "")
    for _ in range(400):
        st, m = c.call("GET", f"/system/migrations/{mid}")
        if m.get("state") in ("done", "failed", "aborted"):
            break
        time.sleep(0.05)
    check(m.get("state") == "done" and m.get("result", {}).get("state") == "done", f"an async move done: {m}")
    check(m.get("result", {}).get("target_executor") == "own" and "trying one of its own" in e.logtext(),
          f"a pooled executor that refuses the checkpoint: restored on one of its own: {m}")
    plan.append(1)
    st, got = e.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"and it is right there: {got}")
    st, body = e.call("POST", f"/system/functions/lc/instances/{m['result']['target_instance']}/migrate",
                      {"to": url(c), "to_token": token(c), "mode": "stw"})
    check(st == 200, f"and back: {st} {body}")
    iid = body.get("target_instance", iid)
    # a live move whose pre-copy is stale at the stop (a buffer written since):
    # fetched again, right. The executor prepared for it (e's one, whose
    # refusal is spent) pinned the stale pre-copy, which the stop rewrote in
    # place: it must read the new bytes
    check(pool_idle(e, 1), "e's executor idle before the move")
    st, body = migrate(c, e, iid)
    check(st == 200 and body.get("refetched_bytes", 0) > 0, f"a stale pre-copy is fetched again: {st} {body}")
    check(body.get("target_executor") == "prepared", f"restored on the executor that pinned it stale: {body}")
    plan.append(1)
    st, got = e.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"after a stale pre-copy the moved instance is right: {got}")
    for inv in (c, e):
        inv.stop()

    # --- the source killed after the switch ------------------------------------------
    # h dies (migrate_source_kill) once its target k has taken the instance and
    # before it stops its own copy: k serves the instance with its state, and h,
    # restarted, holds no live copy of it (its old processes are orphans it
    # kills) nor its checkpoint
    h = Invoker(os.path.join(tmp, "h"), tmp, device=DEVICE, fault="migrate_source_kill")
    k = Invoker(os.path.join(tmp, "k"), tmp, device=DEVICE)
    for inv in (h, k):
        deploy_lc(inv)
    plan = [3]
    st, body = h.call("POST", "/function/lc", {"steps": 3})
    check(st == 200 and body == reference(plan)[-1], f"first call on h: {body}")
    hid = live(h, "lc")[0]["instance"]

    h_mark = b"PHOS_INVOKER_STATE=" + os.path.realpath(h.state).encode()

    def lc_pids():
        # h's long_call processes, as (pid, start time). Only those with h's
        # mark: k parks a standby of lc too, which lives on rightly, and
        # which is up here or not yet depending on the run (CI failed on
        # it). And a start time, as a pid freed by the kill can be taken
        # again (pid_max is 32768 on CI machines, a run goes through
        # thousands) by the restarted h's new standby
        out = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if LONG.encode() not in f.read():
                        continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if h_mark not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    out.add((pid, f.read().rsplit(")", 1)[1].split()[19]))
            except (OSError, IndexError):
                pass
        return out

    def who(procs):
        # what a survivor is, for the failure's message
        out = []
        for pid, _ in procs:
            chain, p = [], pid
            for _ in range(8):
                try:
                    with open(f"/proc/{p}/status") as f:
                        st = dict(l.split(":", 1) for l in f if ":" in l)
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        cmd = f.read().split(b"\0")[0].decode(errors="replace")
                except OSError:
                    break
                chain.append(f"{p} {cmd} {st.get('State', '?').strip()}")
                p = st.get("PPid", "0").strip()
                if p in ("0", "1"):
                    break
            out.append(" <- ".join(chain))
        return "; ".join(out)
    old = lc_pids()   # h's instance, its parked standby
    check(len(old) >= 1, f"h's instance is a process: {old}")
    try:
        st, body = migrate(h, k, hid)
    except OSError as e:   # the source died with the request open
        st, body = 0, str(e)
    h.p.wait(timeout=30)
    check(st == 0 and h.p.returncode == -9, f"the source died after the switch: {st} {body} rc {h.p.returncode}")
    plan.append(1)
    st, got = k.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and got == reference(plan)[-1], f"the target serves the moved instance with its state: {got}")
    check(len(live(k, "lc")) == 1, f"one live copy, the target's: {live(k, 'lc')}")
    h = Invoker(os.path.join(tmp, "h"), tmp, device=DEVICE)   # restarted
    end = time.time() + 30
    while time.time() < end and (live(h, "lc") or os.listdir(os.path.join(h.state, "checkpoints"))):
        time.sleep(0.2)
    check(live(h, "lc") == [] and os.listdir(os.path.join(h.state, "checkpoints")) == [],
          f"the restarted source holds no copy: {live(h, 'lc')} {os.listdir(os.path.join(h.state, 'checkpoints'))}")
    end = time.time() + 30
    while time.time() < end and old & lc_pids():
        time.sleep(0.2)
    check(not old & lc_pids(), f"no process of h's old instance is left: {who(old & lc_pids())}")
    for inv in (h, k):
        inv.stop()
finally:
    for inv in (a, b):
        if inv:
            inv.stop()
    shutil.rmtree(tmp, ignore_errors=True)

done("migrate")
