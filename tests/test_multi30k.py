"""Multi30k through the parallel_text builder (skipped where ../shared/data/multi30k is absent)."""

import os

import pytest

from tests.helpers import ROOT, recipe

MULTI30K = os.path.join(ROOT, "..", "shared", "data", "multi30k")
pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(MULTI30K, "train.en")),
    reason="Multi30k not present at ../shared/data/multi30k",
)


def test_multi30k_splits_load_in_both_directions(tmp_path):
    from transformer.data import load_split

    config = recipe("multi30k")
    config.data.path = MULTI30K
    valid = load_split(config.data, "valid", str(tmp_path))
    test = load_split(config.data, "test", str(tmp_path))
    assert (len(valid), len(test)) == (1014, 1000)
    first_en = open(os.path.join(MULTI30K, "test.en"), encoding="utf-8").readline().strip()
    assert test[0][0] == first_en
    config.data.reverse = True
    assert load_split(config.data, "test", str(tmp_path))[0][1] == first_en
