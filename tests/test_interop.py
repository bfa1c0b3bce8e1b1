"""transformer/interop: a Hugging Face MarianMTModel directory as a run directory and back.

The Marian model is built here, nothing downloaded: SentencePiece models trained on a few
lines, a joint vocab.json laid out as converted OPUS-MT models lay it out (`</s>` 0, `<unk>`
1, `<pad>` last and the decoder start) with one source piece left out of it (MarianTokenizer
maps that piece to unk), and a small random MarianMTModel with SiLU ("swish", OPUS-MT's
activation) whose every weight, the pad row and `final_logits_bias` included, is moved away
from its init. The imported run's logits equal Hugging Face's on the same sentences to 1e-5
in every column, import -> export -> import gives the same parameters and tokenizers,
CTranslate2 on the export emits our greedy ids, eval.py, decode.py and train.py use the
imported run, and what the other side cannot express is refused by name.
"""

from __future__ import annotations

import io
import json
import os
import shutil

import numpy as np
import pytest

from tests.helpers import run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformer.common.errors import UserError  # noqa: E402
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402
from transformer.interop import runs  # noqa: E402

# MarianTokenizer asks for sacremoses on every load; its tokenization does not use it.
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

EN = [
    "the boy sees the dog",
    "a girl reads a book in the garden",
    "the cat sleeps on the warm mat",
    "we like green apples and red cherries",
    "she walks to school every morning",
    "the old man drinks black coffee",
]
DE = [
    "der junge sieht den hund",
    "ein mädchen liest ein buch im garten",
    "die katze schläft auf der warmen matte",
    "wir mögen grüne äpfel und rote kirschen",
    "sie geht jeden morgen zur schule",
    "der alte mann trinkt schwarzen kaffee",
]
MARIAN_SIZES = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    activation_function="swish",
    scale_embedding=True,
)


def _spm(lines: list[str], size: int) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 3),
        model_writer=buf,
        vocab_size=size,
        minloglevel=2,
        hard_vocab_limit=False,
    )  # SentencePiece's own ids: unk 0, bos 1, eos 2, as Marian's are not
    return buf.getvalue()


def _pieces(proto: bytes) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [
        sp.id_to_piece(i)
        for i in range(sp.get_piece_size())
        if not (sp.is_control(i) or sp.is_unknown(i))
    ]


def _joint_vocab(source: bytes, target: bytes, leave_out: str) -> dict[str, int]:
    """OPUS-MT's layout: </s> 0, <unk> 1, both models' pieces, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in _pieces(source) + _pieces(target):
        if piece not in vocab and piece != leave_out:
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def _random_marian(vocab_size: int, pad: int):
    config = transformers.MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        **MARIAN_SIZES,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    with torch.no_grad():  # every weight off its init: norm scales off 1, biases off 0
        for name, tensor in model.state_dict().items():
            if "embed_positions" not in name:
                tensor.add_(0.1 * torch.randn_like(tensor))
        # Pad never wins an argmax, as in a trained model (Marian's generate forbids it and
        # our searches do not); its embedding, the decoder's first input, stays non-zero.
        model.final_logits_bias[0, pad] = -20.0
    return model.eval()


def _source_only_piece(source: bytes, target: bytes) -> str:
    """A source piece the target model lacks that the test sentences use."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=source)
    used = [p for line in EN for p in sp.encode(line, out_type=str)]
    return next(p for p in used if p not in _pieces(target) and len(p) > 2)


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> str:
    """A MarianMTModel directory as save_pretrained writes it (model and tokenizer)."""
    path = tmp_path_factory.mktemp("opus-mt-en-de")
    source, target = _spm(EN, 60), _spm(DE, 70)
    (path / "source.spm").write_bytes(source)
    (path / "target.spm").write_bytes(target)
    vocab = _joint_vocab(source, target, leave_out=_source_only_piece(source, target))
    (path / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.MarianTokenizer(
        str(path / "source.spm"),
        str(path / "target.spm"),
        str(path / "vocab.json"),
        source_lang="en",
        target_lang="de",
    )
    _random_marian(len(vocab), vocab["<pad>"]).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory) -> str:
    return runs.import_marian(marian_dir, str(tmp_path_factory.mktemp("imported") / "run"))


def _restored(workdir):
    from transformer.evaluation.restore import restore_run

    return restore_run(workdir, overrides=["decode.strategy=greedy"])


def _our_logits(restored, src_rows, tgt_rows):
    """Teacher-forced logits of the restored run on padded id rows (BOS prepended)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    src = _padded(src_rows, PAD_ID)
    tgt_in = _padded([[BOS_ID, *row] for row in tgt_rows], PAD_ID)
    forward = jax.jit(lambda p, s, t: nnx.merge(restored.graphdef, p)(s, t))
    return np.asarray(forward(restored.params, jnp.asarray(src), jnp.asarray(tgt_in)))


def _hf_logits(model, src_rows, tgt_rows, pad: int, start: int):
    src = torch.from_numpy(_padded(src_rows, pad)).long()
    tgt_in = torch.from_numpy(_padded([[start, *row] for row in tgt_rows], pad)).long()
    with torch.inference_mode():
        out = model(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt_in)
    return out.logits.numpy()


def _padded(rows, pad: int) -> np.ndarray:
    out = np.full((len(rows), max(map(len, rows))), pad, np.int32)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


def _marian_rows(restored, vocab: dict[str, int]) -> np.ndarray:
    """Written out here, not taken from the importer: the Marian id each of our ids stands
    for, by piece (a piece vocab.json lacks is Marian's unk, both PAD and BOS its pad)."""
    tokenizer = restored.data.target_tokenizer
    specials = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<pad>", EOS_ID: "</s>"}
    pieces = [specials.get(i) or tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return np.asarray([vocab.get(p, vocab["<unk>"]) for p in pieces])


def test_imported_logits_equal_hugging_face_on_the_same_sentences(marian_dir, imported):
    restored = _restored(imported)
    vocab = json.loads(open(os.path.join(marian_dir, "vocab.json")).read())
    rows = _marian_rows(restored, vocab)
    # The pad row twice (PAD and BOS), and the piece left out of vocab.json.
    assert restored.model_cfg.vocab_size == len(vocab) + 2
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(marian_dir)
    src_tok, tgt_tok = restored.data.source_tokenizer, restored.data.target_tokenizer
    ours_src = [src_tok.tokenize(line) + [EOS_ID] for line in EN]
    ours_tgt = [tgt_tok.tokenize(line) for line in DE]
    hf_src = [hf_tokenizer(line).input_ids for line in EN]  # EOS appended
    hf_tgt = [hf_tokenizer(text_target=line).input_ids[:-1] for line in DE]
    assert [rows[row].tolist() for row in ours_src] == hf_src  # the same sentences
    assert [rows[row].tolist() for row in ours_tgt] == hf_tgt
    unlisted = {i for row in ours_src for i in row if rows[i] == vocab["<unk>"] != i}
    assert unlisted  # the piece left out of vocab.json: an id of its own with unk's row
    ours = _our_logits(restored, ours_src, ours_tgt)
    hf = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    pad = vocab["<pad>"]
    theirs = _hf_logits(hf, hf_src, hf_tgt, pad, start=pad)  # Marian decodes from pad
    real = _padded([[BOS_ID, *row] for row in ours_tgt], PAD_ID) != PAD_ID
    assert np.abs(ours[real]).max() > 1.0  # logits of substance
    np.testing.assert_allclose(ours[real], theirs[real][:, rows], atol=1e-5, rtol=0)


def test_import_export_import_is_the_identity(imported, tmp_path):
    from transformer.interop.marian import flat_params

    exported = runs.export_marian(imported, str(tmp_path / "marian"))
    assert exported.notes == []  # an imported run has HF's LayerNorm epsilon
    again = runs.import_marian(str(tmp_path / "marian"), str(tmp_path / "again"))
    first, second = runs.load_run_weights(imported), runs.load_run_weights(again)
    assert second.model_cfg == first.model_cfg
    ours, theirs = flat_params(first.params), flat_params(second.params)
    assert ours.keys() == theirs.keys() and "output_bias" in ours
    for name in ours:
        np.testing.assert_array_equal(theirs[name], ours[name], err_msg=name)
    for side in ("source", "target"):
        tokenizers = [getattr(run, f"{side}_tokenizer") for run in (first, second)]
        assert tokenizers[1].fingerprint == tokenizers[0].fingerprint


def test_a_pytorch_model_bin_with_every_tied_name_imports_the_same(marian_dir, imported, tmp_path):
    """Older checkpoints: pytorch_model.bin holding the shared table under every name it has
    (encoder, decoder, lm_head) and both position tables."""
    from transformer.interop.marian import flat_params

    old = tmp_path / "old"
    shutil.copytree(marian_dir, old)
    os.remove(old / "model.safetensors")
    state = transformers.MarianMTModel.from_pretrained(marian_dir).state_dict()
    assert {"lm_head.weight", "model.encoder.embed_positions.weight"} <= set(state)
    torch.save(state, old / "pytorch_model.bin")
    again = runs.import_marian(str(old), str(tmp_path / "run"))
    ours = flat_params(runs.load_run_weights(imported).params)
    theirs = flat_params(runs.load_run_weights(again).params)
    for name in ours:
        np.testing.assert_array_equal(theirs[name], ours[name], err_msg=name)


def test_exported_directory_loads_in_transformers_with_our_ids_and_logits(imported, tmp_path):
    out = str(tmp_path / "marian")
    runs.export_marian(imported, out)
    restored = _restored(imported)
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(out)
    src_tok, tgt_tok = restored.data.source_tokenizer, restored.data.target_tokenizer
    ours_src = [src_tok.tokenize(line) + [EOS_ID] for line in EN]
    ours_tgt = [tgt_tok.tokenize(line) for line in DE]
    assert [hf_tokenizer(line).input_ids for line in EN] == ours_src
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    theirs = _hf_logits(hf, ours_src, ours_tgt, PAD_ID, start=hf.config.decoder_start_token_id)
    ours = _our_logits(restored, ours_src, ours_tgt)
    real = _padded([[BOS_ID, *row] for row in ours_tgt], PAD_ID) != PAD_ID
    np.testing.assert_allclose(theirs[real], ours[real], atol=1e-5, rtol=0)


def test_exported_ctranslate2_greedy_ids_equal_ours(imported, tmp_path):
    """Every row may emit 10 tokens (max_len_a = 0), EOS forced at the 10th, which
    CTranslate2 expresses by stopping one token earlier."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import sentencepiece as spm

    out = str(tmp_path / "ct2")
    runs.export_marian(imported, str(tmp_path / "marian"), ctranslate2_dir=out)
    restored = _restored_with(imported, "decode.max_len_a=0", "decode.max_len_b=10")
    sources = [restored.data.source_tokenizer.tokenize(line) + [EOS_ID] for line in EN]
    ours, _ = restored.translator.translate_ids(restored.params, sources)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "source.spm"))
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    results = translator.translate_batch(
        [sp.encode(line, out_type=str) for line in EN],
        beam_size=1,
        min_decoding_length=0,
        max_decoding_length=9,
    )
    target = restored.data.target_tokenizer
    theirs = [[target.piece_to_id(p) for p in r.hypotheses[0]] for r in results]
    assert [r[0] for r in ours] == theirs
    assert any(len(ids) > 1 for ids in theirs)


def _restored_with(workdir, *overrides):
    from transformer.evaluation.restore import restore_run

    return restore_run(workdir, overrides=["decode.strategy=greedy", *overrides])


# ------------------------------------------------------------------------ refusals


def _copy_with_config(marian_dir, tmp_path, **changes) -> str:
    path = tmp_path / "edited"
    shutil.copytree(marian_dir, path)
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _cli(argv, capsys) -> tuple[int, str]:
    from transformer.cli.interop import main

    code = main(argv)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "key, value",
    [
        ("normalize_before", True),
        ("scale_embedding", False),
        ("activation_function", "tanh"),
        ("share_encoder_decoder_embeddings", False),
        ("decoder_ffn_dim", 128),
        ("model_type", "bart"),
    ],
)
def test_marian_configs_our_model_cannot_express_are_refused_by_name(
    marian_dir, tmp_path, capsys, key, value
):
    src = _copy_with_config(marian_dir, tmp_path, **{key: value})
    code, err = _cli(["import-marian", src, "--workdir", str(tmp_path / "run")], capsys)
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith("error: config.json has ") and f"{key}=" in err, err
    assert not os.path.exists(tmp_path / "run" / "config.json")


def test_exporting_a_pre_ln_run_names_the_setting(imported, tmp_path, capsys):
    run_dir = tmp_path / "pre_ln"
    shutil.copytree(imported, run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    config["model"]["norm_position"] = "pre"
    (run_dir / "config.json").write_text(json.dumps(config))
    code, err = _cli(["export-marian", "--workdir", str(run_dir), str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 0
    assert "model.norm_position='pre'" in err and "norm_position='post'" in err


def test_input_errors_are_one_line_naming_the_fix(marian_dir, imported, tmp_path, capsys):
    code, err = _cli(["import-marian", marian_dir, "--workdir", imported], capsys)
    assert code == 2 and "already holds a run" in err and "new --workdir" in err
    partial = tmp_path / "partial"
    shutil.copytree(marian_dir, partial)
    os.remove(partial / "vocab.json")
    code, err = _cli(["import-marian", str(partial), "--workdir", str(tmp_path / "r")], capsys)
    assert code == 2 and "has no vocab.json" in err and "save_pretrained" in err
    assert err.count("\n") == 0


def test_a_missing_optional_package_names_the_extra(imported, tmp_path, monkeypatch, capsys):
    import sys

    from transformer.interop.extras import optional_import

    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails
    with pytest.raises(UserError, match=r"pip install -e '\.\[bench\]'") as info:
        optional_import("transformers")
    assert "\n" not in str(info.value)
    monkeypatch.setitem(sys.modules, "torch", None)
    out = tmp_path / "out"
    code, err = _cli(["export-marian", "--workdir", imported, str(out)], capsys)
    assert code == 2 and err.count("\n") == 0 and "torch is not installed" in err
    assert not out.exists()  # refused before writing anything


def test_an_imported_run_names_its_vocabulary_relative_to_itself_and_moves(imported, tmp_path):
    """config.json says vocab/*.model; the run moved away from where it was imported (the
    old place gone) loads the same tokenizers and parameters from its new place, and so
    does a run that stored absolute paths there, as imports did before."""
    with open(os.path.join(imported, "config.json")) as f:
        assert json.load(f)["data"]["vocab_path"] == "vocab/source.model,vocab/target.model"
    original = runs.load_run_weights(imported)
    first, final = tmp_path / "first", tmp_path / "elsewhere" / "run"
    shutil.copytree(imported, first)
    shutil.move(first, final)
    for vocab_path in (None, f"{first}/vocab/source.model,{first}/vocab/target.model"):
        if vocab_path:
            _set_vocab_path(final, vocab_path)
        moved = runs.load_run_weights(str(final))
        for side in ("source", "target"):
            tokenizer = getattr(moved, f"{side}_tokenizer")
            assert tokenizer.path == str(final / "vocab" / f"{side}.model")
            assert tokenizer.fingerprint == getattr(original, f"{side}_tokenizer").fingerprint
        np.testing.assert_array_equal(
            moved.params["src_embed"]["embedding"][...],
            original.params["src_embed"]["embedding"][...],
        )


def _set_vocab_path(run_dir, vocab_path: str) -> None:
    path = os.path.join(run_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["data"]["vocab_path"] = vocab_path
    with open(path, "w") as f:
        json.dump(config, f)


def test_a_failed_import_closes_its_checkpointer_and_leaves_nothing(
    marian_dir, tmp_path, monkeypatch, capsys
):
    """A checkpoint that cannot be saved (a full disk): one line, the checkpoint manager
    closed, nothing left in --workdir, and the same --workdir takes the import again."""
    closed = []
    close = runs.Checkpointer.close

    def recorded_close(self):
        closed.append(self.directory)
        close(self)

    def failing_save(self, step, *args):
        raise UserError(f"cannot save checkpoint {step} in {self.directory} (No space left)")

    monkeypatch.setattr(runs.Checkpointer, "close", recorded_close)
    monkeypatch.setattr(runs.Checkpointer, "save", failing_save)
    workdir = tmp_path / "run"
    argv = ["import-marian", marian_dir, "--workdir", str(workdir)]
    code, err = _cli(argv, capsys)
    assert code == 2 and err.count("\n") == 0 and "No space left" in err
    assert closed == [str(workdir / "checkpoints")]
    assert not workdir.exists()
    monkeypatch.undo()
    code, err = _cli(argv, capsys)
    assert code == 0, err
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.json", "vocab"]


# ---------------------------------------------------------------- the run's commands


def _corpus(path) -> str:
    os.makedirs(path, exist_ok=True)
    for split in ("train", "valid", "test"):
        for lang, lines in (("en", EN), ("de", DE)):
            with open(os.path.join(path, f"{split}.{lang}"), "w") as f:
                f.write("\n".join(lines * (4 if split == "train" else 1)) + "\n")
    return str(path)


@pytest.mark.slow
def test_eval_and_decode_use_an_imported_run(marian_dir, tmp_path):
    workdir = str(tmp_path / "run")
    imported = run(
        ["-m", "transformer.cli.interop", "import-marian", marian_dir, "--workdir", workdir],
        check=True,
    )
    assert "imported" in imported.stderr
    corpus = _corpus(tmp_path / "corpus")
    greedy = ["--config.decode.strategy=greedy", "--config.decode.max_len_b=5"]
    src, ref = os.path.join(corpus, "test.en"), os.path.join(corpus, "test.de")
    run(["eval.py", "--workdir", workdir, "--src", src, "--ref", ref, *greedy], check=True)
    assert os.listdir(os.path.join(workdir, "eval"))
    decoded = _decode(workdir, greedy, "the boy sees the dog\n\nwe like red apples\n")
    assert decoded.count("\n") == 3


def _decode(workdir, flags, text) -> str:
    import subprocess
    import sys

    from tests.helpers import ROOT

    proc = subprocess.run(
        [sys.executable, "decode.py", "--workdir", workdir, *flags],
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        input=text,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_train_fine_tunes_an_imported_run_and_resumes(marian_dir, tmp_path):
    workdir = str(tmp_path / "run")
    runs.import_marian(marian_dir, workdir)
    recipe = tmp_path / "finetune.py"
    recipe.write_text(
        "from transformer.training.run_config import load\n\n\n"
        f"def get_config():\n    return load({workdir!r})\n"
    )
    flags = [
        f"--config.data.path={_corpus(tmp_path / 'corpus')}",
        "--config.train.batch_size=4",
        "--config.train.warmup_steps=2",
        "--config.train.log_every=1",
        "--config.train.eval_every=2",
        "--config.train.checkpoint_every=2",
        "--config.train.eval_bleu_sentences=2",
        "--config.decode.max_len_b=3",
    ]
    for steps in (2, 4):
        run(
            ["train.py", "--config", str(recipe), "--workdir", workdir, *flags]
            + [f"--config.train.num_steps={steps}"],
            check=True,
        )
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    texts = [r.get("message", "") for r in rows]
    assert any("training from the parameters of checkpoint 0" in t for t in texts), texts
    assert any("resumed from checkpoint at step 2" in t for t in texts), texts
    assert sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints"))) == [0, 2, 4]
    tuned = runs.load_run_weights(workdir)
    first = runs.load_run_weights(workdir, "0")
    assert tuned.step == 4
    embedding = "src_embed"
    assert not np.array_equal(
        np.asarray(tuned.params[embedding]["embedding"][...]),
        np.asarray(first.params[embedding]["embedding"][...]),
    )
