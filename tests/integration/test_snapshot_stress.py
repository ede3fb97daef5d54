# SPDX-License-Identifier: MIT
"""Concurrent snapshots and restores (issue 10, item 14), on the sim device.

CRIU's parasite makes "proc.crtools" in the dumped function's working
directory; two dumps at once with one working directory used to collide there
("Can't create a directory (-17)", "Can't get /proc fd") about once in ten
suite runs. Here two invokers started in one directory (so every function of
both shares it) deploy several functions at once, then re-snapshot them while
cold starts and warm calls of the same functions run, for a fixed number of
rounds. Every deploy, re-snapshot and call must succeed with the right answer,
and no "proc.crtools" may be left in the working directory.
"""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from harness import BUILD, check, done, fn_env as env, free_port, program, route_headers

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
VECADD = program("functions", "examples", "vecadd")
STATEFUL = program("tests", "integration", "stateful")
MISBEHAVE = program("tests", "integration", "misbehave")
ROUNDS = 3

tmp = tempfile.mkdtemp(prefix="phos-snapstress-")
procs = []


STATES = {}  # port: the state dir of the invoker there (its admin.token)


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    headers = route_headers(STATES.get(port), path)
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data.decode(errors="replace")


def start(name):
    port = free_port()
    log = open(os.path.join(tmp, f"{name}.log"), "w")
    STATES[port] = os.path.join(tmp, name)
    p = subprocess.Popen([INVOKER, "--listen", f"127.0.0.1:{port}", "--state-dir", os.path.join(tmp, name),
                          "--device", "sim", "--pool", "2"], stdout=log, stderr=subprocess.STDOUT, env=env())
    procs.append(p)
    for _ in range(200):
        try:
            if request(port, "GET", "/healthz")[0] == 200:
                return port
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"phos-invoker did not start: {open(log.name).read()}")


# name -> (deploy body, request, check of the answer)
FUNCTIONS = {
    "va": ({"program": VECADD}, {"n": 2048, "seed": 3}, lambda b: b.get("ok") is True),
    "vb": ({"program": VECADD}, {"n": 512, "seed": 9}, lambda b: b.get("ok") is True),
    "st": ({"program": STATEFUL, "args": ["4"]}, {"op": "state"}, lambda b: isinstance(b.get("counter"), int)),
    "mb": ({"program": MISBEHAVE}, {"x": 1}, lambda b: b.get("gpu") == 1234),
}


def main():
    ports = [start("inv-a"), start("inv-b")]
    results = []   # (what, status, body)
    lock = threading.Lock()

    def note(what, st, body):
        with lock:
            results.append((what, st, body))

    def deploy(port, name):
        spec = dict(FUNCTIONS[name][0], name=name)
        st, body = request(port, "POST", "/system/functions", spec)
        note(f"deploy {name}@{port}", st, body)

    def resnap(port, name):
        st, body = request(port, "POST", f"/system/functions/{name}/snapshot")
        note(f"re-snapshot {name}@{port}", st, body)

    def invoke(port, name, k):
        _, req, ok = FUNCTIONS[name]
        for i in range(k):
            st, body = request(port, "POST", f"/function/{name}", req)
            good = st == 200 and isinstance(body, dict) and ok(body)
            note(f"call {name}@{port}", 200 if good else (st if st != 200 else -1), body)

    def run_all(threads):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
            check(not t.is_alive(), "a worker finished within 300 s")

    # every function deployed on both invokers at once: 8 dumps, one cwd
    run_all([threading.Thread(target=deploy, args=(p, n)) for p in ports for n in FUNCTIONS])
    for r in range(ROUNDS):
        threads = []
        for p in ports:
            for n in FUNCTIONS:
                threads.append(threading.Thread(target=resnap, args=(p, n)))
                threads.append(threading.Thread(target=invoke, args=(p, n, 3)))
        run_all(threads)
        print(f"round {r + 1}: {len(results)} operations so far", flush=True)
    # after the last re-snapshot every function answers from its newest snapshot
    run_all([threading.Thread(target=invoke, args=(p, n, 2)) for p in ports for n in FUNCTIONS])

    want = {"deploy": 201, "re-snapshot": 200, "call": 200}
    bad = [(w, s, b) for w, s, b in results if s != want[w.split()[0]]]
    check(not bad, f"{len(bad)} of {len(results)} operations failed: {bad[:5]}")
    counts = {k: sum(1 for w, _, _ in results if w.startswith(k)) for k in want}
    check(counts == {"deploy": 8, "re-snapshot": 8 * ROUNDS, "call": 8 * 3 * ROUNDS + 16},
          f"every operation ran: {counts}")
    check(not os.path.exists(os.path.join(os.getcwd(), "proc.crtools")), "no proc.crtools left in the cwd")
    for p in procs:
        p.terminate()
    for p, name in zip(procs, ["inv-a", "inv-b"]):
        try:
            code = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = "still running after 60 s"
        if not check(code == 0, f"{name} stopped cleanly after SIGTERM: {code}"):
            print(open(os.path.join(tmp, f"{name}.log")).read()[-3000:])


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
done("snapshot_stress")
