# SPDX-License-Identifier: MIT
"""The driver's virtual memory management (issue 16, preload/driver/libcuda_vmm.c),
as PyTorch's expandable segments use it: tests/transparency/driver/vmm_serve
reserves a range, maps three handles side by side, runs a kernel over a
tensor that spans them, replaces the middle mapping, and serves requests
that run the kernel again, check every value, and map, use and give back a
new handle in the reservation:

- its answers under phos-fn, natively on a GPU, and after a snapshot at
  phos_fn_serve is restored (stop-the-world and on demand): the mappings
  keep their data and the reservation is the program's again;
- the kernel's read/write set holds every mapping of the reservation (a
  tensor may span them) and x;
- a checkpoint of the running program (issue 11), every mode: its image
  lists the reservation, which the restoring executor reserves again around
  the mappings; the restored copy answers the next requests (which map, use
  and give back a handle in it) as the original would;
- what phos-fn refuses: a handle mapped twice (NOT_SUPPORTED, said on
  stderr), mapped in part (NOT_SUPPORTED), outside a reservation, an unmap
  of part of a mapping and freeing a reservation still mapped (INVALID_VALUE).
"""
import json
import os
import shutil
import tempfile

from harness import check, checkpoint_everywhere, done, program, read_trace, run, serve_everywhere

PROG = program("tests", "transparency", "driver", "vmm_serve")
MIB = 1 << 20


def answers_ok(ans, what):
    check(len(ans) == 3 and all(a.get("ok") for a in ans) and [a.get("call") for a in ans] == [1, 2, 3],
          f"vmm_serve {what}: {ans}")


tmp = tempfile.mkdtemp(prefix="phos-vmm-test-")
try:
    serve_everywhere(PROG, "{}\n{}\n{}\n", answers_ok, tmp)

    trace = os.path.join(tmp, "trace.jsonl")
    p = run(PROG, "pointers", stdin="{}\n", trace=trace)
    check(p.returncode == 0 and '"ok": true' in p.stdout, f"vmm_serve pointers: {p.stdout} {p.stderr[-2000:]}")
    line = [l for l in p.stderr.splitlines() if l.startswith("pointers ")]
    ptr = json.loads(line[0][len("pointers "):]) if line else {}
    launches = [r for r in read_trace(trace) if r.get("op") == "launch"] if os.path.exists(trace) else []
    check(len(launches) == 2, f"two launches (init and the request), got {len(launches)}")
    if launches and ptr:
        parts = [[ptr["base"] + i * 4 * MIB, 4 * MIB] for i in range(3)]
        for r in launches:
            check(sorted(r["writes"]) == parts, f"the kernel writes every mapping: {r['writes']}, want {parts}")
            check(sorted(r["reads"]) == sorted(parts + [[ptr["x"], 12 * MIB]]),
                  f"the kernel reads the mappings and x: {r['reads']}")

    def restored_ok(ans, what):
        check(len(ans) == 2 and all(a.get("ok") for a in ans) and [a.get("call") for a in ans] == [2, 3],
              f"vmm_serve {what}: {ans}")

    checkpoint_everywhere(PROG, "{}", restored_ok, tmp)

    p = run(PROG, "refusals")
    codes = dict(l.split(": ") for l in p.stdout.splitlines() if ": " in l)
    want = {"map twice": "801", "map in part": "801", "map outside": "1", "unmap in part": "1",
            "free while mapped": "1"}
    check(p.returncode == 0 and codes == want, f"vmm_serve refusals: {codes}, want {want}: {p.stderr[-1500:]}")
    said = [l for l in p.stderr.splitlines() if "virtual memory" in l and "not supported" in l]
    check(len(said) == 2, f"one stderr line per refusal: {said}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("test_transparency_vmm")
