# SPDX-License-Identifier: MIT
"""Speculation: the executor's read/write sets for const T*, T*, struct-by-value
and extern "C" kernels, and for memcpy, memset and cuBLAS calls."""
import json
import os
import tempfile

from harness import check, done, program, read_trace, run

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "trace.jsonl")
    p = run(program("tests", "integration", "spec_probe"), trace=trace)
    check(p.returncode == 0, f"spec_probe exited {p.returncode}: {p.stderr}")
    ptr = json.loads(p.stdout.strip().splitlines()[-1])
    n = ptr["n"] * 4
    recs = read_trace(trace)

def rng(name, size=None):
    return [ptr[name], size if size is not None else n]

def find(op, kernel=None):
    return [r for r in recs if r["op"] == op and (kernel is None or r.get("kernel") == kernel)]

# Sets come from the PTX access analysis (runtime/kernel/ptx_access.h): every kernel
# here is exact, and its sets hold just what it reads and writes.
# in[i] is read, out[i] only written
k = find("launch", "_Z11k_const_mixPKfPfi")
check(len(k) == 1, f"one k_const_mix launch in the trace, got {len(k)}")
if k:
    check(k[0].get("sets") == "exact", f"k_const_mix is exact: {k[0]}")
    check(k[0]["reads"] == [rng("a")], f"k_const_mix reads {k[0]['reads']}")
    check(k[0]["writes"] == [rng("b")], f"k_const_mix writes {k[0]['writes']}")

# struct by value: the pointer words inside it, p.src read, p.dst written
k = find("launch", "_Z8k_struct9pair_args")
check(len(k) == 1, "one k_struct launch")
if k:
    check(k[0].get("sets") == "exact", f"k_struct is exact: {k[0]}")
    check(k[0]["reads"] == [rng("b")], f"k_struct reads {k[0]['reads']}")
    check(k[0]["writes"] == [rng("c")], f"k_struct writes {k[0]['writes']}")

# extern "C": no types from the name, but the PTX says x is read and written, y read
k = find("launch", "k_extern")
check(len(k) == 1, "one k_extern launch")
if k:
    check(k[0].get("sets") == "exact", f"k_extern is exact: {k[0]}")
    check(k[0]["writes"] == [rng("d")], f"k_extern writes {k[0]['writes']}")
    check(sorted(k[0]["reads"]) == sorted([rng("a"), rng("d")]), f"k_extern reads {k[0]['reads']}")

# well-specified APIs: exact ranges
h2d = [r for r in find("memcpy_h2d") if r["writes"] == [rng("a")]]
check(len(h2d) >= 1 and all(r["reads"] == [] for r in h2d), f"memcpy H2D into a: {find('memcpy_h2d')}")
ms = find("memset")
check(any(r["writes"] == [rng("b")] and r["reads"] == [] for r in ms), f"memset of b: {ms}")
dd = find("memcpy_d2d")
check(any(r["reads"] == [rng("c", 1024)] and r["writes"] == [rng("d", 1024)] for r in dd), f"d2d c→d: {dd}")
d2h = find("memcpy_d2h")
check(any(r["reads"] == [rng("c", 256)] and r["writes"] == [] for r in d2h), f"d2h of c: {d2h}")
g = find("blas_gemm")
check(len(g) == 2, f"two gemms, got {len(g)}")
if g:
    # 16x16 column-major floats: 1 KiB of a and of b read, 1 KiB of m written (beta = 0: not read)
    check(sorted(g[0]["reads"]) == sorted([rng("a", 1024), rng("b", 1024)]), f"gemm reads {g[0]['reads']}")
    check(g[0]["writes"] == [rng("m", 1024)], f"gemm writes {g[0]['writes']}")
if len(g) == 2:
    # pointer arrays: the three arrays (2 pointers each) are read, and so is
    # every matrix they name; the C matrices they name are written
    m = ptr["m"]
    want_reads = [[ptr["p"], 16], [ptr["p"] + 16, 16], [ptr["p"] + 32, 16], rng("a", 1024), rng("b", 1024),
                  rng("c", 1024), rng("d", 1024)]
    check(sorted(g[1]["reads"]) == sorted(want_reads), f"batched gemm reads {g[1]['reads']}")
    check(sorted(g[1]["writes"]) == sorted([[m + 1024, 1024], [m + 2048, 1024]]),
          f"batched gemm writes {g[1]['writes']}")

done("speculation")
