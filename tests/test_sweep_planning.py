"""transformer-sweep --plan: a pilot's variances read from its runs (checked against
sacreBLEU's own corpus scores and the pooled-variance formula; the A/A arm out of tau^2) and
the seeds a gap needs. The planned MDD's power is simulated in test_seed_significance.py."""

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import sacrebleu

from transformer.common.errors import UserError
from transformer.research.sweep import planning
from transformer.research.sweep.runs import Run
from transformer.research.sweep.spec import Sweep
from transformer.research.sweep.versus_baseline import arm_scores_by_variant
from transformer.scoring import seed_significance

WORDS = "der die das Hund Katze sieht den roten Mann und einen Ball".split()


def _pilot(tmp_path, seeds_per_arm: dict[str, int], aa_variant: str | None = None):
    """Runs whose hypotheses corrupt each reference word with a probability that varies by
    arm and by run; each run took 100 + 20 s."""
    rng = random.Random(0)
    refs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10))) for _ in range(80)]
    runs, hyps = [], {}
    for arm, count in seeds_per_arm.items():
        for seed in range(count):
            p = 0.3 + 0.05 * rng.random()
            lines = [
                " ".join(w if rng.random() > p else rng.choice(WORDS) for w in r.split())
                for r in refs
            ]
            where = tmp_path / arm / str(seed)
            (where / "eval").mkdir(parents=True)
            (where / "eval" / "test.json").write_text(json.dumps({"step": 6}))
            (where / "eval" / "test.hyp.txt").write_text("\n".join(lines) + "\n")
            (where / "eval" / "test.ref.txt").write_text("\n".join(refs) + "\n")
            status = {"train_wall_s": 100.0, "eval_wall_s": 20.0}
            (where / "status.json").write_text(json.dumps(status))
            runs.append(Run(arm, seed, str(where), {}, {}, "base.py", "test", num_steps=6))
            hyps[(arm, seed)] = lines
    sweep = Sweep(
        path="s.py",
        base="base.py",
        overrides={},
        seeds=list(range(3)),
        eval_split="test",
        variants=dict.fromkeys(seeds_per_arm, {}),
        eval_overrides={},
        parallel=1,
        baseline=next(iter(seeds_per_arm)),
        aa_variant=aa_variant,
    )
    return sweep, runs, hyps, refs


def test_the_pilot_pools_each_arms_between_seed_variance_by_its_degrees_of_freedom(tmp_path):
    sweep, runs, hyps, refs = _pilot(tmp_path, {"base": 3, "a": 3, "b": 2})
    pilot = planning.read_pilot(sweep, runs)
    bleu = {k: sacrebleu.corpus_bleu(h, [refs]).score for k, h in hyps.items()}
    variances = {
        arm: np.var([bleu[(arm, s)] for s in range(n)], ddof=1)
        for arm, n in (("base", 3), ("a", 3), ("b", 2))
    }
    expected = (2 * variances["base"] + 2 * variances["a"] + variances["b"]) / 5
    assert pilot.seed_variance == pytest.approx(expected, rel=1e-9)
    assert pilot.seed_df == 5
    assert pilot.run_seconds == pytest.approx(120.0)
    assert pilot.arms == 3 and pilot.comparisons == 2
    assert pilot.tau2 >= 0.0


def test_the_pilots_test_set_variance_leaves_the_aa_arm_out(tmp_path):
    # The A/A arm is the baseline again: its test-set term is about zero by design, so in
    # the median it would pull tau^2 down. With one variant, tau^2 is that variant's.
    sweep, runs, _, _ = _pilot(tmp_path, {"base": 3, "a": 3, "base_aa": 3}, aa_variant="base_aa")
    pilot = planning.read_pilot(sweep, runs)
    arms = arm_scores_by_variant(sweep, runs)
    own = seed_significance.test_set_variance(arms["base"][0], arms["a"][0])
    assert pilot.tau2 == pytest.approx(own) and pilot.comparisons == 1
    assert pilot.seed_variance == pytest.approx(
        seed_significance.pooled_seed_variance([a for a, _ in arms.values()])
    )  # the A/A arm's runs still count towards the seed variance


def test_the_plan_names_the_seeds_a_gap_needs_and_the_mdd_by_seeds(tmp_path):
    sweep, runs, _, _ = _pilot(tmp_path, {"base": 3, "a": 3})
    pilot = planning.Pilot(seed_variance=0.25, tau2=0.0, run_seconds=180.0, arms=4, comparisons=3)
    lines = planning.plan_lines(pilot, 0.5)
    needed = seed_significance.seeds_for_gap(0.5, 0.25, 0.0)
    holm = seed_significance.seeds_for_gap(0.5, 0.25, 0.0, alpha=0.05 / 3)
    assert f"(per comparison, alpha 0.0500): {needed} ({4 * needed} runs" in lines[1]
    assert f"(Holm, alpha 0.0167): {holm} (" in lines[2] and holm > needed
    five = next(line for line in lines if line.startswith("| 5 |"))
    mdd = seed_significance.planned_minimum_detectable(5, 0.25, 0.0)
    # A pilot's variance on few degrees of freedom asks for more seeds than a known one.
    rough = dataclasses.replace(pilot, seed_df=4)
    assert int(planning.plan_lines(rough, 0.5)[1].split(": ")[1].split()[0]) > needed
    assert five.startswith(f"| 5 | {mdd:.2f} |") and five.endswith(
        f"| 20 | {20 * 180 / 3600:.1f} |"
    )
    # The test set's own noise alone above the gap: no number of seeds reaches it.
    noisy = planning.Pilot(seed_variance=0.25, tau2=0.04, run_seconds=None, arms=4, comparisons=3)
    assert "not reachable" in planning.plan_lines(noisy, 0.5)[1]
    assert math.sqrt(0.04) * 2.8 > 0.5


def test_a_pilot_with_one_seed_per_arm_is_a_user_error(tmp_path):
    sweep, runs, _, _ = _pilot(tmp_path, {"base": 1, "a": 1})
    with pytest.raises(UserError, match="two or more finished runs"):
        planning.read_pilot(sweep, runs)


def test_transformer_sweep_plan_prints_the_plan_from_a_pilot_directory(tmp_path, capsys):
    from transformer.cli import sweep as sweep_cli

    config = tmp_path / "pilot.py"
    config.write_text(
        "def get_config():\n"
        "    return {'base': 'configs/default.py', 'variants': {'base': {}, 'a': {}},\n"
        "            'seeds': [0, 1, 2]}\n"
    )
    workdir = tmp_path / "w"
    _, runs, _, _ = _pilot(workdir, {"base": 3, "a": 3})
    args = ["--config", str(config), "--workdir", str(workdir), "--plan", "0.5"]
    # The pilot's runs were written as finished at step 6; the base config trains 800.
    for run in runs:
        record = json.loads(open(run.eval_json).read())
        record["step"] = 800
        open(run.eval_json, "w").write(json.dumps(record))
    assert sweep_cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("pilot: between-seed sd ") and "| 5 |" in out
    assert sweep_cli.main([*args[:-1], "-1"]) == 2
    assert "--plan takes a positive gap" in capsys.readouterr().err
