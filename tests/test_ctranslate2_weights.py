"""benchmarks/ctranslate2_weights.py (over transformer/interop/ctranslate2_model.py): a
CTranslate2 model holding exactly our weights.

Tiny random models (Post-LN and Pre-LN, LayerNorm and RMSNorm) whose every parameter is moved
away from its init, so a transposed, unfused or misplaced weight cannot pass: CTranslate2's own
scoring of forced targets equals our teacher-forced log-probabilities to 1e-5, its greedy
search emits the ids our Translator's compiled greedy search emits, and its int8 model holds
one byte per weight.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers import fast_subset
from tests.post_ln_models import padded_rows, post_ln_config, random_model

ctranslate2 = pytest.importorskip("ctranslate2")

from benchmarks import ctranslate2_weights as ct2w  # noqa: E402
from transformer.common.errors import UserError  # noqa: E402
from transformer.common.special_ids import BOS_ID, EOS_ID  # noqa: E402


def tokens(ids) -> list[str]:
    return [ct2w.token(int(i)) for i in ids]


def converted(tmp_path, cfg, params, quantization="float32"):
    out = ct2w.save_ctranslate2(cfg, params, str(tmp_path / quantization), quantization)
    return ctranslate2.Translator(out, device="cpu", intra_threads=1)


@pytest.mark.parametrize(
    "activation, output_bias",
    fast_subset(
        [("relu", False), ("gelu", False), ("gelu_tanh", False), ("silu", True)], [("gelu", False)]
    ),
)
def test_forced_target_scores_equal_our_log_probabilities(tmp_path, activation, output_bias):
    cfg = post_ln_config(activation=activation, output_bias=output_bias)
    assert_scores_equal(tmp_path, cfg)


@pytest.mark.parametrize(
    "norm_position, norm_type",
    fast_subset(
        [("pre", "layernorm"), ("pre", "rmsnorm"), ("post", "rmsnorm")], [("pre", "layernorm")]
    ),
)
def test_pre_ln_and_rmsnorm_scores_equal_our_log_probabilities(tmp_path, norm_position, norm_type):
    """Pre-LN (the main job's blocks, with the final encoder and decoder norms) and RMSNorm,
    which Marian cannot express, go to CTranslate2 through its own spec."""
    cfg = post_ln_config(norm_position=norm_position, norm_type=norm_type, activation="gelu")
    assert_scores_equal(tmp_path, cfg)


def assert_scores_equal(tmp_path, cfg) -> None:
    """CTranslate2's scores of forced targets equal our teacher-forced log-probabilities."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, params = random_model(cfg)
    rng = np.random.default_rng(0)
    src_lengths, tgt_lengths = [9, 5, 3, 7], [7, 4, 6, 2]
    src = padded_rows(rng, src_lengths, end=EOS_ID)  # [4, 9]
    tgt = padded_rows(rng, tgt_lengths)  # [4, 7] words only
    rows = range(len(src_lengths))
    sources = [tokens(src[r, : src_lengths[r]]) for r in rows]
    targets = [tokens(tgt[r, : tgt_lengths[r]]) for r in rows]
    theirs = converted(tmp_path, cfg, params).score_batch(sources, targets)
    forward = jax.jit(lambda p, s, t: nnx.merge(graphdef, p)(s, t))
    for r in rows:
        words = tgt[r, : tgt_lengths[r]].tolist()
        tgt_in = jnp.asarray([[BOS_ID, *words]])
        logits = forward(params, jnp.asarray(src[r : r + 1, : src_lengths[r]]), tgt_in)
        log_probs = np.asarray(jax.nn.log_softmax(logits[0], axis=-1))  # [T + 1, V]
        expected = log_probs[np.arange(len(words) + 1), [*words, EOS_ID]]
        assert np.abs(expected).max() > 1.0  # scores of substance
        np.testing.assert_allclose(theirs[r].log_probs, expected, atol=1e-5, rtol=0)


# (activation, norm_position, model seeds): seeds whose random models end some rows by EOS
# and run others to the limit.
GREEDY_CASES = [("relu", "post", (0, 3)), ("gelu", "post", (0, 3)), ("relu", "pre", (0, 7))]


@pytest.mark.parametrize(
    "activation, norm_position, seeds", fast_subset(GREEDY_CASES, GREEDY_CASES[::2])
)
def test_greedy_ids_equal_our_translator(tmp_path, activation, norm_position, seeds):
    """Every row may emit 10 tokens (max_len_a = 0), EOS forced at the 10th."""
    from transformer.inference.translator import DecodeSettings, Translator

    cfg = post_ln_config(activation=activation, norm_position=norm_position)
    settings = DecodeSettings(strategy="greedy", max_len_a=0.0, max_len_b=10, batch_size=4)
    rng = np.random.default_rng(1)
    lengths = [6, 3, 9, 4, 7, 2]
    src = padded_rows(rng, lengths, end=EOS_ID)
    id_lists = [row[:n].tolist() for row, n in zip(src, lengths, strict=True)]
    emitted = []
    for seed in seeds:
        graphdef, params = random_model(cfg, seed=seed)
        ours, _ = Translator(graphdef, cfg, settings, None, None).translate_ids(params, id_lists)
        results = converted(tmp_path / str(seed), cfg, params).translate_batch(
            [tokens(ids) for ids in id_lists], **ct2w.search_options(10)
        )
        theirs = [ct2w.ids_of(result.hypotheses[0]) for result in results]
        assert [r[0] for r in ours] == theirs
        emitted += [len(ids) for ids in theirs]
    # Both ends of the search: rows cut at the limit, and rows ending by EOS before it.
    assert 9 in emitted and min(emitted) < 9, emitted


def test_int8_model_stores_a_byte_per_weight_and_translates(tmp_path):
    cfg = post_ln_config(d_model=64, d_ff=256, vocab_size=400)
    _, params = random_model(cfg)
    sizes = {}
    for quantization in ct2w.QUANTIZATIONS:
        translator = converted(tmp_path, cfg, params, quantization)
        out = translator.translate_batch([tokens([10, 11, 12, EOS_ID])], **ct2w.search_options(8))
        assert len(out[0].hypotheses[0]) <= 7
        sizes[quantization] = os.path.getsize(tmp_path / quantization / "model.bin")
    assert sizes["int8"] < 0.4 * sizes["float32"]


def test_configs_ctranslate2_cannot_hold_are_refused_by_name(tmp_path):
    cfg = post_ln_config(position="rope")
    with pytest.raises(UserError, match="model.position='rope'.*model.position='sinusoidal'"):
        ct2w.save_ctranslate2(cfg, random_model(cfg)[1], str(tmp_path / "m"))
    with pytest.raises(ValueError, match="quantization='int4'"):
        ct2w.save_ctranslate2(post_ln_config(), None, str(tmp_path / "m"), "int4")


@pytest.mark.slow
def test_compare_ctranslate2_reports_each_precision_at_forced_length(capsys, monkeypatch):
    import json
    import os

    from benchmarks import compare_ctranslate2

    # The load rises with each reading, as the process's own work raises it: every
    # precision's setup line must keep the first, taken before any of that work.
    loads = iter(range(1, 100))
    monkeypatch.setattr(os, "getloadavg", lambda: (float(next(loads)), 0.0, 0.0))
    argv = ["--decode_lengths", "3", "--repeats", "1", "--decode_modes", "greedy,beam4", "--json"]
    assert compare_ctranslate2.main(argv) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_key = {(r["impl"], r["figure"]): r for r in records}
    for precision in ct2w.QUANTIZATIONS:
        impl = f"ctranslate2-{precision}"
        greedy = by_key[(impl, "decode_greedy_tokens_per_s_3")]
        beam = by_key[(impl, "decode_beam4_sentences_per_s_3")]
        assert greedy["value"] == pytest.approx(32 * 3 / greedy["call_s"], rel=1e-3)
        assert beam["value"] == pytest.approx(32 / beam["call_s"], rel=1e-3)
        assert by_key[(impl, "setup")]["ctranslate2"] == ctranslate2.__version__
        assert by_key[(impl, "setup")]["loadavg_1m"] == 1.0
        assert by_key[(impl, "peak_rss_mib")]["value"] > 0


def test_compare_ctranslate2_refuses_unknown_choices(capsys):
    from benchmarks import compare_ctranslate2

    for flag, value in (
        ("--precisions", "int4"),
        ("--decode_modes", "topk"),
        ("--decode_lengths", "x"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            compare_ctranslate2.parse_args([flag, value])
        assert exit_info.value.code == 2
        assert f"{flag} {value!r}" in capsys.readouterr().err
