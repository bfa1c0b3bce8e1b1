"""benchmarks/table.py: figures from both scripts' JSON lines side by side, targets judged."""

import glob
import json
import os
import re
import shutil

from benchmarks import table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path, records, noise=True):
    lines = ["compiling...", "not json {"] if noise else []
    lines += [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def fig(impl, figure, value, unit="tokens/s"):
    return {"figure": figure, "value": value, "unit": unit, "impl": impl}


def test_table_ratios_and_targets(tmp_path, capsys):
    ours = _write(
        tmp_path / "jax.jsonl",
        [
            fig(table.OURS, "train_tokens_per_s", 660.0),
            fig(table.OURS, "mfu", 0.75, "fraction"),
            fig(table.OURS, "train_real_tokens_per_s", 300.0),
            fig(table.OURS, "train_padded_real_tokens_per_s", 100.0),
            fig(table.OURS, "padding_fraction", 0.08, "fraction"),
        ],
    )
    peer = _write(tmp_path / "torch.jsonl", [fig(table.PEER, "train_tokens_per_s", 600.0)])
    assert table.main([ours, peer]) == 0
    out = capsys.readouterr().out
    assert "| `train_tokens_per_s` | tokens/s | 660.0 | 600.0 | 1.10x |" in out
    assert "| training tokens/s vs MarianMT (milestone) | 1.10x | >= 1x | yes |" in out
    assert "| training tokens/s vs MarianMT (goal) | 1.10x | >= 1.2x | no |" in out
    assert "| MFU (fraction of the measured matmul peak) | 0.750 | >= 0.7 | yes |" in out
    assert "| real-data tokens/s, packed vs padded batches | 3.00x | >= 1.5x | yes |" in out
    assert "| padding fraction of packed batches | 0.080 | <= 0.05 | no |" in out
    assert "| greedy tokens/s vs generate() | not measured |" in out


def test_table_into_readme_section_and_errors(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- report:Perf:start -->\nold\n<!-- report:Perf:end -->\ny\n")
    ours = _write(tmp_path / "a.jsonl", [fig(table.OURS, "train_tokens_per_s", 1.0)])
    assert table.main([ours, "--readme", str(readme), "--section", "Perf"]) == 0
    text = readme.read_text()
    assert "old" not in text and "`train_tokens_per_s`" in text and text.endswith("y\n")
    empty = _write(tmp_path / "b.jsonl", [], noise=True)
    for args in ([str(tmp_path / "missing.jsonl")], [empty]):
        try:
            table.main(args)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError("expected exit 2")
    err = capsys.readouterr().err
    assert "missing.jsonl does not exist" in err and "no benchmark figures" in err


def test_peak_memory_row_per_kind_of_run(tmp_path, capsys):
    peak = lambda impl, mib, **kw: {**fig(impl, "peak_rss_mib", mib, "MiB"), **kw}  # noqa: E731
    ours = _write(
        tmp_path / "jax.jsonl",
        [
            fig(table.OURS, "train_tokens_per_s", 500.0),
            peak(table.OURS, 3000.0, what="train"),
            fig(table.OURS, "decode_greedy_tokens_per_s", 300.0),
            peak(table.OURS, 1700.0, what="decode"),
            # a later, smaller decoding run: the row keeps the larger peak
            fig(table.OURS, "decode_greedy_tokens_per_s", 310.0),
            peak(table.OURS, 1300.0, what="decode"),
        ],
    )
    # Older files carry no `what`: the run's parts come from the figures it printed before.
    peer = _write(
        tmp_path / "torch.jsonl",
        [
            fig(table.PEER, "train_tokens_per_s", 400.0),
            peak(table.PEER, 2800.0),
            fig(table.PEER, "decode_greedy_tokens_per_s", 250.0),
            peak(table.PEER, 1200.0),
        ],
    )
    assert table.main([ours, peer]) == 0
    out = capsys.readouterr().out
    assert "| `peak_rss_mib` (decode) | MiB | 1,700.0 | 1,200.0 |  |" in out
    assert "| `peak_rss_mib` (train) | MiB | 3,000.0 | 2,800.0 |  |" in out
    assert out.index("(decode)") > out.index("decode_greedy_tokens_per_s")  # after the figures


def test_real_data_rows_show_the_same_weights_ratio_and_their_own_peak(tmp_path, capsys):
    both = [(table.OURS, 30.0, 21.3, 300.0), (table.PEER, 12.0, 21.2, 900.0)]
    real = _write(
        tmp_path / "real.jsonl",
        [
            rec
            for impl, speed, bleu, mib in both
            for rec in (
                fig(impl, "greedy_sentences_per_s", speed, "sentences/s"),
                fig(impl, "greedy_bleu", bleu, "BLEU"),
                fig(impl, "peak_rss_mib", mib, "MiB"),
            )
        ]
        + [fig(table.PEER, "greedy_agreement", 0.978, "fraction")],
    )
    train = _write(
        tmp_path / "jax.jsonl",
        [fig(table.OURS, "train_tokens_per_s", 1.0), fig(table.OURS, "peak_rss_mib", 50.0, "MiB")],
    )
    assert table.main([train, real]) == 0
    out = capsys.readouterr().out
    assert "| `greedy_sentences_per_s` | sentences/s | 30.0 | 12.0 | 2.50x |" in out
    assert "| `greedy_bleu` | BLEU | 21.3 | 21.2 |  |" in out  # BLEU is no speed: no ratio
    assert "| `greedy_agreement` | fraction |  | 0.978 |  |" in out
    assert "| `peak_rss_mib` (real_data) | MiB | 300.0 | 900.0 |  |" in out
    assert "| `peak_rss_mib` (train) | MiB | 50.0 |  |  |" in out


def test_ratios_from_a_run_started_on_a_busy_machine_are_withheld(tmp_path, capsys):
    def setup(impl, load):
        return {**fig(impl, "setup", 0, "-"), "cpus": 2, "loadavg_1m": load}

    quiet = [
        setup(table.OURS, 0.4),
        fig(table.OURS, "train_tokens_per_s", 660.0),
        fig(table.OURS, "mfu", 0.75, "fraction"),
    ]
    ours = _write(tmp_path / "jax.jsonl", quiet)
    peer = _write(
        tmp_path / "torch.jsonl",
        [
            setup(table.PEER, 1.82),  # 0.91 per core: busy
            fig(table.PEER, "train_tokens_per_s", 600.0),
        ],
    )
    assert table.main([ours, peer]) == 0
    out = capsys.readouterr().out
    assert "| `train_tokens_per_s` | tokens/s | 660.0 | 600.0 | busy |" in out
    assert "| training tokens/s vs MarianMT (milestone) | withheld (busy) | >= 1x |  |" in out
    assert "| MFU (fraction of the measured matmul peak) | 0.750 | >= 0.7 | yes |" in out
    assert "the run in `torch.jsonl` started at load average 1.82 on 2 cores" in out
    peer = _write(
        tmp_path / "torch.jsonl",
        [
            setup(table.PEER, 1.0),  # exactly 0.5 per core
            fig(table.PEER, "train_tokens_per_s", 600.0),
        ],
    )
    assert table.main([ours, peer]) == 0
    out = capsys.readouterr().out
    assert "| 1.10x |" in out and "busy" not in out and "Withheld" not in out


def test_rounds_pair_side_by_side_and_a_target_needs_its_whole_spread(tmp_path, capsys):
    ours, peer = [600.0, 700.0, 800.0], [500.0, 700.0, 400.0]
    files = []
    for k, (a, b) in enumerate(zip(ours, peer, strict=True)):  # A B A B A B, as side_by_side.sh
        files.append(
            _write(tmp_path / f"jax_{k}.jsonl", [fig(table.OURS, "train_tokens_per_s", a)])
        )
        files.append(
            _write(tmp_path / f"torch_{k}.jsonl", [fig(table.PEER, "train_tokens_per_s", b)])
        )
    assert table.main(files) == 0
    out = capsys.readouterr().out
    # Round ratios 1.2, 1.0, 2.0: median 1.2, not median/median (700 / 500 = 1.4).
    row = "| `train_tokens_per_s` | tokens/s | 700.0 (600.0-800.0) | 500.0 (400.0-700.0) |"
    assert f"{row} 1.20x (1.00x-2.00x) |" in out
    assert (
        "| training tokens/s vs MarianMT (milestone) | 1.20x (1.00x-2.00x) | >= 1x | yes |" in out
    )
    goal = "| training tokens/s vs MarianMT (goal) | 1.20x (1.00x-2.00x) | >= 1.2x | unsettled |"
    assert goal in out
    files[-1] = _write(tmp_path / "torch_2.jsonl", [fig(table.PEER, "train_tokens_per_s", 900.0)])
    assert table.main(files) == 0  # ratios 1.2, 1.0, 0.89: the median 1.0 misses the goal
    out = capsys.readouterr().out
    assert "| training tokens/s vs MarianMT (goal) | 1.00x (0.89x-1.20x) | >= 1.2x | no |" in out
    assert (
        "| training tokens/s vs MarianMT (milestone) | 1.00x (0.89x-1.20x) | >= 1x | unsettled |"
        in out
    )


def test_int8_and_ctranslate2_columns_with_their_targets(tmp_path, capsys):
    """Columns ours, MarianMT, ours int8, CTranslate2 float32 / int8 in that order; the int8
    targets are ours-int8 over generate(), the CTranslate2 ratios stated without a target,
    and the int8 BLEU budget a difference (int8 minus float32), met when >= -0.3."""
    greedy = "decode_greedy_tokens_per_s"
    files = [
        _write(tmp_path / "jax.jsonl", [fig(table.OURS, greedy, 300.0)]),
        _write(tmp_path / "int8.jsonl", [fig(table.OURS_INT8, greedy, 450.0)]),
        _write(tmp_path / "torch.jsonl", [fig(table.PEER, greedy, 100.0)]),
        _write(
            tmp_path / "ct2.jsonl",
            [fig(table.CT2_FLOAT32, greedy, 600.0), fig(table.CT2_INT8, greedy, 900.0)],
        ),
        _write(
            tmp_path / "real.jsonl",
            [
                fig(table.OURS, "greedy_bleu", 21.0, "BLEU"),
                fig(table.OURS_INT8, "greedy_bleu", 20.6, "BLEU"),
            ],
        ),
    ]
    assert table.main(files) == 0
    out = capsys.readouterr().out
    header = "| figure | unit | jax-transformer | torch-marian | jax-transformer-int8 |"
    assert out.startswith(header + " ctranslate2-float32 | ctranslate2-int8 | ratio |")
    assert f"| `{greedy}` | tokens/s | 300.0 | 100.0 | 450.0 | 600.0 | 900.0 | 3.00x |" in out
    assert "| greedy tokens/s vs generate() | 3.00x | >= 2x | yes |" in out
    assert "| int8 greedy tokens/s vs generate() | 4.50x | >= 3x | yes |" in out
    assert "| greedy tokens/s vs ctranslate2-float32 | 0.50x | (stated) |  |" in out
    assert "| greedy tokens/s vs ctranslate2-int8 | 0.50x | (stated) |  |" in out
    assert "| real-data greedy BLEU, int8 minus float32 | -0.40 | >= -0.3 | no |" in out
    assert "| sampling tokens/s vs ctranslate2-int8 | not measured | (stated) | |" in out
    spread = table._spread_cell([-0.3, -0.1, -0.2], lambda v: f"{v:+.2f}")
    assert spread == "-0.20 (-0.30 to -0.10)"
    assert table._spread_cell([1.0, 3.0, 2.0], table._ratio) == "2.00x (1.00x-3.00x)"


def sized(impl, figure, value, size, unit="tokens/s", **extra):
    return {**fig(impl, figure, value, unit), "size": size, **extra}


def test_gpu_table_rows_by_size_ratios_to_compiled_peer_targets_and_profile(tmp_path, capsys):
    """Two rounds at two sizes with set values: ratios are ours over compiled MarianMT round
    by round, the targets judged on every round, the profile's kinds sorted by time."""
    files = []
    for k, (big_ours, base_ours) in enumerate(((650.0, 1500.0), (700.0, 1400.0)), 1):
        ours = [
            sized(table.OURS, "train_tokens_per_s", big_ours, "big"),
            sized(table.OURS, "mfu", 0.40, "big", "fraction"),
            sized(table.OURS, "train_tokens_per_s", base_ours, "base"),
            sized(table.OURS, "mfu", 0.31, "base", "fraction"),
        ]
        peer = [
            sized(table.PEER_COMPILED, "train_tokens_per_s", 500.0, "big"),
            sized(table.PEER_COMPILED, "train_tokens_per_s", 1000.0, "base"),
            sized(table.PEER, "train_tokens_per_s", 250.0, "big"),
        ]
        files += [
            _write(tmp_path / f"jax_{k}.jsonl", ours),
            _write(tmp_path / f"pt_{k}.jsonl", peer),
        ]
    profile = [
        {**fig(table.OURS, "step_kind_ms", 2.0, "ms"), "kind": "dropout random bits", "share": 0.1},
        {**fig(table.OURS, "step_kind_ms", 14.0, "ms"), "kind": "matrix products", "share": 0.7},
    ]
    files.append(_write(tmp_path / "profile.jsonl", profile))
    assert table.main(files) == 0
    out = capsys.readouterr().out
    # big: 650/500 = 1.30x, 700/500 = 1.40x; base: 1.50x, 1.40x
    assert (
        "| `train_tokens_per_s` | big | tokens/s | 675.0 (650.0-700.0) | 250.0 (250.0-250.0) "
        "| 500.0 (500.0-500.0) | 1.35x (1.30x-1.40x) |"
    ) in out
    big_target = "| Transformer-big training tokens/s vs compiled MarianMT | 1.35x (1.30x-1.40x)"
    assert f"{big_target} | >= 1.3x | yes |" in out
    assert "| Transformer-big MFU | 0.400 (0.400-0.400) | >= 0.45 | no |" in out
    base_target = "| Transformer-base training tokens/s vs compiled MarianMT | 1.45x (1.40x-1.50x)"
    assert f"{base_target} | >= 1.5x | no |" in out
    assert "| Transformer-base MFU | 0.310 (0.310-0.310) | >= 0.3 | yes |" in out
    assert out.index("| base |") < out.index("| big |")  # base rows first
    kinds = out[out.index("| profiled step") :]
    assert kinds.index("| matrix products | 14.0 | 70.0% |") < kinds.index(
        "| dropout random bits | 2.00 | 10.0% |"
    )


def test_a_matrix_side_recorded_as_size_is_no_model_size(tmp_path, capsys):
    # Files written before throughput_train.py named it `matmul_size` carry the peak
    # product's matrix side as an integer `size`; they render as CPU tables.
    ours = _write(
        tmp_path / "jax.jsonl",
        [
            fig(table.OURS, "train_tokens_per_s", 660.0),
            {**fig(table.OURS, "matmul_peak_gflops", 360.0, "GFLOP/s"), "size": 2048},
        ],
    )
    assert table.main([ours]) == 0
    out = capsys.readouterr().out
    assert "| `matmul_peak_gflops` | GFLOP/s | 360.0 |" in out and "[2048]" not in out
    assert "| figure | unit | jax-transformer | ratio |" in out


def _rendering_commands() -> list[tuple[str, list[str]]]:
    """(page, arguments) of every `python -m benchmarks.table ... --readme ...` the README
    and docs/ state."""
    found = []
    for page in ["README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for command in re.findall(r"`python -m benchmarks\.table\s([^`]*--readme[^`]*)`", text):
            found.append((page, command.split()))
    return found


def test_each_rendered_performance_section_is_its_command_on_the_committed_files(tmp_path, capsys):
    """A section whose page names its rendering command reads what that command writes now
    from the committed files."""
    commands = _rendering_commands()
    assert any(page == "README.md" for page, _ in commands)
    for page, args in commands:
        at = args.index("--readme")
        target = args[at + 1]
        copy = tmp_path / os.path.basename(target)
        shutil.copy(os.path.join(ROOT, target), copy)
        files = [f for a in args[:at] for f in sorted(glob.glob(os.path.join(ROOT, a)))]
        assert files, f"{page}: {' '.join(args)} names no committed file"
        assert table.main([*files, "--readme", str(copy), *args[at + 2 :]]) == 0
        assert capsys.readouterr().out.endswith(" unchanged\n"), f"{page}: {' '.join(args)}"
