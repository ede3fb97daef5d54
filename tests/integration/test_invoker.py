# SPDX-License-Identifier: MIT
"""phos-invoker over real HTTP on loopback (sim device):

- deploy (201, 409 again), list, describe; invoke cold then warm (X-Cold-Start,
  bodies right; a stateful function keeps its state between warm calls);
- every error status with its cause: 404 function/route/call, 400 bad JSON,
  bad name, bad fields, 405, 413, the handler's own 4xx, 429 (max_instances=1,
  a queue of 1, concurrent slow calls), 504 (instance killed; the next call is
  a cold start that works), 502 (a crash; same), 503 (a snapshot that cannot
  be restored);
- async calls and polling; logs; re-snapshot; scale to zero; metrics;
- the CLI against it (deploy, list, describe, invoke, logs, snapshot NAME, remove);
- a restarted invoker (SIGKILL, same state dir) serves the same functions;
- a non-loopback address: refused without a token, 401 without/with a bad token;
- SIGTERM drains an in-flight call before stopping;
- --max-instances caps instances across functions (503), and a slot comes back
  when an instance scales to zero.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from harness import BUILD, PHOS_FN, check, done, fn_env as env, free_port, program

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
VECADD = program("functions", "examples", "vecadd")
STATEFUL = program("tests", "integration", "stateful")
MISBEHAVE = program("tests", "integration", "misbehave")

tmp = tempfile.mkdtemp(prefix="phos-invoker-test-")
procs = []
TOKENS = {}   # port: the admin token the invoker made in its state dir


def start(state, host="127.0.0.1", extra=()):
    port = free_port(host)
    log = open(os.path.join(tmp, f"invoker-{port}.log"), "w")
    p = subprocess.Popen([INVOKER, "--listen", f"{host}:{port}", "--state-dir", state, "--device", "sim", *extra],
                         stdout=log, stderr=subprocess.STDOUT, env=env())
    procs.append(p)
    for _ in range(200):
        try:
            if request(host, port, "GET", "/healthz")[0] == 200:
                if "--token-file" not in extra:
                    with open(os.path.join(state, "admin.token")) as f:
                        TOKENS[port] = f.read().strip()
                return p, port
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"phos-invoker did not start: {open(log.name).read()}")


def request(host, port, method, path, body=None, headers=None, timeout=60):
    """The admin token goes to the control plane, and a JSON content type with a
    dict or list body, unless headers say otherwise."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if (path.startswith("/system/") or path == "/metrics") and port in TOKENS:
        headers.setdefault("Authorization", f"Bearer {TOKENS[port]}")
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = data.decode(errors="replace")
    return r.status, parsed, hdrs


def metric(host, port, line_start):
    text = request(host, port, "GET", "/metrics")[1]
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


def main():
    state = os.path.join(tmp, "state")
    inv, port = start(state)
    H = "127.0.0.1"

    def call(method, path, body=None, headers=None):
        return request(H, port, method, path, body, headers)

    check(call("GET", "/readyz")[0] == 200, "readyz")

    # --- deploy ---
    t0 = time.time()
    st, desc, _ = call("POST", "/system/functions", {"name": "vecadd", "program": VECADD})
    check(st == 201 and desc.get("status") == "ready", f"deploy vecadd: {st} {desc}")
    print(f"deploy vecadd (snapshot) {time.time() - t0:.2f} s", flush=True)
    st, body, _ = call("POST", "/system/functions", {"name": "vecadd", "program": VECADD})
    check(st == 409 and "exists" in body.get("error", ""), f"deploy twice: 409 ({st} {body})")
    st, _, _ = call("POST", "/system/functions", {"name": "stateful", "program": STATEFUL, "args": ["5"]})
    check(st == 201, f"deploy stateful: {st}")
    st, body, _ = call("POST", "/system/functions", {
        "name": "mb", "program": MISBEHAVE, "env": {"MB_MODE": "test"},
        "limits": {"max_instances": 1, "max_inflight": 1, "timeout_ms": 4000, "max_body_bytes": 1024}})
    check(st == 201 and body["limits"]["max_instances"] == 1 and body["env"] == {"MB_MODE": "test"},
          f"deploy mb with limits: {st} {body}")
    st, body, _ = call("GET", "/system/functions")
    check(st == 200 and sorted(f["name"] for f in body) == ["mb", "stateful", "vecadd"], f"list: {body}")
    st, body, _ = call("GET", "/system/functions/stateful")
    check(st == 200 and body["args"] == ["5"] and body["limits"]["max_instances"] == 4, f"describe: {body}")

    # --- invoke: cold, then warm ---
    req = {"n": 4096, "seed": 7}
    st, body, h = call("POST", "/function/vecadd", req)
    check(st == 200 and body.get("ok") is True and h.get("x-cold-start") == "true", f"vecadd cold: {st} {body} {h}")
    check(len(h.get("x-call-id", "")) == 32 and float(h.get("x-restore-ms", "0")) > 0, f"headers: {h}")
    st, body2, h = call("POST", "/function/vecadd", req)
    check(st == 200 and body2.get("ok") is True and h.get("x-cold-start") == "false" and
          body2["checksum"] == body["checksum"], f"vecadd warm: {st} {body2} {h}")
    counters = []
    for i in range(3):
        st, body, h = call("POST", "/function/stateful", {"op": "state"})
        check(st == 200, f"stateful call {i}: {st} {body}")
        counters.append((body.get("counter") if isinstance(body, dict) else None, h.get("x-cold-start")))
    check(counters == [(100, "true"), (101, "false"), (102, "false")], f"stateful: state kept warm {counters}")
    # Both cold starts took warm executors of the pool (--pool 2): both are busy now.
    busy = metric(H, port, 'phos_pool_executors{state="busy"}')
    check(busy == 2, f"the cold starts used the warm pool: {busy} busy")

    # --- errors ---
    st, body, _ = call("POST", "/function/nope", {})
    check(st == 404 and "nope" in body["error"], f"404 unknown function: {st} {body}")
    st, body, _ = call("GET", "/no/such/route")
    check(st == 404 and "error" in body, f"404 route: {st} {body}")
    st, body, _ = call("GET", "/system/calls/0123")
    check(st == 404, f"404 unknown call: {st}")
    st, body, _ = call("POST", "/system/functions", "{not json", {"Content-Type": "application/json"})
    check(st == 400 and "bad JSON" in body["error"], f"400 bad JSON: {st} {body}")
    st, body, _ = call("POST", "/system/functions", {"name": "Bad_Name", "program": VECADD})
    check(st == 400 and "name" in body["error"], f"400 bad name: {st} {body}")
    st, body, _ = call("POST", "/function/Bad_Name", {})
    check(st == 400, f"400 bad name in the route: {st} {body}")
    plain = os.path.join(tmp, "not-executable")
    with open(plain, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(plain, 0o644)
    for bad, why in [({"name": "x", "program": "vecadd"}, "absolute"),
                     ({"name": "x", "program": plain}, "executable"),
                     ({"name": "x", "program": VECADD, "args": [1]}, "args"),
                     ({"name": "x", "program": VECADD, "args": ["a"] * 257}, "args"),
                     ({"name": "x", "program": VECADD, "env": {"1X": "a"}}, "env"),
                     ({"name": "x", "program": VECADD, "limits": {"max_instances": 0}}, "max_instances"),
                     ({"name": "x", "program": VECADD, "limits": {"timeout_ms": 10**9}}, "timeout_ms"),
                     ({"name": "x", "program": VECADD, "bogus": 1}, "unknown")]:
        st, body, _ = call("POST", "/system/functions", bad)
        check(st == 400 and why in body.get("error", ""), f"400 for {bad}: {st} {body}")
    check(call("GET", "/system/functions/x")[0] == 404, "a refused deploy leaves nothing")
    st, body, h = call("GET", "/function/vecadd")
    check(st == 405 and h.get("allow") == "POST", f"405: {st} {h}")
    check(call("PUT", "/system/functions")[0] == 405, "405 on /system/functions")
    st, body, _ = call("POST", "/function/mb", "x" * 4096)
    check(st == 413 and "1024" in body["error"], f"413: {st} {body}")
    st, body, h = call("POST", "/function/mb", {"status": 418})
    check(st == 418 and body.get("error") == "asked to fail", f"handler's own 418: {st} {body}")

    # 429: one instance, a queue of one, three concurrent slow calls
    results = {}

    def slow(tag, ms):
        results[tag] = call("POST", "/function/mb", {"sleep_ms": ms})

    ts = [threading.Thread(target=slow, args=("a", 700))]
    ts[0].start()
    time.sleep(0.2)
    ts.append(threading.Thread(target=slow, args=("b", 10)))
    ts[1].start()
    time.sleep(0.2)
    st, body, _ = call("POST", "/function/mb", {})
    check(st == 429 and "queued" in body["error"], f"429 with the queue full: {st} {body}")
    for t in ts:
        t.join()
    check(results["a"][0] == 200 and results["b"][0] == 200, f"the running and the queued call: "
          f"{results['a'][0]} {results['b'][0]}")
    check(results["b"][2].get("x-cold-start") == "false", "the queued call got the freed instance")

    # 504: over timeout_ms (4000: a cold start counts against it too, and
    # one on a fresh executor of a loaded 2-core machine took over 1.5 s):
    # killed and replaced
    t0 = time.time()
    st, body, _ = call("POST", "/function/mb", {"sleep_ms": 12000})
    check(st == 504 and "timeout_ms" in body["error"] and time.time() - t0 < 7, f"504: {st} {body}")
    st, body, h = call("POST", "/function/mb", {})
    check(st == 200 and h.get("x-cold-start") == "true" and body["gpu"] == 1234 and body["calls"] == 1,
          f"after 504, a fresh instance: {st} {body} {h}")
    # 502: a crash
    st, body, _ = call("POST", "/function/mb", {"crash": True})
    check(st == 502 and "crashed" in body["error"], f"502: {st} {body}")
    st, body, h = call("POST", "/function/mb", {})
    check(st == 200 and h.get("x-cold-start") == "true", f"after 502, a fresh instance: {st} {body} {h}")

    # logs of mb's instance
    # (the log thread reads the function's stderr beside its answer: poll briefly)
    for _ in range(40):
        st, body, _ = call("GET", "/system/logs?name=mb&tail=1")
        insts = body.get("instances", []) if st == 200 else []
        logs = [i["log"] for i in insts if i["state"] != "exited"]
        if logs and logs[0].strip():
            break
        time.sleep(0.05)
    check(st == 200 and len(logs) == 1 and logs[0].strip() == "misbehave: request 1 (2 bytes)",
          f"logs tail=1: {st} {body}")
    insts = call("GET", "/system/logs?name=mb&tail=100")[1].get("instances", [])
    gone = [i for i in insts if i["state"] == "exited"]
    check(len(gone) == 1 and gone[0]["exit_status"] != 0 and "request 2" in gone[0]["log"],
          f"logs: the crashed instance's stderr is kept: {gone}")
    check(call("GET", "/system/logs?name=BAD")[0] == 400 and call("GET", "/system/logs?name=zz")[0] == 404,
          "logs: 400 bad name, 404 unknown")

    # async
    st, body, _ = call("POST", "/async-function/vecadd", req)
    check(st == 202 and len(body.get("call_id", "")) == 32, f"async: {st} {body}")
    cid = body.get("call_id", "x")
    for _ in range(100):
        st, rec, _ = call("GET", f"/system/calls/{cid}")
        if rec.get("status") in ("done", "failed"):
            break
        time.sleep(0.05)
    check(st == 200 and rec.get("status") == "done" and rec.get("code") == 200 and
          json.loads(rec.get("body", "{}")).get("ok") is True, f"async result: {rec}")
    st, body, _ = call("POST", "/async-function/mb", {"crash": True})
    for _ in range(100):
        rec = call("GET", f"/system/calls/{body['call_id']}")[1]
        if rec.get("status") in ("done", "failed"):
            break
        time.sleep(0.05)
    check(rec.get("status") == "failed" and rec.get("code") == 502, f"async crash: {rec}")

    # 503: a snapshot that cannot be restored
    check(call("POST", "/system/functions", {"name": "broken", "program": MISBEHAVE})[0] == 201, "deploy broken")
    shutil.rmtree(os.path.join(state, "snapshots", "broken"))
    st, body, _ = call("POST", "/function/broken", {})
    check(st == 503 and "cannot start" in body["error"], f"503: {st} {body}")

    # re-snapshot: stateful starts again from its init state
    st, body, _ = call("POST", "/system/functions/stateful/snapshot")
    check(st == 200, f"re-snapshot: {st} {body}")
    st, body, h = call("POST", "/function/stateful", {})
    check(st == 200 and body.get("counter") == 100 and h.get("x-cold-start") == "true",
          f"after re-snapshot: {body} {h}")

    # scale to zero
    check(call("POST", "/system/functions", {"name": "idler", "program": MISBEHAVE,
                                             "limits": {"idle_ms": 200}})[0] == 201, "deploy idler")
    check(call("POST", "/function/idler", {})[2].get("x-cold-start") == "true", "idler cold")
    check(metric(H, port, 'phos_instances{function="idler",state="idle"}') == 1, "idler: one idle instance")
    time.sleep(0.8)
    check(metric(H, port, 'phos_instances{function="idler",state="idle"}') == 0, "idler: scaled to zero")
    check(call("POST", "/function/idler", {})[2].get("x-cold-start") == "true", "idler cold again")

    # metrics count what happened
    m = lambda s: metric(H, port, s)  # noqa: E731
    check(m('phos_invocations_total{function="mb",code="504"}') == 1, "metrics: one 504")
    check(m('phos_invocations_total{function="mb",code="502"}') == 2, "metrics: two 502 (sync, async)")
    check(m('phos_invocations_total{function="mb",code="429"}') == 1, "metrics: one 429")
    check(m('phos_invocations_total{function="mb",code="418"}') == 1, "metrics: one 418")
    check(m('phos_cold_starts_total{function="vecadd"}') == 1, "metrics: vecadd cold once")
    check(m('phos_invocation_duration_seconds_count{function="vecadd"}') == 3, "metrics: vecadd 3 calls")
    check(m('phos_cold_starts_total{function="idler"}') == 2, "metrics: idler cold twice")
    check(m("phos_restore_bytes_total") > 0 and m("phos_restore_seconds_total") > 0, "metrics: restores")
    # The second cold start of idler took the process parked (CRIU-restored) after the first.
    check(m("phos_restores_from_standby_total") >= 1, "metrics: a cold start from a standby process")

    # the CLI
    gw = ["--gateway", f"http://127.0.0.1:{port}", "--state-dir", state]

    def cli(*args, stdin=""):
        return subprocess.run([PHOS_FN, *args], input=stdin, capture_output=True, text=True, timeout=60, env=env())

    p = cli("deploy", *gw, "--name", "cli-fn", "--limit", "max_instances=2", "--", MISBEHAVE)
    check(p.returncode == 0 and json.loads(p.stdout)["limits"]["max_instances"] == 2, f"cli deploy: {p.stderr}")
    p = cli("list", *gw)
    check(p.returncode == 0 and "cli-fn" in [f["name"] for f in json.loads(p.stdout)], f"cli list: {p.stderr}")
    p = cli("describe", *gw, "cli-fn")
    check(p.returncode == 0 and json.loads(p.stdout)["name"] == "cli-fn", f"cli describe: {p.stderr}")
    p = cli("invoke", *gw, "cli-fn", stdin='{"hello":1}')
    check(p.returncode == 0 and json.loads(p.stdout)["calls"] == 1, f"cli invoke: {p.stdout} {p.stderr}")
    p = cli("invoke", *gw, "cli-fn", stdin='{"status":422}')
    check(p.returncode != 0 and "asked to fail" in p.stderr and "422" in p.stderr, f"cli invoke error: {p.stderr}")
    p = cli("invoke", *gw, "nope", stdin="{}")
    check(p.returncode != 0 and "no function nope" in p.stderr, f"cli invoke 404: {p.stderr}")
    p = cli("logs", *gw, "cli-fn", "--tail", "5")
    check(p.returncode == 0 and "misbehave: request 2" in p.stdout, f"cli logs: {p.stdout} {p.stderr}")
    p = cli("snapshot", *gw, "cli-fn")
    check(p.returncode == 0, f"cli snapshot NAME: {p.stderr}")
    p = cli("remove", *gw, "cli-fn")
    check(p.returncode == 0 and call("GET", "/system/functions/cli-fn")[0] == 404, f"cli remove: {p.stderr}")
    p = cli("list", "--gateway", "http://127.0.0.1:1")
    check(p.returncode != 0, "cli: no gateway")

    # delete
    st, body, _ = call("DELETE", "/system/functions/broken")
    check(st == 200, f"delete: {st} {body}")
    check(call("POST", "/function/broken", {})[0] == 404, "deleted: 404")
    check(not os.path.exists(os.path.join(state, "functions", "broken.json")), "deleted: registry file gone")
    check(call("DELETE", "/system/functions/broken")[0] == 404, "delete twice: 404")

    # restart: SIGKILL, same state dir, no redeploy
    inv.kill()
    inv.wait()
    inv, port = start(state)
    st, body, _ = call("GET", "/system/functions")
    check(st == 200 and sorted(f["name"] for f in body) == ["idler", "mb", "stateful", "vecadd"],
          f"after restart: {body}")
    st, body, h = call("POST", "/function/vecadd", req)
    check(st == 200 and body.get("ok") is True and h.get("x-cold-start") == "true", f"after restart: {st} {body}")
    check(call("GET", "/system/functions/mb")[1]["limits"]["timeout_ms"] == 4000, "limits kept")

    # graceful shutdown: an in-flight call finishes
    res = {}
    t = threading.Thread(target=lambda: res.update(r=call("POST", "/function/mb", {"sleep_ms": 600})))
    t.start()
    time.sleep(0.3)
    inv.send_signal(signal.SIGTERM)
    t.join()
    check(res["r"][0] == 200, f"the in-flight call finished during drain: {res['r'][0]}")
    check(inv.wait(timeout=20) == 0, "exit 0 after SIGTERM")

    # --max-instances: instances of all functions together
    check(subprocess.run([INVOKER, "--max-instances", "0"], capture_output=True, env=env(),
                         timeout=20).returncode == 2, "--max-instances 0 refused")
    inv, port = start(state, extra=["--max-instances", "1"])
    check(call("POST", "/function/idler", {})[0] == 200, "max-instances 1: idler runs")
    st, body, _ = call("POST", "/function/vecadd", req)
    check(st == 503 and "--max-instances" in body.get("error", ""), f"a second function over the cap: {st} {body}")
    for _ in range(100):  # idler scales to zero after 200 ms, freeing the slot
        if metric(H, port, 'phos_instances{function="idler",state="idle"}') == 0:
            break
        time.sleep(0.05)
    st, body, _ = call("POST", "/function/vecadd", req)
    check(st == 200 and body.get("ok") is True, f"the slot came back after scale to zero: {st} {body}")
    inv.terminate()
    inv.wait(timeout=20)

    # auth on a non-loopback address (127.0.0.2: served only with a token)
    port2 = free_port("127.0.0.2")
    p = subprocess.run([INVOKER, "--listen", f"127.0.0.2:{port2}", "--state-dir", state], capture_output=True,
                       text=True, env=env(), timeout=20)
    check(p.returncode != 0 and "token" in p.stderr, f"non-loopback without a token refused: {p.stderr}")
    token = "s3cret-token-0123456789"
    tf = os.path.join(tmp, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    os.chmod(tf, 0o600)
    inv, port = start(state, host="127.0.0.2", extra=["--token-file", tf])
    H = "127.0.0.2"
    st, body, _ = call("GET", "/system/functions")
    check(st == 401 and "token" in body["error"], f"401 without a token: {st} {body}")
    check(call("GET", "/system/functions", headers={"Authorization": "Bearer wrong"})[0] == 401, "401 bad token")
    check(call("POST", "/system/functions", {"name": "sneaky", "program": MISBEHAVE})[0] == 401, "401 deploy")
    check(call("DELETE", "/system/functions/vecadd")[0] == 401, "401 delete")
    auth = {"Authorization": f"Bearer {token}"}
    st, body, _ = call("GET", "/system/functions", headers=auth)
    check(st == 200 and "sneaky" not in [f["name"] for f in body] and "vecadd" in [f["name"] for f in body],
          "a request without the token changed nothing")
    check(call("POST", "/function/vecadd", req)[0] == 200, "invoke needs no token without --protect-invoke")
    p = subprocess.run([PHOS_FN, "list", "--gateway", f"http://127.0.0.2:{port}", "--token-file", tf],
                       capture_output=True, text=True, env=env(), timeout=30)
    check(p.returncode == 0 and "vecadd" in p.stdout, f"cli with --token-file: {p.stderr}")
    inv.terminate()
    inv.wait(timeout=20)


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
done("invoker")
