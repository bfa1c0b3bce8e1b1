"""Attention analysis: captured probabilities, head statistics and flags, head masking, CLI."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import tiny_config
from transformer import ModelConfig, Transformer
from transformer.cli import analyze as analyze_cli
from transformer.common.errors import UserError
from transformer.common.special_ids import BOS_ID
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.instrumentation import PLAIN, HeadMask, Instrumentation
from transformer.model.masks import shift_right
from transformer.research.attention_stats import KINDS, collect_attention, flag_heads
from transformer.research.head_masking import (
    HeadAnalyzer,
    head_masks,
    masked_model_state,
    parse_mask_spec,
    set_head_masks,
    with_head_masks,
)

CAPTURE = Instrumentation(capture_attention=True)
CAPTURE_AND_MASKS = Instrumentation(capture_attention=True, head_masks=True)


def _model(instrumentation=PLAIN, **kw):
    cfg = ModelConfig(
        vocab_size=50,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout_rate=0.0,
        max_len=32,
        **kw,
    )
    return cfg, Transformer(cfg, rngs=nnx.Rngs(0), instrumentation=instrumentation)


def _batch():
    rng = np.random.default_rng(0)
    src = rng.integers(4, 50, size=(3, 9)).astype(np.int32)
    tgt = rng.integers(4, 50, size=(3, 7)).astype(np.int32)
    for row, (s, t) in enumerate([(9, 7), (5, 4), (3, 6)]):  # lengths; EOS last, then padding
        src[row, s - 1], src[row, s:] = 3, 0
        tgt[row, t - 1], tgt[row, t:] = 3, 0
    return {
        "src": src,
        "tgt": tgt,
        "src_segments": (src != 0).astype(np.int32),
        "tgt_segments": (tgt != 0).astype(np.int32),
    }


def test_attention_rows_sum_to_one_for_real_queries():
    cfg, model = _model(CAPTURE, position="rope")
    b = _batch()
    tgt_in = shift_right(jnp.asarray(b["tgt"]), jnp.asarray(b["tgt_segments"]), BOS_ID)
    probs, logits = collect_attention(model, jnp.asarray(b["src"]), tgt_in)
    assert logits.shape == (3, 7, 50)
    real = {"encoder_self": b["src"] != 0, "decoder_self": b["tgt"] != 0, "cross": b["tgt"] != 0}
    for kind in KINDS:
        assert len(probs[kind]) == 2
        for p in probs[kind]:
            p = np.asarray(p)
            sums = p.sum(-1)  # [B, H, T]
            mask = np.broadcast_to(real[kind][:, None, :], sums.shape)
            np.testing.assert_allclose(sums[mask], 1.0, atol=1e-5)


def test_uniform_head_is_flagged_dead_and_statistics_are_shares():
    cfg, model = _model()
    q = model.encoder_layers[0].self_attention.query  # zero queries: every score is 0
    q.kernel[...] = jnp.zeros_like(q.kernel[...])
    q.bias[...] = jnp.zeros_like(q.bias[...])
    analyzer = HeadAnalyzer(nnx.state(model, nnx.Param), cfg, [_batch()])
    result = analyzer.score_sample(with_stats=True)
    ent = result.stats["encoder_self"]["entropy"]
    np.testing.assert_allclose(ent[0], 1.0, atol=1e-5)  # uniform over the visible keys
    assert (ent[1] < 0.999).all()
    flags = flag_heads(result.stats)
    assert {"encoder_self:0:0", "encoder_self:0:1"} <= set(flags["dead"])
    for kind, stats in result.stats.items():
        for name, values in stats.items():
            assert values.shape == (2, 2), (kind, name)
            assert ((values >= -1e-6) & (values <= 1 + 1e-6)).all(), (kind, name)
    assert "same" not in result.stats["cross"]
    # The encoder's uniform head spreads 1/len over each key: its 'same' share is mean(1/len).
    lengths = np.array([9, 5, 3])
    expected = np.sum(lengths * (1 / lengths)) / lengths.sum()
    np.testing.assert_allclose(result.stats["encoder_self"]["same"][0], expected, rtol=1e-4)
    assert np.isfinite(result.loss) and result.tokens == 17


@pytest.mark.slow
def test_masking_heads_changes_logits_only_when_something_is_masked():
    cfg, captured = _model(CAPTURE)
    _, model = _model(CAPTURE_AND_MASKS)
    b = _batch()
    src = jnp.asarray(b["src"])
    tgt_in = shift_right(jnp.asarray(b["tgt"]), jnp.asarray(b["tgt_segments"]), BOS_ID)
    _, plain = collect_attention(captured, src, tgt_in)
    _, ones = collect_attention(model, src, tgt_in)  # built with masks of ones
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(ones))
    for spec in ("encoder:1:0,encoder:1:1", "cross:0:0,cross:0:1", "decoder:1:0,decoder:1:1"):
        set_head_masks(model, head_masks(cfg, parse_mask_spec(spec, cfg)))
        _, out = collect_attention(model, src, tgt_in)
        assert np.abs(np.asarray(out) - np.asarray(plain)).max() > 1e-4, spec
    set_head_masks(model, None)
    _, back = collect_attention(model, src, tgt_in)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(back))
    analyzer = HeadAnalyzer(nnx.state(model, nnx.Param), cfg, [b])
    assert analyzer.score_sample().loss == analyzer.score_sample(with_stats=True).loss
    assert analyzer.score_sample([("encoder_self", 0, 0)]).loss != analyzer.score_sample().loss


def test_parse_mask_spec_rejects_bad_items():
    cfg, _ = _model()
    assert parse_mask_spec("encoder:0:1, cross:1:0", cfg) == [
        ("encoder_self", 0, 1),
        ("cross", 1, 0),
    ]
    for bad in ("encoder:2:0", "cross:0:5", "foo:0:0", "encoder:0", ""):
        try:
            parse_mask_spec(bad, cfg)
        except UserError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_a_plain_model_traces_no_analysis_and_refuses_it():
    cfg, model = _model()
    src, tgt_in = jnp.asarray(_batch()["src"]), jnp.ones((3, 7), jnp.int32)
    graphdef, params = nnx.split(model, nnx.Param)
    # The plain forward pass (what training traces) returns the logits and nothing else.
    jaxpr = jax.make_jaxpr(lambda p: nnx.merge(graphdef, p)(src, tgt_in))(params)
    assert len(jaxpr.jaxpr.outvars) == 1
    assert not jax.tree.leaves(nnx.state(model, HeadMask))
    with pytest.raises(ValueError, match="built without attention capture"):
        collect_attention(model, src, tgt_in)
    with pytest.raises(ValueError, match="built without head masks"):
        set_head_masks(model, head_masks(cfg))


def test_captured_probabilities_stay_out_of_the_model():
    cfg, model = _model(CAPTURE)
    src, tgt_in = jnp.asarray(_batch()["src"]), jnp.ones((3, 7), jnp.int32)
    collect_attention(model, src, tgt_in)
    assert not jax.tree.leaves(nnx.state(model, nnx.Intermediate))


def test_translator_decodes_with_the_head_masks_in_its_state():
    cfg, model = _model()
    graphdef, params = nnx.split(model, nnx.Param)
    settings = DecodeSettings(strategy="greedy", max_len_a=0.0, max_len_b=6, batch_size=3)
    sources = [list(map(int, row[row != 0])) for row in _batch()["src"]]
    plain = Translator(graphdef, cfg, settings, None, None).translate_ids(params, sources)
    masked_graphdef, ones = masked_model_state(cfg, params)
    translator = Translator(masked_graphdef, cfg, settings, None, None)
    assert translator.translate_ids(ones, sources) == plain
    everything = [(kind, layer, head) for kind in KINDS for layer in range(2) for head in range(2)]
    silenced = with_head_masks(masked_graphdef, ones, head_masks(cfg, everything))
    assert translator.translate_ids(silenced, sources) != plain
    assert translator.translate_ids(ones, sources) == plain  # the state was copied, not written


@pytest.mark.slow
def test_analysis_cli_writes_heatmaps_statistics_and_report(tmp_path):
    from transformer.training.loop import train_and_evaluate

    workdir = str(tmp_path / "run")
    config = tiny_config(
        train__num_steps=10,
        train__log_every=5,
        train__eval_every=10,
        train__checkpoint_every=10,
        train__eval_bleu_sentences=0,
    )
    config.data.synthetic_eval_size = 12
    train_and_evaluate(config, workdir)
    inputs = tmp_path / "in.txt"
    inputs.write_text("the cat sees the dog .\n")
    out = str(tmp_path / "analysis")
    rc = analyze_cli.main(
        [
            "--workdir",
            workdir,
            "--out",
            out,
            "--input",
            str(inputs),
            "--num_sentences",
            "12",
            "--batch_size",
            "12",
            "--bleu_sentences",
            "6",
            "--bleu_heads",
            "2",
            "--mask_heads",
            "encoder:0:1,cross:0:3",
        ]
    )
    assert rc == 0
    report = json.load(open(os.path.join(out, "report.json")))
    assert report["num_sentences"] == 12 and report["step"] == 10
    assert len(report["heads"]) == 3 * 4  # (1 enc + 2 x 1 dec) layers x 4 heads
    assert sum(h["bleu_delta"] is not None for h in report["heads"]) == 2
    assert set(report["flagged"]) == {"dead", "sink", "positional"}
    assert report["mask_heads"]["heads"] == ["encoder_self:0:1", "cross:0:3"]
    assert report["mask_heads"]["loss_delta"] != 0
    pngs = report["sentences"][0]["pngs"]
    names = sorted(os.path.basename(p) for p in pngs)
    assert names == [
        "cross_layer0.png",
        "decoder_self_layer0.png",
        "encoder_self_layer0.png",
        "overview.png",
    ]
    for path in pngs + report["stats_pngs"]:
        assert os.path.getsize(path) > 1000, path
    assert os.path.exists(os.path.join(out, "stats_importance.png"))
