# SPDX-License-Identifier: MIT
"""phos-invoker's HTTP and JSON inputs under mutation (sim device):

- a kept corpus of tricky requests (tests/integration/fuzz/http.json: bodies
  that once were, or could be, trouble: deep nesting, NUL bytes, invalid UTF-8,
  huge numbers, wrong types, names with path characters, unknown fields, ...);
- then seeded random mutations of valid deploy and invoke bodies, random
  routes, methods and headers.

Every answer must be a well-formed HTTP response with a status the API
documents and a JSON error body for 4xx/5xx; no request may deploy a
function (every mutated program path is refused), and the invoker must stay
healthy and keep serving the function that was deployed before.
"""
import faulthandler
import http.client
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

from harness import BUILD, admin_headers, check, done, fn_env as env, free_port, program

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
VECADD = program("functions", "examples", "vecadd")
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "http.json")
ALLOWED = {200, 201, 202, 400, 401, 403, 404, 405, 409, 413, 415, 429, 503}
SEED = int(os.environ.get("PHOS_FUZZ_SEED", "20261123"))
ROUNDS = int(os.environ.get("PHOS_FUZZ_ROUNDS", "400"))

tmp = tempfile.mkdtemp(prefix="phos-fuzz-test-")
STATE = os.path.join(tmp, "state")
faulthandler.dump_traceback_later(int(os.environ.get("PHOS_FUZZ_WATCHDOG_S", "240")), exit=True)


def send(port, method, path, body=b"", headers=None):
    """(status, body bytes); raises on a broken connection or a malformed response.
    The control plane gets the admin token and a JSON content type unless headers
    say otherwise."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.putrequest(method, path, skip_accept_encoding=True, skip_host="Host" in (headers or {}))
    if path.startswith("/system/") or path == "/metrics":
        headers = admin_headers(STATE, headers)
    for k, v in (headers or {}).items():
        c.putheader(k, v)
    c.putheader("Content-Length", str(len(body)))
    c.endheaders()
    if body:
        c.send(body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def mutate_json(rng, v, depth=0):
    """A random mutation of a JSON value."""
    choices = [
        lambda: None, lambda: True, lambda: rng.randint(-2**70, 2**70), lambda: rng.random() * 1e308,
        lambda: "", lambda: "x" * rng.choice([1, 63, 64, 4097]), lambda: "\u0000\ud7ff\u202e",
        lambda: [], lambda: {}, lambda: [v], lambda: {"k": v},
    ]
    if isinstance(v, dict) and v and depth < 4:
        v = dict(v)
        k = rng.choice(list(v))
        if rng.random() < 0.2:
            del v[k]
        elif rng.random() < 0.2:
            v["unknown-" + str(rng.randint(0, 9))] = v.pop(k)
        else:
            v[k] = mutate_json(rng, v[k], depth + 1)
        return v
    if isinstance(v, list) and v and depth < 4:
        v = list(v)
        i = rng.randrange(len(v))
        v[i] = mutate_json(rng, v[i], depth + 1)
        return v
    return rng.choice(choices)()


def mutate_bytes(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:
            del b[rng.randrange(len(b)):]               # truncate
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)  # flip a byte
        elif op == 2:
            b[rng.randrange(len(b) + 1):0] = rng.choice([b"\x00", b"\xff\xfe", b"{" * 64, b"]", b"\\u0000"])
        else:
            b += b'"' * rng.randint(1, 3)
    return bytes(b)


def main():
    state = STATE
    port = free_port()
    log = open(os.path.join(tmp, "invoker.log"), "w")
    inv = subprocess.Popen([INVOKER, "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--device", "sim",
                            "--pool", "0", "--max-body-bytes", "65536"],
                           stdout=log, stderr=subprocess.STDOUT, env=env())
    try:
        for _ in range(200):
            try:
                if send(port, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        st, body = send(port, "POST", "/system/functions",
                        json.dumps({"name": "vecadd", "program": VECADD}).encode())
        check(st == 201, f"deploy vecadd: {st} {body[:300]!r}")
        req = {"n": 256, "seed": 3}

        def judge(what, st, body):
            ok = st in ALLOWED
            if ok and st >= 400:
                try:
                    ok = isinstance(json.loads(body).get("error"), str)
                except (ValueError, AttributeError):
                    ok = False
            check(ok, f"{what}: {st} {body[:200]!r}")

        # the kept corpus
        with open(CORPUS) as f:
            corpus = json.load(f)
        for case in corpus:
            body = case["body"].encode("utf-8", "surrogatepass") if "body" in case else \
                bytes.fromhex(case["body_hex"])
            if body == b"@@BIG@@":  # over the invoker's --max-body-bytes
                body = b"x" * 70000
            st, data = send(port, case.get("method", "POST"), case["path"], body, case.get("headers"))
            judge(f"corpus {case['why']}", st, data)
            if "status" in case:
                check(st == case["status"], f"corpus {case['why']}: want {case['status']}, got {st} {data[:200]!r}")

        # seeded mutations
        rng = random.Random(SEED)
        deploy = {"name": "fz", "program": "/nonexistent/fz", "args": ["--a", "1"], "env": {"K": "V"},
                  "device": "sim", "limits": {"max_instances": 2, "max_inflight": 1, "timeout_ms": 1000,
                                              "idle_ms": 1000, "max_body_bytes": 1024}}
        routes = ["/system/functions", "/system/functions/vecadd", "/function/vecadd", "/async-function/vecadd",
                  "/system/calls/1", "/system/logs?name=vecadd&tail=5", "/metrics", "/healthz",
                  "/system/functions/vecadd/snapshot"]
        for i in range(ROUNDS):
            kind = rng.randrange(4)
            if kind == 0:      # deploy bodies: structure mutated, the program never valid
                d = mutate_json(rng, deploy)
                if isinstance(d, dict) and isinstance(d.get("program"), str):
                    d["program"] = "/nonexistent/" + d["program"][-8:].replace("/", "_")
                body = json.dumps(d).encode()
                if rng.random() < 0.5:
                    body = mutate_bytes(rng, body)
                st, data = send(port, "POST", "/system/functions", body)
            elif kind == 1:    # invoke bodies go to the function as they are
                body = mutate_bytes(rng, json.dumps(req).encode())
                st, data = send(port, "POST", rng.choice(["/function/vecadd", "/async-function/vecadd"]), body)
                if st == 200:  # vecadd answers every request, an error inside its JSON
                    continue
            elif kind == 2:    # routes, methods, query strings
                path = rng.choice(routes)
                path = mutate_bytes(rng, path.encode()).decode("latin-1")
                path = "/" + "".join(c for c in path if 0x21 <= ord(c) < 0x7f and c not in "#")[:200]
                method = rng.choice(["GET", "POST", "PUT", "PATCH"])  # no DELETE: vecadd stays
                st, data = send(port, method, path)
            else:              # headers
                hdr = rng.choice(["Content-Type", "Authorization", "Accept", "X-Junk"])
                val = rng.choice(["application/json", "Bearer " + "a" * 300, "text/plain; charset=\xff", "x" * 5000])
                try:
                    st, data = send(port, "POST", "/function/vecadd", json.dumps(req).encode(), {hdr: val})
                except (http.client.HTTPException, OSError):
                    continue   # a header the server refuses by closing is fine; it must stay alive
            judge(f"round {i} (kind {kind}, seed {SEED})", st, data)
            check(inv.poll() is None, f"the invoker is alive after round {i}")
            if inv.poll() is not None:
                break

        st, data = send(port, "GET", "/system/functions")
        names = [f["name"] for f in json.loads(data)] if st == 200 else None
        check(names == ["vecadd"], f"nothing but vecadd was deployed: {names}")
        st, data = send(port, "POST", "/function/vecadd", json.dumps(req).encode())
        check(st == 200 and json.loads(data).get("ok") is True, f"vecadd still answers: {st} {data[:200]!r}")
        check(send(port, "GET", "/readyz")[0] == 200, "still ready")
    finally:
        inv.terminate()
        try:
            inv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            inv.kill()
            inv.wait()
        log.close()
        if os.environ.get("PHOS_FUZZ_KEEP_LOG"):
            print(open(log.name).read()[-5000:])


try:
    main()
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("http_fuzz")
