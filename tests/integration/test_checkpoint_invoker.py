# SPDX-License-Identifier: MIT
"""Checkpoints of the invoker's instances (issue 11), on the sim device, with
long_call (a serving function whose GPU state lives on across calls, a
session):

- POST /system/functions/NAME/instances/ID/checkpoint checkpoints an idle
  instance in every mode, and a busy one in the middle of a long call (the
  call's own thread takes it); the instance serves on with its state, the
  answers those of an instance never checkpointed; the answer says the mode,
  the stall and the bytes; bad input gets 400/404/405/409 with nothing done;
- limits.checkpoint_ms: a long call is checkpointed while it runs; when its
  executor, or its function process, is killed after that, or (sim) its
  device fails for good (a sticky error: the executor ends), the call resumes
  on a copy restored from the latest checkpoint and answers exactly what an
  uninterrupted call answers (200), and the instance then serves the next
  call with the state carried on; without checkpoint_ms the same loss is a
  502 (nothing resumes);
- an async call checkpointed while it ran resumes from its latest
  checkpoint when the invoker is killed and started again, and answers what an
  uninterrupted call answers; one resumed too often ends as failed (503);
- an instance's checkpoints go with it (removed when it stops), and the
  invoker's start empties STATE/checkpoints (but for those).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from harness import DEVICE, PHOS_FN, Invoker, check, done, live_instances, program
from harness import long_call_reference as reference

LONG = program("tests", "integration", "long_call")


instances = live_instances


def one_instance(inv, name, state=None, wait=10):
    end = time.time() + wait
    while time.time() < end:
        live = [i for i in instances(inv, name) if state is None or i["state"] == state]
        if live:
            return live[0]
        time.sleep(0.02)
    return None


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, TypeError):
        return False


tmp = tempfile.mkdtemp(prefix="phos-ckpt-inv-")
state = os.path.join(tmp, "state")
inv = None
try:
    # a leftover of an earlier invoker is removed at start
    os.makedirs(os.path.join(state, "checkpoints", "old-1"), mode=0o700)
    open(os.path.join(state, "checkpoints", "old-1", "manifest.json"), "w").write("{}")
    # (sim: when this file exists, the device's next launch fails for good, a sticky error)
    poison = os.path.join(tmp, "fatal-now")
    inv = Invoker(state, tmp, device=DEVICE, extra_env={"PHOS_SIM_FATAL": poison})
    check(os.listdir(os.path.join(state, "checkpoints")) == [], "start-up empties STATE/checkpoints")

    st, body = inv.call("POST", "/system/functions", {"name": "lc", "program": LONG,
                                                      "limits": {"timeout_ms": 120000}})
    check(st == 201, f"deploy lc: {st} {body}")
    st, body = inv.call("POST", "/system/functions", {"name": "lcp", "program": LONG,
                                                      "limits": {"timeout_ms": 120000, "checkpoint_ms": 300}})
    check(st == 201, f"deploy lcp: {st} {body}")
    st, body = inv.call("GET", "/system/functions/lcp")
    check(st == 200 and body.get("limits", {}).get("checkpoint_ms") == 300, f"describe shows checkpoint_ms: {body}")
    for bad in (50, -1, "x", 86400001):
        st, body = inv.call("POST", "/system/functions", {"name": "lcbad", "program": LONG,
                                                          "limits": {"checkpoint_ms": bad}})
        check(st == 400 and "checkpoint_ms" in str(body), f"checkpoint_ms {bad!r} refused: {st} {body}")

    # --- the endpoint, idle instance, every mode -----------------------------
    plan = [3, 2, 4, 1]
    ref = reference(plan)
    st, body = inv.call("POST", "/function/lc", {"steps": plan[0]})
    check(st == 200 and body == ref[0], f"first call: {st} {body} (want {ref[0]})")
    inst = one_instance(inv, "lc", "idle")
    check(inst is not None, "an idle instance")
    iid = inst["instance"] if inst else 0
    for k, mode in enumerate(("stw", "cow", "recopy")):
        st, body = inv.call("POST", f"/system/functions/lc/instances/{iid}/checkpoint", {"mode": mode})
        check(st == 200 and body.get("mode") == mode and body.get("instance") == iid and body.get("gpu_bytes", 0) > 0
              and body.get("stall_s", -1) >= 0 and body.get("total_s", 0) > 0,
              f"{mode} checkpoint of the idle instance: {st} {body}")
        st, body = inv.call("POST", "/function/lc", {"steps": plan[k + 1]})
        check(st == 200 and body == ref[k + 1], f"after the {mode} checkpoint it serves on: {body} (want {ref[k + 1]})")
    st, body = inv.call("POST", f"/system/functions/lc/instances/{iid}/checkpoint")
    check(st == 200 and body.get("mode") == "stw", f"no body: stw: {st} {body}")
    inst = one_instance(inv, "lc")
    check(inst and inst.get("checkpoints") == 4 and inst.get("checkpoint_mode") == "stw",
          f"/system/logs counts them: {inst}")
    check(os.listdir(os.path.join(state, "checkpoints")) == [f"lc-{iid}"],
          f"one checkpoint per instance: {os.listdir(os.path.join(state, 'checkpoints'))}")

    # the CLI: phos-fn checkpoint NAME (its only instance), and with --instance and --mode
    for args in ([], ["--instance", str(iid), "--mode", "cow"]):
        r = subprocess.run([PHOS_FN, "checkpoint", "lc", "--gateway", f"http://127.0.0.1:{inv.port}",
                            "--state-dir", state, *args], capture_output=True, text=True, timeout=120)
        out = json.loads(r.stdout or "{}") if r.returncode == 0 else {}
        check(r.returncode == 0 and out.get("mode") == ("cow" if args else "stw") and out.get("instance") == iid,
              f"phos-fn checkpoint lc {args}: {r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}")
    r = subprocess.run([PHOS_FN, "checkpoint", "lc", "--gateway", f"http://127.0.0.1:{inv.port}", "--state-dir",
                        state, "--mode", "fast"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--mode" in r.stderr, f"phos-fn checkpoint --mode fast: {r.returncode} {r.stderr}")
    r = subprocess.run([PHOS_FN, "checkpoint", "lc", "--gateway", f"http://127.0.0.1:{inv.port}", "--state-dir",
                        state, "--instance", "999"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "999" in r.stderr, f"phos-fn checkpoint --instance 999: {r.returncode} {r.stderr}")

    # --- bad requests ---------------------------------------------------------
    cases = [
        ("POST", f"/system/functions/lc/instances/{iid}/checkpoint", {"mode": "fast"}, 400, "mode must be"),
        ("POST", f"/system/functions/lc/instances/{iid}/checkpoint", {"mode": "stw", "x": 1}, 400, "unknown field"),
        ("POST", f"/system/functions/lc/instances/{iid}/checkpoint", "[1]", 400, "JSON object"),
        ("POST", "/system/functions/lc/instances/999/checkpoint", {}, 404, "no instance 999"),
        ("POST", "/system/functions/nope/instances/1/checkpoint", {}, 404, "no such function"),
        ("POST", "/system/functions/lc/instances/01/checkpoint", {}, 404, "no route"),
        ("POST", "/system/functions/lc/instances/x/checkpoint", {}, 404, "no route"),
        ("POST", "/system/functions/lc/instances/1/checkpoints", {}, 404, "no route"),
        ("GET", f"/system/functions/lc/instances/{iid}/checkpoint", None, 405, "method not allowed"),
        ("POST", f"/system/functions/lc/instances/{iid}/checkpoint", "x" * 10000, 413, "over"),
    ]
    for method, path, body, code, msg in cases:
        st, b = inv.call(method, path, body)
        check(st == code and msg in json.dumps(b), f"{method} {path} {str(body)[:40]}: {st} {b}")
    st, body = inv.call("POST", "/function/lc", {"steps": 0})
    check(st == 200 and body == reference(plan + [0])[-1], f"refused requests changed nothing: {body}")

    # --- a busy instance: its call's thread takes the checkpoint ------------------
    res = {}

    def long_call(name, steps, pause_us, key):
        t = time.time()
        res[key] = inv.call("POST", f"/function/{name}", {"steps": steps, "pause_us": pause_us}, timeout=180)
        res[key + "_t"] = time.time() - t

    th = threading.Thread(target=long_call, args=("lc", 200, 10000, "busy"))
    th.start()
    busy = one_instance(inv, "lc", "busy")
    time.sleep(0.3)
    st, body = inv.call("POST", f"/system/functions/lc/instances/{busy['instance'] if busy else 0}/checkpoint",
                        {"mode": "cow"})
    check(st == 200 and body.get("mode") == "cow", f"checkpoint of a busy instance: {st} {body}")
    th.join()
    want = reference(plan + [0, 200])[-1]
    check(res["busy"][0] == 200 and res["busy"][1] == want, f"the call it interrupted is intact: {res['busy']} {want}")

    # --- checkpoint_ms: a lost instance resumes its call -----------------------------
    plan_p = [2]
    st, body = inv.call("POST", "/function/lcp", {"steps": 2})
    check(st == 200 and body == reference(plan_p)[0], f"lcp first call: {body}")
    for victim in ("executor_pid", "pid") + (("fatal",) if DEVICE == "sim" else ()):
        # 4 s: two checkpoints (0.2 s each here, CRIU 4.2.1, 2 cores; more
        # when the machine is loaded) surely come before the call ends
        steps = 400
        plan_p.append(steps)
        th = threading.Thread(target=long_call, args=("lcp", steps, 10000, victim))
        th.start()
        busy = one_instance(inv, "lcp", "busy")
        before = busy.get("checkpoints", 0) if busy else 0
        end = time.time() + 20
        cur = busy
        while time.time() < end and cur and cur.get("checkpoints", 0) < before + 2:
            time.sleep(0.05)
            cur = one_instance(inv, "lcp", "busy", wait=1)
        check(cur and cur.get("checkpoints", 0) >= before + 2,
              f"{victim}: the long call was checkpointed while it ran: {cur}")
        if victim == "fatal":   # a fatal GPU error: the executor ends with it (status 76)
            open(poison, "w").close()
        else:
            check(cur and kill(cur.get(victim)), f"{victim} killed mid-call")
        th.join()
        want = reference(plan_p)[-1]
        check(res[victim][0] == 200 and res[victim][1] == want,
              f"{victim} killed: the call resumed from its checkpoint and answered as if never lost: "
              f"{res[victim]} (want {want})")
        inst = one_instance(inv, "lcp")
        check(inst and inst.get("resumes") == 1, f"{victim}: one resume counted: {inst}")
        # the session goes on on the resumed instance
        plan_p.append(1)
        st, body = inv.call("POST", "/function/lcp", {"steps": 1})
        check(st == 200 and body == reference(plan_p)[-1], f"{victim}: the next call carries the state on: {body}")
    check("resumed its call from its checkpoint" in inv.logtext(), "the log says it resumed")
    if DEVICE == "sim":
        check(not os.path.exists(poison) and "GPU context failed for good" in inv.logtext(),
              "a fatal GPU error ended the executor, and the call resumed as after a kill")

    # without checkpoint_ms the same loss is a 502
    th = threading.Thread(target=long_call, args=("lc", 150, 10000, "nockpt"))
    th.start()
    busy = one_instance(inv, "lc", "busy")
    time.sleep(0.5)
    check(busy and kill(busy.get("executor_pid")), "lc's executor killed mid-call")
    th.join()
    check(res["nockpt"][0] == 502, f"without checkpoint_ms a lost call fails: {res['nockpt']}")

    # --- an async call resumes after the invoker's death ------------------------------------
    # Its checkpoints are noted beside it (STATE/calls/ID.ckpt); a new invoker
    # on the state dir keeps that checkpoint (resume-ID), ends what the old one
    # left running, and finishes the call from the checkpoint, on a new
    # instance that then serves on with the state.
    calls_dir = os.path.join(state, "calls")
    st, body = inv.call("POST", "/async-function/lcp", {"steps": 400, "pause_us": 10000})
    check(st == 202 and "call_id" in body, f"async call accepted: {st} {body}")
    cid = body.get("call_id", "") if isinstance(body, dict) else ""
    plan_p.append(400)
    end = time.time() + 30
    while time.time() < end and not os.path.exists(os.path.join(calls_dir, f"{cid}.ckpt")):
        time.sleep(0.05)
    time.sleep(0.4)   # (one more checkpoint, so that one is surely whole)
    check(os.path.exists(os.path.join(calls_dir, f"{cid}.ckpt")), "the running call's checkpoint is noted")
    # a call that was resumed too often already is not resumed again
    fake = "ab" * 16
    with open(os.path.join(calls_dir, f"{fake}.run"), "w") as f:
        f.write(json.dumps({"function": "lcp", "ctype": "application/json", "accepted": time.time()}) + "\n{}")
    with open(os.path.join(calls_dir, f"{fake}.ckpt"), "w") as f:
        f.write(json.dumps({"function": "lcp", "checkpoint": "lcp-77", "resumes": 3}) + "\n")
    os.makedirs(os.path.join(state, "checkpoints", "lcp-77"), mode=0o700)
    # a note naming no checkpoint of ours (a path out of the folder): not resumed;
    # a note without its running call: removed
    bad = "cd" * 16
    with open(os.path.join(calls_dir, f"{bad}.run"), "w") as f:
        f.write(json.dumps({"function": "lcp", "ctype": "application/json", "accepted": time.time()}) + "\n{}")
    with open(os.path.join(calls_dir, f"{bad}.ckpt"), "w") as f:
        f.write(json.dumps({"function": "lcp", "checkpoint": "../calls", "resumes": 0}) + "\n")
    stray = "ef" * 16
    with open(os.path.join(calls_dir, f"{stray}.ckpt"), "w") as f:
        f.write(json.dumps({"function": "lcp", "checkpoint": "lcp-1", "resumes": 0}) + "\n")
    inv.kill()
    inv = Invoker(state, tmp, device=DEVICE)
    rec = {}
    end = time.time() + 120
    while time.time() < end:
        st, rec = inv.call("GET", f"/system/calls/{cid}")
        if st == 200 and rec.get("status") in ("done", "failed"):
            break
        time.sleep(0.1)
    want = reference(plan_p)[-1]
    got = json.loads(rec.get("body") or "null") if rec.get("code") == 200 else rec
    check(rec.get("status") == "done" and got == want,
          f"the async call resumed after the invoker's death answers as if never interrupted: {rec} (want {want})")
    check("resumed a call of an earlier invoker" in inv.logtext(), "the log says so")
    check(not os.path.exists(os.path.join(calls_dir, f"{cid}.ckpt")), "its note goes when it is done")
    st, rec = inv.call("GET", f"/system/calls/{fake}")
    check(st == 200 and rec.get("status") == "failed" and rec.get("code") == 503 and "too often" in str(rec),
          f"resumed too often: failed, not run again: {st} {rec}")
    st, rec = inv.call("GET", f"/system/calls/{bad}")
    check(st == 200 and rec.get("status") == "failed" and rec.get("code") == 503 and "not run again" in str(rec),
          f"a note naming no checkpoint of ours: failed, not run again: {st} {rec}")
    check(os.path.isdir(calls_dir) and not os.path.exists(os.path.join(calls_dir, f"{stray}.ckpt")),
          "a note without its running call is removed")
    left = sorted(os.listdir(os.path.join(state, "checkpoints")))
    check(f"resume-{fake}" not in left and "lcp-77" not in left and f"resume-{cid}" in left,
          f"the resumed instance owns its checkpoint, the refused one's is gone: {left}")
    plan_p.append(1)
    st, body = inv.call("POST", "/function/lcp", {"steps": 1})
    check(st == 200 and body == reference(plan_p)[-1], f"the resumed instance serves on with the state: {body}")

    # --- checkpoints go with their instances --------------------------------------------
    for name in ("lc", "lcp"):
        st, body = inv.call("DELETE", f"/system/functions/{name}")
        check(st == 200, f"remove {name}: {st} {body}")
    left = os.listdir(os.path.join(state, "checkpoints"))
    check(left == [], f"removed functions leave no checkpoints: {left}")
finally:
    if inv:
        inv.stop()
    shutil.rmtree(tmp, ignore_errors=True)

done("checkpoint_invoker")
