"""benchmarks.throughput end to end on a tiny model (2 + 2 layers, d_model 64).

The train/pipeline and decode parts run as two concurrent subprocesses (XLA compiles on one
core each) with --steps 2 (the median-of-8 rule is relaxed for tests only). The pipeline part
uses the embedded synthetic corpus, so no data files are needed.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, run

MODULE = ["-m", "benchmarks.throughput"]
PROFILE = ["-m", "benchmarks.experiments.profile_step"]
MATMUL = ["-m", "benchmarks.experiments.matmul_shapes"]
DECODE_AB = ["-m", "benchmarks.experiments.decode_ab"]
PREPARE_AB = ["-m", "benchmarks.experiments.prepare_ab"]
TINY = [
    "--config=configs/bench_base.py",
    "--config.model.num_encoder_layers=2",
    "--config.model.num_decoder_layers=2",
    "--config.model.d_model=64",
    "--config.model.num_heads=4",
    "--config.model.d_ff=128",
    "--config.model.vocab_size=200",
    "--config.data.vocab_size=200",
    "--config.model.max_len=64",
    "--config.train.batch_size=8",
    "--config.data.max_source_len=16",
    "--config.data.max_target_len=16",
    "--config.decode.batch_size=8",
    "--json",
    "--steps=2",
]
TRAIN_FIGURES = {
    "train_tokens_per_s",
    "train_step_s",
    "compile_s",
    "train_step_flops",
    "matmul_peak_gflops",
    "mfu",
}
PIPELINE_FIGURES = {
    "train_real_tokens_per_s",
    "padding_fraction",
    "train_padded_real_tokens_per_s",
    "padded_padding_fraction",
}
LENGTHS = (8, 16)
DECODE_FIGURES = {
    f"{name}_{n}"
    for n in LENGTHS
    for name in (
        "decode_greedy_tokens_per_s",
        "decode_sample_tokens_per_s",
        "decode_beam4_sentences_per_s",
        "decode_greedy_nocache_tokens_per_s",
    )
}


def _start(args):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.Popen(
        [sys.executable, *MODULE, *TINY, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(proc, impl="jax-transformer") -> list[dict]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # stdout holds JSON lines only
    for r in records:
        assert list(r)[:4] == ["figure", "value", "unit", "impl"], r
        assert r["impl"] == impl
    return records


def test_int8_decoding_is_its_own_column():
    """--int8 decodes with benchmarks/common.INT8_DECODE and labels the whole decode-only
    run (setup, figures, peak memory) jax-transformer-int8, recording the precision."""
    args = ["--what=decode", "--decode_modes=greedy", "--decode_lengths=8", "--nocache_lengths="]
    records = _records(_start([*args, "--int8"]), impl="jax-transformer-int8")
    assert [r["figure"] for r in records] == [
        "setup",
        "decode_greedy_tokens_per_s_8",
        "peak_rss_mib",
    ]
    greedy = next(r for r in records if r["figure"] == "decode_greedy_tokens_per_s_8")
    assert (greedy["quantize"], greedy["encoder_quantize"]) == ("int8", "bfloat16")


@pytest.mark.slow
def test_throughput_tiny_reports_every_figure(tmp_path):
    train = _start(
        [
            "--what=train,pipeline",
            "--matmul_sizes=128,256",
            "--config.data.name=synthetic",
            "--config.data.synthetic_train_size=800",
            "--config.data.synthetic_eval_size=20",
            f"--workdir={tmp_path}",
        ]
    )
    decode = _start(["--what=decode", "--decode_lengths=8,16", "--nocache_blocks=2"])
    records = _records(train) + _records(decode)
    by_name = {r["figure"]: r for r in records}
    expected = TRAIN_FIGURES | PIPELINE_FIGURES | DECODE_FIGURES | {"peak_rss_mib", "setup"}
    assert expected <= set(by_name), sorted(expected - set(by_name))
    for name in expected - {"setup"}:
        value = by_name[name]["value"]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (name, value)
    assert 0 < by_name["mfu"]["value"] < 1.5
    for name in ("padding_fraction", "padded_padding_fraction"):
        assert 0 < by_name[name]["value"] < 1
    assert by_name["setup"]["cpus"] == os.cpu_count()
    for n in LENGTHS:
        nocache = by_name[f"decode_greedy_nocache_tokens_per_s_{n}"]
        assert nocache["output_tokens"] == n
        assert nocache["agrees_with_cached"] >= 0.9  # same greedy tokens as the KV cache


def test_pipeline_skips_missing_data_path():
    proc = run(
        [*MODULE, *TINY, "--what=pipeline", "--config.data.path=/nonexistent/multi30k"],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pipeline: skipped" in proc.stderr and "/nonexistent/multi30k" in proc.stderr
    figures = [json.loads(line)["figure"] for line in proc.stdout.splitlines() if line.strip()]
    assert figures == ["setup", "peak_rss_mib"]


@pytest.mark.slow
def test_bad_what_is_a_one_line_error():
    proc = run([*MODULE, *TINY, "--what=train,bogus"], timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --what 'train,bogus': choose from train, pipeline, decode"
    )
    proc = run([*MODULE, *TINY, "--what=decode", "--decode_modes=greedy,bogus"], timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --decode_modes 'greedy,bogus': choose from greedy, sample, beam4"
    )


@pytest.mark.slow
def test_decode_modes_selects_the_cached_decoders():
    proc = _start(
        [
            "--what=decode",
            "--decode_modes=greedy",
            "--decode_lengths=8",
            "--nocache_lengths=8",
            "--nocache_blocks=2",
            "--decode_warmup=0",
        ]
    )
    figures = [r["figure"] for r in _records(proc)]
    assert figures == [
        "setup",
        "decode_greedy_tokens_per_s_8",
        "decode_greedy_nocache_tokens_per_s_8",
        "peak_rss_mib",
    ]


@pytest.mark.slow
def test_profile_step_attributes_the_step_to_ops(tmp_path):
    args = [a for a in TINY if a not in ("--json", "--steps=2")]
    proc = run(
        [*PROFILE, *args, "--steps=1", "--top=5", "--json", f"--trace_dir={tmp_path}"], check=True
    )
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    step = next(r["value"] for r in records if r["figure"] == "profiled_step_ms")
    kinds = {r["kind"]: r["value"] for r in records if r["figure"] == "step_kind_ms"}
    ops = [r for r in records if r["figure"] == "op_ms"]
    assert step > 0 and len(ops) == 5
    # The tiny model trains with dropout: its step holds products, masks, norms, the update.
    for kind in ("matrix products", "dropout random bits", "norms and reductions"):
        assert kinds.get(kind, 0) > 0, kind
    assert kinds.get("optimizer update", 0) > 0
    assert all(r["value"] > 0 and r["shape"] for r in ops)
    assert ops == sorted(ops, key=lambda r: -r["value"])


@pytest.mark.slow
def test_profile_step_profiles_a_decoding_call(tmp_path):
    args = [a for a in TINY if a not in ("--steps=2",)]  # keeps --json
    options = ["--what=sample", "--decode_len=5", "--steps=1", "--top=3"]
    proc = run([*PROFILE, *args, *options, f"--trace_dir={tmp_path}"], check=True)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    call_ms = next(r["value"] for r in records if r["figure"] == "profiled_step_ms")
    kinds = {r["kind"]: r["value"] for r in records if r["figure"] == "step_kind_ms"}
    assert call_ms > 0 and kinds.get("matrix products", 0) > 0
    # The per-kind op times plus the time outside device work account for the whole call.
    assert sum(kinds.values()) >= 0.99 * call_ms
    ops = [r for r in records if r["figure"] == "op_ms"]
    assert len(ops) == 3 and all(r["value"] > 0 for r in ops)
    places = {r["place"]: r["value"] for r in records if r["figure"] == "op_place_ms"}
    assert places["in the loop"] > 0 < places["outside any loop"]  # token steps vs encoder
    outside = kinds["outside device work"]
    assert sum(places.values()) == pytest.approx(sum(kinds.values()) - outside)


def test_gpu_script_parses():
    proc = subprocess.run(
        ["bash", "-n", "benchmarks/gpu_side_by_side.sh"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_gpu_script_skips_every_run_once_its_budget_is_spent(tmp_path):
    """BUDGET_S=0: no run starts, each is listed in skipped.txt, the call still succeeds."""
    env = dict(os.environ, PYTHON=sys.executable, BUDGET_S="0")
    command = ["bash", "benchmarks/gpu_side_by_side.sh", "--dry_run", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    skipped = (tmp_path / "skipped.txt").read_text().splitlines()
    names = [line.split(" ")[0] for line in skipped]
    assert {"jax_big_1", "jax_base_1", "profile_big", "jax_big_threefry"} <= set(names)
    assert not list(tmp_path.glob("*.jsonl"))


def test_side_by_side_script_runs_every_benchmark_into_one_table(tmp_path):
    env = dict(os.environ, PYTHON="py", RUN="runs/r", DATA="data/m")
    proc = subprocess.run(
        ["bash", "benchmarks/side_by_side.sh", "--print", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    *runs, long_run, table = proc.stdout.splitlines()
    assert len(runs) == 15  # three rounds (the default), alternating the scripts A B C D E A ...
    names = ("jax", "jaxint8", "torch", "ct2", "real")
    for round_, (jax, int8, torch, ct2, real) in enumerate(zip(*[iter(runs)] * 5, strict=True), 1):
        assert jax.startswith("py -m benchmarks.throughput --config configs/bench_base.py")
        assert "--what train,pipeline,decode" in jax and "--config.data.path=data/m" in jax
        assert jax.endswith(f"> {tmp_path}/jax_{round_}.jsonl")
        assert int8 == (
            "py -m benchmarks.throughput --config configs/bench_base.py --what decode"
            " --decode_lengths 64 --nocache_lengths= --int8 --json"
            f" > {tmp_path}/jaxint8_{round_}.jsonl"
        )
        assert torch == (
            "py -m benchmarks.compare_torch --decode-lengths 64 --json"
            f" > {tmp_path}/torch_{round_}.jsonl"
        )
        assert ct2 == (
            "py -m benchmarks.compare_ctranslate2 --decode_lengths 64 --json"
            f" > {tmp_path}/ct2_{round_}.jsonl"
        )
        assert real.startswith("py -m benchmarks.real_data_speed --workdir runs/r")
        assert real.endswith(f"> {tmp_path}/real_{round_}.jsonl")
    assert "--decode_lengths 256 --nocache_lengths 256" in long_run
    assert long_run.endswith(f"> {tmp_path}/jax_256.jsonl")
    files = " ".join(f"{tmp_path}/{n}_{k}.jsonl" for k in (1, 2, 3) for n in names)
    assert table == f"py -m benchmarks.table {files} {tmp_path}/jax_256.jsonl > {tmp_path}/table.md"
    one = subprocess.run(
        ["bash", "benchmarks/side_by_side.sh", "--print", str(tmp_path)],
        cwd=ROOT,
        env=dict(env, ROUNDS="1", LONG="0"),
        capture_output=True,
        text=True,
    )
    assert len(one.stdout.splitlines()) == 6
    for bad in ("0", "x", "-1"):
        refused = subprocess.run(
            ["bash", "benchmarks/side_by_side.sh", "--print", str(tmp_path)],
            cwd=ROOT,
            env=dict(env, ROUNDS=bad),
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 2 and f"ROUNDS={bad}" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    without = subprocess.run(
        ["bash", "benchmarks/side_by_side.sh", "--print", str(tmp_path)],
        cwd=ROOT,
        env=dict(os.environ, PYTHON="py"),
        capture_output=True,
        text=True,
    )
    assert "real_data_speed" not in without.stdout and "pipeline" not in without.stdout


def _have_torch() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


SLOW_THROUGHPUT = """#!/usr/bin/env bash
# The interpreter, except that benchmarks.throughput prints one figure and then hangs.
if [[ "$*" == *benchmarks.throughput* ]]; then
    echo '{"figure": "train_tokens_per_s", "value": 1.0, "unit": "tokens/s", "impl": "x"}'
    exec sleep 600
fi
exec PYTHON_BIN "$@"
"""


def test_gpu_script_runs_only_the_runs_named_in_only(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, ONLY="jax_big_nodropout torch_eager_big")
    command = ["bash", "benchmarks/gpu_side_by_side.sh", "--dry_run", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = sorted(p.stem for p in tmp_path.glob("*.jsonl"))
    assert ran == (
        ["jax_big_nodropout", "torch_eager_big"] if _have_torch() else ["jax_big_nodropout"]
    )
    assert "| `train_tokens_per_s` | big-nodropout |" in (tmp_path / "table.md").read_text()


def test_gpu_script_cuts_a_run_at_its_hard_limit_and_keeps_its_figures(tmp_path):
    """A run still going at HARD_S is stopped there: its printed figure stays in its file,
    the cut is listed, every later run is skipped, and the call ends soon after HARD_S."""
    fake = tmp_path / "python"
    fake.write_text(SLOW_THROUGHPUT.replace("PYTHON_BIN", sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=str(fake), BUDGET_S="1000", HARD_S="25")
    command = ["bash", "benchmarks/gpu_side_by_side.sh", "--dry_run", str(out)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    skipped = (out / "skipped.txt").read_text().splitlines()
    assert skipped[0] == "jax_big_1 (cut at 25 s)", skipped
    assert all("skipped at" in line or "PyTorch" in line for line in skipped[1:])
    assert json.loads((out / "jax_big_1.jsonl").read_text())["value"] == 1.0


@pytest.mark.slow
def test_gpu_script_dry_run_writes_every_file_and_the_table(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    command = ["bash", "benchmarks/gpu_side_by_side.sh", "--dry_run", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jax" in (tmp_path / "setup.txt").read_text()
    sizes = {
        "jax_big_1": ("big", "threefry"),  # auto: threefry on the CPU
        "jax_base_1": ("base", "threefry"),
        "jax_big_threefry": ("big-threefry", "threefry"),
        "jax_big_fused_qkv": ("big-fused-qkv", "threefry"),
        "jax_big_bf16_logits": ("big-bf16-logits", "threefry"),
        "jax_big_nodropout": ("big-nodropout", "threefry"),
        "jax_big_xla": ("big-xla-attention", "threefry"),
    }
    for name, (size, bits) in sizes.items():
        records = {r["figure"]: r for r in map(json.loads, (tmp_path / f"{name}.jsonl").open())}
        setup = records["setup"]
        assert (setup["size"], setup["dropout_bits"], setup["dtype"]) == (size, bits, "bfloat16")
        assert setup["attention_impl"] == "xla"
        assert records["train_tokens_per_s"]["size"] == size
        assert records["train_tokens_per_s"]["value"] > 0 < records["mfu"]["value"]
    big = [json.loads(line) for line in (tmp_path / "jax_big_1.jsonl").open()]
    assert any(r["figure"] == "decode_beam4_sentences_per_s_8" for r in big)  # round 1 decodes
    profile = [json.loads(line) for line in (tmp_path / "profile_big.jsonl").open()]
    kinds = {r["kind"] for r in profile if r["figure"] == "step_kind_ms"}
    assert {"matrix products", "dropout random bits", "optimizer update"} <= kinds
    table = (tmp_path / "table.md").read_text()
    assert "| `train_tokens_per_s` | big | tokens/s |" in table
    assert "| Transformer-big MFU |" in table and "| matrix products |" in table
    peer_files = ("torch_compiled_big_1", "torch_compiled_base_1", "torch_eager_base")
    skipped = (tmp_path / "skipped.txt").read_text()
    if _have_torch():
        assert skipped == ""
        compiled = [json.loads(line) for line in (tmp_path / "torch_compiled_big_1.jsonl").open()]
        assert {r["impl"] for r in compiled} == {"torch-marian-compiled"}
        assert "| `train_tokens_per_s` | big | tokens/s |" in table and "x |" in table
    else:
        assert all(f"{name} (skipped: PyTorch" in skipped for name in peer_files)


@pytest.mark.slow  # a minute of products in five implementations
def test_matmul_shapes_reports_every_shape_and_impl():
    impls = ["xla", "xla_1thread", "xla_nk", "xla_int8", "xla_bf16", "numpy"]
    try:
        import torch  # noqa: F401

        impls += ["torch_1thread", "torch_linear"]
    except ImportError:  # the bench extra is not installed
        pass
    options = ["--shapes", "decode32,train", "--weights", "cached,streamed", "--stream_mib", "32"]
    proc = run(
        [*MATMUL, "--json", *options, "--repeats", "1", "--impls", ",".join(impls)], check=True
    )
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    products = [r for r in records if "gflops_" in r["figure"]]
    decode = [f"32x{k}x{n}" for k, n in ((512, 512), (512, 2048), (2048, 512), (512, 8000))]
    train = ["4096x512x2048", "4096x2048x512", "4096x512x8000"]
    assert sorted((r["impl"], r["figure"]) for r in products) == sorted(
        [(impl, f"matmul_gflops_{s}") for impl in impls for s in decode + train]
        + [(impl, f"matmul_streamed_gflops_{s}") for impl in impls for s in decode]
    )  # streamed weights only for the decode shapes
    for r in products:  # the figure is the FLOP count over the timed median of one product
        m, k, n = map(int, r["figure"].rsplit("_", 1)[1].split("x"))
        assert r["value"] == pytest.approx(2 * m * k * n / r["median_s"] / 1e9, rel=1e-3)
        width = {"xla_int8": 1, "xla_bf16": 2}.get(r["impl"], 4)  # bytes per weight
        assert r["weight_gbs"] == pytest.approx(k * n * width / r["median_s"] / 1e9, rel=1e-3)
        if r["weights"] == "streamed":  # the ring holds --stream_mib of float32 weights
            assert r["ring"] == 32 * 2**20 // (4 * k * n)
        else:
            assert r["ring"] == 1
    assert records[0]["figure"] == "setup" and "loadavg_1m" in records[0]
    bandwidth = next(r for r in records if r["figure"] == "memory_read_gbs")
    assert bandwidth["value"] > 0 and bandwidth["bytes"] == 32 * 2**20


@pytest.mark.slow
def test_decode_ab_alternates_arms_and_reports_speedups_against_the_first():
    tiny = [a for a in TINY if a not in ("--json", "--steps=2")]
    arm_list = "weight_layout=none;weight_layout=out_in;quantize=int8"
    options = ["--modes", "greedy", "--rounds", "2", "--decode_len", "8", "--arms", arm_list]
    proc = run([*DECODE_AB, *tiny, "--json", *options], check=True)
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[0]["figure"] == "setup" and records[0]["rounds"] == 2
    calls = {r["arm"]: r for r in records if r["figure"] == "decode_ab_call_s"}
    speedups = {r["arm"]: r for r in records if r["figure"] == "decode_ab_speedup"}
    arms = ["weight_layout=none", "weight_layout=out_in", "quantize=int8"]
    assert list(calls) == list(speedups) == arms
    for arm in arms:  # the first arm's median call over this arm's
        want = calls[arms[0]]["value"] / calls[arm]["value"]
        assert speedups[arm]["value"] == pytest.approx(want, rel=1e-6)
        assert calls[arm]["min_s"] <= calls[arm]["value"] <= calls[arm]["max_s"]
    assert speedups[arms[0]]["tokens_agree"] == 1.0
    assert speedups["weight_layout=out_in"]["tokens_agree"] == 1.0  # the same products
    bad = run([*DECODE_AB, *tiny, "--arms", "beam=3;"], check=False)
    assert bad.returncode == 2 and "error: --arms: 'beam=3'" in bad.stderr
    assert "Traceback" not in bad.stderr


ITERATOR = ["-m", "benchmarks.experiments.iterator_speed", "--config", "configs/default.py"]
SMALL_DATA = [
    "--config.data.vocab_size=200",
    "--config.data.synthetic_train_size=600",
    "--config.data.synthetic_eval_size=20",
    "--config.train.batch_size=16",
]


def test_iterator_speed_counts_one_pair_per_padded_row_and_more_when_packed(tmp_path):
    """Padded batches hold exactly batch_size pairs a batch; packed rows hold several."""
    found = {}
    for batching in ("pad", "pack"):
        options = [f"--config.data.batching={batching}", "--workdir", str(tmp_path / batching)]
        proc = run([*ITERATOR, *SMALL_DATA, *options, "--batches", "3", "--json"], check=True)
        records = [json.loads(line) for line in proc.stdout.splitlines()]
        assert records[0]["figure"] == "setup" and records[0]["batching"] == batching
        found[batching] = {r["figure"]: r["value"] for r in records[1:]}
    assert found["pad"]["pairs_per_batch"] == 16
    assert found["pack"]["pairs_per_batch"] > 16
    for figures in found.values():
        rate = figures["iterator_pairs_per_s"] / figures["iterator_batches_per_s"]
        assert rate == pytest.approx(figures["pairs_per_batch"], rel=1e-9)
        assert 2 < figures["target_tokens_per_pair"] <= 48  # configs/default.py's max_target_len
    bad = run([*ITERATOR, "--workdir", str(tmp_path), "--batches", "0"], check=False)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in bad.stderr


def test_prepare_ab_times_weights_built_once_against_built_in_every_call():
    """Both programs decode the same tokens (the copies are the same whether built before
    or inside the call); the speedup is per_call's median over once's."""
    tiny = [a for a in TINY if a not in ("--json", "--steps=2")]
    arms = "weight_layout=auto;quantize=int8,encoder_quantize=bfloat16"
    options = ["--modes", "greedy,beam4", "--rounds", "1", "--decode_len", "8", "--arms", arms]
    proc = run([*PREPARE_AB, *tiny, "--json", *options], check=True)
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[0]["figure"] == "setup" and records[0]["arms"] == arms.split(";")
    for mode in ("greedy", "beam4"):
        for arm in arms.split(";"):
            mine = [r for r in records if r.get("mode") == mode and r.get("arm") == arm]
            calls = {r["impl"]: r["value"] for r in mine if r["figure"] == "prepare_ab_call_s"}
            (speedup,) = [r for r in mine if r["figure"] == "prepare_ab_speedup"]
            assert speedup["value"] == pytest.approx(calls["per_call"] / calls["once"], 1e-6)
            assert speedup["tokens_agree"] == 1.0, (mode, arm)
            (prepare,) = [r for r in mine if r["figure"] == "prepare_s"]
            assert prepare["value"] > 0


FAKE_BENCH = """import json, os, sys
rate = 2.0 if os.environ.get("FAKE_SPEED") == "fast" else 1.0
rate *= 3.0 if "--triple" in sys.argv else 1.0
print(json.dumps({"figure": "setup", "value": 0, "unit": "-", "impl": "x"}))
print(json.dumps({"figure": "tokens_per_s", "value": 100 * rate, "unit": "tokens/s", "impl": "x"}))
print(json.dumps({"figure": "call_s", "value": 3.0 / rate, "unit": "s", "impl": "x"}))
"""


def test_env_ab_runs_each_arm_in_its_environment_and_inverts_times():
    """A command whose speed the environment sets: the fast arm is 2x on both figures (its
    rate doubles, its time halves) and an arm equal to the first is 1x."""
    arms = "FAKE_SPEED=slow;FAKE_SPEED=fast;FAKE_SPEED=slow;FAKE_SPEED=slow --triple"
    command = [sys.executable, "-c", FAKE_BENCH, "--"]
    proc = run(["-m", "benchmarks.experiments.env_ab", "--arms", arms, "--json", "--", *command])
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    speedups = [r for r in records if r["figure"] == "env_ab_speedup"]
    by = {(r["figure_of"], r["arm"]): r["value"] for r in speedups}
    assert by == {
        ("call_s", "FAKE_SPEED=fast"): 2.0,
        ("call_s", "FAKE_SPEED=slow"): 1.0,
        ("tokens_per_s", "FAKE_SPEED=fast"): 2.0,
        ("tokens_per_s", "FAKE_SPEED=slow"): 1.0,
        ("call_s", "FAKE_SPEED=slow --triple"): 3.0,  # an argument appended to the command
        ("tokens_per_s", "FAKE_SPEED=slow --triple"): 3.0,
    }
    bad = run(["-m", "benchmarks.experiments.env_ab", "--arms", "NOEQUALS", "--", *command])
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_bench_real_config_is_the_studys_post_ln_run():
    """configs/bench_real.py rebuilds the run the sweep trained as post_ln/lr_x2/1: every
    override the sweep recorded for that run (its status.json) has that value, and every
    other field is configs/multi30k.py's."""
    from transformer import load_config_file

    built = load_config_file(os.path.join(ROOT, "configs/bench_real.py"))
    base = load_config_file(os.path.join(ROOT, "configs/multi30k.py"))
    study = os.path.join(ROOT, "studies/multi30k_architecture_2026_12/post_ln/lr_x2/1/status.json")
    with open(study, encoding="utf-8") as f:
        overrides = json.load(f)["overrides"]
    for section in built:
        for key in built[section]:
            name = f"{section}.{key}"
            assert built[section][key] == overrides.get(name, base[section][key]), name
