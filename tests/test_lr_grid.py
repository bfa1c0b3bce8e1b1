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
from transformer.research.sweep.runs import Run, outcome

SWEEP = """
def get_config():
    return {{'base': 'configs/default.py',
            'overrides': {{'train.learning_rate': 0.002, 'train.num_steps': 10}},
            'variants': {{'base': {{}}, 'post': {{'model.norm_position': 'post'}},
                         'slow': {{'train.learning_rate': 0.0005}}}},
            'seeds': [0, 1], {grid}}}
"""


def _sweep_file(tmp_path, grid: str, seeds=(0, 1)) -> str:
    path = tmp_path / "sweep_cfg.py"
    path.write_text(SWEEP.format(grid=grid).replace("'seeds': [0, 1]", f"'seeds': {list(seeds)}"))
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
    grid = "'scales': [2, 0.5, 1], 'variants': ['base', 'slow'], 'tune_seeds': 'all'"
    path = _sweep_file(tmp_path, "'lr_grid': {" + grid + "}")
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
    rows = [
        {"kind": "eval", "split": "valid", "step": 5, "loss": valid_loss + 1.0},
        {"kind": "eval", "split": "valid", "step": 10, "loss": valid_loss},
    ]
    (where / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (where / "status.json").write_text(json.dumps({"status": status}))
    if status == "done":
        # A BLEU figure that names its run, to see which runs make a table row.
        record = {"step": 10, "bleu": 10 * scale + seed}
        (where / "eval" / "test.json").write_text(json.dumps(record))
        (where / "eval" / "test.hyp.txt").write_text("\n".join(hyps) + "\n")
        (where / "eval" / "test.ref.txt").write_text("\n".join(refs) + "\n")
    return Run(
        variant,
        seed,
        str(where),
        {},
        {},
        "base.py",
        "test",
        num_steps=10,
        lr_scale=scale,
        learning_rate=1e-3 * scale,
    )


def _study(tmp_path):
    """'base' is best on validation at x2 and 'alt' at x0.5; on test each is worst there, so a
    choice made on test would differ. alt's x2 diverges."""
    rng = random.Random(0)
    words = "der die das Hund Katze sieht den roten Mann".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) for _ in range(30)]

    def noisy(p):
        return [
            " ".join(w if rng.random() > p else rng.choice(words) for w in r.split()) for r in refs
        ]

    valid = {
        ("base", 0.5): [2.0, 2.2],
        ("base", 1.0): [1.8, 1.9],
        ("base", 2.0): [1.5, 1.6],
        ("alt", 0.5): [1.4, 1.5],
        ("alt", 1.0): [1.7, 1.8],
    }
    noise = {("base", 2.0): 0.6, ("alt", 0.5): 0.05}
    runs = []
    for (variant, scale), losses in valid.items():
        for seed, loss in enumerate(losses):
            hyps = noisy(noise.get((variant, scale), 0.3))
            runs.append(_run(tmp_path, variant, scale, seed, valid_loss=loss, hyps=hyps, refs=refs))
    for seed in (0, 1):
        runs.append(
            _run(
                tmp_path,
                "alt",
                2.0,
                seed,
                valid_loss=float("nan"),
                hyps=[],
                refs=refs,
                status="diverged",
            )
        )
    sweep = sw.Sweep(
        path="s.py",
        base="base.py",
        overrides={},
        seeds=[0, 1],
        eval_split="test",
        variants={"base": {}, "alt": {}},
        eval_overrides={},
        parallel=1,
        baseline="base",
        lr_grid={"base": [0.5, 1.0, 2.0], "alt": [0.5, 1.0, 2.0]},
    )
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
        {
            "variant": "v",
            "lr_scale": scale,
            "learning_rate": 1e-3 * scale,
            "status": "done",
            "final_valid_loss": loss,
            "bleu": 1.0,
        }
        for scale, loss in zip((0.5, 1.0, 2.0), losses, strict=True)
    ]
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
    assert rows["plain"]["bleu_sentence_delta"] == pytest.approx(expected["BLEU"].difference)
    write_report(sweep, runs, str(tmp_path / "report"))
    md = (tmp_path / "report" / "results.md").read_text()
    plain_row = next(line for line in md.splitlines() if line.startswith("| plain |"))
    alt_row = next(line for line in md.splitlines() if line.startswith("| alt |"))
    assert " vs x1 |" in plain_row and " vs x" not in alt_row


def _finish(run, valid_loss: float | None) -> None:
    """Leaves `run`'s directory as a finished run (or a diverged one for None), as train.py
    and eval.py would."""
    os.makedirs(os.path.join(run.workdir, "eval"), exist_ok=True)
    if valid_loss is None:
        with open(os.path.join(run.workdir, "status.json"), "w") as f:
            json.dump({"status": "diverged"}, f)
        return
    row = {"kind": "eval", "split": "valid", "step": run.num_steps, "loss": valid_loss}
    with open(os.path.join(run.workdir, "metrics.jsonl"), "w") as f:
        f.write(json.dumps(row) + "\n")
    with open(run.eval_json, "w") as f:
        json.dump({"step": run.num_steps, "bleu": 10.0, "chrf": 20.0}, f)
    for kind, text in (("hyp", "der Hund sieht\ndie Katze\n"), ("ref", "der Hund\ndie Katze\n")):
        with open(os.path.join(run.workdir, "eval", f"test.{kind}.txt"), "w") as f:
            f.write(text)


def _search_to_the_end(sweep, workdir, loss_of) -> list[list]:
    """Plans, 'runs' every new run (loss_of(scale, seed); None diverges) and plans again
    until the plan stops growing; returns each round's new (variant, scale, seed)."""
    rounds, seen = [], set()
    while True:
        runs = sw.plan_runs(sweep, workdir)
        new = [r for r in runs if r.workdir not in seen]
        if not new:
            return rounds
        rounds.append(sorted((r.variant, r.lr_scale, r.seed) for r in new))
        for r in new:
            seen.add(r.workdir)
            _finish(r, loss_of(r.lr_scale, r.seed))


def test_the_search_widens_until_its_best_point_is_interior_then_runs_the_other_seeds(tmp_path):
    import math

    grid = "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base'], 'max_scale': 8}"
    sweep = sw.load_sweep(_sweep_file(tmp_path, grid, seeds=(0, 1, 2)))
    rounds = _search_to_the_end(
        sweep, str(tmp_path / "w"), lambda scale, seed: (math.log2(scale) - 2) ** 2 + 0.01 * seed
    )
    base = [[key for key in r if key[0] == "base"] for r in rounds]
    tune = 999  # the search's own seed by default, none of the compared 0, 1, 2
    assert base[0] == [("base", 0.5, tune), ("base", 1.0, tune), ("base", 2.0, tune)]
    assert base[1] == [("base", 4.0, tune)]  # x2 was best: one point up
    assert base[2] == [("base", 8.0, tune)]  # x4 best at the top again
    assert base[3] == [("base", 4.0, s) for s in (0, 1, 2)]  # interior: the compared seeds
    # Untuned variants run every seed at their own rate from the first round.
    assert [k for k in rounds[0] if k[0] == "post"] == [("post", 1.0, s) for s in (0, 1, 2)]
    table, per_run = aggregate(sweep, sw.plan_runs(sweep, str(tmp_path / "w")))
    row = next(r for r in table if r["variant"] == "base")
    assert row["lr_scale"] == 4.0 and row["runs"] == 3 and not row["lr_grid_edge"]
    reported = {r["seed"] for r in per_run if r["variant"] == "base" and r["reported"]}
    assert reported == {0, 1, 2}
    roles = {(r["seed"], r["lr_scale"]): r["role"] for r in per_run if r["variant"] == "base"}
    assert roles[(tune, 4.0)] == "tuning" and roles[(0, 4.0)] == "compared"


def test_first_seed_tuning_runs_the_other_seeds_after_it_and_says_so(tmp_path):
    import math

    grid = "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base'], 'tune_seeds': 'first'}"
    sweep = sw.load_sweep(_sweep_file(tmp_path, grid, seeds=(0, 1, 2)))
    workdir = str(tmp_path / "w")
    rounds = _search_to_the_end(sweep, workdir, lambda scale, seed: (math.log2(scale) - 0) ** 2)
    base = [[key for key in r if key[0] == "base"] for r in rounds]
    assert base == [[("base", s, 0) for s in (0.5, 1.0, 2.0)], [("base", 1.0, s) for s in (1, 2)]]
    table, per_run = aggregate(sweep, sw.plan_runs(sweep, workdir))
    assert {r["seed"] for r in per_run if r["variant"] == "base" and r["reported"]} == {0, 1, 2}
    write_report(sweep, sw.plan_runs(sweep, workdir), str(tmp_path / "report"))
    assert (
        "include the run(s) that won the selection"
        in (tmp_path / "report" / "results.md").read_text()
    )


def test_the_tuning_seed_is_kept_out_of_the_compared_runs(tmp_path):
    """A planted lucky tuning run (lowest validation loss, BLEU 90) must win the selection
    and appear in no figure of the table: the row's BLEU is the compared seeds' alone."""
    grid = "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base', 'post'], 'tune_seeds': [7]}"
    sweep = sw.load_sweep(_sweep_file(tmp_path, grid, seeds=(0, 1, 2)))
    workdir = str(tmp_path / "w")
    _search_to_the_end(sweep, workdir, lambda scale, seed: abs(scale - 1.0) + 0.1 * (seed != 7))
    runs = sw.plan_runs(sweep, workdir)
    lucky = next(r for r in runs if (r.variant, r.seed, r.lr_scale) == ("base", 7, 1.0))
    with open(lucky.eval_json, "w") as f:
        json.dump({"step": lucky.num_steps, "bleu": 90.0, "chrf": 90.0}, f)
    table, per_run = aggregate(sweep, runs)
    row = next(r for r in table if r["variant"] == "base")
    assert row["lr_scale"] == 1.0 and row["runs"] == 3 and row["bleu_mean"] == 10.0
    assert {r.seed for r in runs if r.variant == "base" and r.lr_scale == 1.0} == {7, 0, 1, 2}
    assert not lucky.compared and "(lr search)" in lucky.label
    write_report(sweep, runs, str(tmp_path / "report"))
    assert "seed(s) [7] of its own" in (tmp_path / "report" / "results.md").read_text()


@pytest.mark.parametrize(
    "loss, tried, chosen, edge",
    [
        (lambda s: -s, [0.5, 1, 2, 4, 8], 8.0, "top"),  # still falling at the cap
        (lambda s: s, [0.25, 0.5, 1, 2], 0.25, "bottom"),  # min_scale 0.25
        (lambda s: None if s >= 4 else -s, [0.5, 1, 2, 4], 2.0, None),  # x4 diverges
    ],
)
def test_the_search_stops_at_its_cap_and_flags_it_or_below_a_diverged_point(
    tmp_path, loss, tried, chosen, edge
):
    sweep = sw.load_sweep(
        _sweep_file(
            tmp_path,
            "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base'], 'max_scale': 8, "
            "'min_scale': 0.25}",
        )
    )
    _search_to_the_end(sweep, str(tmp_path / "w"), lambda scale, seed: loss(scale))
    runs = sw.plan_runs(sweep, str(tmp_path / "w"))
    choice = choose(sweep.lr_grid, [outcome(r) for r in runs])["base"]
    assert [p.scale for p in choice.points] == tried
    assert choice.complete and choice.scale == chosen and choice.edge == edge
    assert {r.seed for r in runs if r.variant == "base" and r.lr_scale == chosen} == {999, 0, 1}


def test_bad_caps_and_tuning_seeds_are_user_errors(tmp_path):
    for grid, message in (
        ("'scales': [0.5, 1, 2], 'max_scale': 1", "must hold the grid"),
        ("'scales': [0.5, 1, 2], 'min_scale': 0", "must hold the grid"),
        ("'scales': [0.5, 1, 2], 'max_scale': 'big'", "must be numbers"),
        ("'scales': [0.5, 1, 2], 'tune_seeds': 'some'", "tune_seeds must be a list of seeds"),
        ("'scales': [0.5, 1, 2], 'tune_seeds': ['a']", "must be a list of ints"),
        ("'scales': [0.5, 1, 2], 'tune_seeds': [5, 5]", "distinct ints"),
        ("'scales': [0.5, 1, 2], 'tune_seeds': [1, 9]", r"tune_seeds \[1\] are also compared"),
    ):
        with pytest.raises(UserError, match=message):
            sw.load_sweep(_sweep_file(tmp_path, "'lr_grid': {" + grid + "}"))


def test_the_aa_arm_repeats_the_baseline_under_disjoint_seeds_and_its_search(tmp_path):
    grid = "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base']}"
    path = _sweep_file(tmp_path, "'aa_arm': True, " + grid)
    sweep = sw.load_sweep(path)
    assert list(sweep.variants)[:2] == ["base", "base_aa"]
    assert sweep.variants["base_aa"] == sweep.variants["base"]
    assert sweep.aa_variant == "base_aa" and sweep.seeds_of("base_aa") == [1000, 1001]
    assert "base_aa" in sweep.lr_grid  # tuned wherever the baseline is
    runs = sw.plan_runs(sweep, str(tmp_path / "w"))
    aa = [r for r in runs if r.variant == "base_aa"]
    assert {(r.lr_scale, r.seed) for r in aa} == {(0.5, 1999), (1.0, 1999), (2.0, 1999)}
    assert all(r.overrides["train.seed"] == 1999 and not r.compared for r in aa)
    with open(tmp_path / "clash.py", "w") as f:
        f.write(open(path).read().replace("'seeds': [0, 1]", "'seeds': [0, 1000]"))
    with pytest.raises(UserError, match="both the sweep's and the A/A arm"):
        sw.load_sweep(str(tmp_path / "clash.py"))


def test_the_cli_runs_rounds_until_the_search_ends_then_reports(tmp_path, monkeypatch, capsys):
    import math

    from transformer.cli import sweep as sweep_cli

    def fake_execute(runs, **kwargs):  # every unfinished run 'trains' at once
        import transformer.research.sweep.runs as runs_lib

        fresh = [r for r in runs if not runs_lib.is_finished(r)]
        for r in fresh:
            _finish(r, (math.log2(r.lr_scale) - 1) ** 2 + 0.01 * r.seed)
        return {"done": len(fresh), "skipped": len(runs) - len(fresh), "failed": 0, "diverged": 0}

    monkeypatch.setattr(sweep_cli, "execute", fake_execute)
    grid = "'lr_grid': {'scales': [0.5, 1, 2], 'variants': ['base'], 'max_scale': 8}"
    path = _sweep_file(tmp_path, "'aa_arm': True, " + grid, seeds=(0, 1, 2))
    workdir = str(tmp_path / "w")
    assert sweep_cli.main(["--config", path, "--workdir", workdir]) == 0
    out = capsys.readouterr().out
    # Round 1: 3 + 3 grid points (base, A/A, on their own tuning seeds) + 3 seeds each of
    # post and slow; round 2: x4 for both searches (x2 was best at the top); round 3: the
    # three compared seeds of each at x2.
    assert [
        line.split(":")[1].split(",")[0] for line in out.splitlines() if "at a time" in line
    ] == [
        " 12 run(s)",
        " 14 run(s)",
        " 20 run(s)",
    ]
    (summary,) = [line for line in out.splitlines() if line.startswith("sweep finished")]
    assert summary.endswith(": 20 done, 0 skipped, 0 failed, 0 diverged"), summary
    with open(os.path.join(workdir, "results.csv")) as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    assert rows["base"]["lr_scale"] == "2.0" and rows["base"]["runs"] == "3"
    assert rows["base_aa"]["lr_scale"] == "2.0" and rows["base_aa"]["bleu_p_holm"] == ""
    md = open(os.path.join(workdir, "results.md")).read()
    assert "| base_aa (A/A) |" in md and "(untuned)" in md
