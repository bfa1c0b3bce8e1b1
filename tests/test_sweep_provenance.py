"""A study refuses to pool an arm's runs of different code or data (their provenance.json
differ), in one line naming the runs and what differs, unless --allow_mixed_provenance,
which the report then marks; runs recorded before provenance existed are left out."""

import json

import pytest

from tests.test_lr_grid import _study
from transformer.common import provenance
from transformer.common.errors import UserError
from transformer.research.sweep import provenance_check
from transformer.research.sweep.results import compute_lines, write_report

DATA = {"source_vocab": "a" * 16, "target_vocab": "b" * 16, "train_tokens_sha256": "c" * 64}


def give_provenance(run, source: str, data=DATA, resumed_source: str | None = None):
    """The run's provenance.json as training writes it: one start, or two when resumed."""
    starts = [{"start_step": 0, "code": {"source_sha256": source}, "data": data}]
    if resumed_source is not None:
        starts.append({"start_step": 5, "code": {"source_sha256": resumed_source}, "data": data})
    for start in starts:
        provenance.record(run.workdir, start)


def test_same_code_and_data_pool_silently(tmp_path):
    sweep, runs, _ = _study(tmp_path)
    for run in runs:
        give_provenance(run, "1" * 64)
    assert provenance_check.mixed_arms(runs) == []
    write_report(sweep, runs, str(tmp_path / "report"))
    assert "Mixed provenance" not in (tmp_path / "report" / "results.md").read_text()


def test_an_arm_of_two_codes_is_refused_naming_its_runs(tmp_path):
    sweep, runs, _ = _study(tmp_path)
    for run in runs:
        changed = run.variant == "alt" and run.seed == 1 and run.lr_scale == 0.5
        give_provenance(run, ("2" if changed else "1") * 64)
    with pytest.raises(UserError) as error:
        write_report(sweep, runs, str(tmp_path / "report"))
    message = str(error.value)
    assert message.startswith("variant alt: its runs ran different code (")
    assert "seed 1 lr x0.5: source 222222222222" in message
    assert (
        "seed 0 lr x0.5, seed 0, seed 1, seed 0 lr x2, seed 1 lr x2: source 111111111111" in message
    )
    assert message.endswith(
        "or pass --allow_mixed_provenance to pool them anyway (the report then marks the arm)"
    )
    assert "\n" not in message
    write_report(sweep, runs, str(tmp_path / "report"), allow_mixed=True)
    md = (tmp_path / "report" / "results.md").read_text()
    assert "Mixed provenance, pooled by --allow_mixed_provenance:" in md
    assert "- variant alt: its runs ran different code" in md


def test_a_run_resumed_under_other_code_and_other_data_are_caught(tmp_path):
    sweep, runs, _ = _study(tmp_path)
    for run in runs:
        if run.variant == "base" and run.seed == 0 and run.lr_scale == 1.0:
            give_provenance(run, "1" * 64, resumed_source="3" * 64)
        elif run.variant == "alt" and run.seed == 0 and run.lr_scale == 1.0:
            give_provenance(run, "1" * 64, data={**DATA, "train_tokens_sha256": "d" * 64})
        else:
            give_provenance(run, "1" * 64)
    mixed = provenance_check.mixed_arms(runs)
    assert [m.split(":")[0] for m in mixed] == ["variant base", "variant alt"]
    assert "seed 0: source 111111111111+333333333333" in mixed[0]
    assert "ran different data" in mixed[1]


def test_runs_without_provenance_are_left_out(tmp_path):
    sweep, runs, _ = _study(tmp_path)
    give_provenance(runs[0], "1" * 64)  # the others predate provenance.json
    assert provenance_check.mixed_arms(runs) == []
    assert provenance_check.run_identity(runs[1]) is None
    assert json.loads((tmp_path / "base" / "x0.5" / "0" / "provenance.json").read_text())


# ------------------------------------------------------------------ outlier runs


def test_a_planted_outlier_run_is_named_in_the_table_and_runs_csv(tmp_path):
    """Six arms of five seeds, BLEU 25 + small noise, one run of 'v3' 4 BLEU low: the table's
    'outlier runs' cell names that seed, runs.csv marks that run alone, and the legend
    explains the rule; without the planted run no column appears."""
    import csv
    import random

    from transformer.research import sweep as sw
    from transformer.research.sweep.runs import Run

    rng = random.Random(0)

    def make(plant: bool, root):
        runs = []
        for v in range(6):
            for seed in range(5):
                bleu = 25.0 + rng.gauss(0, 0.3) - (4.0 if plant and (v, seed) == (3, 2) else 0)
                workdir = root / f"v{v}" / str(seed)
                (workdir / "eval").mkdir(parents=True)
                (workdir / "eval" / "test.json").write_text(
                    json.dumps({"step": 10, "bleu": bleu, "chrf": 50.0})
                )
                for kind, text in (
                    ("hyp", "der Hund sieht\ndie Katze\n"),
                    ("ref", "der Hund\ndie Katze\n"),
                ):
                    (workdir / "eval" / f"test.{kind}.txt").write_text(text)
                row = {"kind": "eval", "split": "valid", "step": 10, "loss": 2.0}
                (workdir / "metrics.jsonl").write_text(json.dumps(row) + "\n")
                runs.append(
                    Run(f"v{v}", seed, str(workdir), {}, {}, "base.py", "test", num_steps=10)
                )
        sweep = sw.Sweep(
            path="s.py",
            base="base.py",
            overrides={},
            seeds=list(range(5)),
            variants={f"v{v}": {} for v in range(6)},
            eval_split="test",
            eval_overrides={},
            parallel=1,
            baseline="v0",
        )
        return sweep, runs

    sweep, runs = make(True, tmp_path / "planted")
    write_report(sweep, runs, str(tmp_path / "report"))
    md = (tmp_path / "report" / "results.md").read_text()
    assert "| outlier runs |" in md
    row = next(line for line in md.splitlines() if line.startswith("| v3 |"))
    assert "seed 2: BLEU 2" in row and "sigma below the others' median 2" in row
    assert "Outlier runs: a reported run whose test BLEU" in md
    with open(tmp_path / "report" / "runs.csv") as f:
        marked = [(r["variant"], r["seed"]) for r in csv.DictReader(f) if r["outlier"]]
    assert marked == [("v3", "2")]
    sweep, runs = make(False, tmp_path / "clean")
    write_report(sweep, runs, str(tmp_path / "clean_report"))
    assert "outlier" not in (tmp_path / "clean_report" / "results.md").read_text().lower()


def test_the_report_states_the_compute_each_machine_spent(tmp_path):
    """Every ended run's training + evaluation wall time (status.json) summed on the machine
    its last start ran on (provenance.json); a run still training is left out."""
    sweep, runs, _ = _study(tmp_path)
    expected = {"machine A": 0.0, "machine B": 0.0}
    for i, run in enumerate(runs):
        path = tmp_path / run.workdir / "status.json"
        status = {**json.loads(path.read_text()), "train_wall_s": 360.0 * (i + 1)}
        status["eval_wall_s"] = 36.0
        path.write_text(json.dumps(status))
        machines = ["machine A"] + (["machine B"] if run.variant == "alt" else [])
        for step, machine in enumerate(machines):  # alt's runs resumed on machine B
            start = {"start_step": step, "code": {"source_sha256": "1" * 64}, "data": DATA}
            provenance.record(run.workdir, {**start, "machine": machine})
        expected[machines[-1]] += (360.0 * (i + 1) + 36.0) / 3600
    write_report(sweep, runs, str(tmp_path / "report"))
    lines = (tmp_path / "report" / "results.md").read_text().splitlines()
    (line,) = [x for x in lines if x.startswith("Compute:")]
    assert line.startswith(
        # base's and alt's two seeds at their chosen rates make the table
        f"Compute: {len(runs)} ended run(s) (4 in the table, {len(runs) - 4} only searching "
        "learning rates): "
        f"{expected['machine A']:.1f} run-hours on machine A; "
        f"{expected['machine B']:.1f} run-hours on machine B ("
    ), line


def test_the_compute_line_counts_reported_and_search_runs_and_skips_unended_ones():
    def run(reported, status, wall, machine="m"):
        return dict(reported=reported, status=status, wall_s=wall, eval_wall_s=0.0, machine=machine)

    per_run = [
        run(False, "done", 3600.0),
        run(False, "diverged", 1800.0),
        run(True, "failed", 1800.0, machine=None),
        run(True, "training", 99999.0),
    ]
    (_, line) = compute_lines(per_run)
    assert line.startswith(
        "Compute: 3 ended run(s) (1 in the table, 2 only searching learning rates): 0.5 "
        "run-hours on a machine not recorded; 1.5 run-hours on m ("
    ), line
    assert compute_lines([run(True, "training", 5.0)]) == []
