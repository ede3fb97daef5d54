# SPDX-License-Identifier: MIT
"""Faults of images and of functions, and how the invoker reports them
(issue 10, items 11 and 13), on the sim device:

- item 13: a handler that prints to stdout still answers 200 (its lines go to
  the instance's log); a response over 64 MiB is a 502 that says so, and the
  next call works; the function's content_type is the HTTP answer's; abort()
  in a call is a 502 naming SIGABRT; deploy failures name the program (not
  /usr/bin/env), abort() or exit() before phos_fn_serve is 422 naming
  SIGABRT / the status, a full disk (injected) is 507;
- item 11: a flipped byte in gpu.data gives 502 with "checksum mismatch" on
  every cold start (never the function's own CUDA error, never an answer), and
  a flipped byte in a CRIU page file of cpu/ is refused the same way before
  CRIU runs, and so is one in a __device__ variable's data (named); the
  intact snapshot, redeployed, answers again.
"""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness import BUILD, check, done, fn_env as env, free_port, own_mount, program, route_headers

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
FAULTY = program("tests", "integration", "image_faults")
STATEFUL = program("tests", "integration", "stateful")
WORDS = 1 << 20
WANT_SUM = sum((i * 2654435761) & 0xFFFFFFFF for i in range(WORDS))

tmp = tempfile.mkdtemp(prefix="phos-imgfaults-")
procs = []


STATES = {}  # port: the state dir of the invoker there (its admin.token)


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body, separators=(",", ":"))
    headers = route_headers(STATES.get(port), path)
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    ctype = r.getheader("Content-Type")
    c.close()
    try:
        return r.status, json.loads(data), ctype
    except ValueError:
        return r.status, data.decode(errors="replace"), ctype


def start(name, extra_env=None, args=(), cwd=None, wrap=()):
    port = free_port()
    log = open(os.path.join(tmp, f"{name}.log"), "w")
    STATES[port] = os.path.join(tmp, name)
    p = subprocess.Popen([*wrap, INVOKER, "--listen", f"127.0.0.1:{port}", "--state-dir", os.path.join(tmp, name),
                          "--device", "sim", *args], stdout=log, stderr=subprocess.STDOUT, env=env(extra_env),
                         cwd=cwd)
    procs.append(p)
    for _ in range(200):
        try:
            if request(port, "GET", "/healthz")[0] == 200:
                return p, port
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"phos-invoker did not start: {open(log.name).read()}")


def err(body):
    return body.get("error", "") if isinstance(body, dict) else str(body)


def wait_idle_zero(port, name):
    for _ in range(200):
        st, body, _ = request(port, "GET", f"/system/functions/{name}")
        if st == 200 and body.get("instances", {}).get("idle", 1) == 0 and \
                body.get("instances", {}).get("busy", 1) == 0:
            return True
        time.sleep(0.05)
    return False


def test_responses(port):
    st, body, _ = request(port, "POST", "/system/functions", {"name": "f", "program": FAULTY})
    check(st == 201, f"deploy: {st} {body}")
    st, body, _ = request(port, "POST", "/function/f", {"sum": True})
    check(st == 200 and body == {"sum": WANT_SUM}, f"sum: {st} {body}")
    st, body, _ = request(port, "POST", "/function/f", {"print": 500})
    check(st == 200 and body == {"printed": 500}, f"a handler that prints to stdout: {st} {body}")
    for _ in range(100):   # the log is read from the function's stderr pipe as it comes
        st, body, _ = request(port, "GET", "/system/logs?name=f&tail=1000")
        logs = json.dumps(body)
        if "a line the handler printed to stdout: 499" in logs:
            break
        time.sleep(0.05)
    check("a line the handler printed to stdout: 499" in logs, f"its stdout is in the log: {logs[-300:]}")
    st, body, ct = request(port, "POST", "/function/f", {"ctype": "text/plain"})
    check(st == 200 and body == "plain text 1" and ct == "text/plain", f"content_type honoured: {st} {body} {ct}")
    st, body, ct = request(port, "POST", "/function/f", {"ctype": "bad type\\r\\nX-Evil: 1"})
    check(st == 200 and ct == "application/json", f"a content_type that is no token is not used: {st} {ct}")
    st, body, _ = request(port, "POST", "/function/f", {"big": (64 << 20) + 1})
    check(st == 502 and "over the limit" in err(body) and str((64 << 20) + 1) in err(body),
          f"an oversized response: {st} {err(body)}")
    st, body, _ = request(port, "POST", "/function/f", {"big": 1 << 20})
    check(st == 200 and len(body) == 1 << 20, f"a 1 MiB response after it: {st} {len(body)}")
    st, body, _ = request(port, "POST", "/function/f", {"abort": True})
    check(st == 502 and "SIGABRT" in err(body) and "SIGSEGV" not in err(body), f"abort(): {st} {err(body)}")
    st, body, _ = request(port, "POST", "/function/f", {"sum": True})
    check(st == 200 and body == {"sum": WANT_SUM}, f"a call after the abort: {st} {body}")

    # deploy failures
    st, body, _ = request(port, "POST", "/system/functions",
                          {"name": "ab", "program": FAULTY, "env": {"IF_INIT": "abort"}})
    check(st == 422 and FAULTY in err(body) and "SIGABRT" in err(body) and "/usr/bin/env" not in err(body),
          f"abort() before phos_fn_serve: {st} {err(body)}")
    st, body, _ = request(port, "POST", "/system/functions",
                          {"name": "ex", "program": FAULTY, "env": {"IF_INIT": "exit"}})
    check(st == 422 and FAULTY in err(body) and "status 3" in err(body), f"exit(3) at init: {st} {err(body)}")
    st, body, _ = request(port, "GET", "/system/functions")
    check(st == 200 and [f["name"] for f in body] == ["f"], f"nothing else deployed: {body}")


def test_full_disk():
    inv, port = start("disk", {"PHOS_FAULT": "gpu_data_alloc"})
    st, body, _ = request(port, "POST", "/system/functions", {"name": "g", "program": FAULTY})
    check(st == 507 and "No space left" in err(body), f"a full disk at deploy: {st} {err(body)}")
    inv.terminate()
    inv.wait(timeout=60)


def test_executor_killed_mid_snapshot():
    """The snapshot's executor dies between its GPU dump and CRIU's: CRIU then
    saved the channel half-closed, and restoring such an image hung CRIU (a
    standby's park held the snapshot's lock, and a remove of the function
    stayed "being removed" behind it). The deploy must fail instead, and the
    name deploy, serve and go normally afterwards."""
    inv, port = start("exekill", {"PHOS_FAULT": "snapshot_executor_kill"})
    st, body, _ = request(port, "POST", "/system/functions", {"name": "k", "program": FAULTY})
    check(st >= 500 and "executor ended" in err(body) and "channel was cut" in err(body), f"deploy whose executor died mid-snapshot: {st} {err(body)}")
    check(request(port, "GET", "/system/functions/k")[0] == 404, "... not listed")
    st, body, _ = request(port, "POST", "/system/functions", {"name": "k", "program": FAULTY})
    check(st == 201, f"the next deploy of the name: {st} {body}")
    st, body, _ = request(port, "POST", "/function/k", {"sum": True})
    check(st == 200 and body.get("sum") == WANT_SUM, f"and it serves: {st} {body}")
    time.sleep(0.5)  # the reaper parks a standby of it meanwhile
    t = time.time()
    st, body, _ = request(port, "DELETE", "/system/functions/k", timeout=120)
    check(st == 200 and time.time() - t < 60, f"remove: {st} {body} in {time.time() - t:.1f} s")
    st, body, _ = request(port, "POST", "/system/functions", {"name": "k", "program": FAULTY})
    check(st == 201, f"deploy after the remove: {st} {body}")
    inv.terminate()
    inv.wait(timeout=60)


def test_leftover_proc_mount():
    """A dump whose parasite was killed between mounting a proc at
    "proc.crtools" in the function's working directory and unmounting it
    leaves that mount, and every later dump there failed (parasite: "Can't
    create a directory (-17)", "Can't get /proc fd"). The next dump clears
    it. Needs to mount a proc (root): skipped otherwise. The proc is mounted
    in a mount namespace of the invoker's own: a mount in ours would be in
    every function the other tests dump meanwhile (their mount namespaces
    follow ours), and their restores after it went failed ("mnt-v2: Can't
    stat mountpoint")."""
    cwd = os.path.join(tmp, "cwd-leftover")
    leftover = os.path.join(cwd, "proc.crtools")
    os.makedirs(leftover)
    if subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "proc", "proc", leftover],
                      capture_output=True).returncode != 0:
        print("leftover proc mount: cannot mount a proc here; part skipped", flush=True)
        return
    mount = own_mount("-t proc proc", leftover)
    inv, port = start("leftover", cwd=cwd, wrap=mount)
    check(leftover not in open("/proc/self/mountinfo").read(), "the leftover is the invoker's alone")
    st, body, _ = request(port, "POST", "/system/functions", {"name": "l", "program": FAULTY})
    check(st == 201, f"deploy over a leftover proc.crtools mount: {st} {err(body)}")
    mounted = [ln for ln in open(f"/proc/{inv.pid}/mountinfo") if leftover in ln]
    check(not mounted and not os.path.exists(leftover), f"the leftover is gone: {mounted}")
    inv.terminate()
    inv.wait(timeout=60)


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))


def test_corrupt_gpu_data(port, state):
    sdir = os.path.join(state, "snapshots", "f")
    m = json.load(open(os.path.join(sdir, "manifest.json")))
    big = max(m["buffers"], key=lambda b: b["size"])
    request(port, "DELETE", "/system/functions/f")   # nothing warm
    st, body, _ = request(port, "POST", "/system/functions", {"name": "f", "program": FAULTY})
    check(st == 201, f"redeploy: {st} {body}")
    m = json.load(open(os.path.join(sdir, "manifest.json")))
    big = max(m["buffers"], key=lambda b: b["size"])
    flip(os.path.join(sdir, "gpu.data"), big["offset"] + big["size"] // 2)
    statuses = []
    for i in range(7):
        check(wait_idle_zero(port, "f"), "no instance left before the cold start")
        st, body, h = request(port, "POST", "/function/f", {"sum": True})
        statuses.append(st)
        check(st == 502 and "checksum mismatch" in err(body), f"cold start {i} from a corrupt gpu.data: {st} {body}")
        check(not (isinstance(body, dict) and "sum" in body), f"an answer from corrupt data: {body}")
    print("corrupt gpu.data:", statuses, flush=True)


def test_corrupt_variable(port, state):
    """A flipped byte in a __device__ variable's data (stateful's dev_scale),
    which the restore fills apart from the buffers, once its module is loaded:
    the same 502 and checksum mismatch, naming the variable."""
    st, body, _ = request(port, "POST", "/system/functions", {"name": "v", "program": STATEFUL})
    check(st == 201, f"deploy stateful: {st} {body}")
    sdir = os.path.join(state, "snapshots", "v")
    m = json.load(open(os.path.join(sdir, "manifest.json")))
    var = [v for v in m.get("variables", []) if v.get("name") == "dev_scale" and v.get("size")]
    if not check(var, f"stateful's dev_scale in the manifest: {m.get('variables')}"):
        return
    flip(os.path.join(sdir, "gpu.data"), var[0]["offset"])
    for i in range(2):
        check(wait_idle_zero(port, "v"), "no instance left before the cold start")
        st, body, _ = request(port, "POST", "/function/v", {})
        check(st == 502 and "checksum mismatch" in err(body) and "dev_scale" in err(body),
              f"cold start {i} from a corrupt variable: {st} {body}")
    request(port, "DELETE", "/system/functions/v")


def test_corrupt_cpu(port, state):
    request(port, "DELETE", "/system/functions/f")
    st, body, _ = request(port, "POST", "/system/functions", {"name": "f", "program": FAULTY})
    check(st == 201, f"redeploy: {st} {body}")
    sdir = os.path.join(state, "snapshots", "f")
    m = json.load(open(os.path.join(sdir, "manifest.json")))
    files = {f["name"]: f for f in m["cpu"].get("files", [])}
    check(m["version"]["minor"] >= 1 and any(n.startswith("pages-") for n in files),
          f"cpu/ files are checksummed in the manifest: {m['version']} {sorted(files)}")
    pages = [n for n in files if n.startswith("pages-") and files[n]["size"] > 0]
    if not check(pages, "a CRIU page file"):
        return
    flip(os.path.join(sdir, "cpu", pages[0]), files[pages[0]]["size"] // 2)
    for i in range(3):
        check(wait_idle_zero(port, "f"), "no instance left before the cold start")
        st, body, _ = request(port, "POST", "/function/f", {"sum": True})
        check(st == 502 and "checksum mismatch" in err(body) and pages[0] in err(body),
              f"cold start {i} from a corrupt cpu/{pages[0]}: {st} {body}")


def main():
    state = os.path.join(tmp, "main")
    # no standby: every cold start restores from the files (a parked process
    # was verified when it was parked, before the corruption)
    inv, port = start("main", args=["--standby", "0"])
    test_responses(port)
    test_full_disk()
    test_executor_killed_mid_snapshot()
    test_leftover_proc_mount()
    test_corrupt_gpu_data(port, state)
    test_corrupt_variable(port, state)
    test_corrupt_cpu(port, state)
    inv.terminate()
    check(inv.wait(timeout=60) == 0, "the invoker stopped cleanly")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not os.environ.get("PHOS_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
done("image_faults")
