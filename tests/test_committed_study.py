"""The README's reading of the committed Multi30k study against the study's own files: a
re-rendered study whose reading was not rewritten (a stale figure) fails here."""

from __future__ import annotations

import csv
import os
import re

import pytest

from tests.helpers import ROOT

STUDY = os.path.join(ROOT, "studies", "multi30k_architecture_2026_12")


def _results() -> dict[str, dict]:
    with open(os.path.join(STUDY, "results.csv"), encoding="utf-8") as f:
        return {row["variant"]: row for row in csv.DictReader(f)}


def _reading() -> str:
    """The README's prose after the generated Ablations table, up to the next heading."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    after = readme.split("<!-- report:Ablations:end -->", 1)[1]
    return re.split(r"\n#+ ", after, maxsplit=1)[0]


def _one_line(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces, as a reader sees it."""
    return " ".join(text.split())


def _bullet(reading: str, opening: str) -> str:
    """The bullet of the reading that starts with `opening`, joined onto one line."""
    for bullet in re.split(r"\n- ", reading):
        flat = _one_line(bullet)
        if flat.startswith(opening):
            return flat
    raise AssertionError(f"the README's study reading has no bullet starting {opening!r}")


def _signed(value: str) -> str:
    """A gap as the reading prints it: two decimals, its sign always shown."""
    return f"{float(value):+.2f}"


def _holm_p(value: str) -> str:
    """A Holm-adjusted p as the reading prints it."""
    p = float(value)
    return "p < 0.001" if p < 0.0005 else f"p {p:.3f}"


@pytest.fixture(scope="module")
def study():
    if not os.path.exists(os.path.join(STUDY, "results.csv")):
        pytest.skip("the committed study is not in this checkout")
    return _results(), _reading()


def test_aa_bullet_matches_the_table(study):
    rows, reading = study
    aa = rows["baseline_aa"]
    bullet = _bullet(reading, "**The A/A check passes.**")
    expected = (
        f"{_signed(aa['bleu_delta'])} BLEU [{_signed(aa['bleu_delta_low'])}, "
        f"{_signed(aa['bleu_delta_high'])}], p {float(aa['bleu_p']):.3f} "
        f"(MDD {float(aa['bleu_mdd']):.2f})"
    )
    assert expected in bullet
    assert float(aa["bleu_p"]) >= 0.05  # the bullet's title claims it passes


def test_starred_and_unstarred_bullets_name_the_tables_gaps(study):
    rows, reading = study
    starred = _bullet(reading, "**Significant after Holm's correction:**")
    unstarred = _bullet(reading, "**No significant difference after Holm**")
    for variant, row in rows.items():
        if not row["bleu_significant"]:
            continue  # the baseline and the A/A arm: outside Holm's family
        gap = _signed(row["bleu_delta"])
        if row["bleu_significant"] == "True":
            assert f"{gap} " in starred, f"{variant}: {gap} missing from the starred bullet"
            assert _holm_p(row["bleu_p_holm"]) in starred, variant
        else:
            assert gap in unstarred, f"{variant}: {gap} missing from the unstarred bullet"


def test_counts_and_pooled_sd_match_the_table(study):
    rows, reading = study
    stars = sum(row["bleu_significant"] == "True" for row in rows.values())
    sd = float(rows["baseline_aa"]["bleu_pooled_seed_sd"])
    flat = _one_line(reading)
    assert f"where the seed-aware test after Holm gives it to {stars}." in flat
    assert f"pooled between-seed sd ({sd:.2f} BLEU)" in flat


def test_reproduce_verdict_matches_its_table(study):
    rows, reading = study
    with open(os.path.join(STUDY, "reproduce", "reproduce.csv"), encoding="utf-8") as f:
        reruns = list(csv.DictReader(f))
    identical = sum(row["verdict"] == "bit-identical" for row in reruns)
    arms = {row["variant"] for row in reruns}
    assert arms == set(rows), "--reproduce should rerun one run of every arm"
    flat = _one_line(reading)
    assert f"{identical} of the {len(reruns)} reruns are bit-identical" in flat
    if "with no translation differing" in flat:
        assert all(row["differing_sentences"] == "0" for row in reruns)
    if "source hash only" in flat:
        assert all(row["setup_differs"] == "code" for row in reruns)
