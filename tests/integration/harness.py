# SPDX-License-Identifier: MIT
"""Shared helpers of the integration tests: run programs under `phos-fn run`
on the sim device, and read executor traces."""
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

BUILD = os.environ.get("PHOS_BUILD_DIR") or sys.exit("PHOS_BUILD_DIR is not set")
PHOS_FN = os.path.join(BUILD, "invoker", "phos-fn")
TWINS = ":".join([
    os.path.join(BUILD, "functions", "examples", "libphos-twins-examples.so"),
    os.path.join(BUILD, "tests", "integration", "libphos-twins-tests.so"),
    os.path.join(BUILD, "tests", "transparency", "libphos-twins-transparency.so"),
])

failures = 0
failed_checks = []


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        failed_checks.append(str(msg)[:2000])
        print("FAIL:", msg, flush=True)
    return cond


def done(name):
    if failures:
        # again at the end: meson shows only the last lines of a long log
        for msg in failed_checks[:20]:
            print("FAIL:", msg)
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
    runtime must come first); phos-fn run with fresh executors (a pool daemon
    or invoker on the machine must not change what a test sees:
    test_lend asks for lent ones); then extra."""
    e = dict(os.environ, PHOS_SIM_TWINS=TWINS, PHOS_RUN_EXECUTOR="fresh")
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


def own_mount(args, path):
    """A command prefix (Invoker's wrap) that runs what follows in a mount
    namespace of its own, with `mount ARGS PATH` made there first. A mount a
    test makes in ours would be in every function that other tests dump
    meanwhile (their mount namespaces follow ours), and their restores after
    the unmount fail ("mnt-v2: Can't stat mountpoint")."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", f'mount {args} "$0" && exec "$@"', path]


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


def gpu_count():
    """GPUs of this host (nvidia-smi -L), 0 without a driver."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


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


procs = []   # every Invoker started, for a test's final cleanup


class Invoker:
    """phos-invoker on the sim device, or device (PHOS_FAULT only when fault is
    given; extra arguments and environment added), its log and working
    directory under tmp."""

    def __init__(self, state, tmp, extra=(), fault=None, extra_env=None, start_timeout=20, device="sim", port=None,
                 host="127.0.0.1", wrap=()):
        """host: the address it listens on and we call (not loopback: pass
        --token-file in extra); wrap: a command prefix, as ip netns exec NS."""
        self.port = port or free_port()
        self.host = host
        self.state = state
        self.log = os.path.join(tmp, f"invoker-{self.port}.log")
        if os.path.exists(self.log):  # a restart on the same port: the log of each run
            n = 1
            while os.path.exists(f"{self.log}.{n}"):
                n += 1
            os.rename(self.log, f"{self.log}.{n}")
        # A working directory of its own: CRIU's parasite mounts /proc at
        # "proc.crtools" in the dumped process's cwd (inherited from here), so
        # dumps of other tests' functions in a shared cwd would collide (EEXIST).
        cwd = os.path.join(tmp, f"cwd-{self.port}")
        os.makedirs(cwd, exist_ok=True)
        e = fn_env(extra_env)
        e.pop("PHOS_FAULT", None)
        if fault:
            e["PHOS_FAULT"] = fault
        self.p = subprocess.Popen([*wrap, os.path.join(BUILD, "invoker", "phos-invoker"), "--listen",
                                   f"{host}:{self.port}", "--state-dir", state, "--device", device, *extra],
                                  stdout=open(self.log, "w"), stderr=subprocess.STDOUT, cwd=cwd, env=e)
        procs.append(self.p)
        for _ in range(int(start_timeout / 0.05)):
            try:
                if self.call("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise SystemExit(f"phos-invoker did not start: {self.logtext()}")

    def request(self, method, path, body=None, timeout=120):
        """(status, parsed JSON or text, {lowercased header: value}) of one
        request, with the admin token where the path needs it and a JSON
        content type when there is a body."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            headers = route_headers(self.state, path)
            if body is None:
                del headers["Content-Type"]
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        try:
            return r.status, json.loads(data), hdrs
        except ValueError:
            return r.status, data.decode(errors="replace"), hdrs

    def call(self, method, path, body=None, timeout=120):
        """(status, parsed JSON or text) of one request (see request)."""
        return self.request(method, path, body, timeout)[:2]

    def logtext(self):
        with open(self.log) as f:
            return f.read()

    def kill(self):
        self.p.kill()
        self.p.wait(timeout=30)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()


def long_call_reference(steps_per_call):
    """[{"calls", "step", "sum"}] that tests/integration/long_call answers after
    each call of steps_per_call (its recurrence, in Python)."""
    x, step, out = list(range(1024)), 0, []
    for c, steps in enumerate(steps_per_call, 1):
        for _ in range(steps):
            x = [(v * 1103515245 + 12345 + step) & 0xFFFFFFFF for v in x]
            step += 1
        out.append({"calls": c, "step": step, "sum": sum(x)})
    return out


def live_instances(inv, name):
    """The instances of name on an Invoker that have not exited (/system/logs)."""
    st, body = inv.call("GET", f"/system/logs?name={name}&tail=1")
    return [i for i in body.get("instances", []) if i.get("state") != "exited"] if st == 200 else []


def checkpoint_refused(prog, request, says, tmp, args=()):
    """A serving program (with args) under `phos-fn run --checkpointable`,
    after one request: `phos-fn checkpoint` must refuse it with a message
    holding says, write nothing, and leave it serving (a second request
    answered)."""
    name = os.path.basename(prog)
    p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", prog, *args],
                         stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fn_env())
    try:
        p.stdin.write(request + "\n")
        p.stdin.flush()
        first = p.stdout.readline()
        out = os.path.join(tmp, f"ck-{name}")
        c = subprocess.run([PHOS_FN, "checkpoint", "-o", out, str(p.pid)], capture_output=True, text=True,
                           timeout=300, env=fn_env())
        check(first.startswith("{") and c.returncode != 0 and says in c.stderr,
              f"{name}: the checkpoint is refused, saying '{says}': rc {c.returncode} {c.stderr[-1500:]} ({first})")
        check(not os.path.exists(out), f"{name}: a refused checkpoint wrote {out}")
        rest, err = p.communicate(input=request + "\n", timeout=300)
        check(p.returncode == 0 and rest.startswith("{"), f"{name} serves on after the refusal: rc {p.returncode} "
              f"{rest[-500:]} {err[-1500:]}")
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def ask(p, request):
    """Writes one request line to a serving process (a Popen with text pipes)
    and reads its one answer line within 60 s, as JSON ({"bad answer": ...}
    otherwise). Nothing is buffered ahead of the answer: select sees it."""
    p.stdin.write(request + "\n")
    p.stdin.flush()
    line = p.stdout.readline() if select.select([p.stdout], [], [], 60)[0] else "(no answer in 60 s)"
    try:
        return json.loads(line)
    except ValueError:
        return {"bad answer": line}


def checkpoint_while_running(prog, args, marker, tmp, what, pause=0.2, restore=("stw", "cow", "recopy"),
                             restore_env=None):
    """A program (with args) that prints a JSON line once it runs its loop and
    marker when it ends well, under `phos-fn run --checkpointable`:
    checkpointed in each mode, pause seconds apart, while it runs (issue 11).
    It must end well, and so must each checkpoint of the modes in restore,
    restored (with restore_env added to the environment). The restores'
    stderr, joined."""
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run")}
    p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", prog, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fn_env(run_env))
    outs = ""
    try:
        first = p.stdout.readline()
        check(first.startswith("{"), f"{what}: its first line: {first!r}")
        for mode in ("stw", "cow", "recopy"):
            time.sleep(pause)
            c = phos("checkpoint", "--mode", mode, "-o", os.path.join(tmp, f"ck-{mode}"), p.pid, extra_env=run_env,
                     timeout=120)
            check(c.returncode == 0, f"{what}: {mode} checkpoint: rc {c.returncode} {c.stderr[-1500:]}")
        outs, errs = p.communicate(timeout=300)
        outs += errs
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=60)
    check(p.returncode == 0 and marker in outs, f"{what}, checkpointed: rc {p.returncode} {outs[-2000:]}")
    errs = ""
    for mode in restore:
        ck = os.path.join(tmp, f"ck-{mode}")
        if os.path.exists(os.path.join(ck, "manifest.json")):
            r = phos("restore", "--device", DEVICE, ck, timeout=300, extra_env=restore_env)
            check(r.returncode == 0 and marker in r.stdout + r.stderr,
                  f"{what}, restored from its {mode} checkpoint: rc {r.returncode} {r.stderr[-2000:]}")
            errs += r.stderr
    return errs


def checkpoint_everywhere(prog, request, check_restored, tmp, args=(), modes=("stw", "cow", "recopy")):
    """A serving program (with args) under `phos-fn run --checkpointable`,
    after one request, checkpointed in each mode (issue 11), then killed; the
    checkpoint restored (stop-the-world) answers two more requests, which
    check_restored(answers, what) checks."""
    name = os.path.basename(prog)
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, f"run-{name}")}
    for mode in modes:
        out = os.path.join(tmp, f"ck-{name}-{mode}")
        p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", prog, *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=fn_env(run_env))
        try:
            p.stdin.write(request + "\n")
            p.stdin.flush()
            first = p.stdout.readline()
            c = subprocess.run([PHOS_FN, "checkpoint", "--mode", mode, "-o", out, str(p.pid)], capture_output=True,
                               text=True, timeout=300, env=fn_env(run_env))
            check(first.startswith("{") and c.returncode == 0,
                  f"{name}: checkpoint ({mode}): rc {c.returncode} {c.stderr[-1500:]} ({first})")
        finally:
            p.kill()
            p.communicate()
        if c.returncode != 0:
            continue
        r = subprocess.run([PHOS_FN, "restore", "--device", DEVICE, out], input=(request + "\n") * 2,
                           capture_output=True, text=True, timeout=300, env=fn_env())
        check(r.returncode == 0, f"{name}: restore of its checkpoint ({mode}): rc {r.returncode} {r.stderr[-1500:]}")
        check_restored(answers(r), f"restored from a checkpoint ({mode})")


def serve_everywhere(prog, stdin, check_answers, tmp, args=()):
    """A serving program's (with args) answers to stdin checked by
    check_answers(list, what): under phos-fn run, natively on a GPU, and
    after a snapshot at phos_fn_serve is restored, stop-the-world and on
    demand."""
    p = run(prog, *args, stdin=stdin)
    check(p.returncode == 0, f"{os.path.basename(prog)} under phos-fn: rc {p.returncode}\n{p.stderr[-3000:]}")
    check_answers(answers(p), "phos-fn run")
    if DEVICE == "cuda":
        n = subprocess.run([prog, *args], input=stdin, capture_output=True, text=True, timeout=300)
        check_answers([json.loads(line) for line in n.stdout.splitlines() if line.startswith("{")], "native")
    snap = os.path.join(tmp, "snap-" + os.path.basename(prog))
    p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", prog, *args)
    check(p.returncode == 0, f"snapshot: rc {p.returncode}: {p.stderr[-3000:]}")
    if p.returncode == 0:
        for mode in ([], ["--on-demand"]):
            r = phos("restore", "--device", DEVICE, *mode, snap, stdin=stdin)
            what = "restore " + (" ".join(mode) or "stop-the-world")
            check(r.returncode == 0, f"{what}: rc {r.returncode}: {r.stderr[-3000:]}")
            check_answers(answers(r), what)


def sh(*cmd, ok=True):
    """Runs a short command (30 s at most): its status; with ok, a failure raises RuntimeError."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError:   # no such program (the GPU machine has no `ip`)
        if ok:
            raise
        return 127
    if ok and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.returncode


class NetNamespaces:
    """Network namespaces as hosts: each key k in a namespace of its own held
    by a sleeping process (no `ip netns add`, whose bind mounts under
    /run/netns would show in every mount namespace made meanwhile: CRIU
    refuses to dump a function whose mount table has them), with one veth,
    eth0 at addrs[k]/24, whose other end ifs[k] is on the bridge `bridge` at
    NET.1 in this namespace (where the test's clients are). stale: a regex of
    the link names a killed run of the test may have left (one group).
    setup() raises RuntimeError, OSError or TimeoutExpired where they cannot
    be made (the caller skips); teardown() removes everything."""

    def __init__(self, bridge, ifs, net, addrs, stale):
        self.bridge, self.ifs, self.net, self.addrs, self.stale = bridge, ifs, net, addrs, stale
        self.holders = {}

    def cmd(self, k, *cmd):
        """cmd run in k's namespace."""
        return ["nsenter", f"--net=/proc/{self.holders[k].pid}/ns/net", *cmd]

    def setup(self):
        for tool in ("ip", "unshare", "nsenter"):
            if not shutil.which(tool):
                raise RuntimeError(f"no `{tool}` here")
        # links left by a run that was killed (same subnet: the routes would clash)
        for name in set(re.findall(self.stale, subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                                                               timeout=30).stdout)):
            sh("ip", "link", "del", name, ok=False)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for k, host_if in self.ifs.items():
            self.holders[k] = h = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
            for _ in range(100):   # until the holder is in its namespace
                if os.readlink(f"/proc/{h.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                    break
                time.sleep(0.02)
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", f"{host_if}p")
            sh("ip", "link", "set", f"{host_if}p", "netns", str(h.pid))
            sh("ip", "link", "set", host_if, "master", self.bridge)
            sh("ip", "link", "set", host_if, "up")
            sh(*self.cmd(k, "ip", "link", "set", f"{host_if}p", "name", "eth0"))
            sh(*self.cmd(k, "ip", "addr", "add", f"{self.addrs[k]}/24", "dev", "eth0"))
            sh(*self.cmd(k, "ip", "link", "set", "eth0", "up"))
            sh(*self.cmd(k, "ip", "link", "set", "lo", "up"))

    def teardown(self):
        for name in self.ifs.values():
            sh("ip", "link", "del", name, ok=False)
        sh("ip", "link", "del", self.bridge, ok=False)
        for p in self.holders.values():
            p.kill()
            p.wait()
