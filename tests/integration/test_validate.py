# SPDX-License-Identifier: MIT
"""Validation of speculation (ctxpool/calls/exec_validate.c), sim device.

The sim device cannot run PTX, so here the twin is the kernel's host twin and
nothing is really checked; PHOS_FAULT=validate_miss stands in for a twin that
saw an access outside its set. What is tested is everything around the check:

- PHOS_VALIDATE_SPEC=always: launches of exact kernels run as their twins,
  the trace says "validated", and the answers are unchanged;
- a miss after a stop-the-world restore: the kernel is opaque from the next
  launch on, the trace has a validate_miss line, the executor's log names the
  kernel, and the snapshot's spec-opaque list holds it, so that a later restore
  (validation off) treats it as opaque from its first launch;
- a miss while an on-demand restore is still moving buffers in: the instance
  ends with the reason and gives no answer (it may have read bytes that were
  not restored yet).
"""
import json
import os
import tempfile

from harness import answers, check, DEVICE, done, phos, program, read_trace

TABLES = program("functions", "examples", "tables")
tmp = tempfile.mkdtemp(prefix="phos-validate-test-")
args = ["--tables", "4", "--table-mib", "2"]
direct = json.dumps({"table": 3, "direct": True})


def launches(trace, kernel):
    return [t for t in read_trace(trace) if t.get("op") == "launch" and kernel in t.get("kernel", "")]


# validation on: exact kernels run as their twins, the answers do not change
tr = os.path.join(tmp, "run.jsonl")
p = phos("run", "--device", DEVICE, "--trace", tr, "--", TABLES, *args, stdin=direct + "\n",
         extra_env={"PHOS_VALIDATE_SPEC": "always"})
got = answers(p)
check(p.returncode == 0 and len(got) == 1 and got[0].get("ok"), f"validated run: {got} {p.stderr[-1500:]}")
fills = launches(tr, "fill_table")
check(fills and all(t.get("sets") == "validated" for t in fills), f"fill_table launches: {fills[:1]}")
check([t.get("sets") for t in launches(tr, "sum_direct")] == ["validated"], "sum_direct validated")

snap = os.path.join(tmp, "snap")
p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", TABLES, *args)
check(p.returncode == 0, f"snapshot: {p.stderr[-2000:]}")

# kernels that use module variables (vecadd's __device__ bias, written by one
# request and read by the next) run validated on the twin module's copies of
# them: the same answers as without validation
VECADD = program("functions", "examples", "vecadd")
reqs = [json.dumps({"n": 4096, "seed": 7}), json.dumps({"n": 65536, "seed": 3, "bias": 1}), json.dumps({})]
runs = {}
for mode in ("off", "always"):
    tr = os.path.join(tmp, f"vecadd-{mode}.jsonl")
    p = phos("run", "--device", DEVICE, "--trace", tr, "--validate-spec", mode, "--", VECADD, "--elements", "65536",
             stdin="".join(r + "\n" for r in reqs))
    runs[mode] = (answers(p), [t.get("sets") for t in read_trace(tr) if t.get("op") == "launch"])
    check(p.returncode == 0 and len(runs[mode][0]) == 3 and all(a.get("ok") for a in runs[mode][0]),
          f"vecadd, validation {mode}: {runs[mode][0]} {p.stderr[-1500:]}")
check(runs["off"][0] == runs["always"][0], f"validated answers differ: {runs['always'][0]} vs {runs['off'][0]}")
check(runs["always"][0] and runs["always"][0][2].get("bias") == 1, "the bias written by a validated request is kept")
check(runs["always"][1] and all(s == "validated" for s in runs["always"][1]),
      f"every vecadd launch validated: {runs['always'][1]}")

p = phos("run", "--validate-spec", "sometimes", "--", VECADD)
check(p.returncode == 2 and "--validate-spec takes off or always" in p.stderr, f"a bad --validate-spec: {p.stderr}")

# a miss after a stop-the-world restore: opaque from then on, and remembered
tr = os.path.join(tmp, "miss.jsonl")
p = phos("restore", "--device", DEVICE, snap, stdin=direct + "\n" + direct + "\n",
         extra_env={"PHOS_VALIDATE_SPEC": "always", "PHOS_FAULT": "validate_miss", "PHOS_TRACE": tr,
                    "PHOS_LOG": "warn"})
got = answers(p)
check(p.returncode == 0 and len(got) == 2 and all(a.get("ok") for a in got), f"answers after a miss: {got}")
sums = launches(tr, "sum_direct")
check([t.get("sets") for t in sums] == ["validated", "opaque"], f"sum_direct before and after the miss: {sums}")
misses = [t for t in read_trace(tr) if t.get("op") == "validate_miss"]
check(len(misses) == 1 and "sum_direct" in misses[0]["kernel"], f"validate_miss lines: {misses}")
check("sum_direct touched memory outside its proven set" in p.stderr, f"no log line: {p.stderr[-1500:]}")
listed = open(os.path.join(snap, "spec-opaque")).read().split() if os.path.exists(os.path.join(snap, "spec-opaque")) else []
check(listed == ["_Z10sum_directPKjyPy"], f"spec-opaque list: {listed}")

tr = os.path.join(tmp, "later.jsonl")
p = phos("restore", "--device", DEVICE, snap, stdin=direct + "\n", extra_env={"PHOS_TRACE": tr})
check(answers(p) and answers(p)[0].get("ok"), f"later restore: {p.stderr[-1500:]}")
check([t.get("sets") for t in launches(tr, "sum_direct")] == ["opaque"], "the remembered kernel is opaque")

# a miss during an on-demand restore: no answer, the reason said
os.remove(os.path.join(snap, "spec-opaque"))
p = phos("restore", "--device", DEVICE, "--on-demand", snap, stdin=direct + "\n",
         extra_env={"PHOS_VALIDATE_SPEC": "restore", "PHOS_FAULT": "validate_miss",
                    "PHOS_RESTORE_THROTTLE_MIBPS": "2"})
check(not any("sum" in a for a in answers(p)), f"a miss during on-demand restore answered: {answers(p)}")
check("outside its set during the restore" in p.stderr, f"no reason: {p.stderr[-1500:]}")

done("validate")
