# SPDX-License-Identifier: MIT
"""Many clients uploading large bodies at once cannot take the invoker's
memory (issue 10, item 5: 48 clients holding 15 MiB each took it to 743 MiB).

An invoker with --body-memory 24 MiB and a function taking bodies up to
9 MiB; 32 clients each upload an 8 MiB body slowly (1 MiB pieces), with
`Expect: 100-continue`, retrying after a 503:

- a body is admitted (100 Continue) or refused (503 with Retry-After) by its
  Content-Length before any of it is sent: never more than two at once here;
- every client gets its 200 in the end, with the function having seen all of
  its bytes;
- the invoker's peak RSS (VmHWM) grows by less than the budget plus 40 MiB
  of slack over its RSS before the load (all bodies at once would be 256 MiB);
- afterwards its RSS is back within 40 MiB of where it started.
The RSS checks are left out under the sanitizers (ASan's quarantine).
"""
import os
import shutil
import socket
import tempfile
import threading
import time

from harness import check, done, Invoker, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
CLIENTS = 32
BODY = 8 << 20
BUDGET = 24 << 20
SLACK = 40 << 20
SANITIZED = bool(os.environ.get("PHOS_TEST_PRELOAD"))   # tools/test --sanitize

tmp = tempfile.mkdtemp(prefix="phos-body-memory-test-")


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def upload(port, body, stats):
    """One client: until a 200 (or the deadline), send the headers, and the
    body once admitted."""
    end = time.time() + 240
    while time.time() < end:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        try:
            s.sendall(b"POST /function/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (port, len(body)))
            first = s.recv(4096)
            if first.startswith(b"HTTP/1.1 100"):
                with stats["lock"]:
                    stats["admitted"] += 1
                    stats["most"] = max(stats["most"], stats["admitted"])
                try:
                    for off in range(0, len(body), 1 << 20):
                        s.sendall(body[off:off + (1 << 20)])
                        time.sleep(0.01)
                    ans = b""
                    while b"\r\n\r\n" not in ans or not ans.rstrip().endswith(b"}"):
                        b = s.recv(65536)
                        if not b:
                            break
                        ans += b
                finally:
                    with stats["lock"]:
                        stats["admitted"] -= 1
            else:
                ans = first
        except OSError as e:
            ans = repr(e).encode()
        finally:
            s.close()
        head, _, rest = ans.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 200"):
            with stats["lock"]:
                stats["ok"] += 1
                stats["lens"].append(rest)
            return
        with stats["lock"]:
            stats["other"].append(head.split(b"\r\n")[0])
            if head.startswith(b"HTTP/1.1 503"):
                stats["refused"] += 1
                stats["retry_after"] += b"Retry-After" in head
        time.sleep(0.2)


def main():
    inv = Invoker(os.path.join(tmp, "state"), tmp, extra=["--body-memory", str(BUDGET)])
    st, body = inv.call("POST", "/system/functions", {"name": "big", "program": MISBEHAVE,
                                                      "limits": {"max_body_bytes": 9 << 20}})
    check(st == 201, f"deploy big: {st} {body}")
    payload = b'{"pad":"' + b"p" * (BODY - 10) + b'"}'
    st, body = inv.call("POST", "/function/big", payload)   # warm: an instance and its buffers exist
    check(st == 200 and body.get("len") == len(payload), f"one big body: {st} {str(body)[:200]}")
    rss0 = status_kb(inv.p.pid, "VmRSS")
    stats = {"lock": threading.Lock(), "admitted": 0, "most": 0, "ok": 0, "refused": 0, "retry_after": 0,
             "other": [], "lens": []}
    threads = [threading.Thread(target=upload, args=(inv.port, payload, stats)) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    peak = status_kb(inv.p.pid, "VmHWM")
    print(f"rss before {rss0 >> 20} MiB, peak {peak >> 20} MiB; {stats['refused']} refusals, "
          f"at most {stats['most']} bodies admitted at once", flush=True)
    check(stats["ok"] == CLIENTS, f"every client got its 200: {stats['ok']} of {CLIENTS} "
          f"({set(stats['other'])})")
    check(all(b'"len":%d' % len(payload) in r for r in stats["lens"]), "the function saw every byte of each body")
    check(stats["refused"] > 0 and stats["retry_after"] == stats["refused"],
          f"bodies over the budget were refused with Retry-After ({stats['refused']}, {stats['retry_after']})")
    check(stats["most"] <= BUDGET // BODY, f"at most {BUDGET // BODY} bodies admitted at once ({stats['most']})")
    if SANITIZED:   # ASan keeps freed memory in its quarantine (256 MiB): RSS says nothing there
        print("body_memory: RSS not checked under the sanitizers", flush=True)
        inv.stop()
        return
    check(peak - rss0 < BUDGET + SLACK, f"peak RSS grew {(peak - rss0) >> 20} MiB (< {(BUDGET + SLACK) >> 20})")
    rss1 = rss0
    for _ in range(50):
        rss1 = status_kb(inv.p.pid, "VmRSS")
        if rss1 - rss0 < SLACK:
            break
        time.sleep(0.1)
    check(rss1 - rss0 < SLACK, f"RSS back near its start: {rss0 >> 20} -> {rss1 >> 20} MiB")
    inv.stop()


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    if not os.environ.get("PHOS_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
done("body_memory")
