"""transformer/interop/marian.py: a Hugging Face MarianMTModel holding exactly our weights.

Tiny random Post-LN models whose every bias and norm parameter is perturbed away from its
init (zeros, ones), so a transposed, unpermuted or misplaced weight cannot pass: teacher-forced
logits agree to 1e-4 on a padded batch, our Translator's compiled greedy search and HF's
generate() emit the same ids, and configs Marian cannot express are refused by name. The slow
test trains a tiny Post-LN run and runs benchmarks/real_data_speed.py on it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import fast_subset, tiny_config

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.post_ln_models import padded_rows, post_ln_config, random_model  # noqa: E402
from transformer.common.errors import UserError  # noqa: E402
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from transformer.interop import marian  # noqa: E402


@pytest.mark.parametrize(
    "activation, output_bias",
    fast_subset(
        [("relu", False), ("gelu", False), ("gelu_tanh", False), ("silu", True)], [("gelu", False)]
    ),
)
def test_teacher_forced_logits_agree_on_a_padded_batch(activation, output_bias):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    cfg = post_ln_config(activation=activation, output_bias=output_bias)
    graphdef, params = random_model(cfg)
    hf = marian.to_marian(cfg, params)
    rng = np.random.default_rng(0)
    src = padded_rows(rng, [9, 5, 3, 7], end=EOS_ID)  # [4, 9]
    tgt_in = padded_rows(rng, [7, 4, 6, 2], first=BOS_ID)  # [4, 7]
    forward = jax.jit(lambda p, s, t: nnx.merge(graphdef, p)(s, t))  # eager NNX is slow
    ours = np.asarray(forward(params, jnp.asarray(src), jnp.asarray(tgt_in)))
    src_t = torch.from_numpy(src).long()
    with torch.inference_mode():
        theirs = hf(
            input_ids=src_t,
            attention_mask=(src_t != PAD_ID).long(),
            decoder_input_ids=torch.from_numpy(tgt_in).long(),
        ).logits.numpy()  # [4, 7, V]
    real = tgt_in != PAD_ID
    assert np.abs(ours).max() > 1.0  # logits of substance, not a near-zero model
    np.testing.assert_allclose(theirs[real], ours[real], atol=1e-4, rtol=0)


def test_position_table_is_hf_own_and_matches_ours_permuted():
    from transformer.model.position import sinusoidal_table

    cfg = post_ln_config()
    hf = marian.to_marian(cfg, random_model(cfg)[1])
    perm = marian.residual_permutation(cfg.d_model)
    ours = np.asarray(sinusoidal_table(cfg.max_len, cfg.d_model))[:, perm]
    for stack in (hf.model.encoder, hf.model.decoder):
        np.testing.assert_allclose(stack.embed_positions.weight.numpy(), ours, atol=1e-5)
    norms = [m for m in hf.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 2 + 3 * 2 and all(m.eps == cfg.norm_eps for m in norms)


@pytest.mark.parametrize("activation", fast_subset(["relu", "gelu"], ["relu"]))
def test_greedy_ids_equal_hf_generate(activation):
    """Ours: Translator.translate_ids, the compiled greedy search training's BLEU, eval.py and
    decode.py use. Every row may emit 10 tokens (max_len_a = 0), EOS forced at the 10th."""
    from transformer.inference.translator import DecodeSettings, Translator

    cfg = post_ln_config(activation=activation)
    graphdef, params = random_model(cfg, seed=3)
    settings = DecodeSettings(strategy="greedy", max_len_a=0.0, max_len_b=10, batch_size=4)
    rng = np.random.default_rng(1)
    lengths = [6, 3, 9, 4, 7, 2]
    src = padded_rows(rng, lengths, end=EOS_ID)  # [6, 9]
    id_lists = [row[:n].tolist() for row, n in zip(src, lengths, strict=True)]
    ours, _ = Translator(graphdef, cfg, settings, None, None).translate_ids(params, id_lists)
    hf = marian.to_marian(cfg, params)
    src_t = torch.from_numpy(src).long()
    with torch.inference_mode():
        out = hf.generate(
            input_ids=src_t,
            attention_mask=(src_t != PAD_ID).long(),
            num_beams=1,
            do_sample=False,
            max_new_tokens=10,
        )
    theirs = marian.generated_ids(out.numpy())
    assert [r[0] for r in ours] == theirs


@pytest.mark.parametrize(
    "field, value",
    [
        ("norm_position", "pre"),
        ("position", "rope"),
        ("norm_type", "rmsnorm"),
        ("activation", "swiglu"),
        ("num_kv_heads", 2),
        ("use_bias", False),
        ("share_embeddings", False),
        ("tie_output", False),
    ],
)
def test_check_compatible_names_the_field(field, value):
    with pytest.raises(UserError, match=rf"model\.{field}=") as info:
        marian.check_compatible(post_ln_config(**{field: value}))
    assert "\n" not in str(info.value)


def test_check_compatible_accepts_post_ln_and_mha_written_out():
    marian.check_compatible(post_ln_config(num_kv_heads=4, activation="gelu"))


@pytest.mark.slow
def test_real_data_speed_reports_figures_on_a_trained_post_ln_run(tmp_path, capsys):
    from benchmarks import real_data_speed
    from transformer.training.loop import train_and_evaluate

    config = tiny_config(train__num_steps=20, train__eval_bleu_sentences=0)
    config.model.norm_position = "post"
    workdir = str(tmp_path / "run")
    train_and_evaluate(config, workdir)
    capsys.readouterr()
    rc = real_data_speed.main(
        [
            "--workdir",
            workdir,
            "--split",
            "test",
            "--json",
            "--max_sentences",
            "8",
            "--batch_size",
            "4",
        ]
    )
    assert rc == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_key = {(r["impl"], r["figure"]): r for r in records}
    engines = ("ctranslate2-float32", "ctranslate2-int8")
    for impl in ("jax-transformer", "torch-marian", *engines):
        for mode in ("greedy", "beam4"):
            assert by_key[(impl, f"{mode}_sentences_per_s")]["sentences"] == 8
            assert 0 <= by_key[(impl, f"{mode}_bleu")]["value"] <= 100
    for impl in ("torch-marian", *engines):
        agreement = by_key[(impl, "greedy_agreement")]
        assert 0 <= agreement["value"] <= agreement["agree_up_to_own_limit"] <= 1
        assert agreement["sentences"] == 8 and agreement["vs"] == "jax-transformer"
    # The same float32 weights under the same greedy rule: every sentence agrees up to its
    # own limit (the batch-wide limit alone may let CTranslate2 go on where ours stopped).
    assert by_key[("ctranslate2-float32", "greedy_agreement")]["agree_up_to_own_limit"] == 1
    assert "loadavg_1m_before" in by_key[("jax-transformer", "setup")]
