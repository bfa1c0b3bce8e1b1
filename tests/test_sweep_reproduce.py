"""transformer-sweep --reproduce: the draw over arms, and real reruns from recorded configs
matching their runs to the bit, with planted damage and planted setup differences."""

import argparse
import csv
import json
import os
import shutil
import subprocess

import pytest

from tests.helpers import ROOT
from tests.test_sweep import TINY
from transformer.cli import sweep as sweep_cli
from transformer.common.errors import UserError
from transformer.research.sweep import reproduce
from transformer.research.sweep.runs import Run


def _runs(arms: int, seeds: int) -> list[Run]:
    return [
        Run(f"arm{a}", s, f"/w/arm{a}/{s}", {}, {}, "base.py", "test")
        for a in range(arms)
        for s in range(seeds)
    ]


def test_the_draw_covers_every_arm_before_any_twice_and_is_seeded():
    runs = _runs(arms=4, seeds=5)
    for seed in range(20):
        chosen = reproduce.choose(runs, 4, seed)
        assert sorted(r.variant for r in chosen) == [f"arm{a}" for a in range(4)]
        six = reproduce.choose(runs, 6, seed)
        counts = sorted([r.variant for r in six].count(f"arm{a}") for a in range(4))
        assert counts == [1, 1, 2, 2] and len({r.workdir for r in six}) == 6
        assert reproduce.choose(runs, 6, seed) == six  # the same seed, the same runs
    draws = {tuple(r.workdir for r in reproduce.choose(runs, 4, s)) for s in range(20)}
    assert len(draws) > 10  # the seed moves the draw
    for bad, message in ((0, "positive number"), (21, "only 20 finished")):
        with pytest.raises(UserError, match=message):
            reproduce.choose(runs, bad, 0)


def _sweep(tmp_path) -> str:
    overrides = {**TINY, "model.dropout_rate": 0.1}  # dropout's masks must rerun alike too
    path = tmp_path / "sweep_cfg.py"
    path.write_text(
        "def get_config():\n"
        f"    return {{'base': 'configs/default.py', 'overrides': {overrides!r},\n"
        "            'variants': {'pre': {}, 'post': {'model.norm_position': 'post'}},\n"
        "            'seeds': [0], 'eval_split': 'test', 'parallel': 2}\n"
    )
    return str(path)


def _verdicts(scratch) -> dict[str, str]:
    with open(os.path.join(scratch, "reproduce.csv")) as f:
        return {r["variant"]: r["verdict"] for r in csv.DictReader(f)}


@pytest.mark.slow
def test_reruns_from_recorded_configs_match_to_the_bit_and_damage_is_caught(tmp_path, capsys):
    config, workdir = _sweep(tmp_path), str(tmp_path / "study")
    args = ["--config", config, "--workdir", workdir, "--poll_s", "1"]
    assert sweep_cli.main(args) == 0
    # The sweep config changes after the study ran: the reruns must train what each run
    # recorded, not today's config.
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("'train.learning_rate': 0.003", "'train.learning_rate': 0.01"))
    scratch = os.path.join(workdir, "reproduce")
    assert sweep_cli.main([*args, "--reproduce", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 rerun(s) bit-identical to the recorded run" in out
    assert _verdicts(scratch) == {"pre": "bit-identical", "post": "bit-identical"}
    rendered = f"--workdir {workdir} --reproduce 2 --reproduce_seed 0`"  # default scratch
    assert rendered in open(os.path.join(scratch, "reproduce.md")).read()
    for variant in ("pre", "post"):
        rerun = json.load(open(os.path.join(scratch, variant, "0", "config.json")))
        assert rerun["train"]["learning_rate"] == 0.003

    # Planted damage: a recorded BLEU off by 0.5 on the same code, libraries and machine.
    record_path = os.path.join(workdir, "pre", "0", "eval", "test.json")
    record = json.load(open(record_path))
    json.dump({**record, "bleu": record["bleu"] + 0.5}, open(record_path, "w"))
    assert sweep_cli.main([*args, "--reproduce", "2"]) == 1  # reruns resume: read, not run
    assert "DIFFER on the same code, libraries and machine" in capsys.readouterr().out
    with open(os.path.join(scratch, "reproduce.csv")) as f:
        pre = next(r for r in csv.DictReader(f) if r["variant"] == "pre")
    assert float(pre["bleu_difference"]) == pytest.approx(-0.5)
    json.dump(record, open(record_path, "w"))

    # Planted setup differences: 'post' recorded as run by other code, 'pre' with no
    # provenance. Identical figures stay bit-identical; a difference is reported with what
    # differs in the setup, and is no failure.
    provenance_path = os.path.join(workdir, "post", "0", "provenance.json")
    starts = json.load(open(provenance_path))
    starts["starts"][-1]["code"]["source_sha256"] = "0" * 64
    json.dump(starts, open(provenance_path, "w"))
    os.remove(os.path.join(workdir, "pre", "0", "provenance.json"))
    assert sweep_cli.main([*args, "--reproduce", "2"]) == 0
    assert _verdicts(scratch) == {"pre": "bit-identical", "post": "bit-identical"}
    with open(os.path.join(scratch, "reproduce.csv")) as f:
        setups = {r["variant"]: r["setup_differs"] for r in csv.DictReader(f)}
    assert setups == {"pre": "not recorded", "post": "code"}
    post_path = os.path.join(workdir, "post", "0", "eval", "test.json")
    post = json.load(open(post_path))
    json.dump({**post, "bleu": post["bleu"] + 1.0}, open(post_path, "w"))
    json.dump({**record, "bleu": record["bleu"] + 1.0}, open(record_path, "w"))
    assert sweep_cli.main([*args, "--reproduce", "2"]) == 0
    assert _verdicts(scratch) == {
        "pre": "differs (the recorded run has no provenance)",
        "post": "differs (other code)",
    }


def test_the_rendered_reproduce_command_names_a_scratch_directory_it_was_given():
    args = argparse.Namespace(
        config="c.py", workdir="study", reproduce=3, reproduce_seed=7, scratch="/elsewhere"
    )
    expected = "--workdir study --reproduce 3 --reproduce_seed 7 --scratch /elsewhere"
    assert sweep_cli._reproduce_command(args).endswith(expected)


def test_the_generated_config_module_passes_the_projects_lint_however_deep_the_study(tmp_path):
    """A study kept inside a linted repository (as studies/ is) commits the modules that
    --reproduce writes: ruff, with this project's settings, finds nothing in one written for
    a run directory whose path is far longer than a line."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    sweep_dir = tmp_path / ("a_study_directory_with_a_long_name_" * 3)
    run_dir = sweep_dir / "a_variant_with_a_long_name" / "lr_x2" / "1001"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text("{}", encoding="utf-8")
    run = Run("a_variant_with_a_long_name", 1001, str(run_dir), {}, {}, "base.py", "test")
    rerun = reproduce.rerun_of(run, str(sweep_dir), str(tmp_path / "scratch"))
    assert len(str(run_dir / "config.json")) > 100
    result = subprocess.run(
        [ruff, "check", "--no-cache", "--config", os.path.join(ROOT, "pyproject.toml"), rerun.base],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout
