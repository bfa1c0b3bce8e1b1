"""Cached decoding against the full forward pass, batch independence, eval.py and decode.py."""

import itertools
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import cached_logits, fast_subset, run, tiny_config
from transformer import ModelConfig, Transformer
from transformer.common.special_ids import BOS_ID, EOS_ID
from transformer.inference.translator import DecodeSettings, Translator
from transformer.model.normalization import PLACEMENTS
from transformer.model.position_schemes import SCHEMES
from transformer.training.steps import init_state

SRC = jnp.array([[5, 6, 7, 8, 9, 3, 0, 0], [10, 11, 3, 0, 0, 0, 0, 0]], jnp.int32)
TGT_IN = jnp.array([[2, 12, 13, 14, 15, 16], [2, 17, 18, 19, 20, 21]], jnp.int32)


@pytest.mark.parametrize(
    "position,norm_position",
    fast_subset(
        itertools.product(SCHEMES.names(), PLACEMENTS.names()),
        [(p, "pre") for p in ("rope", "alibi", "relative")],
    ),
)
def test_cached_decoding_equals_teacher_forcing(position, norm_position):
    cfg = ModelConfig(
        vocab_size=30,
        d_model=16,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=2,
        d_ff=32,
        max_len=16,
        dropout_rate=0.0,
        position=position,
        norm_position=norm_position,
    )
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(
        cached_logits(model, SRC, TGT_IN), model(SRC, TGT_IN), atol=2e-5, rtol=1e-5
    )


@pytest.mark.parametrize("num_kv_heads", fast_subset([None, 2, 1], [2]), ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("position", fast_subset(["rope", "alibi"], ["rope"]))
def test_cached_decoding_with_grouped_heads(num_kv_heads, position):
    cfg = ModelConfig(
        vocab_size=30,
        d_model=16,
        num_heads=4,
        num_kv_heads=num_kv_heads,
        num_encoder_layers=1,
        num_decoder_layers=2,
        d_ff=32,
        max_len=16,
        dropout_rate=0.0,
        position=position,
    )
    model = Transformer(cfg, rngs=nnx.Rngs(1))
    assert model.init_cache(2, 8)[0]["k"].shape == (2, cfg.kv_heads, 8, cfg.head_dim)
    np.testing.assert_allclose(
        cached_logits(model, SRC, TGT_IN), model(SRC, TGT_IN), atol=2e-5, rtol=1e-5
    )


class IdTokenizer:
    """Whitespace-separated integers <-> ids (a stand-in for SentencePiece)."""

    vocab_size = 30

    def tokenize_batch(self, texts):
        return [[int(t) for t in text.split()] for text in texts]

    def detokenize(self, ids):
        return " ".join(str(i) for i in ids)


@pytest.fixture(scope="module")
def small_model():
    cfg = ModelConfig(
        vocab_size=30,
        d_model=16,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        max_len=32,
        dropout_rate=0.0,
        position="rope",
    )
    graphdef, state = init_state(Transformer(cfg, rngs=nnx.Rngs(3)), _sgd())
    return cfg, graphdef, state.params


def _sgd():
    import optax

    return optax.sgd(0.1)


@pytest.mark.parametrize("strategy", fast_subset(["greedy", "sample", "beam"], ["sample", "beam"]))
def test_translation_does_not_depend_on_batch(small_model, strategy):
    cfg, graphdef, params = small_model
    settings = DecodeSettings(
        strategy=strategy, batch_size=4, beam_size=3, top_k=5, max_len_a=1.0, max_len_b=4, seed=7
    )
    tok = IdTokenizer()
    translator = Translator(graphdef, cfg, settings, tok, tok)
    short = "5 6 7"
    longer = ["8 9 10 11 12 13 14 15 16 17 18 19 20", "21 22 23 24 25 26 27 28 29 4 5 6"]
    alone = translator.translate(params, [short]).hypotheses[0]
    # The short sentence keeps its index (0) so sampling uses the same per-sentence key.
    together = translator.translate(params, [short, *longer]).hypotheses[0]
    assert alone == together


def _stream(translator, params, lines, tmp_path, name):
    """decode.py's streaming loop over `lines`, in process; returns the output bytes."""
    from types import SimpleNamespace

    from transformer.inference.streaming import translate_stream

    src, out = tmp_path / f"{name}.in", tmp_path / f"{name}.out"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    translate_stream(SimpleNamespace(translator=translator, params=params), str(src), str(out))
    return out.read_bytes()


def test_samples_do_not_depend_on_batch_size_around_empty_lines(small_model, tmp_path):
    # Line i's key comes from the seed and i alone: empty lines count, whatever the batch.
    cfg, graphdef, params = small_model
    tok = IdTokenizer()
    lines = ["5 6 7", "", "8 9 10 11", "", "", "12 13", "14 15 16 17 18"]
    outputs = {}
    for batch_size in (1, 2, 3, 64):
        settings = DecodeSettings(
            strategy="sample",
            num_samples=2,
            batch_size=batch_size,
            temperature=2.0,
            max_len_b=4,
            seed=3,
        )
        translator = Translator(graphdef, cfg, settings, tok, tok)
        outputs[batch_size] = _stream(translator, params, lines, tmp_path, str(batch_size))
    assert len(set(outputs.values())) == 1, outputs
    rows = outputs[1].decode().splitlines()
    assert [int(r.split("\t")[0]) for r in rows] == [i for i in range(len(lines)) for _ in "ab"]


def test_greedy_variants_agree(small_model):
    cfg, graphdef, params = small_model
    tok = IdTokenizer()
    lines = ["5 6 7 8", "9 10 11", "12 13 14 15 16 17"]

    def out(**kw):
        settings = DecodeSettings(batch_size=4, max_len_b=6, **kw)
        return Translator(graphdef, cfg, settings, tok, tok).translate(params, lines).best

    greedy = out(strategy="greedy")
    assert out(strategy="sample", temperature=0.0) == greedy
    assert out(strategy="sample", top_k=1) == greedy


# ------------------------------------------------------------------------ a trained tiny run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from transformer.training.loop import train_and_evaluate

    workdir = str(tmp_path_factory.mktemp("run") / "tiny")
    config = tiny_config(
        train__num_steps=60, train__eval_every=60, train__checkpoint_every=20, train__log_every=20
    )
    train_and_evaluate(config, workdir)
    return workdir


def test_eval_bleu_equals_sacrebleu_cli(trained_run):
    args = [
        "eval.py",
        "--workdir",
        trained_run,
        "--split",
        "valid",
        "--average_last",
        "2",
        "--config.decode.strategy=beam",
        "--config.decode.beam_size=2",
    ]
    proc = run(args, check=True)
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a" in proc.stdout
    assert "does not exist" not in proc.stderr  # no alarming (harmless) Orbax warning
    assert "Using custom data configuration" not in proc.stderr  # TFDS's routine notice
    record = json.load(open(os.path.join(trained_run, "eval", "valid.json")))
    assert record["averaged_steps"] == [40, 60] and record["decode"]["strategy"] == "beam"
    for key in ("bleu", "chrf", "signature", "step", "decode", "sentences_per_s"):
        assert key in record
    hyp = os.path.join(trained_run, "eval", "valid.hyp.txt")
    ref = os.path.join(trained_run, "eval", "valid.ref.txt")
    cli = run(["-m", "sacrebleu", ref, "-i", hyp, "-m", "bleu", "chrf", "-w", "6"], check=True)
    bleu, chrf = json.loads(cli.stdout)
    assert bleu["score"] == pytest.approx(record["bleu"], abs=1e-5)
    assert chrf["score"] == pytest.approx(record["chrf"], abs=1e-5)
    assert bleu["signature"] in json.dumps(record["signature"])
    n_ref = sum(1 for _ in open(ref))
    assert n_ref == record["sentences"] == 40  # the whole split, nothing filtered


SAMPLING = ("--strategy=sample", "--temperature=1.5")


def decode_file(workdir: str, src, out, *decode_flags: str) -> bytes:
    """decode.py on the file src into out, each of decode_flags a `--config.decode.` setting
    without that prefix ("--seed=1"); returns what it wrote."""
    settings = [f"--config.decode.{flag[2:]}" for flag in decode_flags]
    args = ["decode.py", "--workdir", workdir, "--input", str(src), "--output", str(out)]
    run(args + settings, check=True)
    return out.read_bytes()


@pytest.mark.slow
def test_decode_cli_is_reproducible_and_keeps_empty_lines(trained_run, tmp_path):
    lines = ["The clever boy sees the dog.", "", "A red cat sleeps in the house."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        outputs.append(
            decode_file(trained_run, src, tmp_path / f"{name}.txt", *SAMPLING, f"--seed={seed}")
        )
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]
    decoded = outputs[0].decode().split("\n")
    assert len(decoded) == 4 and decoded[1] == "" and decoded[3] == ""


@pytest.mark.slow
def test_decode_cli_samples_do_not_depend_on_batch_size(trained_run, tmp_path):
    lines = ["The clever boy sees the dog.", "", "A red cat sleeps.", "", "The dog sleeps."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for batch_size in (1, 2, 3, 64):
        out = tmp_path / f"out{batch_size}.txt"
        flags = (*SAMPLING, "--num_samples=3", f"--batch_size={batch_size}")
        outputs[batch_size] = decode_file(trained_run, src, out, *flags)
    assert len(set(outputs.values())) == 1, outputs
    assert len(outputs[1].decode().splitlines()) == 3 * len(lines)


def test_decode_cli_shows_no_routine_library_notices(trained_run, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("The dog sleeps.\n", encoding="utf-8")
    proc = run(
        [
            "decode.py",
            "--workdir",
            trained_run,
            "--input",
            str(src),
            "--config.decode.strategy=greedy",
        ],
        check=True,
    )
    assert proc.stderr.strip() == "translated 1 lines", proc.stderr  # nothing but our line


def test_decode_cli_with_prefix_starts_each_translation_with_it(trained_run, tmp_path):
    lines = ["The clever boy sees the dog.\tThe red", "", "A red cat sleeps.", "The dog.\tA"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ["decode.py", "--workdir", trained_run, "--input", str(src), "--output", str(out)]
    run([*args, "--with_prefix", "--config.decode.strategy=beam"], check=True)
    decoded = out.read_text(encoding="utf-8").split("\n")
    assert decoded[0].startswith("The red") and decoded[3].startswith("A")
    assert decoded[1] == "" and len(decoded) == 5
    plain = tmp_path / "plain.txt"  # no tab: no prefix, as decoding the bare source
    (tmp_path / "bare.txt").write_text("A red cat sleeps.\n", encoding="utf-8")
    bare = ["--input", str(tmp_path / "bare.txt"), "--output", str(plain)]
    run([*args[:3], *bare, "--config.decode.strategy=beam"], check=True)
    assert plain.read_text(encoding="utf-8").strip() == decoded[2]


def test_eval_prefix_file_starts_each_hypothesis_and_is_checked(trained_run, tmp_path):
    (tmp_path / "s.txt").write_text("The dog sleeps.\nA red cat sleeps.\n")
    (tmp_path / "r.txt").write_text("a\nb\n")
    (tmp_path / "p.txt").write_text("The cat\n\n")
    (tmp_path / "short.txt").write_text("The cat\n")
    files = ["--src", str(tmp_path / "s.txt"), "--ref", str(tmp_path / "r.txt")]
    args = ["eval.py", "--workdir", trained_run, *files, "--name", "prefixed"]
    proc = run([*args, "--prefix", str(tmp_path / "short.txt")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "has 1 lines for 2 source lines" in proc.stderr.strip().splitlines()[-1]
    run([*args, "--prefix", str(tmp_path / "p.txt")], check=True)
    hyp = open(os.path.join(trained_run, "eval", "prefixed.hyp.txt")).read().splitlines()
    assert hyp[0].startswith("The cat")
    record = json.load(open(os.path.join(trained_run, "eval", "prefixed.json")))
    assert record["prefix_file"] == str(tmp_path / "p.txt")


def test_decode_and_eval_with_constraints_hold_every_phrase(trained_run, tmp_path):
    lines = ["The clever boy sees the dog.\tred cat\thouse", "", "A red cat sleeps."]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ["decode.py", "--workdir", trained_run, "--input", str(src), "--output", str(out)]
    run([*args, "--with_constraints", "--config.decode.strategy=beam"], check=True)
    decoded = out.read_text(encoding="utf-8").split("\n")
    assert "red cat" in decoded[0] and "house" in decoded[0], decoded[0]
    assert decoded[1] == "" and len(decoded) == 4
    (tmp_path / "s.txt").write_text("The dog sleeps.\nA red cat sleeps.\n")
    (tmp_path / "r.txt").write_text("a\nb\n")
    (tmp_path / "c.txt").write_text("house\n\n")
    files = ["--src", str(tmp_path / "s.txt"), "--ref", str(tmp_path / "r.txt")]
    evaluate = ["eval.py", "--workdir", trained_run, *files, "--name", "constrained"]
    beam = "--config.decode.strategy=beam"
    run([*evaluate, "--constraints", str(tmp_path / "c.txt"), beam], check=True)
    hyp = open(os.path.join(trained_run, "eval", "constrained.hyp.txt")).read().splitlines()
    assert "house" in hyp[0], hyp
    proc = run(
        [*evaluate, "--constraints", str(tmp_path / "c.txt"), "--config.decode.strategy=greedy"]
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "lexical constraints need beam search" in proc.stderr.strip().splitlines()[-1]


def test_eval_ensemble_of_a_checkpoint_with_itself_translates_as_it_alone(trained_run):
    args = ["eval.py", "--workdir", trained_run, "--split", "valid", "--checkpoint", "60"]
    greedy = "--config.decode.strategy=greedy"
    run([*args, greedy, "--name", "alone"], check=True)
    run([*args, greedy, "--name", "twice", "--ensemble", f"{trained_run}:60"], check=True)
    run([*args, greedy, "--name", "mixed", "--ensemble", f"{trained_run}:40"], check=True)
    hyp = {
        n: open(os.path.join(trained_run, "eval", f"{n}.hyp.txt")).read()
        for n in ("alone", "twice")
    }
    assert hyp["twice"] == hyp["alone"]
    record = json.load(open(os.path.join(trained_run, "eval", "mixed.json")))
    assert [m["step"] for m in record["ensemble"]] == [60, 40]


@pytest.mark.slow
def test_ensemble_members_with_other_tokenizers_are_a_one_line_error(trained_run, tmp_path):
    from transformer.training.loop import train_and_evaluate

    other = str(tmp_path / "other")
    train_and_evaluate(tiny_config(data__vocab_size=150, train__num_steps=2), other)
    for script in ("eval.py", "decode.py"):
        proc = run([script, "--workdir", trained_run, "--ensemble", other])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert f"ensemble member {other}: its source tokenizer" in last


def test_evaluate_returns_the_record_it_wrote_and_the_scores(trained_run):
    import transformer.evaluation.evaluator  # noqa: F401 - the module must not shadow the function
    from transformer import Evaluation, evaluate

    result = evaluate(
        trained_run, split="valid", name="in_process", overrides=["decode.strategy=greedy"]
    )
    assert isinstance(result, Evaluation)
    assert result.path == os.path.join(trained_run, "eval", "in_process.json")
    assert json.load(open(result.path)) == result.record
    assert (
        result.record["bleu"] == result.scores.bleu
        and result.record["decode"]["strategy"] == "greedy"
    )


def test_restore_reads_parameters_only(trained_run, monkeypatch):
    # eval.py/decode.py need the parameters alone: the Adam moments (2x their size) must
    # never be read, for one checkpoint or an average.
    import orbax.checkpoint as ocp

    from transformer.evaluation.restore import restore_run

    read = []
    deserialize = ocp.type_handlers.ArrayHandler.deserialize

    async def recording(self, infos, args=None):
        read.extend(str(info.name) for info in infos)
        return await deserialize(self, infos, args)

    monkeypatch.setattr(ocp.type_handlers.ArrayHandler, "deserialize", recording)
    run = restore_run(trained_run, average_last=2)
    n_params = len(jax.tree.leaves(run.params))
    assert run.averaged_steps == [40, 60]
    assert len(read) == 2 * n_params and all(name.startswith("params.") for name in read), read


def test_eval_src_ref_line_mismatch_is_one_line_error(trained_run, tmp_path):
    (tmp_path / "s.txt").write_text("a\nb\n")
    (tmp_path / "r.txt").write_text("a\n")
    proc = run(
        [
            "eval.py",
            "--workdir",
            trained_run,
            "--src",
            str(tmp_path / "s.txt"),
            "--ref",
            str(tmp_path / "r.txt"),
        ]
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "has 2 lines but --ref" in proc.stderr.strip().splitlines()[-1]


def test_eval_without_checkpoint_is_one_line_error(tmp_path):
    proc = run(["eval.py", "--workdir", str(tmp_path / "nothing")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a training workdir" in proc.stderr


def test_jax_platform_is_cpu():
    assert jax.default_backend() == "cpu"


@pytest.mark.slow
def test_eval_longer_than_scores_the_sentences_over_the_limit(trained_run, tmp_path):
    import sacrebleu
    import sentencepiece as spm

    sources = [
        "The dog sleeps.",
        "A cat sees the boy.",
        "The clever boy sees the red dog in the big house.",
        "The old woman who sees the small cat gives the boy a red apple.",
        "The boy sleeps.",
        "Because the dog sleeps, the cat sees the clever woman.",
    ]
    references = ["Der Hund schläft.", "Eine Katze sieht den Jungen.", "x", "y", "z", "w"]
    (tmp_path / "s.txt").write_text("\n".join(sources) + "\n")
    (tmp_path / "r.txt").write_text("\n".join(references) + "\n")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(trained_run, "vocab", "shared.model"))
    lengths = [len(sp.encode(s)) + 1 for s in sources]  # EOS counts, as in data.max_source_len
    limit = sorted(lengths)[2]
    keep = [i for i, n in enumerate(lengths) if n > limit]
    assert 0 < len(keep) < len(sources)
    proc = run(
        [
            "eval.py",
            "--workdir",
            trained_run,
            "--src",
            str(tmp_path / "s.txt"),
            "--ref",
            str(tmp_path / "r.txt"),
            "--name",
            "long",
            "--longer_than",
            str(limit),
        ],
        check=True,
    )
    record = json.load(open(os.path.join(trained_run, "eval", "long.json")))
    hyps = open(os.path.join(trained_run, "eval", "long.hyp.txt")).read().splitlines()
    longer = record["longer"]
    assert longer["sentences"] == len(keep) and longer["source_tokens_over"] == limit
    expected = sacrebleu.corpus_bleu([hyps[i] for i in keep], [[references[i] for i in keep]])
    assert longer["bleu"] == pytest.approx(expected.score, abs=1e-6)
    assert f"sources over {limit} tokens: {len(keep)} sentences, BLEU" in proc.stdout


@pytest.mark.slow
def test_eval_writes_length_buckets_scored_on_each_buckets_sentences(trained_run, tmp_path):
    import sacrebleu
    import sentencepiece as spm

    sources = [
        "The dog sleeps.",
        "The clever boy sees the red dog in the big house.",
        "The old woman who sees the small cat gives the boy a red apple.",
        "A cat sees the boy.",
    ]
    references = ["Der Hund schläft.", "x y", "Die alte Frau gibt dem Jungen einen Apfel.", "z"]
    (tmp_path / "s.txt").write_text("\n".join(sources) + "\n")
    (tmp_path / "r.txt").write_text("\n".join(references) + "\n")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(trained_run, "vocab", "shared.model"))
    lengths = [len(sp.encode(s)) + 1 for s in sources]  # EOS counts, as in data.max_source_len
    edge = sorted(lengths)[1]
    run(
        [
            "eval.py",
            "--workdir",
            trained_run,
            "--src",
            str(tmp_path / "s.txt"),
            "--ref",
            str(tmp_path / "r.txt"),
            "--name",
            "buckets",
            f"--length_buckets={edge}",
        ],
        check=True,
    )
    record = json.load(open(os.path.join(trained_run, "eval", "buckets.json")))
    hyps = open(os.path.join(trained_run, "eval", "buckets.hyp.txt")).read().splitlines()
    short, long = record["length_buckets"]
    for bucket, keep in (
        (short, [n <= edge for n in lengths]),
        (long, [n > edge for n in lengths]),
    ):
        members = [i for i, k in enumerate(keep) if k]
        assert bucket["sentences"] == len(members)
        expected = sacrebleu.corpus_bleu(
            [hyps[i] for i in members], [[references[i] for i in members]]
        )
        assert bucket["bleu"] == pytest.approx(expected.score, abs=1e-6)
    run(
        [
            "eval.py",
            "--workdir",
            trained_run,
            "--src",
            str(tmp_path / "s.txt"),
            "--ref",
            str(tmp_path / "r.txt"),
            "--name",
            "nobuckets",
            "--length_buckets=",
        ],
        check=True,
    )
    assert "length_buckets" not in json.load(
        open(os.path.join(trained_run, "eval", "nobuckets.json"))
    )


def _restored_greedy(workdir):
    from transformer.evaluation.restore import restore_run

    return restore_run(workdir, overrides=["decode.strategy=greedy"])


def test_reference_scores_equal_a_per_sentence_forward_pass(trained_run):
    # Batched, padded forced decoding vs one unpadded teacher-forced pass per sentence.
    from transformer.data import tokenize_sources
    from transformer.evaluation.reference_scores import score_ids

    restored = _restored_greedy(trained_run)
    data = restored.data.eval_split("valid", batch_size=8, max_sentences=4)
    src_ids, _ = tokenize_sources(list(data.sources), restored.data.source_tokenizer, 64)
    tgt_ids, _ = tokenize_sources(list(data.targets), restored.data.target_tokenizer, 64)
    log_probs, tokens = score_ids(
        restored.graphdef, restored.params, src_ids, tgt_ids, batch_size=3
    )
    # Jitted (one compile per sentence shape): eager NNX dispatches each small op by itself.
    forward = jax.jit(lambda params, src, tgt: nnx.merge(restored.graphdef, params)(src, tgt))
    for i, (src, tgt) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        logits = forward(restored.params, jnp.asarray([src]), jnp.asarray([[BOS_ID, *tgt[:-1]]]))
        naive = jax.nn.log_softmax(np.asarray(logits[0], np.float64), axis=-1)
        expected = float(sum(naive[t, token] for t, token in enumerate(tgt)))
        assert tokens[i] == len(tgt)
        assert log_probs[i] == pytest.approx(expected, abs=1e-3)


@pytest.mark.slow
def test_the_greedy_output_scores_as_its_search_score(trained_run):
    # The search's summed log-probs (KV-cached, token by token) are the forced-decoding
    # log-probs of the same tokens; outputs cut at the length limit got a forced EOS.
    from transformer.data import tokenize_sources
    from transformer.evaluation.reference_scores import score_ids

    restored = _restored_greedy(trained_run)
    sources = list(restored.data.eval_split("valid", batch_size=8, max_sentences=8).sources)
    src_ids, _ = tokenize_sources(sources, restored.data.source_tokenizer, 64)
    outputs, scores = restored.translator.translate_ids(restored.params, src_ids)
    settings = restored.translator.settings
    natural = [
        i
        for i, out in enumerate(outputs)
        if len(out[0]) + 1 < settings.max_len_a * len(src_ids[i]) + settings.max_len_b - 1
    ]
    assert natural, "no output ended before the length limit"
    targets = [[*outputs[i][0], EOS_ID] for i in natural]
    log_probs, _ = score_ids(
        restored.graphdef, restored.params, [src_ids[i] for i in natural], targets, batch_size=8
    )
    assert log_probs == pytest.approx([scores[i][0] for i in natural], abs=1e-3)


@pytest.mark.slow
def test_eval_score_references_writes_per_sentence_scores_and_perplexity(trained_run):
    run(
        [
            "eval.py",
            "--workdir",
            trained_run,
            "--split",
            "valid",
            "--name",
            "scored",
            "--score_references",
            "--config.decode.strategy=greedy",
        ],
        check=True,
    )
    record = json.load(open(os.path.join(trained_run, "eval", "scored.json")))
    rows = [
        line.split("\t")
        for line in open(os.path.join(trained_run, "eval", "scored.ref_scores.txt"))
        .read()
        .splitlines()
    ]
    assert len(rows) == record["sentences"] == record["reference_scores"]["sentences"]
    total_lp, total_tokens = sum(float(r[0]) for r in rows), sum(int(r[1]) for r in rows)
    assert record["reference_scores"]["tokens"] == total_tokens
    assert record["reference_scores"]["perplexity"] == pytest.approx(
        math.exp(-total_lp / total_tokens), rel=1e-5
    )
