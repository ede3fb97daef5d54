# SPDX-License-Identifier: MIT
"""Invokers that find each other through etcd (issue 41), on the sim device.

etcd (Debian's etcd-server, started here) listens on a bridge in this
namespace; invokers A, B and C each run in a network namespace of their own
with one veth on that bridge, their own address, --token-file and
--cluster with one shared cluster token, as three hosts would.

- Bad --cluster command lines are refused before anything starts: no token
  file, a URL with a path, the admin token as the cluster token.
- A deploys mlp with "replicas": 2: B, the other member, pulls it from A
  with the cluster token (it opens A's export route) and answers as A
  without running its init. The cluster token opens no admin route of A
  (deploy: 401), and makes a member pull only from a member (403).
- C, which has no mlp, lists A and B with mlp ready (GET /system/cluster)
  and answers calls of mlp through them: the answers are A's own, and each
  names the member that served it (X-Phos-Served-By). A call C forwards is
  never forwarded again (X-Phos-Forwarded at B for a function B lacks: 404);
  a function nobody has is 404 at C.
- A member at capacity (mlp1: one instance, no queue) hands calls it would
  refuse with 429 to another member that has the function.
- etcd stopped (SIGSTOP): C keeps placing calls from its last view.
- A killed (SIGKILL) while four clients call C without pause: every call is
  answered 200 with the right numbers (those A held are run again on B), and
  A's key leaves etcd when its lease runs out.
- B stopped (SIGTERM): its key goes at once (the lease revoked), and mlp is
  then 404 at C. A started again on its state comes back into the view.
- A drained (POST /system/cluster/drain) while a client calls its session
  (a function of one instance) through C: the session moves to B live and
  its counter goes on, each call answered once; vec, which A alone had, is
  pulled by another member; C's calls avoid A while it drains.

Needs root, network namespaces and etcd: exits 77 where they are missing.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BUILD, DEVICE, PHOS_FN, Invoker, NetNamespaces, check, done, free_port, program

MLP = program("functions", "examples", "mlp")
SESSION = program("functions", "examples", "session")
VECADD = program("functions", "examples", "vecadd")
TAG = f"{os.getpid() % 100000}"
BR = f"phcx{TAG}"
KEYS = ("a", "b", "c")
HOST_IF = {k: f"phc{k}{TAG}" for k in KEYS}
NET = "10.231.78"
ADDR = {"a": f"{NET}.2", "b": f"{NET}.3", "c": f"{NET}.4"}
REQ = {"batch": 3, "seed": 5, "check": True}

nets = NetNamespaces(BR, HOST_IF, NET, ADDR, r"\b(phc(?:x|a|b|c)\d+)\b")
ns_cmd = nets.cmd

etcd_bin = shutil.which("etcd")
if not etcd_bin or os.geteuid() != 0:
    print("cluster: needs root and etcd (Debian's etcd-server; tools/setup installs it): skipped")
    sys.exit(77)
try:
    nets.setup()
except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
    nets.teardown()
    print(f"cluster: cannot make network namespaces here ({e}): skipped")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="phos-cluster-test-")
os.chmod(tmp, 0o711)
invs = {}
etcd = None


def secret(path, text):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text + "\n")
    return path


CLUSTER_TOKEN = f"cluster-{os.urandom(16).hex()}"
cluster_tok = secret(os.path.join(tmp, "cluster.token"), CLUSTER_TOKEN)
ports = {k: free_port() for k in KEYS}


def url(k):
    return f"http://{ADDR[k]}:{ports[k]}"


def start(k, etcd_url):
    state = os.path.join(tmp, k)
    os.makedirs(state, mode=0o700, exist_ok=True)
    tok = os.path.join(state, "admin.token")
    if not os.path.exists(tok):
        secret(tok, f"admin-of-{k}-{os.urandom(12).hex()}")
    inv = Invoker(state, tmp, device=DEVICE, host=ADDR[k], port=ports[k], wrap=ns_cmd(k),
                  extra=["--token-file", tok, "--cluster", etcd_url, "--cluster-token-file", cluster_tok,
                         "--advertise", url(k)])
    invs[k] = inv
    return inv


def post(k, path, body, headers=None, timeout=120):
    """(status, JSON or text, headers) of a POST to invoker k without a token."""
    c = http.client.HTTPConnection(ADDR[k], ports[k], timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json",
                                                                 **(headers or {})})
        r = c.getresponse()
        data = r.read()
        hdrs = {x.lower(): v for x, v in r.getheaders()}
    finally:
        c.close()
    try:
        return r.status, json.loads(data), hdrs
    except ValueError:
        return r.status, data.decode(errors="replace"), hdrs


def members(inv):
    st, body = inv.call("GET", "/system/cluster")
    return {m["url"]: m for m in body.get("members", [])} if st == 200 else {}


def wait_view(inv, want, what, limit=30):
    """Until want(members) holds at inv."""
    end = time.time() + limit
    m = {}
    while time.time() < end:
        m = members(inv)
        if want(m):
            return True
        time.sleep(0.2)
    check(False, f"{what}: the view at {inv.host} is {json.dumps(m)[:1500]}")
    return False


def has_mlp(m, k):
    return m.get(url(k), {}).get("functions", {}).get("mlp", {}).get("ready") is True


try:
    eport, epeer = free_port(), free_port()
    etcd_url = f"http://{NET}.1:{eport}"
    etcd = subprocess.Popen([etcd_bin, "--name", "phos-test", "--data-dir", os.path.join(tmp, "etcd"),
                             "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                             "--listen-peer-urls", f"http://127.0.0.1:{epeer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{epeer}",
                             "--initial-cluster", f"phos-test=http://127.0.0.1:{epeer}"],
                            stdout=open(os.path.join(tmp, "etcd.log"), "w"), stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection(f"{NET}.1", eport, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit("etcd did not start")

    # -- bad command lines: refused at once, nothing started
    inv_bin = os.path.join(BUILD, "invoker", "phos-invoker")
    for args, says in (([], "--cluster-token-file"),
                       (["--cluster-token-file", cluster_tok, "--advertise", "http://x:1/path"], "--advertise"),
                       (["--cluster-token-file", os.path.join(tmp, "nope")], "cluster-token-file")):
        p = subprocess.run([inv_bin, "--listen", f"127.0.0.1:{free_port()}", "--state-dir", os.path.join(tmp, "bad"),
                            "--device", DEVICE, "--cluster", etcd_url, *args], capture_output=True, text=True,
                           timeout=60)
        check(p.returncode != 0 and says in p.stderr, f"--cluster {args}: refused naming {says}: {p.returncode} "
                                                      f"{p.stderr[-300:]}")
    same = secret(os.path.join(tmp, "same.token"), CLUSTER_TOKEN)
    p = subprocess.run([inv_bin, "--listen", f"127.0.0.1:{free_port()}", "--state-dir", os.path.join(tmp, "bad2"),
                        "--device", DEVICE, "--token-file", same, "--cluster", etcd_url, "--cluster-token-file",
                        cluster_tok], capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "admin" in p.stderr, f"the admin token as the cluster token: {p.stderr[-300:]}")

    a, b = start("a", etcd_url), start("b", etcd_url)
    wait_view(a, lambda m: url("b") in m, "A sees B")
    st, body = a.call("POST", "/system/functions", {"name": "x", "program": MLP, "replicas": 17})
    check(st == 400 and "replicas" in body.get("error", ""), f"replicas over 16: {st} {body}")
    # deployed on A with two replicas: B pulls it from A with the cluster token (it opens A's peer routes)
    st, body = a.call("POST", "/system/functions", {"name": "mlp", "program": MLP, "args": ["--weights-mib", "4"],
                                                  "limits": {"timeout_ms": 60000}, "replicas": 2}, timeout=300)
    reps = body.get("replicas", []) if isinstance(body, dict) else []
    check(st == 201 and len(reps) == 1 and reps[0].get("member") == url("b") and reps[0].get("status") == 201 and
          reps[0].get("answer", {}).get("pull", {}).get("bytes_fetched", 0) > 4 << 20,
          f"deploy mlp on A with replicas 2: B pulled it: {st} {json.dumps(body)[:800]}")
    st, ref = a.call("POST", "/function/mlp", REQ)
    check(st == 200 and ref.get("ok"), f"mlp on A: {st} {ref}")
    st, got = b.call("POST", "/function/mlp", REQ)
    check(st == 200 and got == ref, f"mlp on B, never initialised there, answers as A: {st} {got}")
    # the cluster token opens none of a member's admin routes...
    bearer = {"Authorization": f"Bearer {CLUSTER_TOKEN}"}
    st, body, _ = post("a", "/system/functions", {"name": "x", "program": MLP}, headers=bearer)
    check(st == 401, f"the cluster token cannot deploy on A: {st} {body}")
    # ...and makes a member pull only from another member
    st, body, _ = post("b", "/system/cluster/replicate", {"name": "mlp2", "from": f"http://{NET}.9:1"}, headers=bearer)
    check(st == 403 and "not a member" in body.get("error", ""), f"a replica from a non-member: {st} {body}")
    st, body, _ = post("b", "/system/cluster/replicate", {"name": "mlp2", "from": url("a"), "x": 1}, headers=bearer)
    check(st == 400, f"a bad replicate request: {st} {body}")
    st, body, _ = post("b", "/system/cluster/replicate", {"name": "mlp2", "from": url("a")})
    check(st == 401, f"a replicate request without the token: {st} {body}")
    c = start("c", etcd_url)

    wait_view(c, lambda m: has_mlp(m, "a") and has_mlp(m, "b") and url("c") in m, "C sees A and B with mlp")
    m = members(c)
    da, db = (m[url(k)]["functions"]["mlp"].get("digest") for k in ("a", "b"))
    check(da and len(da) == 32 and da == db, f"A's and B's mlp have one snapshot digest: {da} {db}")
    check(all(m[url(k)]["functions"]["mlp"].get("hot") is True for k in ("a", "b")),
          f"mlp's snapshot is hot in A's and B's pools: {json.dumps(m)[:600]}")
    check(all(isinstance(m[url(k)].get("gpus"), list) and m[url(k)].get("device") == DEVICE for k in KEYS),
          f"each record names its device and GPUs: {json.dumps(m)[:600]}")
    view = c.call("GET", "/system/cluster")[1]
    check(view.get("self") == url("c") and view.get("etcd_ok") is True and len(view.get("members", [])) == 3,
          f"C's view: itself, etcd answering, three members: {json.dumps(view)[:800]}")

    # the CLI: a call at a member etcd names, and the view of one
    p = subprocess.run([PHOS_FN, "invoke", "--cluster", etcd_url, "mlp"], input=json.dumps(REQ), capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0 and json.loads(p.stdout or "null") == ref,
          f"phos-fn invoke --cluster: {p.returncode} {p.stdout[:300]} {p.stderr[-300:]}")
    p = subprocess.run([PHOS_FN, "cluster", "--gateway", url("c"), "--token-file", os.path.join(c.state, "admin.token"),
                        "--insecure-http"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and len(json.loads(p.stdout or "{}").get("members", [])) == 3,
          f"phos-fn cluster: {p.returncode} {p.stdout[:300]} {p.stderr[-300:]}")
    served = set()
    for i in range(6):
        st, got, h = post("c", "/function/mlp", REQ)
        check(st == 200 and got == ref, f"call {i} of mlp through C: {st} {got} (A's own: {ref})")
        served.add(h.get("x-phos-served-by"))
    check(served <= {url("a"), url("b")} and served, f"C's calls were served by A or B: {served}")
    st, got, _ = post("c", "/function/nosuch", {})
    check(st == 404 and "cluster" in got.get("error", ""), f"a function no member has: 404 at C: {st} {got}")
    st, got, _ = post("c", "/function/mlp", REQ, headers={"X-Phos-Forwarded": url("b")})
    check(st == 404, f"a forwarded call is not forwarded again: {st} {got}")

    # -- a member at capacity hands calls to another: mlp1 (one instance, no queue) on A and a replica
    st, body = a.call("POST", "/system/functions", {"name": "mlp1", "program": MLP, "args": ["--weights-mib", "4"],
                                                  "limits": {"max_instances": 1, "max_inflight": 0},
                                                  "replicas": 2}, timeout=300)
    other = (body.get("replicas") or [{}])[0].get("member") if isinstance(body, dict) else None
    check(st == 201 and other in (url("b"), url("c")), f"mlp1 on A and {other}: {st} {json.dumps(body)[:400]}")
    wait_view(a, lambda m: m.get(other, {}).get("functions", {}).get("mlp1", {}).get("ready"), "A sees mlp1's replica")
    over, stop_over = [], threading.Event()

    def at_a():
        while not stop_over.is_set():
            st, got, h = post("a", "/function/mlp1", REQ)
            over.append((st, got == ref, h.get("x-phos-served-by")))

    ts = [threading.Thread(target=at_a) for _ in range(6)]
    for t in ts:
        t.start()
    time.sleep(3)
    stop_over.set()
    for t in ts:
        t.join()
    wrong = [x for x in over if (x[0] == 200 and not x[1]) or x[0] not in (200, 429)]
    handed = sum(1 for x in over if x[0] == 200 and x[2] == other)
    check(not wrong and handed > 0 and any(x[0] == 200 and x[2] is None for x in over),
          f"A at capacity handed {handed} of {len(over)} calls to {other}, ran others itself, none wrong: "
          f"{wrong[:3]}")
    print(f"cluster: A at capacity handed {handed} of {len(over)} calls to another member "
          f"({sum(1 for x in over if x[0] == 429)} refused: both full)", flush=True)

    # -- etcd stops answering: C places calls from its last view
    etcd.send_signal(signal.SIGSTOP)
    try:
        view, end = {}, time.time() + 20   # (a round's etcd calls time out after 3 s each)
        while time.time() < end:
            view = c.call("GET", "/system/cluster")[1]
            if view.get("etcd_ok") is False:
                break
            time.sleep(0.2)
        check(view.get("etcd_ok") is False and len(view.get("members", [])) == 3,
              f"etcd stopped: C says it does not answer, keeping its view: {json.dumps(view)[:600]}")
        st, got, h = post("c", "/function/mlp", REQ)
        check(st == 200 and got == ref, f"etcd stopped: C still places calls: {st} {got}")
    finally:
        etcd.send_signal(signal.SIGCONT)
    wait_view(c, lambda m: has_mlp(m, "a") and has_mlp(m, "b"), "the view after etcd came back")

    # -- A killed under calls: every call answered right, on B from then on
    results, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            try:
                st, got, h = post("c", "/function/mlp", REQ)
                results.append((st, got == ref, h.get("x-phos-served-by"), time.time()))
            except OSError as e:
                results.append((0, False, str(e), time.time()))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(2)
    t_kill = time.time()
    a.kill()
    time.sleep(3)
    stop.set()
    for t in threads:
        t.join()
    bad = [r for r in results if r[0] != 200 or not r[1]]
    after = [r for r in results if r[3] > t_kill + 2]   # (answered well after the kill: none can be A's)
    check(len(results) > 20 and not bad, f"{len(results)} calls through C while A was killed, all answered right: "
                                         f"{bad[:3]}")
    check(after and all(r[2] == url("b") for r in after), f"after the kill, B served them: "
                                                           f"{set(r[2] for r in after)}")
    print(f"cluster: {len(results)} calls through C, {len(after)} after A's SIGKILL, none lost", flush=True)
    wait_view(c, lambda m: url("a") not in m, "A's key leaves etcd with its lease", limit=25)

    # -- B stops: its lease revoked, its key gone at once
    t0 = time.time()
    b.stop()
    wait_view(c, lambda m: url("b") not in m, "B's key goes when it stops (its lease revoked)", limit=8)
    print(f"cluster: B left the view {time.time() - t0:.1f} s after SIGTERM", flush=True)
    st, got, _ = post("c", "/function/mlp", REQ)
    check(st == 404, f"no member has mlp: 404 at C: {st} {got}")
    # -- A again, on its state: back in the view, serving C's calls
    a = start("a", etcd_url)
    wait_view(c, lambda m: has_mlp(m, "a"), "A back in the view")
    st, got, h = post("c", "/function/mlp", REQ)
    check(st == 200 and got == ref and h.get("x-phos-served-by") == url("a"), f"A serves C's call again: {st} {got}")

    # -- drain A: its live session moves to B under calls, the counter going on
    b = start("b", etcd_url)
    st, body = a.call("POST", "/system/functions", {
        "name": "sess", "program": SESSION, "args": ["--state-mib", "8", "--block-mib", "1", "--write-kib", "16"],
        "limits": {"timeout_ms": 60000, "max_instances": 1}}, timeout=300)
    check(st == 201, f"deploy sess on A: {st} {body}")
    st, body = a.call("POST", "/system/functions", {"name": "vec", "program": VECADD, "args": ["--elements", "4096"]},
                      timeout=300)
    check(st == 201, f"deploy vec on A alone: {st} {body}")
    st, vref = a.call("POST", "/function/vec", {"n": 1000, "seed": 2})
    check(st == 200 and vref.get("ok"), f"vec on A: {st} {vref}")
    wait_view(c, lambda m: has_mlp(m, "b") and m.get(url("a"), {}).get("functions", {}).get("sess", {}).get("ready"),
              "C sees sess on A and mlp on B")
    seen = [post("c", "/function/sess", {}) for _ in range(3)]
    check(all(x[2].get("x-phos-served-by") == url("a") for x in seen), "C's session calls go to A")
    st, body = a.call("POST", "/system/cluster/drain", {"drain": "yes"})
    check(st == 400, f"a bad drain request: {st} {body}")
    stop.clear()

    def session_client():
        while not stop.is_set():
            seen.append(post("c", "/function/sess", {}))

    th = threading.Thread(target=session_client)
    th.start()
    time.sleep(0.5)
    st, body = a.call("POST", "/system/cluster/drain", {"drain": True}, timeout=300)
    moves = body.get("sessions", []) if isinstance(body, dict) else []
    check(st == 200 and body.get("draining") is True and len(moves) == 1 and moves[0].get("status") == 200 and
          moves[0].get("to") == url("b"), f"A drained: its session moved to B: {st} {json.dumps(body)[:600]}")
    placed = body.get("placed", []) if isinstance(body, dict) else []
    check([x.get("function") for x in placed] == ["vec"] and
          [r.get("status") for r in placed[0].get("replicas", [])] == [201],
          f"A drained: vec, which A alone had, pulled by a member (mlp, which B has, not): {json.dumps(placed)[:600]}")
    holder = placed[0]["replicas"][0].get("member") if placed and placed[0].get("replicas") else None
    time.sleep(1.5)
    stop.set()
    th.join()
    seen.append(post("c", "/function/sess", {}))
    bad = [x for x in seen if x[0] != 200 or not x[1].get("ok")]
    counters = [x[1].get("counter") for x in seen if x[0] == 200]
    check(not bad and counters == list(range(1, len(seen) + 1)),
          f"{len(seen)} session calls through C, each answered once, the counter going on across the drain: "
          f"{bad[:2]} {counters[:4]}...{counters[-4:]}")
    check(seen[-1][2].get("x-phos-served-by") in (url("b"), url("a")), "the last session call was answered")
    wait_view(c, lambda m: m.get(url("a"), {}).get("draining") is True, "A says it is draining")
    served = {post("c", "/function/mlp", REQ)[2].get("x-phos-served-by") for _ in range(4)}
    check(served == {url("b")}, f"mlp calls through C avoid the draining A: {served}")
    if holder == url("b"):   # (C learns of B's copy within a round or two of etcd)
        wait_view(c, lambda m: m.get(holder, {}).get("functions", {}).get("vec", {}).get("ready"),
                  "C sees the copy of vec")
    st, got, h = post("c", "/function/vec", {"n": 1000, "seed": 2})
    check(st == 200 and got == vref and holder in (url("b"), url("c")) and
          h.get("x-phos-served-by") in (None, url("b")),
          f"vec through C, from the member that pulled it ({holder}), not the draining A: {st} {got} {h}")
    print(f"cluster: {len(seen)} session calls through C across A's drain, none lost", flush=True)
    p = subprocess.run([PHOS_FN, "drain", "--undo", "--gateway", url("a"), "--token-file",
                        os.path.join(a.state, "admin.token"), "--insecure-http"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0 and json.loads(p.stdout or "{}").get("draining") is False,
          f"phos-fn drain --undo: A's drain ended: {p.returncode} {p.stdout[:300]} {p.stderr[-300:]}")
    wait_view(c, lambda m: m.get(url("a"), {}).get("draining") is False, "A takes calls again")
finally:
    for inv in invs.values():
        if inv.p.poll() is None:
            inv.stop()
    if etcd:
        etcd.send_signal(signal.SIGCONT)
        etcd.kill()
        etcd.wait()
    nets.teardown()
    shutil.rmtree(tmp, ignore_errors=True)

done("cluster")
