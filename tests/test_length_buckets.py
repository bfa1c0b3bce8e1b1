"""scoring.length_buckets: each bucket's scores equal sacreBLEU on that bucket's sentences."""

from __future__ import annotations

import random

import pytest
import sacrebleu

from transformer.common.errors import UserError
from transformer.scoring import length_buckets as lb


def _corpus(n=40, seed=0):
    rng = random.Random(seed)
    words = "der die das Hund Katze sieht den einen roten kleinen Mann".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(n)]
    hyps = [" ".join(w for w in r.split() if rng.random() > 0.3) for r in refs]
    lengths = [rng.randint(1, 30) for _ in range(n)]
    return lengths, hyps, refs


def test_each_bucket_is_scored_by_sacrebleu_on_its_own_sentences():
    lengths, hyps, refs = _corpus()
    buckets = lb.bucket_scores(lengths, hyps, refs, (5, 12, 20))
    bounds = [(1, 5), (6, 12), (13, 20), (21, None)]
    assert [(b["min_tokens"], b["max_tokens"]) for b in buckets] == bounds
    assert sum(b["sentences"] for b in buckets) == len(refs)
    for bucket, (low, high) in zip(buckets, bounds, strict=True):
        members = [i for i, n in enumerate(lengths) if low <= n and (high is None or n <= high)]
        assert bucket["sentences"] == len(members)
        sub_h, sub_r = [hyps[i] for i in members], [[refs[i] for i in members]]
        assert bucket["bleu"] == pytest.approx(sacrebleu.corpus_bleu(sub_h, sub_r).score)
        assert bucket["chrf"] == pytest.approx(sacrebleu.corpus_chrf(sub_h, sub_r).score)


def test_an_empty_bucket_has_no_score():
    buckets = lb.bucket_scores([3, 4], ["a b", "c d"], ["a b", "c e"], (10,))
    assert buckets[1] == {
        "min_tokens": 11,
        "max_tokens": None,
        "sentences": 0,
        "bleu": None,
        "chrf": None,
    }
    assert [lb.bucket_label(b) for b in buckets] == ["1-10", "11+"]


@pytest.mark.parametrize("spec", ["", "10,5", "0,10", "10,10", "ten"])
def test_bad_edges_are_user_errors(spec):
    with pytest.raises(UserError, match="e.g. 10,20,30"):
        lb.parse_edges(spec)


def test_edges_parse():
    assert lb.parse_edges("10, 20,30") == (10, 20, 30)
    assert lb.parse_edges([1]) == (1,)
