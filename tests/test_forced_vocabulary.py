"""Prefixes and constraint phrases with characters outside the target vocabulary
(inference/forcing.check_vocabulary): tokenized, such characters become <unk>, so the output
would not start with (or hold) the text asked for. Each such line gives one warning naming
the line and the characters; strict_vocab (decode.py --strict_vocab) makes it a one-line
error. The vocabulary is trained here on text with no 'Ü' and no digits."""

from __future__ import annotations

import types

import pytest
from flax import nnx

from tests.helpers import tiny_model_config
from transformer import Transformer
from transformer.common.errors import UserError
from transformer.data.tokenizer import Tokenizer
from transformer.inference.streaming import translate_stream
from transformer.inference.translator import DecodeSettings, Translator

TEXT = ["Zebras run, brigens the dog runs", "the cat sleeps"] * 20
LINES = ["the dog runs", "the cat", "", "the cat sleeps"]  # numbered 11 to 14 below
FIRST_ID = 10


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(TEXT, None, 40)


def translator(tokenizer, strategy="greedy"):
    cfg = tiny_model_config(vocab_size=tokenizer.vocab_size, max_len=32)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    settings = DecodeSettings(strategy=strategy, beam_size=2, batch_size=2, max_len_b=4)
    return Translator(graphdef, cfg, settings, tokenizer, tokenizer), params


def warning(line: int, what: str, chars: str) -> str:
    return (
        f"warning: input line {line}: the {what} has characters outside the target "
        f"vocabulary ({chars}); they become <unk> in the output"
    )


def warnings_of(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


def test_the_planted_characters_are_the_unknown_ones(tokenizer):
    assert tokenizer.unknown_characters("Übrigens, 42 Zebras") == ["Ü", "4", "2"]
    assert tokenizer.unknown_characters("Zebras run, brigens") == []


def test_a_prefix_outside_the_vocabulary_warns_once_naming_its_line(tokenizer, capsys):
    model, params = translator(tokenizer)
    prefixes = ["Übrigens, 42 Zebras", "Zebras run", "Ü", "ÜÜ Zebras"]  # line 13 is empty
    result = model.translate(params, LINES, first_id=FIRST_ID, prefixes=prefixes)
    assert warnings_of(capsys) == [
        warning(11, "target prefix", "'Ü', '4', '2'"),
        warning(14, "target prefix", "'Ü'"),
    ]
    assert not result.best[0].startswith("Übrigens")  # what the warning is about
    assert result.best[1].startswith("Zebras run")


def test_strict_vocab_refuses_the_first_such_prefix_in_one_line(tokenizer):
    model, params = translator(tokenizer)
    prefixes = ["Zebras", "", "", "the 2 cats"]
    with pytest.raises(UserError) as info:
        model.translate(params, LINES, first_id=FIRST_ID, prefixes=prefixes, strict_vocab=True)
    assert str(info.value) == (
        "input line 14: the target prefix has characters outside the target vocabulary "
        "('2'); remove or replace them (without --strict_vocab they become <unk>)"
    )


def test_a_constraint_outside_the_vocabulary_warns_or_is_refused(tokenizer, capsys):
    model, params = translator(tokenizer, "beam")
    phrases = [["Zebras", "42"], [], [], ["dog", "Übrigens"]]
    model.translate(params, LINES, first_id=FIRST_ID, constraints=phrases)
    assert warnings_of(capsys) == [
        warning(11, "constraint", "'4', '2'"),
        warning(14, "constraint", "'Ü'"),
    ]
    with pytest.raises(UserError, match=r"^input line 11: the constraint has characters"):
        model.translate(params, LINES, first_id=FIRST_ID, constraints=phrases, strict_vocab=True)


def test_decode_streams_warn_per_line_and_refuse_with_strict_vocab(tokenizer, tmp_path, capsys):
    """decode.py's loop over several batches: lines numbered in the whole input."""
    model, params = translator(tokenizer)
    run = types.SimpleNamespace(translator=model, params=params)
    source = tmp_path / "in.txt"
    source.write_text("the dog\tZebras\nthe cat\tZebras\nthe dog runs\tÜbrigens, 42 Zebras\n")
    out = str(tmp_path / "out.txt")
    stats = translate_stream(run, str(source), out, with_prefix=True)
    assert stats["lines"] == 3
    assert warnings_of(capsys) == [warning(3, "target prefix", "'Ü', '4', '2'")]
    with pytest.raises(UserError, match=r"^input line 3: .*\('Ü', '4', '2'\); remove"):
        translate_stream(run, str(source), out, with_prefix=True, strict_vocab=True)
