"""transformer-interop export-ctranslate2 on runs trained here, Pre-LN (the main job's blocks,
which Marian cannot express) and Post-LN.

A tiny configs/default.py run is trained briefly in the test and exported. CTranslate2's
greedy search, with the length options the export writes beside the model, emits the ids
this project's greedy search emits for every validation sentence and a long one (sources
cut at model.max_len on both sides): with the trained weights, whose outputs end by EOS, and
with EOS's logit pushed down, where every output runs to model.max_len. docs/interop.md's
CTranslate2 snippet runs as written on that model, where CTranslate2 without those options
stops with its position error.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from tests.helpers import ROOT, fast_subset, tiny_config

ctranslate2 = pytest.importorskip("ctranslate2")

from transformer.cli import interop  # noqa: E402
from transformer.common.special_ids import EOS_ID  # noqa: E402
from transformer.interop import runs  # noqa: E402

# Enough steps for a model that ends some sentences by EOS before the limit.
TRAIN = dict(
    train__num_steps=120,
    train__learning_rate=1e-2,
    train__batch_size=32,
    train__eval_every=1000,
    train__checkpoint_every=1000,
)
LOOPING = "the " * 80  # longer than model.max_len: both sides cut the source


@pytest.fixture(scope="module", params=fast_subset(["pre", "post"], ["pre"]))
def trained_run(request, tmp_path_factory):
    """(workdir, CTranslate2 model directory) of a run with model.norm_position=param."""
    from transformer.training.loop import train_and_evaluate

    root = tmp_path_factory.mktemp(f"ct2_{request.param}")
    workdir, out = str(root / "run"), str(root / "ct2")
    train_and_evaluate(tiny_config(model__norm_position=request.param, **TRAIN), workdir)
    assert interop.main(["export-ctranslate2", "--workdir", workdir, out]) == 0
    return workdir, out


def test_ctranslate2_greedy_equals_ours(trained_run):
    """The trained weights: sentences that end by EOS, each at its own length."""
    workdir, out = trained_run
    run = restored(workdir)
    lines, ids = sources(run.data, run.model_cfg.max_len)
    ours, _ = run.translator.translate_ids(run.params, ids)
    theirs = ctranslate2_greedy(out, lines, run.data.target_tokenizer)
    assert [r[0] for r in ours] == theirs
    assert min(len(r) for r in theirs) < run.model_cfg.max_len - 1  # ended by EOS ...
    assert len({tuple(r) for r in theirs}) > len(lines) // 2  # ... with outputs that differ


def test_ctranslate2_greedy_equals_ours_cut_at_max_len(trained_run, tmp_path):
    """EOS pushed down: every sentence runs to model.max_len on both sides."""
    workdir, _ = trained_run
    weights = never_ending(workdir)
    max_len = weights.model_cfg.max_len
    out = str(tmp_path / "ct2")
    runs._write_ctranslate2(weights, out, "float32")
    lines, ids = sources(restored(workdir).data, max_len)
    ours = our_greedy(weights, ids)
    theirs = ctranslate2_greedy(out, lines, weights.target_tokenizer)
    assert ours == theirs
    assert {len(r) for r in theirs} == {max_len - 1}  # EOS forced at max_len by ours
    assert len({tuple(r) for r in theirs}) > len(lines) // 2


def sources(data, max_len) -> tuple[list[str], list[list[int]]]:
    """(the validation sources and LOOPING, their ids cut to max_len as decode.py cuts)."""
    from transformer.data import tokenize_sources

    lines = [*data.eval_split("valid").sources, LOOPING]
    ids, truncated = tokenize_sources(lines, data.source_tokenizer, max_len)
    assert truncated >= 2  # LOOPING and long validation sentences: both sides cut them
    return lines, ids


def restored(workdir):
    """The run as decode.py restores it, greedy, every sentence allowed model.max_len."""
    from transformer.evaluation.restore import restore_run

    overrides = ["decode.strategy=greedy", "decode.max_len_a=0", "decode.max_len_b=100000"]
    return restore_run(workdir, overrides=overrides)


def our_greedy(weights, ids) -> list[list[int]]:
    """Our Translator's greedy ids for the weights of `never_ending`, limit model.max_len."""
    from flax import nnx

    from transformer.inference.translator import DecodeSettings, Translator
    from transformer.training.run_state import build_model

    cfg = weights.model_cfg
    graphdef, state = nnx.split(nnx.eval_shape(lambda: build_model(cfg, 0)), nnx.Param)
    nnx.replace_by_pure_dict(state, weights.params)
    settings = DecodeSettings(strategy="greedy", max_len_a=0.0, max_len_b=cfg.max_len)
    tokens, _ = Translator(graphdef, cfg, settings, None, None).translate_ids(state, ids)
    return [r[0] for r in tokens]


def ctranslate2_greedy(out, lines, target_tokenizer) -> list[list[int]]:
    """CTranslate2's greedy ids of raw lines, with the options the export wrote."""
    import sentencepiece as spm

    source = spm.SentencePieceProcessor(model_file=os.path.join(out, "source.spm"))
    with open(os.path.join(out, "translate_options.json")) as f:
        options = json.load(f)
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    results = translator.translate_batch(
        [source.encode(line, out_type=str) for line in lines], beam_size=1, **options
    )
    return [[target_tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results]


def test_export_marian_refuses_pre_ln_pointing_at_export_ctranslate2(trained_run, tmp_path, capsys):
    """Pre-LN: a one-line error naming the field and export-ctranslate2; Post-LN: the Marian
    export writes the same CTranslate2 directory beside it."""
    workdir, out = trained_run
    marian, ct2 = str(tmp_path / "marian"), str(tmp_path / "ct2")
    argv = ["export-marian", "--workdir", workdir, marian, "--ctranslate2", ct2]
    if runs.run_config.load(workdir).model.norm_position == "post":
        pytest.importorskip("torch")
        assert interop.main(argv) == 0
        assert sorted(os.listdir(ct2)) == sorted(os.listdir(out))
        return
    code = interop.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert "model.norm_position='pre' has no MarianMTModel equivalent" in err
    assert "transformer-interop export-ctranslate2" in err
    assert not os.path.exists(marian) and not os.path.exists(ct2)


def docs_snippet() -> str:
    """docs/interop.md's Python block that runs CTranslate2."""
    with open(os.path.join(ROOT, "docs", "interop.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    (snippet,) = [b for b in blocks if "ctranslate2.Translator" in b]
    return snippet


def test_the_docs_snippet_stops_a_looping_sentence_at_max_len(trained_run, tmp_path, capsys):
    """The run's weights with EOS's logit pushed down: every sentence runs to the limit."""
    workdir, _ = trained_run
    weights = never_ending(workdir)
    out = str(tmp_path / "ct2")
    runs._write_ctranslate2(weights, out, "float32")
    with open(os.path.join(out, "translate_options.json")) as f:
        max_decoding_length = json.load(f)["max_decoding_length"]
    assert max_decoding_length == weights.model_cfg.max_len - 1
    snippet = docs_snippet()
    assert "max_decoding_length" in snippet
    model_line = re.search(r'^model = ".*"$', snippet, re.M).group(0)
    namespace = {}
    exec(snippet.replace(model_line, f"model = {out!r}"), namespace)  # noqa: S102
    assert len(namespace["result"][0].hypotheses[0]) == max_decoding_length
    assert capsys.readouterr().out.strip()
    translator, source = namespace["ctranslate2"].Translator(out), namespace["source"]
    with pytest.raises(RuntimeError, match="No position encodings are defined for positions"):
        translator.translate_batch([source.encode("The house is small.", out_type=str)])


def never_ending(workdir):
    """The run's RunWeights with an output bias that EOS never overcomes (pure-dict
    parameters)."""
    import dataclasses

    from flax import nnx

    run = runs.load_run_weights(workdir)
    params = nnx.to_pure_dict(run.params)
    params["output_bias"] = np.zeros(run.model_cfg.vocab_size, np.float32)
    params["output_bias"][EOS_ID] = -1e4
    model_cfg = dataclasses.replace(run.model_cfg, output_bias=True)
    return dataclasses.replace(run, model_cfg=model_cfg, params=params)
