# SPDX-License-Identifier: MIT
"""Indirect access under on-demand restore (issue 9), sim device.

functions/examples/tables keeps eight tables and a pointer table in device
memory; its kernel sum_table finds the table through that pointer table, so the
buffer it reads is named by no parameter. The PTX analysis marks sum_table
opaque and on-demand restore makes it wait for every buffer. With the restore
engine throttled so that the tables are still streaming in, a first request for
the table that is last in the background order must answer the same sum as the
original process and as stop-the-world restore, and the trace must show the
launch as opaque while the exact fill kernel stays exact.
"""
import json
import os
import tempfile

from harness import answers, check, DEVICE, done, phos, program, read_trace

def manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)


def restore(d, requests, trace, throttle):
    return phos("restore", "--device", DEVICE, "--on-demand", d, stdin="".join(r + "\n" for r in requests),
                extra_env={"PHOS_TRACE": trace, "PHOS_RESTORE_THROTTLE_MIBPS": str(throttle)})


TABLES = program("functions", "examples", "tables")
NTAB, MIB = 8, 4
tmp = tempfile.mkdtemp(prefix="phos-tables-test-")
args = ["--tables", str(NTAB), "--table-mib", str(MIB)]
requests = [json.dumps({"table": NTAB - 1}), json.dumps({"table": 0})]

ref = phos("run", "--device", DEVICE, "--", TABLES, *args, stdin="".join(r + "\n" for r in requests))
want = answers(ref)
check(ref.returncode == 0 and len(want) == 2 and all(a.get("ok") for a in want),
      f"reference run: {ref.returncode} {want} {ref.stderr[-2000:]}")

snap = os.path.join(tmp, "snap")
trace0 = os.path.join(tmp, "snapshot-trace.jsonl")
p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", TABLES, *args, extra_env={"PHOS_TRACE": trace0})
check(p.returncode == 0, f"snapshot: {p.stderr[-3000:]}")
fills = [t for t in read_trace(trace0) if t.get("op") == "launch" and "fill_table" in t.get("kernel", "")]
check(len(fills) == NTAB and all(t.get("sets") == "exact" for t in fills),
      f"fill_table launches should be exact: {fills[:2]}")
tables = sorted((b for b in manifest(snap)["buffers"] if b["size"] == MIB << 20), key=lambda b: b["addr"])
check(len(tables) == NTAB, f"{len(tables)} tables in the snapshot")

# 4 MiB/s for 32 MiB: the restore takes about 8 s; the request comes at once.
trace = os.path.join(tmp, "trace.jsonl")
r = restore(snap, requests, trace=trace, throttle=4)
got = answers(r)
check(r.returncode == 0, f"on-demand restore exited {r.returncode}: {r.stderr[-3000:]}")
check(got == want, f"on-demand answers {got}, want {want}")
lines = read_trace(trace)
sums = [t for t in lines if t.get("op") == "launch" and "sum_table" in t.get("kernel", "")]
check(len(sums) == 2 and all(t.get("sets") == "opaque" for t in sums), f"sum_table launches: {sums}")
resident = [t for t in lines if t.get("op") == "restore_resident"]
check(len(resident) >= NTAB, f"only {len(resident)} buffers resident in the trace")
start = [t for t in lines if t.get("op") == "restore_start"]
d2h = [t for t in lines if t.get("op") == "memcpy_d2h" and sums and t["seq"] > sums[0]["seq"]]
check(start and d2h, "restore_start and the first answer's copy are in the trace")
if sums and resident and start and d2h:
    # the opaque launch waited for the whole restore: every table was resident
    # before the copy of its result was dispatched
    late = [t for t in resident if start[0]["t_ms"] + t["ms"] > d2h[0]["t_ms"] + 1]
    check(not late, f"buffers resident after the opaque launch's result was read: {late}")

# The same table named by a parameter (sum_direct, exact): only that table is
# promoted, and the answer comes before the restore is done.
direct = json.dumps({"table": NTAB - 1, "direct": True})
trace2 = os.path.join(tmp, "trace-direct.jsonl")
r = restore(snap, [direct], trace=trace2, throttle=4)
got = answers(r)
check(r.returncode == 0 and len(got) == 1 and got[0].get("ok") and got[0]["sum"] == want[0]["sum"],
      f"direct on-demand answer {got}: {r.stderr[-2000:]}")
lines = read_trace(trace2)
launch = [t for t in lines if t.get("op") == "launch" and "sum_direct" in t.get("kernel", "")]
check(len(launch) == 1 and launch[0].get("sets") == "exact" and
      [tables[-1]["addr"], tables[-1]["size"]] in launch[0]["reads"], f"sum_direct launch: {launch}")
promoted = [t for t in lines if t.get("op") == "restore_promote" and t.get("addr") == tables[-1]["addr"]]
check(len(promoted) == 1, f"the last table was not promoted: {[t for t in lines if 'promote' in t.get('op', '')]}")
res = {t["buf"]: t for t in lines if t.get("op") == "restore_resident"}
if promoted:
    mine = res.get(promoted[0]["buf"])
    check(mine is not None and mine["rank"] < NTAB // 2, f"the promoted table was not among the first resident: {mine}")

# ... and its answer really comes first: the synchronous copy of the sum is
# answered (the trace's "reply" line) while other buffers still stream in. A
# copy must wait only for the buffer it reads, not for the whole restore.
d2h = [t for t in lines if t.get("op") == "memcpy_d2h" and launch and t["seq"] > launch[0]["seq"]]
replies = {t["seq"]: t for t in lines if t.get("op") == "reply"}
start = [t for t in lines if t.get("op") == "restore_start"]
check(d2h and d2h[0]["seq"] in replies and start, f"the sum's copy and its reply are in the trace: {d2h[:1]}")
if d2h and d2h[0]["seq"] in replies and start and res:
    answered = replies[d2h[0]["seq"]]["t_ms"] - start[0]["t_ms"]
    before = [b for b, t in res.items() if t["ms"] <= answered]
    check(len(before) <= start[0]["items"] - NTAB // 2,
          f"the sum was answered at {answered:.0f} ms, when {len(before)} of {start[0]['items']} buffers were "
          f"resident: it waited for the restore")

r = phos("restore", "--device", DEVICE, snap, stdin="".join(q + "\n" for q in requests))
check(answers(r) == want, f"stop-the-world answers {answers(r)}: {r.stderr[-2000:]}")

done("tables")
