"""Tests of benchmarks.common (no JAX or PyTorch needed)."""

import io
import json
import statistics
import time

import pytest

from benchmarks import common


def test_emit_json_line():
    buf = io.StringIO()
    rec = common.emit(
        "train_tokens_per_s", 1234.5, "tokens/s", "torch-marian", True, file=buf, step_s=0.25
    )
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    parsed = json.loads(lines[0])
    assert parsed == {
        "figure": "train_tokens_per_s",
        "value": 1234.5,
        "unit": "tokens/s",
        "impl": "torch-marian",
        "step_s": 0.25,
    }
    assert rec == parsed
    assert list(parsed)[:4] == ["figure", "value", "unit", "impl"]


def test_emit_table_row_and_stdout_default(capsys):
    common.emit("decode_greedy_tokens_per_s", 98765.4321, "tokens/s", "jax", False, repeats=3)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "decode_greedy_tokens_per_s" in out
    assert "98,765" in out
    assert "tokens/s" in out and "jax" in out and "repeats=3" in out


def test_emit_rejects_shadowing_extra():
    with pytest.raises(TypeError):
        common.emit("x", 1.0, "s", "jax", True, file=io.StringIO(), **{"unit": "ms"})


def test_format_value():
    assert common.format_value(0) == "0"
    assert common.format_value(12345.6) == "12,346"
    assert common.format_value(0.123456) == "0.1235"
    assert common.format_value(1.5e-5) == "1.500e-05"
    assert common.format_value(7) == "7"
    assert common.format_value("abc") == "abc"
    assert common.format_value(True) == "True"


def test_median_time_counts_calls_and_syncs():
    calls = []
    synced = []

    def fn():
        calls.append(len(calls))
        return len(calls)

    med, times = common.median_time(fn, warmup=2, repeats=5, sync=synced.append)
    assert len(calls) == 7
    assert synced == [1, 2, 3, 4, 5, 6, 7]
    assert len(times) == 5
    assert all(t >= 0 for t in times)
    assert med == statistics.median(times)


def test_median_time_sync_is_inside_timed_region():
    med, times = common.median_time(
        lambda: None, warmup=0, repeats=3, sync=lambda _: time.sleep(0.01)
    )
    assert min(times) >= 0.009
    assert med >= 0.009


def test_median_time_validates_arguments():
    with pytest.raises(ValueError):
        common.median_time(lambda: None, warmup=0, repeats=0)
    with pytest.raises(ValueError):
        common.median_time(lambda: None, warmup=-1, repeats=1)


def test_spread_brackets_the_median_of_millisecond_timings():
    # Two calls of ~2.2 ms: their median (the mean) lies strictly between them, and the spread
    # must still bracket it (4-decimal rounding put max_s = 0.0022 below a 0.0022175 median).
    times = [0.00221750, 0.00221759]
    spread = common.spread(times)
    assert spread == {"min_s": min(times), "max_s": max(times)}
    assert spread["min_s"] <= statistics.median(times) <= spread["max_s"]


def test_peak_rss_mib_grows_with_allocation():
    before = common.peak_rss_mib()
    assert before > 1.0  # any Python process holds more than 1 MiB
    blob = bytearray(64 * 1024 * 1024)  # zero-filled, so every page is touched
    after = common.peak_rss_mib()
    assert after >= before
    assert after >= 64  # the peak now includes the 64 MiB buffer
    del blob


def test_random_sources_are_full_length_sentences():
    src = common.random_sources(3, rows=5, length=7, vocab_size=50, eos_id=3)
    assert src.shape == (5, 7) and src.dtype.name == "int32"
    assert (src[:, -1] == 3).all()
    body = src[:, :-1]
    assert (body >= common.FIRST_WORD_ID).all() and (body < 50).all()  # no pad/unk/bos/eos
    again = common.random_sources(3, rows=5, length=7, vocab_size=50, eos_id=3)
    assert (src == again).all()  # same seed, same sources: runs compare like with like


def test_random_train_batch_is_unpacked_and_unpadded():
    import numpy as np

    batch = common.random_train_batch(np.random.default_rng(0), 4, 6, 9, vocab_size=30)
    assert batch["src"].shape == (4, 6) and batch["tgt"].shape == (4, 9)
    for side, length in (("src", 6), ("tgt", 9)):
        assert (batch[side] >= common.FIRST_WORD_ID).all() and (batch[side] < 30).all()
        assert (batch[f"{side}_segments"] == 1).all()
        assert (batch[f"{side}_positions"] == np.arange(length)).all()
        assert batch[f"{side}_positions"].flags.writeable  # a real array, not a broadcast view


def test_forced_length_overrides_pin_the_output_length():
    for mode, (_, settings) in common.DECODE_MODES.items():
        overrides = common.forced_length_overrides(mode, 17, rows=8)
        # max_len = a * source_len + b; with a = 0 it is b whatever the source length.
        assert overrides["max_len_a"] == 0 and overrides["max_len_b"] == 17
        assert overrides["min_len"] == 17 and overrides["batch_size"] == 8
        assert {k: overrides[k] for k in settings} == settings


@pytest.mark.parametrize(
    "cpuinfo, cpus, tag",
    [
        ("model name\t: AMD EPYC 7B13 64-Core Processor\nflags\t: avx2\n", 2, "epyc2"),
        ("model name\t: Intel(R) Xeon(R) Platinum 8481C CPU\nflags\t: avx512f\n", 2, "xeon2"),
        ("model name\t: Strange CPU\n", 8, None),  # no known family: the architecture
    ],
)
def test_machine_tag_names_the_cpu_family_and_core_count(cpuinfo, cpus, tag):
    import platform

    expected = tag or f"{platform.machine().lower()}_8"  # x86_64_8: '_' after a digit
    assert common.machine_tag(cpuinfo, cpus) == expected
