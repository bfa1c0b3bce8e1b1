"""benchmarks/experiments/profile_kinds.py on cases whose answer is known: a hand-written
compiled module and a GPU-style trace with set kernel times, and a real CPU trace whose kinds
must account for the ops it holds."""

import pytest

from benchmarks.experiments import profile_kinds as pk

# A compiled module as XLA's GPU backend prints one: a cuBLAS product, a Triton GEMM fusion,
# cuDNN attention, a dropout fusion, a norm reduction, an optimizer fusion, a transpose and
# an elementwise fusion (names, targets and op_name metadata as XLA writes them).
HLO = """HloModule jit_train_step

%fused_dropout (p0: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %rbg = (u32[4]{0}, u32[8]{0}) rng-bit-generator(%p0), algorithm=rng_philox, metadata={op_name="jit(train_step)/jvp(dropout)/rng_bit_generator"}
  ROOT %add.1 = f32[8]{0} add(%p0, %p0), metadata={op_name="jit(train_step)/jvp(Transformer)/add"}
}

%fused_norm (p0: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  ROOT %reduce.3 = f32[] reduce(%p0), metadata={op_name="jit(train_step)/jvp(norm)/reduce_sum"}
}

%fused_adam (p0: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  ROOT %mul.9 = f32[8]{0} multiply(%p0, %p0), metadata={op_name="jit(train_step)/optimizer_update/mul"}
}

%fused_gemm (p0: bf16[8,8]) -> bf16[8,8] {
  %p0 = bf16[8,8]{1,0} parameter(0)
  ROOT %dot.2 = bf16[8,8]{1,0} dot(%p0, %p0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_transpose (p0: f32[8,4]) -> f32[4,8] {
  %p0 = f32[8,4]{1,0} parameter(0)
  ROOT %transpose.4 = f32[4,8]{1,0} transpose(%p0), dimensions={1,0}
}

%fused_gelu (p0: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  ROOT %tanh.1 = f32[8]{0} tanh(%p0), metadata={op_name="jit(train_step)/jvp(Transformer)/tanh"}
}

ENTRY %main (a: bf16[8,8]) -> f32[8] {
  %a = bf16[8,8]{1,0} parameter(0)
  %custom-call.1 = (bf16[8,8]{1,0}, s8[1024]{0}) custom-call(%a, %a), custom_call_target="__cublas$gemm"
  %gemm_fusion_dot.2 = bf16[8,8]{1,0} fusion(%a), kind=kCustom, calls=%fused_gemm
  %custom-call.7 = (bf16[8,8]{1,0}, u8[0]{0}) custom-call(%a, %a, %a), custom_call_target="__cudnn$fmhaSoftmax"
  %loop_add_fusion = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused_dropout
  %input_reduce_fusion = f32[] fusion(%a), kind=kInput, calls=%fused_norm
  %loop_multiply_fusion = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused_adam
  %transpose_fusion = f32[4,8]{1,0} fusion(%a), kind=kLoop, calls=%fused_transpose
  ROOT %loop_tanh_fusion = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused_gelu
}
"""  # noqa: E501  (XLA's lines, as long as it writes them)

# (hlo_op, kernel name, start us, duration us, expected kind) on the device's stream line.
KERNELS = [
    ("custom-call.1", "sm90_xmma_gemm_bf16bf16_bf16f32", 0, 100, pk.MATMUL),
    ("gemm_fusion_dot.2", "gemm_fusion_dot_2", 110, 50, pk.MATMUL),
    ("custom-call.7", "cudnn_generated_fort_native_sdpa_sm90", 160, 40, pk.ATTENTION),
    ("loop_add_fusion", "loop_add_fusion", 200, 30, pk.RANDOM),
    ("input_reduce_fusion", "input_reduce_fusion", 230, 20, pk.REDUCTION),
    ("loop_multiply_fusion", "loop_multiply_fusion", 260, 10, pk.OPTIMIZER),
    ("transpose_fusion", "transpose_fusion", 270, 5, pk.COPY),
    ("loop_tanh_fusion", "loop_tanh_fusion", 275, 5, pk.ELEMENTWISE),
    ("", "Memcpy DtoD (Device -> Device)", 280, 20, pk.COPY),
]


def gpu_trace() -> dict:
    """Device pid 1 with a stream line and a derived 'XLA Ops' line that repeats the
    kernels (must not be counted twice); host pid 701 with its own events."""
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #7"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "XLA Ops"}},
        {"ph": "M", "name": "process_name", "pid": 701, "args": {"name": "/host:CPU"}},
    ]
    events = []
    for hlo_op, kernel, start, duration, _ in KERNELS:
        args = {"hlo_op": hlo_op} if hlo_op else {}
        for tid in (7, 2):
            events.append(
                {
                    "ph": "X",
                    "pid": 1,
                    "tid": tid,
                    "name": kernel,
                    "ts": start,
                    "dur": duration,
                    "args": args,
                }
            )
    events.append({"ph": "X", "pid": 701, "tid": 1, "name": "loop_add_fusion", "ts": 0, "dur": 999})
    return {"traceEvents": meta + events}


def test_every_instruction_gets_its_kind():
    ops = pk.parse_hlo(HLO)
    for hlo_op, kernel, *_, kind in KERNELS:
        assert pk.classify(ops.get(hlo_op), kernel) == kind, (hlo_op, kernel)


def test_gpu_trace_reduces_to_known_times_and_idle_gaps():
    """Two calls' worth of kernels: each kind's time is its kernels' sum / 2; the idle gap
    is the 10 us hole between the first two kernels and the 5 us one after the 7th."""
    ops = pk.parse_hlo(HLO)
    events, streams = pk.trace_events(gpu_trace(), ops)
    assert streams and len(events) == len(KERNELS)  # the derived line and the host left out
    times = pk.kind_times(events, ops, calls=2, streams=True)
    expected = {}
    for *_, duration, kind in KERNELS:
        expected[kind] = expected.get(kind, 0) + duration / 2 / 1e3
    assert times.pop(pk.IDLE) == pytest.approx((10 + 10) / 2 / 1e3)
    assert times == pytest.approx(expected)
    assert list(times) == [k for k in pk.KINDS if k in expected]  # KINDS order


def test_busy_time_merges_overlapping_intervals():
    events = [pk.Event("a", "a", 0, 10), pk.Event("b", "b", 5, 10), pk.Event("c", "c", 20, 5)]
    assert pk.busy_time(events) == (25, 20)


def test_loop_bodies_are_found_through_calls():
    hlo = """%body (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  ROOT %f = s32[] fusion(%p), kind=kLoop, calls=%inner
}

%inner (q: s32[]) -> s32[] {
  %q = s32[] parameter(0)
  ROOT %neg = s32[] negate(%q)
}

ENTRY %main (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %w = s32[] while(%x), condition=%cond, body=%body
}
"""
    ops = pk.parse_hlo(hlo)
    assert ops["f"].in_loop and ops["neg"].in_loop and not ops["w"].in_loop
    assert [op.name for op in ops["f"].fused] == ["q", "neg"]


# ------------------------------------------------------------ program_fingerprint.py


def test_fingerprint_ignores_names_and_metadata_but_not_operations():
    from benchmarks.experiments.program_fingerprint import fingerprint

    a = '%add.1 = f32[8]{0} add(%p.0, %p.0), metadata={op_name="jit(f)/norm/add"}\n'
    renamed = '%add.7 = f32[8]{0} add(%q.3, %q.3), metadata={op_name="jit(f)/add"}\n'
    reshaped = '%add.1 = f32[4]{0} add(%p.0, %p.0), metadata={op_name="jit(f)/add"}\n'
    multiplied = "%add.1 = f32[8]{0} multiply(%p.0, %p.0)\n"
    assert fingerprint(a) == fingerprint(renamed)
    assert fingerprint(a) != fingerprint(reshaped) and fingerprint(a) != fingerprint(multiplied)


def test_train_program_fingerprint_is_stable_and_sees_a_changed_step():
    """The same config compiles to the same fingerprint twice; Q/K/V in one product (the same
    values, another program) changes it; a name scope alone (metadata) does not."""
    import jax

    from benchmarks.experiments.program_fingerprint import fingerprint, train_program
    from tests.helpers import tiny_config

    base = tiny_config(model__vocab_size=64)
    first, again = (fingerprint(train_program(base)) for _ in range(2))
    assert first == again
    fused = fingerprint(train_program(tiny_config(model__vocab_size=64, train__fused_qkv=True)))
    assert fused != first
    with jax.named_scope("an_extra_scope"):
        assert fingerprint(train_program(base)) == first
