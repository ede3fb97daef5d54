# SPDX-License-Identifier: MIT
"""phos_spec_fallbacks_total{function,reason} and --validate-spec (issue 9), sim.

- an opaque kernel (tables' sum_table) launched while an on-demand restore is
  still moving buffers in waits for the whole restore: counted as
  reason="opaque_kernel"; the exact sum_direct is not counted;
- with --validate-spec restore, a kernel caught outside its set during the
  restore (PHOS_FAULT=validate_miss stands in for the twin's report on sim)
  ends the instance (502, the reason said) and counts as reason="validate_miss";
- --validate-spec takes off, restore or always; anything else is refused.
"""
import json
import os
import re
import subprocess
import tempfile

from harness import BUILD, check, done, fn_env, Invoker, procs, program

TABLES = program("functions", "examples", "tables")
ARGS = ["--tables", "4", "--table-mib", "2"]
tmp = tempfile.mkdtemp(prefix="phos-fallbacks-test-")


def fallbacks(inv, name):
    st, text = inv.call("GET", "/metrics")
    check(st == 200, f"/metrics: {st}")
    got = {}
    for m in re.finditer(r'^phos_spec_fallbacks_total\{function="([^"]+)",reason="([a-z_]+)"\} (\d+)$',
                         text if isinstance(text, str) else "", re.M):
        if m.group(1) == name:
            got[m.group(2)] = int(m.group(3))
    return got


def deploy(inv, name):
    st, desc = inv.call("POST", "/system/functions", {"name": name, "program": TABLES, "args": ARGS})
    check(st == 201, f"deploy {name}: {st} {desc}")


try:
    # 4 MiB/s for 8 MiB: the restore runs for about 2 s, the call comes at once
    inv = Invoker(os.path.join(tmp, "a"), tmp, extra_env={"PHOS_RESTORE_THROTTLE_MIBPS": "4"})
    deploy(inv, "tables")
    check(fallbacks(inv, "tables") == {"opaque_kernel": 0, "overflow": 0, "validate_miss": 0},
          f"no fallbacks before any call: {fallbacks(inv, 'tables')}")
    st, body = inv.call("POST", "/function/tables", {"table": 3})
    check(st == 200 and isinstance(body, dict) and body.get("ok"), f"opaque cold call: {st} {body}")
    fb = fallbacks(inv, "tables")
    check(fb.get("opaque_kernel", 0) >= 1, f"the opaque launch during the restore is counted: {fb}")
    check(fb.get("validate_miss") == 0 and fb.get("overflow") == 0, f"no other reason: {fb}")
    before = fb.get("opaque_kernel", 0)
    # once the restore is done an opaque launch costs nothing: not counted
    st, body = inv.call("POST", "/function/tables", {"table": 0, "direct": True})
    check(st == 200 and body.get("ok"), f"direct warm call: {st} {body}")
    check(fallbacks(inv, "tables").get("opaque_kernel") == before, "an exact launch adds no fallback")
    inv.stop()

    # validation during the restore, with a miss: the instance ends, counted
    inv = Invoker(os.path.join(tmp, "b"), tmp, extra=("--validate-spec", "restore"),
                  extra_env={"PHOS_RESTORE_THROTTLE_MIBPS": "4"})
    deploy(inv, "tables")
    # the fault only in the executors that restore (the deploy ran without it)
    inv.stop()
    inv = Invoker(os.path.join(tmp, "b"), tmp, extra=("--validate-spec", "restore"), fault="validate_miss",
                  extra_env={"PHOS_RESTORE_THROTTLE_MIBPS": "4"})
    st, body = inv.call("POST", "/function/tables", {"table": 3, "direct": True})
    check(st == 502 and "validation" in json.dumps(body), f"a miss during the restore ends the instance: {st} {body}")
    fb = fallbacks(inv, "tables")
    check(fb.get("validate_miss") == 1, f"the miss is counted: {fb}")
    inv.stop()

    p = subprocess.run([os.path.join(BUILD, "invoker", "phos-invoker"), "--validate-spec", "sometimes"],
                       capture_output=True, text=True, env=fn_env(), timeout=30)
    check(p.returncode == 2 and "--validate-spec takes off, restore or always" in p.stderr,
          f"a bad --validate-spec: {p.returncode} {p.stderr}")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
done("fallbacks")
