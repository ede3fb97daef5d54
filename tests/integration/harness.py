# SPDX-License-Identifier: MIT
"""Shared helpers of the integration tests: run programs under `phos-fn run`
on the sim device, and read executor traces."""
import json
import os
import socket
import subprocess
import sys

BUILD = os.environ.get("PHOS_BUILD_DIR") or sys.exit("PHOS_BUILD_DIR is not set")
PHOS_FN = os.path.join(BUILD, "invoker", "phos-fn")
TWINS = ":".join([
    os.path.join(BUILD, "functions", "examples", "libphos-twins-examples.so"),
    os.path.join(BUILD, "tests", "integration", "libphos-twins-tests.so"),
])

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg, flush=True)
    return cond


def done(name):
    if failures:
        print(f"{name}: {failures} check(s) failed")
        sys.exit(1)
    print(f"{name}: ok")
    sys.exit(0)


# tools/gpu-check runs the same tests on the GPU with PHOS_TEST_DEVICE=cuda.
DEVICE = os.environ.get("PHOS_TEST_DEVICE", "sim")


def fn_env(extra=None):
    """The environment of phos-fn, the invoker and the functions they start:
    the sim twins, and in sanitizer builds the sanitizer runtime preloaded (a
    non-instrumented CUDA program loads an instrumented preload, so the
    runtime must come first); then extra."""
    e = dict(os.environ, PHOS_SIM_TWINS=TWINS)
    if os.environ.get("PHOS_TEST_PRELOAD"):
        e["LD_PRELOAD"] = os.environ["PHOS_TEST_PRELOAD"]
    e.update(extra or {})
    return e


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(program, *args, stdin="", trace=None, device=DEVICE, timeout=300, env=None):
    """Runs program under phos-fn; returns the CompletedProcess."""
    e = fn_env(env)
    cmd = [PHOS_FN, "run", "--device", device]
    if trace:
        cmd += ["--trace", trace]
    cmd += ["--", program, *map(str, args)]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=e)


def phos(*args, stdin="", extra_env=None, timeout=300):
    """Runs phos-fn ARGS (snapshot, restore, ...) with fn_env(extra_env)."""
    return subprocess.run([PHOS_FN, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=fn_env(extra_env))


def answers(p):
    """The JSON lines of a CompletedProcess's stdout (others skipped)."""
    out = []
    for line in p.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def program(*parts):
    return os.path.join(BUILD, *parts)


def read_trace(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def serve(program, requests, *args, **kw):
    """Sends JSON requests (one per line) to a phos_fn_serve function; returns
    (CompletedProcess, [parsed responses])."""
    stdin = "".join(json.dumps(r) + "\n" if not isinstance(r, str) else r + "\n" for r in requests)
    p = run(program, *args, stdin=stdin, **kw)
    out = []
    for line in p.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"unparsed": line})
    return p, out


def admin_headers(state_dir, headers=None):
    """headers plus the invoker's admin token (STATE/admin.token, which the
    invoker makes when it has no --token-file) and a JSON content type."""
    h = {"Content-Type": "application/json"}
    with open(os.path.join(state_dir, "admin.token")) as f:
        h["Authorization"] = "Bearer " + f.read().strip()
    h.update(headers or {})
    return h


def route_headers(state_dir, path, headers=None):
    """A JSON content type, plus the admin token of the invoker whose state dir
    this is when path is on the control plane (/system/..., /metrics) and the
    token exists; then headers."""
    tok = os.path.join(state_dir or "", "admin.token")
    if state_dir and (path.startswith("/system/") or path == "/metrics") and os.path.exists(tok):
        return admin_headers(state_dir, headers)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return h
