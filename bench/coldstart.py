# SPDX-License-Identifier: MIT
"""Cold start of the example function `mlp` over HTTP, phos-fn side by side
with the baselines, in one run on the GPU machine (issue 4). Latency is from
sending the HTTP request to receiving its whole response, for

  native           a fresh native mlp process: start, CUDA context, weights read
                   from a file on disk (--weights-file), then the request
  driver-api+criu  `criu restore` of a native mlp checkpointed with the NVIDIA
                   driver checkpoint API, cuCheckpointProcessRestore + Unlock,
                   then the request (bench/ckpt_baseline)
  phos-stw         phos-invoker --restore stop-the-world (pooled executor)
  phos-ondemand    phos-invoker --restore on-demand (pooled executor, buffers
                   streaming in behind the function, the CPU side restored
                   ahead: a parked standby process, --standby 1)
  phos-ondemand-criu-on-path   the same with --standby 0 (CRIU on the path)
  limit            bytes the request touches / pinned H2D bandwidth, measured
                   in the same run (bench/bandwidth)

for 1, 4 and 16 GiB of weights, each with the image in the page cache
("pagecache": for phos the invoker's hot snapshots, pinned by the pooled
executors ahead of use) and with the image's files evicted ("dropped":
POSIX_FADV_DONTNEED on every file of the snapshot, the CRIU image, the weights
file; phos runs with --hot-bytes 0, since pinned pages cannot be evicted;
binaries and libraries stay cached for everybody). The baselines' HTTP front
is a small server in this script that starts or restores the process for each
request; phos is phos-invoker itself. A warm call follows each cold one
(phos: the same instance; native: the same process) so that the overhead of a
warm invocation over the function's own time can be read off.

Every answer is checked against the native process's answer.

Writes bench/results/<name>.json (records {"bench","case","system","metric",
"value","unit","device","date"}), <name>.checks.json, <name>.png; copies them
to $OUT.

usage: python3 bench/coldstart.py BUILD_DIR [--sizes 1,4,16] [--systems baseline,phos]
         [--reps N] [--workdir DIR] [--name coldstart]
"""
import argparse
import ctypes
import datetime
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import snapshot as S  # noqa: E402  (process helpers shared with the snapshot benchmark)

RESULTS = os.path.join(HERE, "results")
OUT = os.environ.get("OUT")
DATE = datetime.date.today().isoformat()
GIB = 1 << 30
REQUEST = {"batch": 8, "seed": 1, "check": False}
PR_SET_CHILD_SUBREAPER = 36

records, checks = [], []
A = None
DEVICE = "unknown"
BW = {}


T0 = time.time()


def log(msg):
    if msg.startswith("=="):
        msg = f"{msg}  [{time.time() - T0:.0f} s]"
    print(msg, flush=True)


def record(case, system, metric, value, unit):
    records.append({"bench": BENCH, "case": case, "system": system, "metric": metric,
                    "value": value, "unit": unit, "device": DEVICE, "date": DATE})
    v = f"{value:12.4f}" if isinstance(value, (int, float)) else str(value)
    log(f"  {case:20s} {system:16s} {metric:30s} {v} {unit}")


def check(name, ok, detail=""):
    if isinstance(detail, bytes):
        detail = detail.decode(errors="replace")
    checks.append({"check": name, "ok": bool(ok), "detail": str(detail)})
    log(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}")


def error(case, system, step, msg):
    record(case, system, "error", f"{step}: {msg}"[-4000:], "")
    checks.append({"check": f"{case} {system} {step}", "ok": False, "detail": str(msg)[-4000:]})


def evict(*paths):
    """Drops the files under paths from the page cache (they must not be pinned)."""
    os.sync()
    n = 0
    for p in paths:
        walk = [(p, [], [""])] if os.path.isfile(p) else os.walk(p)
        for root, _, files in walk:
            for name in files:
                f = os.path.join(root, name) if name else root
                try:
                    fd = os.open(f, os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    n += 1
                finally:
                    os.close(fd)
    return n


def keep_log(inv, name):
    """Keeps an invoker's log for the archive that goes to $OUT at the end."""
    d = os.path.join(A.workdir, "logs")
    os.makedirs(d, exist_ok=True)
    inv.log.flush()
    shutil.copy(inv.log.name, os.path.join(d, f"invoker-{name}.log"))


def disk_read_gbs(path, limit_bytes=4 * GIB, threads=32, chunk=4 << 20):
    """O_DIRECT read bandwidth of path (evicted first), threads x chunk in flight: the disk's
    limit for a cold image, measured in the same run."""
    import mmap
    evict(path)
    size = min(os.path.getsize(path), limit_bytes) // chunk * chunk
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    nxt = [0]
    lock = threading.Lock()

    def reader():
        buf = mmap.mmap(-1, chunk)  # page aligned, as O_DIRECT wants
        while True:
            with lock:
                off = nxt[0]
                nxt[0] += chunk
            if off >= size:
                break
            os.preadv(fd, [buf], off)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=reader) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    os.close(fd)
    return size / dt / 1e9


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


TOKENS = {}  # port: the admin token of the invoker there (its STATE/admin.token)


def call(port, method, path, body=None, timeout=900):
    """(status, body bytes, headers, seconds from sending the request to the end of the response)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    headers = {"Content-Type": "application/json"}
    if (path.startswith("/system/") or path == "/metrics") and port in TOKENS:
        headers["Authorization"] = "Bearer " + TOKENS[port]
    t0 = time.perf_counter()
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, data, hdrs, dt


# ---- the baselines' HTTP front ---------------------------------------------

class Front:
    """POST /<what>: runs self.handlers[what](body) -> (status, body); one request at a time."""

    def __init__(self):
        self.handlers = {}
        front = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                fn = front.handlers.get(self.path.strip("/"))
                try:
                    st, out = fn(body) if fn else (404, b'{"error":"no such route"}')
                except Exception as e:  # noqa: BLE001 - reported to the client and the log
                    st, out = 500, json.dumps({"error": str(e)[-2000:]}).encode()
                self.send_response(st)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.srv = http.server.HTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()


def mlp_argv(size):
    return [os.path.join(A.build, "functions", "examples", "mlp"), "--weights-mib", str(size * A.unit_mib)]


# The function measured: its name in case names, and its argv for a size in GiB
# (it takes --save-weights F and --weights-file F). bench/torch_coldstart.py
# sets these to its PyTorch function before main().
BENCH = "coldstart"
FN = "mlp"
fn_argv = mlp_argv  # noqa: E305
# The targets: >= 20x the driver API at TARGET_GIB (and NATIVE_SPEEDUP x the
# native cold start, when set); a warm call adds <= WARM_ADDED_S to the
# native one (or, WARM_RATIO set, takes at most that times the native one).
TARGET_GIB = 16
DEFAULT_SIZES = "1,4,16"
NATIVE_SPEEDUP = None
# Whether the first response is what the targets judge (False where a request
# does much after its first result, as llm_coldstart's 32 tokens: its own
# targets are on the first token)
RESPONSE_TARGETS = True
WARM_ADDED_S = 0.001
WARM_RATIO = None
# cold_metrics(body, seconds) -> {metric: value} for each cold answer, their
# medians recorded beside first_response_s (bench/llm_coldstart.py: the time
# to the first and the 32nd token).
cold_metrics = None


def native_argv(argv):
    """A native process; with --sim (a dry run of this script without a GPU), the
    same program under phos-fn run on the sim device."""
    if not A.sim:
        return argv
    return [os.path.join(A.build, "invoker", "phos-fn"), "run", "--device", "sim", "--", *argv]


class NativeCold:
    """/native: a fresh native mlp per request, weights from the file. Keeps the
    process for one warm request afterwards (/native-warm)."""

    def __init__(self, size, weights):
        self.argv = native_argv(fn_argv(size) + ["--weights-file", weights])
        self.p = None

    def cold(self, body):
        self.close()
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=S.native_env())
        return self.ask(body)

    def ask(self, body):
        self.p.stdin.write(body.strip() + b"\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            return 500, json.dumps({"error": self.p.stderr.read()[-2000:].decode(errors="replace")}).encode()
        return 200, line.strip()

    def close(self):
        if self.p:
            self.p.kill()
            self.p.wait()
            self.p = None


class CriuCold:
    """/criu: criu restore + driver restore/unlock of a checkpointed native mlp per
    request; its stdout/stderr files are put back as they were at the dump first
    (CRIU checks their size)."""

    def __init__(self, size, work):
        self.work = work
        self.img = os.path.join(work, "img")
        self.fn = None
        self.dumped = None
        self.saved = {}
        self.size = size

    def prepare(self, case, timeout):
        criu = S.find_criu()
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.img)
        self.fn = S.Native(self.work, fn_argv(self.size))
        line, t_init = self.fn.ask(REQUEST, timeout)
        ans = S.answer(line)
        if not (ans and ans.get("ok")):
            raise S.StepError(f"native {FN} answered {line[:300]}")
        S.ckpt("lock,checkpoint", self.fn.pid, timeout)
        for extra in ([], ["--ext-unix-sk", "--link-remap", "--file-locks"]):
            shutil.rmtree(self.img, ignore_errors=True)
            os.makedirs(self.img)
            rc, t_dump, out, err = S.sh([criu, "dump", "-t", self.fn.pid, "-D", self.img, "--shell-job",
                                         "-o", "dump.log", *extra], timeout)
            if rc == 0:
                self.dumped = extra
                break
            if not self.fn.alive():
                break
        if self.dumped is None:
            raise S.StepError(f"criu dump failed: {S.criu_errors(os.path.join(self.img, 'dump.log'))}")
        self.fn.reap_dumped()
        for f in (self.fn.out, self.fn.err):
            with open(f, "rb") as fh:
                self.saved[f] = fh.read()
        self.lines0 = self.fn.lines
        return ans

    def cold(self, body):
        criu = S.find_criu()
        self.kill()
        for f, data in self.saved.items():
            with open(f, "wb") as fh:
                fh.write(data)
        self.fn.lines = self.lines0
        pidfile = os.path.join(self.work, "restored.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        rc, _, out, err = S.sh([criu, "restore", "-D", self.img, "--shell-job", "-d", "--pidfile", pidfile,
                                "-o", "restore.log", *self.dumped], 600)
        if rc != 0:
            return 500, json.dumps({"error": f"criu restore: {S.criu_errors(os.path.join(self.img, 'restore.log'))}"}).encode()
        with open(pidfile) as f:
            self.fn.pid = int(f.read().strip())
        self.fn.restored = True
        S.ckpt("restore,unlock", self.fn.pid, 600)
        line, _ = self.fn.ask(json.loads(body), 600)
        return 200, line.strip().encode()

    def warm(self, body):
        line, _ = self.fn.ask(json.loads(body), 600)
        return 200, line.strip().encode()

    def kill(self):
        if self.fn and self.fn.restored:
            try:
                os.kill(self.fn.pid, 9)
            except ProcessLookupError:
                pass
            S.reap(self.fn.pid)
            self.fn.restored = False

    def close(self):
        self.kill()
        if self.fn:
            try:
                os.close(self.fn.wfd)
            except OSError:
                pass


# ---- phos -----------------------------------------------------------------

class Invoker:
    def __init__(self, state, extra, binary=None):
        self.port = free_port()
        self.log = open(os.path.join(A.workdir, f"invoker-{self.port}.log"), "w")
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.setdefault("PHOS_LOG", "info")
        if os.environ.get("PHOS_BENCH_TRACE"):   # the executors' timelines, into the logs archive
            os.makedirs(os.path.join(A.workdir, "logs"), exist_ok=True)
            env["PHOS_TRACE"] = os.path.join(A.workdir, "logs", f"trace-{self.port}-%p.jsonl")
        self.p = subprocess.Popen([binary or os.path.join(A.build, "invoker", "phos-invoker"), "--listen",
                                   f"127.0.0.1:{self.port}", "--state-dir", state, "--device", A.device, *extra],
                                  stdout=self.log, stderr=subprocess.STDOUT, env=env)
        for _ in range(600):
            try:
                if call(self.port, "GET", "/healthz", timeout=5)[0] == 200:
                    tok = os.path.join(state, "admin.token")
                    if os.path.exists(tok):    # invokers before the admin token had none
                        with open(tok) as f:
                            TOKENS[self.port] = f.read().strip()
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise S.StepError(f"phos-invoker did not start: {S.tail(self.log.name)}")

    def metric(self, name):
        _, body, _, _ = call(self.port, "GET", "/metrics")
        for ln in body.decode().splitlines():
            if ln.startswith(name + " ") or ln.startswith(name + "{"):
                yield ln

    def settled(self, fname, timeout=600, standby=True):
        """Waits until f has no instance, the pool is idle with the current hot list, and
        (standby) f has its parked process."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, body, _, _ = call(self.port, "GET", f"/system/functions/{fname}")
            inst = json.loads(body).get("instances", {}) if st == 200 else {}
            pend = [ln for ln in self.metric("phos_pool_hot_pending")]
            idle = [ln for ln in self.metric("phos_pool_executors") if 'state="idle"' in ln]
            starting = [ln for ln in self.metric("phos_pool_executors")
                        if 'state="starting"' in ln or 'state="busy"' in ln]
            sb = [ln for ln in self.metric("phos_standby_processes") if f'"{fname}"' in ln]
            # no pooled executor starting or busy (still scrubbing after the last
            # instance): every pool, the one over several GPUs too, is warm
            if (sum(inst.values()) == 0 and pend and pend[0].split()[-1] == "0" and idle
                    and int(idle[0].split()[-1]) >= 1 and all(ln.split()[-1] == "0" for ln in starting)
                    and (not standby or (sb and sb[0].split()[-1] == "1"))):
                return
            time.sleep(0.05)
        raise S.StepError(f"the invoker did not settle: {S.tail(self.log.name)}")

    def matches(self, pattern):
        """The groups, as floats, of every line of the log that matches pattern, in order."""
        import re
        with open(self.log.name, errors="replace") as f:
            return [[float(g) for g in m.groups()] for m in map(re.compile(pattern).search, f) if m]

    def phases(self):
        """(CRIU s, executor s, GPU data s, GPU bytes) of every restore the invoker logged."""
        return [(criu / 1e3, ex / 1e3, data / 1e3, mib * (1 << 20)) for criu, ex, data, mib in
                self.matches(r"restored in [0-9.]+ ms \(.*?; CRIU ([0-9.]+) ms.*?, executor ([0-9.]+) ms "
                             r"of which GPU data ([0-9.]+) ms; ([0-9.]+) MiB")]

    def zeros(self):
        """The bytes of zeros each restore set on the device instead of copying
        (ctxpool/restore/engine.c: a hot snapshot's zero chunks), in order."""
        return [mib * (1 << 20) for mib, in
                self.matches(r"restore engine: .*, ([0-9.]+) MiB of it zeros set on the device")]

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


# ---- one size ---------------------------------------------------------------

def measure(case, system, cold, warm, want, reps, warmup=False):
    """cold()/warm() -> (status, body, headers, seconds); records the median cold latency and the
    median of A.warm_calls warm calls after each cold one (after one cold start that is recorded
    apart when warmup: the first after a start)."""
    colds, warms, parts, runs, extra = [], [], [], [], {}
    if warmup:
        st, body, hdrs, dt = cold()
        if st == 200:
            record(case, system, "first_cold_after_start_s", dt, "s")
        warm()
    for i in range(reps):
        st, body, hdrs, dt = cold()
        got = S.answer(body)
        ok = st == 200 and got == want
        check(f"{case} {system} cold #{i + 1} answers as the native process", ok,
              "" if ok else f"{st} {body[:300]!r}")
        if hdrs.get("x-cold-start") not in (None, "true"):
            check(f"{case} {system} cold #{i + 1} was a cold start", False, str(hdrs))
        if not ok:
            return None
        colds.append(dt)
        if cold_metrics:
            for k, v in cold_metrics(body, dt).items():
                extra.setdefault(k, []).append(v)
        if "x-restore-ms" in hdrs:
            parts.append((float(hdrs["x-restore-ms"]) / 1e3, float(hdrs.get("x-run-ms", 0)) / 1e3))
        for _ in range(A.warm_calls):
            st, body, hdrs, dt = warm()
            if st == 200 and S.answer(body) == want:
                warms.append(dt)
                try:   # the function's own time for the request, when it says (torch_mlp: run_ms)
                    runs.append(float(json.loads(body)["run_ms"]) / 1e3)
                except (ValueError, KeyError, TypeError):
                    pass
    colds.sort()
    record(case, system, "first_response_s", colds[len(colds) // 2], "s")
    if reps > 1:
        record(case, system, "first_response_min_s", colds[0], "s")
    for k, vs in extra.items():
        vs.sort()
        record(case, system, k, vs[len(vs) // 2], "s")
    if parts:
        parts.sort()
        record(case, system, "restore_until_running_s", parts[len(parts) // 2][0], "s")
        record(case, system, "first_run_s", parts[len(parts) // 2][1], "s")
    if warms:
        warms.sort()
        record(case, system, "warm_response_s", warms[len(warms) // 2], "s")
    if runs:
        runs.sort()
        record(case, system, "warm_run_s", runs[len(runs) // 2], "s")
    return colds[len(colds) // 2]


def run_size(size, front):
    work = os.path.join(A.workdir, f"{FN}-{size}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    weights = os.path.join(work, "weights.bin")
    timeout = 300 + 60 * size
    got = {}

    log(f"== {FN} {size} GiB: weights file")
    rc, t, out, err = S.sh(native_argv(fn_argv(size) + ["--save-weights", weights]), timeout,
                           env=S.native_env(), stdin_data="")
    if rc != 0:
        error(f"{FN}-{size}GiB", "native", "save weights", err[-2000:])
        return
    want = None
    try:
        BW["disk_read_gbs"] = disk_read_gbs(weights)
        record(f"{FN}-{size}GiB-dropped", "limit", "disk_read_odirect", BW["disk_read_gbs"], "GB/s")
    except OSError as e:
        error(f"{FN}-{size}GiB-dropped", "limit", "disk read", str(e))

    # native: the reference answer too
    nat = NativeCold(size, weights)
    front.handlers["native"] = nat.cold
    front.handlers["native-warm"] = nat.ask
    # native always runs: its answer is the reference
    for cache in A.caches:
        case = f"{FN}-{size}GiB-{cache}"
        if cache == "pagecache":
            st, body, _, _ = call(front.port, "POST", "/native", REQUEST)  # fills the page cache
            want = S.answer(body)
            check(f"{FN} {size} GiB native answers", st == 200 and want and want.get("ok"), body[:300])
            if not (want and want.get("ok")):
                nat.close()
                return

        def cold(cache=cache):
            if cache == "dropped":
                evict(weights)
            return call(front.port, "POST", "/native", REQUEST)

        got[("native", cache)] = measure(case, "native", cold,
                                         lambda: call(front.port, "POST", "/native-warm", REQUEST), want,
                                         A.reps if cache == "pagecache" else 1)
    nat.close()
    os.unlink(weights)  # disk: the weights, the CRIU image and the snapshot are never there together

    # driver API + CRIU
    if "baseline" in A.systems:
        cr = CriuCold(size, os.path.join(work, "criu"))
        front.handlers["criu"] = cr.cold
        front.handlers["criu-warm"] = cr.warm
        try:
            log(f"== {FN} {size} GiB: driver-api+criu checkpoint")
            before = cr.prepare(f"{FN}-{size}GiB", timeout)
            check(f"{FN} {size} GiB baseline process answers as native", before == want, str(before)[:300])
            for cache in A.caches:
                case = f"{FN}-{size}GiB-{cache}"

                def cold(cache=cache):
                    cr.kill()
                    if cache == "dropped":
                        evict(cr.img)
                    return call(front.port, "POST", "/criu", REQUEST)

                if cache == "pagecache":  # a first restore reads the image into the page cache
                    cold()
                got[("driver-api+criu", cache)] = measure(case, "driver-api+criu", cold,
                                                          lambda: call(front.port, "POST", "/criu-warm", REQUEST),
                                                          want, 1)
        except S.StepError as e:
            error(f"{FN}-{size}GiB", "driver-api+criu", "run", str(e))
        finally:
            cr.close()
            shutil.rmtree(cr.work, ignore_errors=True)

    # phos
    if "phos" in A.systems:
        state = os.path.join(work, "phos-state")
        fname = f"{FN.replace('_', '')}{size}"
        inv = None
        try:
            log(f"== {FN} {size} GiB: phos deploy (snapshot) and the call that records the prefetch order")
            inv = Invoker(state, [])
            t0 = time.perf_counter()
            st, body, _, _ = call(inv.port, "POST", "/system/functions",
                                  {"name": fname, "program": fn_argv(size)[0], "args": fn_argv(size)[1:],
                                   "device": A.device, "limits": {"idle_ms": 1000, "timeout_ms": 900000}})
            if st != 201:
                raise S.StepError(f"deploy: {st} {body[:1000]!r}")
            record(f"{FN}-{size}GiB", "phos-ondemand", "deploy_with_snapshot_s", time.perf_counter() - t0, "s")
            inv.settled(fname)
            st, body, hdrs, dt = call(inv.port, "POST", f"/function/{fname}", REQUEST)
            check(f"{FN} {size} GiB phos first call answers as native", st == 200 and S.answer(body) == want,
                  f"{st} {body[:300]!r}")
            snap = os.path.join(state, "snapshots", fname)
            # the touch order is written after the answer: wait for it
            for _ in range(200):
                with open(os.path.join(snap, "manifest.json")) as f:
                    man = json.load(f)
                if man.get("prefetch"):
                    break
                time.sleep(0.05)
            check(f"{FN} {size} GiB: the first call's touch order is written", bool(man.get("prefetch")),
                  "no prefetch in the manifest 10 s after the answer")
            sizes = {b["id"]: b["size"] for b in man["buffers"]}
            touched = sum(sizes.get(i, 0) for i in man.get("prefetch", []))
            record(f"{FN}-{size}GiB", "phos-ondemand", "touched_bytes", touched, "B")
            record(f"{FN}-{size}GiB", "phos-ondemand", "snapshot_gpu_bytes", man.get("gpu_bytes", 0), "B")
            inv.stop()
            inv = None
            for cache in A.caches:
                case = f"{FN}-{size}GiB-{cache}"
                lim = touched / (BW["h2d_pinned_gbs"] * 1e9) if BW.get("h2d_pinned_gbs") else None
                if lim:
                    record(case, "limit", "touched_over_h2d_s", lim, "s")
                if cache == "dropped" and BW.get("disk_read_gbs"):
                    # a cold image cannot arrive faster than the disk reads it
                    record(case, "limit", "touched_over_disk_s", touched / (BW["disk_read_gbs"] * 1e9), "s")
                configs = [("phos-stw", "stop-the-world", True), ("phos-ondemand", "on-demand", True)]
                if cache == "pagecache":  # what the standby process saves: CRIU on the path
                    configs.append(("phos-ondemand-criu-on-path", "on-demand", False))
                for system, mode, standby in configs:
                    extra = ["--restore", mode, "--standby", "1" if standby else "0"] + \
                        (["--hot-bytes", "0"] if cache == "dropped" else [])
                    inv = Invoker(state, extra)

                    def cold(cache=cache, inv=inv, standby=standby):
                        inv.settled(fname, standby=standby)
                        if cache == "dropped":
                            evict(snap)
                        return call(inv.port, "POST", f"/function/{fname}", REQUEST, timeout=A.call_timeout)

                    inv_now = inv
                    got[(system, cache)] = measure(case, system, cold,
                                                   lambda inv=inv: call(inv.port, "POST", f"/function/{fname}",
                                                                        REQUEST, timeout=A.call_timeout),
                                                   want, A.reps if cache == "pagecache" else 1, warmup=True)
                    ph = inv_now.phases()[1:]  # without the warm-up
                    zs = inv_now.zeros()[1:]
                    zero = sorted(zs)[len(zs) // 2] if zs else 0.0
                    if zs:
                        record(case, system, "zeros_set_bytes", zero, "B")
                    if ph:
                        def med(k):
                            return sorted(p[k] for p in ph)[len(ph) // 2]
                        record(case, system, "criu_restore_s", med(0), "s")
                        record(case, system, "executor_restore_s", med(1), "s")
                        if mode == "stop-the-world" and med(2) > 0:
                            # stop-the-world: every byte lands before the function runs (the
                            # rate over the bytes that crossed the bus: zeros are set on the device)
                            rate = max(med(3) - zero, 0.0) / med(2) / 1e9
                            record(case, system, "gpu_data_rate", rate, "GB/s")
                            if BW.get("h2d_pinned_gbs"):
                                record(case, system, "gpu_data_rate_over_h2d", rate / BW["h2d_pinned_gbs"], "x")
                                if cache == "pagecache":
                                    check(f"{case}: stop-the-world restore moves GPU data at {rate:.1f} GB/s "
                                          f">= 80% of pinned H2D ({BW['h2d_pinned_gbs']:.1f} GB/s)",
                                          rate >= 0.8 * BW["h2d_pinned_gbs"])
                    keep_log(inv_now, f"{FN}{size}-{cache}-{system}")
                    inv.stop()
                    inv = None
        except (S.StepError, OSError, ValueError) as e:
            error(f"{FN}-{size}GiB", "phos", "run", str(e))
            if inv and OUT:  # what the invoker and its executors said
                shutil.copy(inv.log.name, os.path.join(OUT, f"invoker-{FN}{size}-failed.log"))
        finally:
            if inv:
                inv.stop()

    # ratios and targets
    for cache in A.caches:
        case = f"{FN}-{size}GiB-{cache}"
        base = got.get(("driver-api+criu", cache))
        for system in ("phos-stw", "phos-ondemand", "native"):
            v = got.get((system, cache))
            if v and base:
                record(case, system, "speedup_vs_driver_api", base / v, "x")
        v = got.get(("phos-ondemand", cache))
        lim = [r["value"] for r in records if r["case"] == case and r["metric"] == "touched_over_h2d_s"]
        dlim = [r["value"] for r in records if r["case"] == case and r["metric"] == "touched_over_disk_s"]
        if v and dlim:
            record(case, "phos-ondemand", "first_response_over_disk_limit", v / dlim[0], "x")
        if v and lim:
            target = 1.2 * lim[0] + 0.015
            record(case, "phos-ondemand", "first_response_over_limit", v / lim[0], "x")
            if cache == "pagecache" and RESPONSE_TARGETS:
                check(f"{case}: on-demand first response {v:.3f} s <= 1.2 x touched/H2D + 15 ms = {target:.3f} s",
                      v <= target)
        if v and base and cache == "pagecache" and size == TARGET_GIB and RESPONSE_TARGETS:
            check(f"{case}: on-demand >= 20x faster than driver-api+criu ({base / v:.1f}x)", base / v >= 20)
        nat = got.get(("native", cache))
        if v and nat:
            record(case, "phos-ondemand", "speedup_vs_native", nat / v, "x")
            if NATIVE_SPEEDUP and cache == "pagecache" and size == TARGET_GIB:
                check(f"{case}: on-demand >= {NATIVE_SPEEDUP}x faster than the native cold start ({nat / v:.1f}x)",
                      nat / v >= NATIVE_SPEEDUP)
    nat_warm = [r["value"] for r in records if r["case"] == f"{FN}-{size}GiB-pagecache"
                and r["system"] == "native" and r["metric"] == "warm_response_s"]
    nat_run = [r["value"] for r in records if r["case"] == f"{FN}-{size}GiB-pagecache"
               and r["system"] == "native" and r["metric"] == "warm_run_s"]
    for system in ("phos-ondemand", "phos-stw"):
        w = [r["value"] for r in records if r["case"] == f"{FN}-{size}GiB-pagecache"
             and r["system"] == system and r["metric"] == "warm_response_s"]
        wr = [r["value"] for r in records if r["case"] == f"{FN}-{size}GiB-pagecache"
              and r["system"] == system and r["metric"] == "warm_run_s"]
        if wr and nat_run:
            # the function's own time for a warm request: forwarding, without either HTTP front
            record(f"{FN}-{size}GiB-pagecache", system, "warm_run_over_native", wr[0] / nat_run[0], "x")
            if system == "phos-ondemand" and WARM_RATIO:
                check(f"{FN} {size} GiB: a warm request's own time is {wr[0] / nat_run[0]:.3f}x the native "
                      f"one ({1e3 * wr[0]:.2f} ms, <= {WARM_RATIO}x)", wr[0] / nat_run[0] <= WARM_RATIO)
        if w and nat_warm:
            record(f"{FN}-{size}GiB-pagecache", system, "warm_added_over_native_s", w[0] - nat_warm[0], "s")
            record(f"{FN}-{size}GiB-pagecache", system, "warm_over_native", w[0] / nat_warm[0], "x")
            if WARM_RATIO:
                pass   # judged on the function's own time above; over HTTP the two fronts differ
            elif system == "phos-ondemand":
                check(f"{FN} {size} GiB: a warm invocation adds {1e3 * (w[0] - nat_warm[0]):.2f} ms "
                      "(HTTP + forwarding) to the native function's time (<= 1 ms)", w[0] - nat_warm[0] <= 0.001)
    if not A.keep_files:
        shutil.rmtree(work, ignore_errors=True)


# ---- chart ------------------------------------------------------------------

# What the chart shows (bench/llm_coldstart.py: the time to the first token,
# against the weights over pinned H2D)
CHART_METRIC = "first_response_s"
CHART_YLABEL = "HTTP request to response (s)"
CHART_LIMITS = (("touched_over_h2d_s", "k_", "touched bytes / pinned H2D"),
                ("touched_over_disk_s", "r_", "touched bytes / O_DIRECT disk read"))


def chart(path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(no matplotlib: no chart)")
        return
    get = {(r["case"], r["system"], r["metric"]): r["value"] for r in records}
    systems = [("native", "#c84"), ("driver-api+criu", "#888"), ("phos-stw", "#7bd"), ("phos-ondemand", "#2a7")]
    fig, axes = plt.subplots(1, len(A.caches), figsize=(6.5 * len(A.caches), 4.8), squeeze=False)
    axes = axes[0]
    w = 0.2
    for ax, cache in zip(axes, A.caches):
        cases = [f"{FN}-{s}GiB-{cache}" for s in A.sizes]
        for i, (system, color) in enumerate(systems):
            xs = [k + (i - 1.5) * w for k in range(len(cases))]
            vals = [get.get((c, system, CHART_METRIC)) for c in cases]
            ok = [(x, v) for x, v in zip(xs, vals) if isinstance(v, (int, float))]
            ax.bar([x for x, _ in ok], [v for _, v in ok], w, color=color, label=system)
            for x, v in ok:
                ax.annotate(f"{v:.2g}", (x, v), ha="center", va="bottom", fontsize=7)
        for metric, style, label in CHART_LIMITS:
            lim = [get.get((c, "limit", metric)) for c in cases]
            if any(isinstance(v, (int, float)) for v in lim):
                ax.plot(range(len(cases)), [v if isinstance(v, (int, float)) else float("nan") for v in lim],
                        style, ms=50, mew=2, label=label)
        ax.legend(fontsize=8, loc="upper left", markerscale=0.3)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"{s} GiB" for s in A.sizes])
        ax.set_yscale("log")
        ax.set_ylim(top=ax.get_ylim()[1] * 12)   # room for the legend above the tallest bar
        ax.set_ylabel(CHART_YLABEL)
        ax.set_title(f"cold start, image {'in the page cache' if cache == 'pagecache' else 'evicted'}")
    # (two lines: one cache's chart is narrower than the device's name and the rest)
    fig.suptitle(f"{FN} cold start over HTTP, {DEVICE}\n{DATE}; pinned H2D {BW.get('h2d_pinned_gbs', 0):.1f} GB/s",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--sizes", default=DEFAULT_SIZES)
    p.add_argument("--systems", default="baseline,phos", help="besides native (always: the reference)")
    p.add_argument("--reps", type=int, default=3, help="cold starts per page-cache case (median reported)")
    p.add_argument("--warm-calls", type=int, default=5, help="warm calls after each cold start (median reported)")
    p.add_argument("--workdir", default=os.environ.get("PHOS_BENCH_DIR", "/var/tmp/phos-bench-coldstart"))
    p.add_argument("--name", default=BENCH)
    p.add_argument("--keep-files", action="store_true")
    p.add_argument("--caches", default="pagecache,dropped",
                   help="pagecache (the image in the page cache), dropped (evicted first), or both")
    p.add_argument("--call-timeout", type=float, default=300, help="seconds one phos call may take")
    # A dry run without a GPU: sim device, sizes in units of --unit-mib, no baseline.
    p.add_argument("--sim", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--unit-mib", type=int, default=1024, help=argparse.SUPPRESS)
    a = p.parse_args()
    a.device = "sim" if a.sim else "cuda"
    a.build = os.path.abspath(a.build)
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    a.systems = set(a.systems.split(","))
    a.caches = [c for c in a.caches.split(",") if c]
    if not a.caches or set(a.caches) - {"pagecache", "dropped"}:
        p.error("--caches: pagecache, dropped or both")
    if a.caches[0] != "pagecache":   # the page-cache case gives the reference answer
        a.caches = ["pagecache"] + [c for c in a.caches if c != "pagecache"]
    if a.sim:
        a.systems.discard("baseline")
        os.environ.setdefault("PHOS_SIM_TWINS", os.path.join(a.build, "functions", "examples",
                                                             "libphos-twins-examples.so"))
    return a


def main():
    global A, DEVICE
    A = parse_args()
    S.A = A
    os.makedirs(RESULTS, exist_ok=True)
    os.makedirs(A.workdir, exist_ok=True)
    shutil.rmtree(os.path.join(A.workdir, "logs"), ignore_errors=True)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    DEVICE, _ = S.gpu_info()
    S.DEVICE = DEVICE
    log(f"device: {DEVICE}; CRIU {S.find_criu()}; work dir {A.workdir}")
    log(S.sh(["df", "-h", A.workdir], 10)[2].strip())
    A.keep = set()
    A.floor = S.gpu_used_mib()
    rc, _, out, err = S.sh([os.path.join(A.build, "bench", "bandwidth"), "--mib", 1024, "--reps", 5], 300,
                           env=S.native_env())
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc == 0 and lines:
        BW.update(json.loads(lines[-1]))
        record("bandwidth-1GiB", "limit", "h2d_pinned", BW["h2d_pinned_gbs"], "GB/s")
    else:
        error("bandwidth-1GiB", "limit", "bandwidth", err[-2000:])
    front = Front()
    names = [f"{A.name}.json", f"{A.name}.checks.json", f"{A.name}.png"]

    def save(final):
        """After every size, so that a run cut short still leaves what it measured."""
        with open(os.path.join(RESULTS, names[0]), "w") as f:
            json.dump(records, f, indent=1)
        with open(os.path.join(RESULTS, names[1]), "w") as f:
            json.dump(checks, f, indent=1)
        if final:
            chart(os.path.join(RESULTS, names[2]))
        if OUT:
            for n in names:
                if os.path.exists(os.path.join(RESULTS, n)):
                    shutil.copy(os.path.join(RESULTS, n), OUT)

    try:
        for size in A.sizes:
            try:
                run_size(size, front)
            finally:
                S.kill_leftovers(A.keep)
                save(False)
    finally:
        front.close()
    save(True)
    logs = os.path.join(A.workdir, "logs")
    if OUT and os.path.isdir(logs):
        S.sh(["tar", "czf", os.path.join(OUT, f"{A.name}-logs.tar.gz"), "-C", A.workdir, "logs"], 120)
    bad = [c for c in checks if not c["ok"]]
    log(f"{BENCH}: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
