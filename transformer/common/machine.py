"""One line naming the machine a figure was measured on: architecture, CPU model, the vector
extensions that decide CPU kernel speed, core count and JAX backend. Throughput figures from
an AVX2 machine and an AVX-512/AMX one differ by more than most effects they are used to show,
so every recorded speed names its machine."""

from __future__ import annotations

import os
import platform

# /proc/cpuinfo flag -> the name shown, widest first; the first present is reported, then AMX.
_VECTOR_FLAGS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("asimd", "NEON"))


def cpu_model(cpuinfo: str | None = None) -> str:
    """'Intel(R) Xeon(R) Processor, AVX-512, AMX' from /proc/cpuinfo ('' where unreadable)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return platform.processor()
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Model") or ""
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    parts = [name] if name else []
    parts += [shown for flag, shown in _VECTOR_FLAGS if flag in flags][:1]
    if "amx_tile" in flags:
        parts.append("AMX")
    return ", ".join(parts)


def describe_machine(backend: str) -> str:
    """'x86_64 Intel(R) Xeon(R) Processor, AVX-512, AMX, 2 CPU cores, cpu'."""
    parts = [platform.machine(), cpu_model(), f"{os.cpu_count()} CPU cores", backend]
    return ", ".join(p for p in parts if p).replace(", ", " ", 1)
