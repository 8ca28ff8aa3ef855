"""What the benchmarks share: refusing bad input in one line, and the host they ran on."""
import os
import sys
from pathlib import Path


def refuse(message: str):
    "Bad input: one line naming the problem and what to do, exit status 2."
    print(message, file=sys.stderr); sys.exit(2)


def host() -> dict:
    "The CPU: its model name, cores, and the vector units that decide the training precision (AMX, avx512_bf16)."
    from embryo.model.model import cpu_flags  # the flags the training precision is chosen from
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "")
    flags = cpu_flags()
    return dict(cpu=name, cores=os.cpu_count(), amx="amx_tile" in flags, avx512_bf16="avx512_bf16" in flags,
                avx2="avx2" in flags)
