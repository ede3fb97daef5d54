# SPDX-License-Identifier: MIT
"""Issue 12, host memory: cudaHostRegister'ed memory (tests/transparency/hostmem/).

Under phos-fn (`strict`) the registered pages must be the memfd shared with the
executor, so that copies from and to them are DMA, not records through the
call channel; the bytes around the buffer in its first and last pages are
unchanged; copies are right; double registration and unregistering memory
that is not registered give CUDA's errors; the memory stays usable after
cudaHostUnregister. With PHOS_TEST_DEVICE=cuda the program also runs natively.
"""
import subprocess

from harness import DEVICE, check, done, program, run

HOSTREG = program("tests", "transparency", "hostmem", "hostreg")

p = run(HOSTREG, "strict")
check(p.returncode == 0 and "hostreg: ok" in p.stdout, f"hostreg under phos-fn: rc {p.returncode}\n{p.stderr[-3000:]}")
if DEVICE == "cuda":
    p = subprocess.run([HOSTREG], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"hostreg natively: rc {p.returncode}\n{p.stderr[-3000:]}")
done("transparency_hostmem")
