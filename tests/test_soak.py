"""benchmarks/soak.py: the kill -9 soak. Its parts on files made here (where a kill landed,
what differs, the plan, the docs table), then the soak itself on real `train.py` processes:
three kills end identical to the uninterrupted run, and each planted bug is caught."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks import soak
from tests.helpers import ROOT
from transformer.common.metrics_file import read_metrics

STEPS = soak.num_steps(3)


def write_rows(workdir, rows, at: float) -> None:
    """Appends metrics rows stamped with wall time `at`, as a train.py process writes them."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps({"time": at, **row}) + "\n")


def train(step: int) -> dict:
    return {"step": step, "kind": "train", "loss": 1.0 / step, "tokens_per_s": 100.0 + step}


def evaluation(step: int) -> dict:
    return {"step": step, "kind": "eval", "split": "valid", "loss": 2.0, "sentences_per_s": 3.0}


def start_saving(workdir, step: int) -> None:
    os.makedirs(os.path.join(workdir, "checkpoints", f"{step}{soak.TMP_SUFFIX}"))


def commit(workdir, step: int) -> None:
    os.makedirs(os.path.join(workdir, "checkpoints", str(step)))


# ------------------------------------------------------------------------ where it landed


def test_a_kill_lands_in_the_phase_the_files_show(tmp_path):
    """Rows of an earlier process and a save it left behind (both older than the process's
    start) do not count; the phase follows the killed process's own rows and saves."""
    run = str(tmp_path / "run")
    commit(run, 20)
    start_saving(run, 40)  # left behind by the earlier process: its save never committed
    time.sleep(0.05)
    since = time.time()
    write_rows(run, [train(n) for n in range(1, 42)], at=since - 9)  # the earlier process's
    files = soak.RunFiles(run, since)
    assert soak.landing(files, STEPS) == soak.Landing("startup", None, None, None, 20)

    resumed = {"kind": "info", "step": 20, "message": "resumed from checkpoint at step 20"}
    write_rows(run, [resumed] + [train(n) for n in range(21, 27)], at=since + 1)
    assert soak.landing(files, STEPS) == soak.Landing("train", 26, None, None, 20)
    assert files.resumed_from == 20

    write_rows(run, [train(n) for n in range(27, 31)], at=since + 1)  # 30 is validated
    assert soak.landing(files, STEPS) == soak.Landing("eval", 30, None, 30, 20)

    write_rows(run, [evaluation(30)] + [train(n) for n in range(31, 41)], at=since + 1)
    os.rmdir(os.path.join(run, "checkpoints", f"40{soak.TMP_SUFFIX}"))  # Orbax's cleanup,
    start_saving(run, 40)  # then this process's own save of step 40, under the same name
    write_rows(run, [train(n) for n in range(41, 46)], at=since + 1)
    assert soak.landing(files, STEPS) == soak.Landing("save", 45, 40, None, 20)

    write_rows(run, [train(n) for n in range(46, 61)], at=since + 1)  # 60 is validated
    assert soak.landing(files, STEPS) == soak.Landing("eval+save", 60, 40, 60, 20)
    commit(run, 40)
    assert soak.landing(files, STEPS).newest_checkpoint == 40


def test_the_run_files_are_read_again_when_a_resume_rewrites_them(tmp_path):
    """A resumed train.py rewrites metrics.jsonl without the rows past its step (a new file):
    rows read before from the old file are forgotten, not kept twice."""
    run = str(tmp_path / "run")
    write_rows(run, [train(n) for n in range(1, 6)], at=5.0)
    files = soak.RunFiles(run, since=1.0)
    assert [r["step"] for r in files.refresh()] == [1, 2, 3, 4, 5]
    path = os.path.join(run, "metrics.jsonl")
    os.replace(path, path + ".old")  # as atomic_write replaces it
    write_rows(run, [train(n) for n in range(1, 4)], at=5.0)
    assert [r["step"] for r in files.refresh()] == [1, 2, 3]
    with open(path, "a") as f:
        f.write('{"step": 4, "kind": "tr')  # cut short: read once its line ends
    assert files.last_train_step() == 3


# ---------------------------------------------------------------------------- comparison


def test_arrays_are_compared_bit_for_bit():
    rng = np.random.default_rng(0)
    a = {"params.w": rng.normal(size=(3, 4)).astype(np.float32), "step": np.int32(7)}
    same = {k: v.copy() for k, v in a.items()}
    assert soak.differing_arrays(a, same) == []

    flipped = same["params.w"].copy()
    flipped.view(np.int32)[1, 2] ^= 1  # the lowest bit of one value
    assert soak.differing_arrays(a, {**same, "params.w": flipped}) == ["params.w"]
    zeros = {"params.w": np.zeros(2, np.float32), "step": np.int32(7)}
    negative = {"params.w": -np.zeros(2, np.float32), "step": np.int32(7)}
    assert soak.differing_arrays(zeros, negative) == ["params.w"]  # equal as numbers
    nan = {"x": np.full(2, np.nan, np.float32)}
    assert soak.differing_arrays(nan, {"x": nan["x"].copy()}) == []  # same bits
    assert soak.differing_arrays(a, {**same, "step": np.int64(7)}) == ["step"]
    assert soak.differing_arrays(a, {"step": same["step"]}) == ["params.w"]


def test_rows_differ_by_value_not_by_wall_clock(tmp_path):
    steps = 30
    reference, run = str(tmp_path / "reference"), str(tmp_path / "run")
    rows = [train(n) for n in range(1, steps + 1)] + [evaluation(30)]
    write_rows(reference, rows, at=1.0)
    later = [{**r, "tokens_per_s": 1.0, "sentences_per_s": 9.0} for r in rows]
    write_rows(run, later, at=7.0)
    assert soak.compare_rows(reference, run, steps) == []

    changed = [dict(r) for r in later]
    changed[11]["loss"] = np.nextafter(changed[11]["loss"], 1.0)  # step 12, one ulp
    changed[20]["grad_norm"] = 1.0  # a field the reference lacks
    os.remove(os.path.join(run, "metrics.jsonl"))
    write_rows(run, changed + [{**train(5), "loss": 9.0}], at=7.0)  # and step 5 again
    assert soak.compare_rows(reference, run, steps) == [
        "the run's train rows are not one per step " + str(list(range(1, 31))),
        "train rows of 3 steps from step 5 (grad_norm, loss)",
    ]


# --------------------------------------------------------------------------------- plan


def test_the_plan_comes_from_the_seed_and_aims_at_every_kind():
    assert soak.plan(0, 20) == soak.plan(0, 20)
    assert soak.plan(0, 20) != soak.plan(1, 20)
    for seed in range(5):
        assert sorted(a.kind for a in soak.plan(seed, 3)) == sorted(soak.KINDS)
    kinds = [a.kind for a in soak.plan(0, 20)]
    assert sorted(kinds.count(k) for k in soak.KINDS) == [6, 7, 7]
    assert all(0 <= a.delay_s <= soak.MAX_DELAY_S[a.kind] for a in soak.plan(0, 20))


def test_targets_lie_past_the_next_checkpoint_and_before_the_end():
    every, steps = soak.CHECKPOINT_EVERY, soak.num_steps(20)
    for fraction in (0.0, 0.5, 0.999):
        aim = soak.Aim("train", fraction, 0.0)
        assert every < soak.target_step(aim, 0, steps) - 0 <= 2 * every
        assert soak.target_step(aim, 100, steps) in range(100 + every + 1, 100 + 2 * every + 1)
        near_end = steps - every - 5
        assert near_end < soak.target_step(aim, near_end, steps) <= steps - every


# ---------------------------------------------------------------------------- the table


def kill(n: int, step: int | None, saving: int | None, evaluating: int | None) -> dict:
    landed = soak.phase(step, saving, evaluating)
    return {
        "figure": "soak_kill",
        "kill": n,
        "step": step,
        "phase": landed,
        "saving_step": saving,
        "evaluating_step": evaluating,
    }


def records(identical=True) -> list[dict]:
    kills = [
        kill(1, 30, None, None),
        kill(2, 66, 60, None),  # training went on past the save: it ran asynchronously
        kill(3, 80, 80, None),  # killed in the save of the step it logged last
        kill(4, 90, 80, 90),
        kill(5, None, None, None),
    ]
    verdict = {
        "figure": "soak_identical",
        "value": identical,
        "kills": 5,
        "mismatches": [] if identical else ["params.w", "train rows of 3 steps from step 5"],
        "num_mismatches": 0 if identical else 2,
        "num_steps": 180,
        "command": "python -m benchmarks.soak --kills 5 --seed 0",
        "machine": "x86_64 AMD EPYC, AVX2, 2 CPU cores, cpu",
        "wall_s": 123.4,
        "loadavg_1m_start": 5.5,
    }
    return kills + [verdict]


def test_the_table_is_rendered_from_the_results(tmp_path):
    path = tmp_path / "epyc2_soak.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records()))
    table = soak.render(str(path))
    assert table.startswith(
        "`python -m benchmarks.soak --kills 5 --seed 0` on x86_64 AMD EPYC, AVX2, 2 CPU cores, "
        "cpu: 123 s, load average 5.5 at the start ("
    )
    assert "| 5 | 1 | 2 (1) | 0 | 1 | 1 | identical (180 steps) |" in table
    landed = "30 (training), 66 (save of 60), 80 (save of 80), 90 (validation, save of 80), startup"
    assert landed in table
    path.write_text("".join(json.dumps(r) + "\n" for r in records(identical=False)))
    assert "| differ: 2 (params.w, train rows of 3 steps from step 5) |" in soak.render(str(path))


def test_the_docs_show_the_recorded_soak():
    """docs/reliability.md's Soak section is the table of the results file it names."""
    with open(os.path.join(ROOT, "docs", "reliability.md")) as f:
        doc = f.read()
    start = doc.index("<!-- report:Soak:start -->\n") + len("<!-- report:Soak:start -->\n")
    section = doc[start : doc.index("<!-- report:Soak:end -->")]
    results = section.split("(`")[1].split("`)")[0]
    assert section.strip("\n") == soak.render(os.path.join(ROOT, results)).strip("\n")
    verdict = json.loads(open(os.path.join(ROOT, results)).read().splitlines()[-1])
    assert verdict["value"] is True and verdict["kills"] == 20 and not verdict["plant_bug"]


def test_render_of_a_missing_file_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--render", str(tmp_path / "none.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
    assert proc.stderr.count("\n") == 1 and "none.jsonl does not exist" in proc.stderr


# ----------------------------------------------------------------------------- the soak


def run_soak(tmp_path, *args) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "result.jsonl"
    cmd = [sys.executable, "-m", "benchmarks.soak", "--dir", str(tmp_path), "--out", str(out)]
    began = time.monotonic()
    proc = subprocess.run(cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=900)
    print(f"soak {args}: {time.monotonic() - began:.0f} s")
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_three_kills_end_identical_to_the_uninterrupted_run(tmp_path):
    proc, rows = run_soak(tmp_path, "--kills", "3")
    kills, verdict = rows[:-1], rows[-1]
    assert proc.returncode == 0 and verdict["value"] is True, proc.stdout[-3000:]
    assert verdict["mismatches"] == [] and verdict["num_steps"] == soak.num_steps(3)
    assert [r["kill"] for r in kills] == [1, 2, 3]
    assert sorted(r["aimed_at"] for r in kills) == sorted(soak.KINDS)
    assert sum(verdict["phases"].values()) == 3
    assert verdict["resumed_from_newest"] and verdict["set_aside"] == []
    for r in kills:  # what the files showed agrees with how train.py works
        assert r["phase"] == soak.phase(r["step"], r["saving_step"], r["evaluating_step"])
        assert r["newest_checkpoint"] % soak.CHECKPOINT_EVERY == 0
        assert r["newest_checkpoint"] <= r["step"]
        if r["saving_step"] is not None:
            assert r["saving_step"] % soak.CHECKPOINT_EVERY == 0
            assert r["newest_checkpoint"] < r["saving_step"]  # not committed when killed
        if r["evaluating_step"] is not None:
            assert soak.validated(r["evaluating_step"], verdict["num_steps"])
    assert not glob.glob(str(tmp_path / "soak_*")), "an identical soak removes its runs"


@pytest.mark.slow
@pytest.mark.parametrize("bug", soak.PLANTED_BUGS)
def test_a_planted_bug_is_caught(tmp_path, bug):
    """A resume that zeroes one Adam moment, or trains at a learning rate 2**-20 larger, ends
    NOT identical (exit 1), naming the arrays; the rows before the planted resume match."""
    proc, rows = run_soak(tmp_path, "--kills", "1", "--plant_bug", bug)
    verdict = rows[-1]
    assert proc.returncode == 1 and verdict["value"] is False, proc.stdout[-3000:]
    assert "NOT identical" in proc.stdout
    planted = verdict["planted_at"]
    assert planted and planted % soak.CHECKPOINT_EVERY == 0
    arrays = [m for m in verdict["mismatches"] if m.startswith(("params.", "opt_state."))]
    assert any(m.startswith("params.") for m in arrays), verdict["mismatches"]
    if bug == "optimizer":
        assert any(f".{soak.PLANT_LEAF}." in m for m in arrays), verdict["mismatches"]
    (kept,) = glob.glob(str(tmp_path / "soak_*"))  # kept when they differ
    ref, run = (read_metrics(os.path.join(kept, d), kind="train") for d in ("reference", "run"))
    before = [r["loss"] for r in run if r["step"] <= planted]
    assert before == [r["loss"] for r in ref[:planted]]  # bitwise up to the planted resume
    after = [(a["loss"], a["grad_norm"]) for a in run[planted:]]
    assert after != [(b["loss"], b["grad_norm"]) for b in ref[planted:]]
