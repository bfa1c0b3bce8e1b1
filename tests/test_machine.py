"""The machine line every recorded speed carries: CPU model and widest vector extension read
from /proc/cpuinfo text."""

import pytest

from transformer.common.machine import cpu_model, describe_machine

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw amx_bf16 amx_tile
processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw amx_bf16 amx_tile
"""
AMD = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx avx2 fma
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes
"""


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        (INTEL, "Intel(R) Xeon(R) Processor, AVX-512, AMX"),
        (AMD, "AMD EPYC 7B13, AVX2"),
        (ARM, "NEON"),
        ("", ""),
    ],
)
def test_cpu_model_names_the_widest_vector_extension(cpuinfo, expected):
    assert cpu_model(cpuinfo) == expected


def test_describe_machine_names_cores_and_backend():
    line = describe_machine("cpu")
    assert line.endswith("CPU cores, cpu") and ", ," not in line
