"""Per-variant learning-rate grids: config checks, the runs they plan, the choice on
validation loss (never test BLEU), the sensitivity figure and the report."""

import csv
import json
import os
import random

import pytest

from transformer.common.errors import UserError
from transformer.research import sweep as sw
from transformer.research.sweep.lr_grid import Choice, GridPoint, choose
from transformer.research.sweep.results import aggregate, write_report
from transformer.research.sweep.runs import Run

SWEEP = """
def get_config():
    return {{'base': 'configs/default.py',
            'overrides': {{'train.learning_rate': 0.002, 'train.num_steps': 10}},
            'variants': {{'base': {{}}, 'post': {{'model.norm_position': 'post'}},
                         'slow': {{'train.learning_rate': 0.0005}}}},
            'seeds': [0, 1], {grid}}}
"""


def _sweep_file(tmp_path, grid: str) -> str:
    path = tmp_path / "sweep_cfg.py"
    path.write_text(SWEEP.format(grid=grid))
    return str(path)


@pytest.mark.parametrize(
    "grid, message",
    [
        ("'lr_grid': {'scales': [1, 2]}", "3-5 distinct scales"),
        ("'lr_grid': {'scales': [0.25, 0.5, 1, 2, 4, 8]}", "3-5 distinct scales"),
        ("'lr_grid': {'scales': [0.5, 1, 3]}", "log-spaced"),
        ("'lr_grid': {'scales': [2, 4, 8]}", "include 1.0"),
        ("'lr_grid': {'scales': [-1, 1, 2]}", "positive"),
        ("'lr_grid': {'scales': ['a', 1, 2]}", "numbers"),
        ("'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['nope']}", "not variants"),
        ("'lr_grid': {'scale': [0.5, 1, 2]}", "lr_grid must be"),
    ],
)
def test_bad_lr_grids_are_user_errors(tmp_path, grid, message):
    with pytest.raises(UserError, match=message):
        sw.load_sweep(_sweep_file(tmp_path, grid))


def test_grid_points_scale_each_variants_own_learning_rate(tmp_path):
    path = _sweep_file(tmp_path, "'lr_grid': {'scales': [2, 0.5, 1], 'variants': ['base', 'slow']}")
    sweep = sw.load_sweep(path)
    assert sweep.lr_grid == {"base": [0.5, 1.0, 2.0], "slow": [0.5, 1.0, 2.0]}
    runs = sw.plan_runs(sweep, str(tmp_path / "w"))
    assert len(runs) == 2 * (3 + 1 + 3)  # seeds x (base grid + post + slow grid)
    by_key = {(r.variant, r.lr_scale, r.seed): r for r in runs}
    for variant, own in (("base", 0.002), ("slow", 0.0005)):
        for scale in (0.5, 2.0):
            run = by_key[(variant, scale, 1)]
            assert run.overrides["train.learning_rate"] == pytest.approx(own * scale)
            assert run.learning_rate == pytest.approx(own * scale)
            assert run.workdir == str(tmp_path / "w" / variant / f"lr_x{scale:g}" / "1")
            assert f"--config.train.learning_rate={own * scale!r}" in run.train_command()
            assert f"lr=x{scale:g}" in run.label
            assert run.config_error is None
        plain = by_key[(variant, 1.0, 0)]  # the variant's ordinary run, where it always was
        assert plain.workdir == str(tmp_path / "w" / variant / "0")
        assert plain.learning_rate == pytest.approx(own)
    assert ("post", 2.0, 0) not in by_key and by_key[("post", 1.0, 0)].learning_rate == 0.002


def _run(tmp_path, variant, scale, seed, *, valid_loss, hyps, refs, status="done"):
    """A run directory as train.py and eval.py leave it (or a diverged one)."""
    where = tmp_path / variant / f"x{scale:g}" / str(seed)
    (where / "eval").mkdir(parents=True)
    rows = [{"kind": "eval", "split": "valid", "step": 5, "loss": valid_loss + 1.0},
            {"kind": "eval", "split": "valid", "step": 10, "loss": valid_loss}]  # fmt: skip
    (where / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (where / "status.json").write_text(json.dumps({"status": status}))
    if status == "done":
        # A BLEU figure that names its run, to see which runs make a table row.
        record = {"step": 10, "bleu": 10 * scale + seed}
        (where / "eval" / "test.json").write_text(json.dumps(record))
        (where / "eval" / "test.hyp.txt").write_text("\n".join(hyps) + "\n")
        (where / "eval" / "test.ref.txt").write_text("\n".join(refs) + "\n")
    return Run(variant, seed, str(where), {}, {}, "base.py", "test", num_steps=10,
               lr_scale=scale, learning_rate=1e-3 * scale)  # fmt: skip


def _study(tmp_path):
    """'base' is best on validation at x2 and 'alt' at x0.5; on test each is worst there, so a
    choice made on test would differ. alt's x2 diverges."""
    rng = random.Random(0)
    words = "der die das Hund Katze sieht den roten Mann".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) for _ in range(30)]

    def noisy(p):
        return [" ".join(w if rng.random() > p else rng.choice(words) for w in r.split())
                for r in refs]  # fmt: skip

    valid = {("base", 0.5): [2.0, 2.2], ("base", 1.0): [1.8, 1.9], ("base", 2.0): [1.5, 1.6],
             ("alt", 0.5): [1.4, 1.5], ("alt", 1.0): [1.7, 1.8]}  # fmt: skip
    noise = {("base", 2.0): 0.6, ("alt", 0.5): 0.05}
    runs = []
    for (variant, scale), losses in valid.items():
        for seed, loss in enumerate(losses):
            hyps = noisy(noise.get((variant, scale), 0.3))
            runs.append(_run(tmp_path, variant, scale, seed, valid_loss=loss, hyps=hyps,
                             refs=refs))  # fmt: skip
    for seed in (0, 1):
        runs.append(_run(tmp_path, "alt", 2.0, seed, valid_loss=float("nan"), hyps=[],
                         refs=refs, status="diverged"))  # fmt: skip
    sweep = sw.Sweep(path="s.py", base="base.py", overrides={}, seeds=[0, 1],
                     eval_split="test", variants={"base": {}, "alt": {}}, eval_overrides={},
                     parallel=1, baseline="base",
                     lr_grid={"base": [0.5, 1.0, 2.0], "alt": [0.5, 1.0, 2.0]})  # fmt: skip
    return sweep, runs, valid


def test_each_variant_is_reported_at_its_best_validation_learning_rate(tmp_path):
    sweep, runs, valid = _study(tmp_path)
    table, per_run = aggregate(sweep, runs)
    rows = {r["variant"]: r for r in table}
    assert rows["base"]["lr_scale"] == 2.0 and rows["base"]["learning_rate"] == 2e-3
    assert rows["alt"]["lr_scale"] == 0.5 and rows["alt"]["learning_rate"] == 5e-4
    means = {k: sum(v) / 2 for k, v in valid.items()}
    assert rows["base"]["lr_sensitivity"] == pytest.approx(
        means[("base", 0.5)] - means[("base", 2.0)]
    )
    # The diverged x2 point is listed, never chosen, and outside the spread.
    assert rows["alt"]["lr_sensitivity"] == pytest.approx(means[("alt", 1.0)] - means[("alt", 0.5)])
    # The row's figures are the chosen point's seeds' (test.json BLEU = 10 x scale + seed).
    assert rows["base"]["bleu_mean"] == pytest.approx(20.5) and rows["base"]["done"] == 2
    assert rows["alt"]["bleu_mean"] == pytest.approx(5.5) and rows["alt"]["done"] == 2
    # The test comparison pairs the two chosen points.
    reported = [r for r in per_run if r["reported"]]
    assert {(r["variant"], r["lr_scale"]) for r in reported} == {("base", 2.0), ("alt", 0.5)}
    assert rows["alt"]["bleu_delta"] > 0  # alt's x0.5 outputs are the least noisy
    assert all(r["bleu_delta"] is None for r in per_run if not r["reported"])


def test_an_incomplete_grid_reports_the_variants_own_learning_rate(tmp_path):
    sweep, runs, _ = _study(tmp_path)
    unfinished = next(r for r in runs if (r.variant, r.lr_scale, r.seed) == ("base", 0.5, 1))
    os.remove(unfinished.eval_json)
    (tmp_path / "base" / "x0.5" / "1" / "status.json").write_text('{"status": "trained"}')
    choices = choose(sweep.lr_grid, aggregate(sweep, runs)[1])
    assert not choices["base"].complete and choices["base"].scale == 1.0
    assert choices["base"].sensitivity is None
    assert choices["alt"].complete and choices["alt"].scale == 0.5
    write_report(sweep, runs, str(tmp_path / "report"))
    md = (tmp_path / "report" / "results.md").read_text()
    assert "0.001 (x1, grid incomplete)" in md
    assert "diverged (2/2)" in md and "(1/2)" in md


def test_report_has_the_grid_columns_table_csv_and_plot(tmp_path):
    sweep, runs, valid = _study(tmp_path)
    write_report(sweep, runs, str(tmp_path / "report"))
    md = (tmp_path / "report" / "results.md").read_text()
    assert "| lr (best on valid) | valid-loss spread over lr grid |" in md
    base_row = next(line for line in md.splitlines() if line.startswith("| base |"))
    assert "| 0.002 (x2, top of grid) | 0.550 |" in base_row  # means 2.1, 1.85, 1.55
    alt_row = next(line for line in md.splitlines() if line.startswith("| alt |"))
    assert "(x0.5, bottom of grid)" in alt_row  # x2 diverged, yet x0.5 is still the edge
    grid_row = [line for line in md.splitlines() if line.startswith("| base | ")][-1]
    assert "**1.550 ± 0.071**" in grid_row  # the grid table, chosen point in bold
    with open(tmp_path / "report" / "lr_grid.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    chosen = [(r["variant"], float(r["lr_scale"])) for r in rows if r["chosen"] == "True"]
    assert chosen == [("base", 2.0), ("alt", 0.5)]
    assert os.path.getsize(tmp_path / "report" / "lr_valid_loss.png") > 1000
    with open(tmp_path / "report" / "runs.csv") as f:
        assert sum(r["reported"] == "True" for r in csv.DictReader(f)) == 4


@pytest.mark.parametrize(
    "losses, edge",
    [((2.0, 1.5, 1.7), None), ((2.0, 1.7, 1.5), "top"), ((1.5, 1.7, 2.0), "bottom")],
)
def test_a_choice_at_the_grids_largest_or_smallest_scale_is_flagged(losses, edge):
    per_run = [
        {"variant": "v", "lr_scale": scale, "learning_rate": 1e-3 * scale, "status": "done",
         "final_valid_loss": loss, "bleu": 1.0}
        for scale, loss in zip((0.5, 1.0, 2.0), losses, strict=True)
    ]  # fmt: skip
    choice = choose({"v": [0.5, 1.0, 2.0]}, per_run)["v"]
    assert choice.scale == (0.5, 1.0, 2.0)[losses.index(min(losses))]
    assert choice.edge == edge
    unfinished = Choice(scale=1.0, points=[GridPoint(1.0, 1e-3, 1, 0, 0, None, None, None)])
    assert unfinished.edge is None


def test_variants_without_a_grid_meet_the_baseline_at_its_configured_rate(tmp_path):
    """The baseline's grid chooses x2; a variant with no grid of its own (run at x1) must be
    compared with the baseline's x1 runs, not its tuned x2 ones; a finished-grid variant
    meets the baseline's best."""
    from transformer.scoring import significance

    sweep, runs, _ = _study(tmp_path)
    refs = (tmp_path / "base" / "x1" / "0" / "eval" / "test.ref.txt").read_text().splitlines()
    plain_hyps = {0: refs[:15] + ["der Hund"] * 15, 1: refs[:20] + ["die Katze"] * 10}
    for seed, hyps in plain_hyps.items():
        runs.append(_run(tmp_path, "plain", 1.0, seed, valid_loss=1.7, hyps=hyps, refs=refs))
    sweep.variants = {**sweep.variants, "plain": {"model.activation": "gelu"}}
    table, _ = aggregate(sweep, runs)
    rows = {r["variant"]: r for r in table}
    assert rows["base"]["lr_scale"] == 2.0
    assert rows["plain"]["versus_baseline_lr_scale"] == 1.0
    assert rows["alt"]["versus_baseline_lr_scale"] == 2.0  # best (x0.5) against best (x2)

    def hyps(variant, scale, seed):
        path = tmp_path / variant / f"x{scale:g}" / str(seed) / "eval" / "test.hyp.txt"
        return path.read_text().splitlines()

    pairs = {s: (hyps("base", 1.0, s), plain_hyps[s]) for s in (0, 1)}
    expected = significance.paired_bootstrap(*significance.pool_seeds(pairs, refs))
    assert rows["plain"]["bleu_delta"] == pytest.approx(expected["BLEU"].difference)
    write_report(sweep, runs, str(tmp_path / "report"))
    md = (tmp_path / "report" / "results.md").read_text()
    plain_row = next(line for line in md.splitlines() if line.startswith("| plain |"))
    alt_row = next(line for line in md.splitlines() if line.startswith("| alt |"))
    assert " vs x1 |" in plain_row and " vs x" not in alt_row
