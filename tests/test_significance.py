"""scoring.significance against independent facts: sacreBLEU's own command line
(`sacrebleu REF -i BASE SYS --paired-bs`), its PairedTest intervals, the Holm procedure's
definition and Student's t table."""

from __future__ import annotations

import math
import random
import re
import subprocess
import sys

import numpy as np
import pytest
from sacrebleu.significance import PairedTest, estimate_ci

from transformer.common.errors import UserError
from transformer.scoring import significance as sig
from transformer.scoring.metrics import sacrebleu_metrics

WORDS = "the a dog cat man woman sees runs red big small house car tree under over with".split()


def _corpus(n: int = 60, seed: int = 0):
    """Fixed references and two systems that corrupt 40% / 25% of their words."""
    rng = random.Random(seed)
    refs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(n)]

    def noisy(p):
        return [
            " ".join(w if rng.random() > p else rng.choice(WORDS) for w in r.split()) for r in refs
        ]

    return refs, noisy(0.4), noisy(0.25)


def _cli_table(tmp_path, refs, base, system) -> list[str]:
    for name, lines in (("r", refs), ("b", base), ("s", system)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    cli = [
        sys.executable,
        "-m",
        "sacrebleu",
        str(tmp_path / "r.txt"),
        "-i",
        str(tmp_path / "b.txt"),
        str(tmp_path / "s.txt"),
        "-m",
        "bleu",
        "chrf",
        "--paired-bs",
        "--paired-bs-n",
        "1000",
        "-f",
        "text",
    ]
    out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_scores_and_p_values_equal_sacrebleus_command_line(tmp_path):
    refs, base, system = _corpus()
    result = sig.paired_bootstrap(base, system, refs)
    lines = _cli_table(tmp_path, refs, base, system)
    table = "\n".join(lines)  # rows: baseline BLEU, chrF; system BLEU, chrF; then its p-values
    scores = [float(x) for x in re.findall(r"(\d+\.\d) \(\d+\.\d ±", table)]
    p_values = [float(x) for x in re.findall(r"p = (\d\.\d+)", table)]
    assert len(scores) == 4 and len(p_values) == 2, lines
    assert round(result["BLEU"].baseline, 1) == scores[0]
    assert round(result["chrF"].baseline, 1) == scores[1]
    assert round(result["BLEU"].system, 1) == scores[2]
    assert round(result["chrF"].system, 1) == scores[3]
    assert [round(result[m].p_value, 4) for m in ("BLEU", "chrF")] == p_values
    assert all(result[m].p_value < 0.05 for m in ("BLEU", "chrF"))  # a 15-point gap is real


def test_the_difference_interval_comes_from_sacrebleus_own_resamples():
    # Our resamples reproduce the system mean and interval PairedTest reports, so the paired
    # differences are taken over the very resamples its p-value comes from.
    refs, base, system = _corpus()
    test = PairedTest(
        [("b", base), ("s", system)], sacrebleu_metrics(), [refs], test_type="bs", n_samples=1000
    )
    _, reported = test()
    indices = sig.resample_indices(len(refs), 1000, sig.SEED)
    for column, metric in zip(["BLEU", "chrF2"], sacrebleu_metrics().values(), strict=True):
        mean, ci = estimate_ci(sig.resampled_scores(system, refs, metric, indices))
        assert mean == pytest.approx(reported[column][1].mean, abs=1e-9)
        assert ci == pytest.approx(reported[column][1].ci, abs=1e-9)
    result = sig.paired_bootstrap(base, system, refs)["BLEU"]
    low, high = result.interval
    assert low < result.difference < high and low > 0  # the gap is outside the noise


def test_identical_systems_differ_by_nothing():
    refs, base, _ = _corpus()
    for result in sig.paired_bootstrap(base, base, refs).values():
        assert result.difference == 0 and result.interval == (0.0, 0.0)


def test_close_systems_are_not_significant():
    refs, base, _ = _corpus()
    rng = random.Random(1)
    one_word_off = list(base)
    for i in rng.sample(range(len(base)), 3):
        one_word_off[i] = base[i] + " " + rng.choice(WORDS)
    result = sig.paired_bootstrap(base, one_word_off, refs)["BLEU"]
    assert result.p_value > 0.05 and result.interval[0] < 0 < result.interval[1] + 1e-9


def test_seed_is_recorded_and_changes_the_resamples():
    refs, base, system = _corpus()
    a = sig.paired_bootstrap(base, system, refs, seed=1)["BLEU"]
    b = sig.paired_bootstrap(base, system, refs, seed=2)["BLEU"]
    assert (a.seed, b.seed) == (1, 2) and a.difference == b.difference
    assert a.interval != b.interval
    assert sig.paired_bootstrap(base, system, refs, seed=1)["BLEU"] == a


def test_mismatched_lengths_are_a_user_error():
    refs, base, system = _corpus()
    with pytest.raises(UserError, match="59 system"):
        sig.paired_bootstrap(base, system[:-1], refs)


def test_pooled_seeds_concatenate_matching_hypotheses():
    refs, base, system = _corpus(5)
    base2, system2 = [b + " x" for b in base], [s + " y" for s in system]
    pooled = sig.pool_seeds({1: (base2, system2), 0: (base, system)}, refs)
    assert pooled == (base + base2, system + system2, refs + refs)


def _holm_by_definition(p_values: dict[str, float], alpha: float) -> set[str]:
    """Holm's step-down procedure: reject the k smallest while p_(i) <= alpha / (m - i)."""
    rejected = set()
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    for i, (name, p) in enumerate(ordered):
        if p > alpha / (len(ordered) - i):
            break
        rejected.add(name)
    return rejected


@pytest.mark.parametrize("seed", range(20))
def test_holm_adjusted_p_values_reject_what_the_procedure_rejects(seed):
    rng = np.random.default_rng(seed)
    p_values = {f"v{i}": float(p) for i, p in enumerate(rng.uniform(0, 0.1, rng.integers(1, 8)))}
    adjusted = sig.holm(p_values)
    for alpha in (0.01, 0.05):
        assert {k for k, v in adjusted.items() if v <= alpha} == _holm_by_definition(
            p_values, alpha
        )
    assert all(adjusted[k] >= p_values[k] for k in p_values)


def test_holm_on_a_worked_example():
    assert sig.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
        {"a": 0.03, "b": 0.06, "c": 0.06}
    )


def test_t_interval_uses_students_t():
    # t(0.975, 1) = 12.706 and t(0.975, 2) = 4.303 (printed tables).
    assert sig.t_interval([1.0, 3.0]) == pytest.approx((2.0, 12.706), abs=1e-3)
    mean, half = sig.t_interval([1.0, 2.0, 6.0])
    assert mean == 3.0 and half == pytest.approx(4.303 * math.sqrt(7.0) / math.sqrt(3), abs=1e-3)
    assert math.isnan(sig.t_interval([5.0])[1])
