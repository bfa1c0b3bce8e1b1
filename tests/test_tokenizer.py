"""Tokenizer: special ids, round trip, decode rules, shared/separate vocab files reused."""

import os

import pytest

from transformer.common.errors import UserError
from transformer.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    build_tokenizers,
    resolve_vocab_path,
)
from transformer.training.base_config import get_base_config

EN = [
    f"the {a} {b} sees the {c} house number {i}"
    for i, (a, b, c) in enumerate(
        [("big", "dog", "red"), ("small", "cat", "blue"), ("old", "man", "green")] * 20
    )
]
DE = [
    f"der {a} {b} sieht das {c} Haus Nummer {i}"
    for i, (a, b, c) in enumerate(
        [("große", "Hund", "rote"), ("kleine", "Katze", "blaue"), ("alte", "Mann", "grüne")] * 20
    )
]
PAIRS = list(zip(EN, DE, strict=True))


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_special_ids_and_round_trip(tmp_path, model_type):
    tok = Tokenizer.train(EN + DE, str(tmp_path / "m.model"), 200, model_type=model_type)
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tok.id_to_piece(PAD_ID) == "<pad>" and tok.id_to_piece(UNK_ID) == "<unk>"
    assert tok.id_to_piece(BOS_ID) == "<s>" and tok.id_to_piece(EOS_ID) == "</s>"
    text = "the small cat sees the red house number 7"
    ids = tok.tokenize(text)
    assert ids and not set(ids) & {PAD_ID, BOS_ID, EOS_ID}
    assert tok.detokenize(ids) == text
    # decode stops at EOS and ignores pad / bos / out-of-range ids
    assert tok.detokenize([BOS_ID, *ids, EOS_ID, *tok.tokenize("der Hund"), PAD_ID]) == text
    assert tok.detokenize([*ids, PAD_ID, PAD_ID, 10**6]) == text
    assert tok.tokenize_batch([text, "der Hund"]) == [ids, tok.tokenize("der Hund")]
    loaded = Tokenizer.load(tok.path)
    assert loaded.vocab_size == tok.vocab_size and loaded.tokenize(text) == ids


def test_training_is_deterministic_and_limited(tmp_path):
    a = Tokenizer.train(EN + DE, None, 120, max_sentences=30)
    b = Tokenizer.train(iter(EN + DE), None, 120, max_sentences=30)
    assert a.model_proto == b.model_proto
    c = Tokenizer.train(EN + DE, None, 120)
    assert c.model_proto != a.model_proto  # more sentences -> another model


def test_train_from_file(tmp_path):
    f = tmp_path / "text.txt"
    f.write_text("\n".join(EN) + "\n")
    tok = Tokenizer.train(f, None, 100)
    assert tok.detokenize(tok.tokenize(EN[0])) == EN[0]


def _data_config(**kw):
    cfg = get_base_config().data
    cfg.name = "parallel_text"
    for k, v in kw.items():
        cfg[k] = v
    return cfg


def test_shared_vocab_saved_and_reused(tmp_path):
    calls = []

    def texts():
        calls.append(1)
        return PAIRS

    src, tgt = build_tokenizers(_data_config(), 300, str(tmp_path), texts)
    assert src is tgt and calls == [1]
    path = tmp_path / "vocab" / "shared.model"
    assert path.is_file() and src.path == str(path)
    assert src.tokenize("Katze") and src.detokenize(src.tokenize("grüne Katze")) == "grüne Katze"
    mtime = os.stat(path).st_mtime_ns
    src2, tgt2 = build_tokenizers(_data_config(), 300, str(tmp_path), texts)
    assert calls == [1]  # reused, train texts not even loaded
    assert src2 is tgt2 and src2.model_proto == src.model_proto
    assert os.stat(path).st_mtime_ns == mtime
    with pytest.raises(UserError, match="trained with other settings"):
        build_tokenizers(_data_config(vocab_type="bpe"), 300, str(tmp_path), texts)


def test_separate_vocab_saved_and_reused(tmp_path):
    src, tgt = build_tokenizers(_data_config(shared_vocab=False), 300, str(tmp_path), PAIRS)
    assert src is not tgt
    assert (tmp_path / "vocab" / "source.model").is_file()
    assert (tmp_path / "vocab" / "target.model").is_file()
    assert not (tmp_path / "vocab" / "shared.model").exists()
    assert src.model_proto != tgt.model_proto
    src2, tgt2 = build_tokenizers(_data_config(shared_vocab=False), 300, str(tmp_path), None)
    assert src2.model_proto == src.model_proto and tgt2.model_proto == tgt.model_proto


def test_vocab_path(tmp_path):
    tok = Tokenizer.train(EN + DE, str(tmp_path / "given.model"), 300)
    src, tgt = build_tokenizers(_data_config(vocab_path=tok.path), 300, str(tmp_path / "w"), None)
    assert src is tgt and src.model_proto == tok.model_proto
    assert not (tmp_path / "w" / "vocab").exists()
    with pytest.raises(UserError, match="does not exist"):
        build_tokenizers(_data_config(vocab_path=str(tmp_path / "nope.model")), 300, "w", None)


def test_relative_vocab_paths_name_the_runs_files(tmp_path, monkeypatch):
    """A relative data.vocab_path names the run directory's file (imported runs store theirs
    so); one the run lacks stays relative to the current directory; an absolute path that
    is gone below a vocab/ directory falls back to the run's own vocab/ file."""
    run = tmp_path / "run"
    tok = Tokenizer.train(EN + DE, str(run / "vocab" / "source.model"), 300)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert resolve_vocab_path("vocab/source.model", str(run)) == tok.path
    assert resolve_vocab_path("other.model", str(run)) == "other.model"
    gone = str(tmp_path / "old_place" / "vocab" / "source.model")
    assert resolve_vocab_path(gone, str(run)) == tok.path
    assert resolve_vocab_path(str(tmp_path / "x" / "source.model"), str(run)).startswith(
        str(tmp_path / "x")
    )
    config = _data_config(vocab_path="vocab/source.model,vocab/source.model")
    src, tgt = build_tokenizers(config, 300, str(run), None)
    assert src.path == tgt.path == tok.path


def test_foreign_special_ids_rejected(tmp_path):
    import io

    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(EN),
        model_writer=buf,
        vocab_size=60,
        minloglevel=2,
        hard_vocab_limit=False,
    )  # default ids: unk=0, bos=1, eos=2, no pad
    (tmp_path / "x.model").write_bytes(buf.getvalue())
    with pytest.raises(UserError, match="pad=0, unk=1, bos=2, eos=3") as e:
        Tokenizer.load(str(tmp_path / "x.model"))
    assert "\n" not in str(e.value) and "x.model" in str(e.value)
