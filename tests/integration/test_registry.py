# SPDX-License-Identifier: MIT
"""The invoker's registry and call records under faults (sim device, loopback):

- remove racing a deploy of the same name, 30 seeded rounds: every answer is a
  documented status, and after each round the function either serves or is
  absent, with its registry file and snapshot present exactly when it is listed
  and no temporary left; then a SIGKILL in the middle of such a race and a
  restart: the function serves or is cleanly absent, nothing orphaned;
- start-up sweeps planted leftovers (snapshots/NAME.tmp-*, an unowned
  snapshots/NAME, a registry file without a snapshot, a registry temporary),
  logs each, and keeps serving what is owned; a second invoker on the same
  state dir is refused;
- the invoker killed inside a deploy (PHOS_FAULT snapshot_kill, before the
  commit; registry_kill, after it): the next start sweeps what it left;
- an injected registry-write failure (PHOS_FAULT=registry_write) rolls the
  deploy back: 500, no snapshot, no registry file; the next deploy works;
- a burst of 2000 async calls against --async-queue 64 with sync calls
  competing for max_instances=2, max_inflight=0: every answer is 202 or 429,
  and every 202's call reaches done with its own answer and stays readable;
  with --async-retention 1 a finished result goes away (404) after it;
- accepted async calls outlive the invoker (STATE/calls/): after a SIGKILL the
  queued ones run, the one running ends failed (503, not run twice), earlier
  results stay readable; after SIGTERM the queued ones run at the next start;
  a stored call of a function that is gone ends 404.
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

from harness import BUILD, check, done, fn_env as env, free_port, Invoker, own_mount, procs, program

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")

MISBEHAVE = program("tests", "integration", "misbehave")

tmp = tempfile.mkdtemp(prefix="phos-registry-test-")


def deploy_body(name, **limits):
    d = {"name": name, "program": MISBEHAVE}
    if limits:
        d["limits"] = limits
    return d


def leftovers(state):
    """What in the state dir no function owns: temporaries, snapshots without a
    registry file, registry files without a snapshot."""
    snaps = set(os.listdir(os.path.join(state, "snapshots")))
    regs = set(os.listdir(os.path.join(state, "functions")))
    bad = [s for s in snaps if ".tmp-" in s or f"{s}.json" not in regs]
    bad += [r for r in regs if not r.endswith(".json") or r[:-5] not in snaps]
    return bad


def settled_state(inv, state, name, what):
    """The function serves with its files present, or is absent without them."""
    st, desc = inv.call("GET", f"/system/functions/{name}")
    reg = os.path.exists(os.path.join(state, "functions", f"{name}.json"))
    snap = os.path.exists(os.path.join(state, "snapshots", name, "manifest.json"))
    if st == 200:
        check(desc.get("status") == "ready" and reg and snap, f"{what}: listed but {desc} reg={reg} snap={snap}")
        st, body = inv.call("POST", f"/function/{name}", {"x": 1})
        check(st == 200 and body.get("gpu") == 1234, f"{what}: a listed function must serve: {st} {body}")
    else:
        check(st == 404 and not reg and not snap, f"{what}: absent ({st}) but reg={reg} snap={snap}")
    check(leftovers(state) == [], f"{what}: leftovers {leftovers(state)}")
    return st == 200


def race_round(inv, rng, name, quiet=False):
    """DELETE and POST of one name at once, while a slow call keeps an instance
    busy (a removal waits for it: the window in which a deploy of the name
    used to be accepted and its snapshot deleted); returns both answers."""
    out = {}
    delay = rng.random() * 0.3
    sleep_ms = 200 + int(rng.random() * 1300)

    def req(key, method, path, body):
        try:
            out[key] = inv.call(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            out[key] = (0, str(e))   # the invoker was killed under it

    def deploy():
        time.sleep(delay)
        req("dep", "POST", "/system/functions", deploy_body(name))

    ts = [threading.Thread(target=req, args=("slow", "POST", f"/function/{name}", {"sleep_ms": sleep_ms})),
          threading.Thread(target=req, args=("rm", "DELETE", f"/system/functions/{name}", None)),
          threading.Thread(target=deploy)]
    ts[0].start()
    time.sleep(0.15)
    for t in ts[1:]:
        t.start()
    for t in ts:
        t.join(timeout=300)
    check(not any(t.is_alive() for t in ts), "race round: a request hung")
    if not quiet:
        check(out["slow"][0] in (200, 404, 503), f"race round: the slow call answered {out['slow']}")
    return out["rm"], out["dep"]


def test_remove_race(state):
    inv = Invoker(state, tmp)
    name = "racer"
    check(inv.call("POST", "/system/functions", deploy_body(name))[0] == 201, "first deploy")
    rng = random.Random(10)
    seen = set()
    for i in range(30):
        (rs, rb), (ds, db) = race_round(inv, rng, name)
        check(rs in (200, 404, 409), f"round {i}: remove answered {rs} {rb}")
        check(ds == 201 or ds == 409 and ("being removed" in db.get("error", "") or "exists" in db.get("error", "")),
              f"round {i}: deploy answered {ds} {db}")
        check(isinstance(rb, dict) and "error" in rb or rs == 200, f"round {i}: remove body {rb}")
        seen.add((rs, ds))
        if not settled_state(inv, state, name, f"round {i} ({rs}, {ds})"):
            check(inv.call("POST", "/system/functions", deploy_body(name))[0] == 201, f"round {i}: redeploy")
    print(f"race outcomes (remove, deploy): {sorted(seen)}", flush=True)
    check(any(rs == 200 for rs, _ in seen), "some removes must have won")

    # SIGKILL at seeded points of such a race, then a restart on the same state
    # dir: the function serves or is cleanly absent, nothing orphaned
    rng = random.Random(11)
    for k in range(6):
        if inv.call("GET", f"/system/functions/{name}")[0] == 404:
            check(inv.call("POST", "/system/functions", deploy_body(name))[0] == 201, f"kill {k}: deploy")
        t = threading.Thread(target=race_round, args=(inv, random.Random(k), name, True))
        t.start()
        time.sleep(0.15 + rng.random() * 1.2)
        inv.kill()
        t.join(timeout=120)
        inv = Invoker(state, tmp)
        settled_state(inv, state, name, f"after a SIGKILL mid-race ({k})")
    inv.stop()


def test_sweep(state):
    inv = Invoker(state, tmp)
    check(inv.call("POST", "/system/functions", deploy_body("keeper"))[0] == 201, "deploy keeper")
    check(inv.call("POST", "/function/keeper", {})[0] == 200, "keeper serves")
    # a second invoker on the same state dir must not start (it would sweep ours)
    p = subprocess.run([INVOKER, "--listen", f"127.0.0.1:{free_port()}", "--state-dir", state, "--device", "sim"],
                       capture_output=True, text=True, env=env(), timeout=60)
    check(p.returncode != 0 and "invoker.lock" in p.stderr, f"second invoker on one state dir: {p.returncode} {p.stderr}")
    inv.kill()

    snaps, funcs = os.path.join(state, "snapshots"), os.path.join(state, "functions")
    planted = {
        "ghost": os.path.join(snaps, "ghost"),                       # no registry file
        "tmp-dead": os.path.join(snaps, "keeper.tmp-999999999-abcdef"),  # a crash mid-deploy
        "tmp-live": os.path.join(snaps, "keeper.tmp-1-abcdef"),      # pid 1 lives: still a leftover
        "rm": os.path.join(snaps, "gone.tmp-4242-rm0"),              # a crash mid-remove
    }
    for d in planted.values():
        os.makedirs(os.path.join(d, "cpu"))
        with open(os.path.join(d, "gpu.data"), "wb") as f:
            f.write(b"\0" * (1 << 20))
    shutil.copytree(os.path.join(snaps, "keeper"), os.path.join(snaps, "copy"))  # a real snapshot, unowned
    with open(os.path.join(funcs, "nosnap.json"), "w") as f:
        json.dump({"name": "nosnap", "program": MISBEHAVE, "args": [], "env": {}, "device": "sim"}, f)
    with open(os.path.join(funcs, "keeper.json.tmp.777"), "w") as f:
        f.write("{")
    with open(os.path.join(snaps, "README.txt"), "w") as f:
        f.write("not ours: left alone\n")

    inv = Invoker(state, tmp)
    log = inv.logtext()
    for what, d in planted.items():
        check(not os.path.exists(d), f"sweep: {what} ({d}) still there")
        check(d in log, f"sweep: {d} removed without a log line: {log}")
    check(not os.path.exists(os.path.join(snaps, "copy")), "sweep: an unowned snapshot survived")
    check(not os.path.exists(os.path.join(funcs, "nosnap.json")), "sweep: a registry file without a snapshot")
    check(not os.path.exists(os.path.join(funcs, "keeper.json.tmp.777")), "sweep: a registry temporary")
    check(os.path.exists(os.path.join(snaps, "README.txt")), "sweep: removed a file that is not a snapshot")
    os.unlink(os.path.join(snaps, "README.txt"))
    check("removed" in log and "MiB" in log, f"sweep: the log says what it removed: {log}")
    st, body = inv.call("GET", "/system/functions")
    check(st == 200 and [f["name"] for f in body] == ["keeper"], f"after the sweep: {body}")
    st, body = inv.call("POST", "/function/keeper", {})
    check(st == 200 and body.get("gpu") == 1234, f"keeper after the sweep: {st} {body}")
    check(leftovers(state) == [], f"sweep: leftovers {leftovers(state)}")
    inv.stop()


def test_deploy_crash(state):
    """The invoker killed inside a deploy: before the snapshot's commit (a
    temporary left) and after it (a snapshot that no registry file owns). The
    next start sweeps both and serves the rest."""
    for fault, leftover in [("snapshot_kill", ".tmp-"), ("registry_kill", "")]:
        inv = Invoker(state, tmp, fault=fault)
        try:
            st, body = inv.call("POST", "/system/functions", deploy_body("doomed"))
            check(False, f"{fault}: the invoker answered {st} {body}")
        except (OSError, http.client.HTTPException):
            pass
        inv.p.wait(timeout=60)
        check(inv.p.returncode == -signal.SIGKILL, f"{fault}: exit {inv.p.returncode}")
        snaps = os.listdir(os.path.join(state, "snapshots"))
        found = [d for d in snaps if d.startswith("doomed") and leftover in d and (leftover or d == "doomed")]
        check(found, f"{fault}: nothing left to sweep? {snaps}")
        check(not os.path.exists(os.path.join(state, "functions", "doomed.json")), f"{fault}: registry file")
        inv = Invoker(state, tmp)
        check(leftovers(state) == [], f"{fault}: leftovers after the restart {leftovers(state)}")
        check(all(os.path.join(state, "snapshots", d) in inv.logtext() for d in found),
              f"{fault}: the sweep did not log {found}: {inv.logtext()}")
        check(inv.call("GET", "/system/functions/doomed")[0] == 404, f"{fault}: doomed listed")
        st, body = inv.call("POST", "/system/functions", deploy_body("doomed"))
        check(st == 201, f"{fault}: deploy again: {st} {body}")
        check(inv.call("DELETE", "/system/functions/doomed")[0] == 200, f"{fault}: remove")
        inv.stop()


def test_registry_write_fault(state):
    inv = Invoker(state, tmp, fault="registry_write")
    st, body = inv.call("POST", "/system/functions", deploy_body("rb"))
    check(st == 500 and "registry" in body.get("error", ""), f"registry write failure: {st} {body}")
    check(not os.path.exists(os.path.join(state, "snapshots", "rb")), "rolled back: the snapshot is gone")
    check(not os.path.exists(os.path.join(state, "functions", "rb.json")), "rolled back: no registry file")
    check(leftovers(state) == [], f"rolled back: leftovers {leftovers(state)}")
    check(inv.call("GET", "/system/functions/rb")[0] == 404, "rolled back: not listed")
    st, body = inv.call("POST", "/system/functions", deploy_body("rb"))
    check(st == 201, f"deploy after the fault: {st} {body}")
    st, body = inv.call("POST", "/function/rb", {})
    check(st == 200 and body.get("gpu") == 1234, f"rb serves: {st} {body}")
    inv.kill()
    inv = Invoker(state, tmp)
    check(inv.call("POST", "/function/rb", {})[0] == 200, "rb serves after a restart")
    inv.stop()


def test_async_burst(state):
    inv = Invoker(state, tmp, extra=("--async-queue", "64"))
    check(inv.call("POST", "/system/functions",
                   deploy_body("slow", max_instances=2, max_inflight=0, timeout_ms=30000))[0] == 201,
          "deploy slow")
    accepted, refused, other = {}, [0], []
    lock = threading.Lock()
    stop_sync = threading.Event()
    sync_codes = []

    def submitter(k):
        c = http.client.HTTPConnection("127.0.0.1", inv.port, timeout=60)
        for i in range(k, 2000, 16):
            body = json.dumps({"sleep_ms": 5, "pad": "x" * (i % 97)})
            c.request("POST", "/async-function/slow", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = json.loads(r.read())
            with lock:
                if r.status == 202:
                    accepted[data["call_id"]] = len(body)
                elif r.status == 429 and "queue" in data.get("error", ""):
                    refused[0] += 1
                else:
                    other.append((r.status, data))
        c.close()

    def sync_caller():
        # competes for the two instances, so that async calls meet a full function
        while not stop_sync.is_set():
            st, _ = inv.call("POST", "/function/slow", {"sleep_ms": 3}, timeout=60)
            sync_codes.append(st)

    syncs = [threading.Thread(target=sync_caller) for _ in range(2)]
    subs = [threading.Thread(target=submitter, args=(k,)) for k in range(16)]
    for t in syncs + subs:
        t.start()
    for t in subs:
        t.join(timeout=300)
    stop_sync.set()
    for t in syncs:
        t.join(timeout=120)
    check(not other, f"async burst: answers other than 202/429: {other[:5]}")
    check(len(accepted) + refused[0] == 2000, f"async burst: {len(accepted)} + {refused[0]} != 2000")
    check(len(accepted) >= 64 and refused[0] > 0, f"async burst: {len(accepted)} accepted, {refused[0]} refused")
    check(set(sync_codes) <= {200, 429} and 200 in sync_codes, f"sync calls beside: {set(sync_codes)}")
    print(f"async burst: {len(accepted)} accepted, {refused[0]} refused, {len(sync_codes)} sync calls", flush=True)

    pending, deadline = dict(accepted), time.time() + 240
    while pending and time.time() < deadline:
        for cid in list(pending)[:200]:
            st, rec = inv.call("GET", f"/system/calls/{cid}")
            check(st == 200, f"accepted call {cid} lost: {st} {rec}")
            if rec["status"] in ("done", "failed"):
                check(rec["status"] == "done" and rec["code"] == 200, f"call {cid}: {rec}")
                ans = json.loads(rec["body"])
                check(ans.get("gpu") == 1234 and ans.get("len") == pending[cid], f"call {cid} answer: {ans}")
                del pending[cid]
        time.sleep(0.2)
    check(not pending, f"{len(pending)} accepted async calls never finished")
    for cid in accepted:   # all still readable
        st, rec = inv.call("GET", f"/system/calls/{cid}")
        check(st == 200 and rec["status"] == "done", f"finished call {cid} not kept: {st} {rec}")
    inv.stop()

    # retention: a finished result goes away after --async-retention
    inv = Invoker(state, tmp, extra=("--async-retention", "1"))
    st, body = inv.call("POST", "/async-function/slow", {"sleep_ms": 1})
    check(st == 202, f"async: {st} {body}")
    cid, states = body["call_id"], []
    for _ in range(300):
        st, rec = inv.call("GET", f"/system/calls/{cid}")
        states.append(rec.get("status") if st == 200 else st)
        if st == 404:
            break
        time.sleep(0.1)
    check(states[-1] == 404 and "done" in states, f"retention 1 s: {states[:3]}..{states[-3:]}")
    inv.stop()
    p = subprocess.run([INVOKER, "--async-queue", "0"], capture_output=True, text=True, env=env(), timeout=30)
    check(p.returncode == 2 and "--async-queue" in p.stderr, f"--async-queue 0: {p.returncode} {p.stderr}")


def poll_final(inv, ids, seconds=120):
    """Polls call ids until each is done or failed: {id: record}."""
    out, deadline = {}, time.time() + seconds
    while len(out) < len(ids) and time.time() < deadline:
        for cid in ids:
            if cid not in out:
                st, rec = inv.call("GET", f"/system/calls/{cid}")
                check(st == 200, f"accepted call {cid} unknown: {st} {rec}")
                if st == 200 and rec["status"] in ("done", "failed"):
                    out[cid] = rec
        time.sleep(0.2)
    check(len(out) == len(ids), f"{len(ids) - len(out)} accepted calls never finished")
    return out


def test_async_restart(state):
    """Accepted async calls outlive the invoker: queued ones run after a
    restart, a running one ends failed (503, not run twice), results stay."""
    inv = Invoker(state, tmp)
    check(inv.call("POST", "/system/functions", deploy_body("one", max_instances=1, max_inflight=0))[0] == 201,
          "deploy one")
    st, body = inv.call("POST", "/async-function/one", {"pad": "first"})
    first = body.get("call_id")
    check(st == 202 and poll_final(inv, [first])[first]["status"] == "done", "a first async call")
    ids = {}
    for i in range(12):
        req = json.dumps({"sleep_ms": 400, "pad": "y" * i})
        st, body = inv.call("POST", "/async-function/one", req)
        check(st == 202, f"async {i}: {st} {body}")
        ids[body.get("call_id")] = len(req)
    time.sleep(0.6)   # one runs, the rest are queued
    inv.kill()
    files = os.listdir(os.path.join(state, "calls"))
    check(any(f.endswith(".req") for f in files) and any(f.endswith(".run") for f in files),
          f"calls on disk at the kill: {sorted(files)}")
    inv = Invoker(state, tmp)
    recs = poll_final(inv, list(ids) + [first], seconds=240)
    interrupted = [r for r in recs.values() if r["status"] == "failed"]
    check(len(interrupted) <= 1 and all(r["code"] == 503 and "not run again" in r["body"] for r in interrupted),
          f"after a SIGKILL: failed calls {interrupted}")
    for cid, n in ids.items():
        r = recs.get(cid, {})
        if r.get("status") == "done":
            check(json.loads(r["body"]).get("len") == n, f"call {cid} after the restart: {r}")
    check(recs[first]["status"] == "done" and json.loads(recs[first]["body"]).get("gpu") == 1234,
          f"a result from before the kill: {recs[first]}")
    check(sum(r["status"] == "done" for r in recs.values()) >= len(ids), "queued calls ran after the restart")

    # SIGTERM: queued calls are not started while draining; the next start runs them
    more = []
    for i in range(6):
        st, body = inv.call("POST", "/async-function/one", {"sleep_ms": 300})
        check(st == 202, f"async before SIGTERM: {st}")
        more.append(body.get("call_id"))
    time.sleep(0.2)
    inv.stop()
    check(inv.p.returncode == 0, f"SIGTERM exit {inv.p.returncode}")
    inv = Invoker(state, tmp)
    recs = poll_final(inv, more + [first], seconds=120)
    check(all(r["status"] == "done" and r["code"] == 200 for r in recs.values()),
          f"after SIGTERM and a restart: {[(r['status'], r['code']) for r in recs.values()]}")
    # a function removed while its calls wait on disk: they end 404
    inv.kill()
    with open(os.path.join(state, "calls", "0" * 32 + ".req"), "w") as f:
        f.write(json.dumps({"function": "nosuch", "ctype": "application/json", "accepted": time.time()}) + "\n{}")
    with open(os.path.join(state, "calls", "junk.req"), "w") as f:
        f.write("junk")
    inv = Invoker(state, tmp)
    r = poll_final(inv, ["0" * 32])["0" * 32]
    check(r["status"] == "failed" and r["code"] == 404, f"a stored call of a missing function: {r}")
    check(not os.path.exists(os.path.join(state, "calls", "junk.req")), "junk in calls/ removed")
    inv.stop()


def test_async_full_disk(state):
    """STATE/calls on a full disk (a 64 KiB tmpfs): an async call that cannot
    be written down is 507, as a full disk is elsewhere (issue 37, item 9:
    it was 503), and one that fits is still taken and done."""
    calls = os.path.join(state, "calls")
    os.makedirs(calls, mode=0o700)
    os.chmod(state, 0o700)
    # mounted in a mount namespace of the invoker's own: one in ours would be
    # in every function that other tests dump meanwhile, whose restores
    # after the unmount fail ("mnt-v2: Can't stat mountpoint")
    if subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                      stderr=subprocess.DEVNULL).returncode != 0:
        print("async full disk: cannot make a mount namespace here: not run", flush=True)
        return
    mount = own_mount("-t tmpfs -o size=64k,mode=0700 tmpfs", calls)
    inv = Invoker(state, tmp, wrap=mount)
    check(f" {calls} " in open(f"/proc/{inv.p.pid}/mountinfo").read(), "STATE/calls is the invoker's tmpfs")
    st, body = inv.call("POST", "/system/functions", deploy_body("fd"))
    check(st == 201, f"deploy: {st} {body}")
    st, body = inv.call("POST", "/async-function/fd", {"pad": "x" * (256 << 10)})
    check(st == 507 and "cannot keep the call" in str(body), f"an async call STATE/calls cannot hold: 507: {st} {body}")
    st, body = inv.call("POST", "/async-function/fd", {})
    check(st == 202, f"a small one is taken: {st} {body}")
    if st == 202:
        rec = poll_final(inv, [body["call_id"]]).get(body["call_id"], {})
        check(rec.get("status") == "done" and rec.get("code") == 200, f"and done: {rec}")
    inv.stop()


PARTS = {
    "fault": ("registry write fault", test_registry_write_fault),
    "sweep": ("sweep", test_sweep),
    "crash": ("deploy crash", test_deploy_crash),
    "race": ("remove race", test_remove_race),
    "async": ("async burst", test_async_burst),
    "restart": ("async restart", test_async_restart),
    "fulldisk": ("async full disk", test_async_full_disk),
}


def main():
    """The parts named on the command line (all when none); meson runs them
    as two tests side by side."""
    try:
        for part in sys.argv[1:] or list(PARTS):
            if part not in PARTS:
                sys.exit(f"unknown part {part!r}")
            what, fn = PARTS[part]
            fn(os.path.join(tmp, part))
            print(f"{what}: ok", flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    done("registry")


if __name__ == "__main__":
    main()
