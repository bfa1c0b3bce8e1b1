"""The vocabulary-size rule end to end: `data.vocab_size` asks SentencePiece for a size (a
soft limit), `model.vocab_size` follows the tokenizer unless set, and the resolved value is
what config.json records, so train.py, eval.py and decode.py agree on a corpus too small for
the size asked."""

import json
import os

import pytest

from tests.helpers import run, tiny_args

WORDS = "the a red big small old clever dog cat boy girl house sees likes sleeps in".split()


def _small_corpus(directory):
    """A parallel corpus far too small for 8,000 pieces (a few hundred distinct pieces)."""
    os.makedirs(directory)
    for split, n in (("train", 120), ("valid", 8), ("test", 8)):
        lines = [" ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7)) for i in range(n)]
        for lang in ("en", "de"):
            text = "\n".join(line.upper() if lang == "de" else line for line in lines)
            with open(os.path.join(directory, f"{split}.{lang}"), "w") as f:
                f.write(text + "\n")


def _train(workdir, data_dir, *extra):
    args = [
        "train.py",
        "--config",
        "configs/default.py",
        "--workdir",
        workdir,
        *tiny_args(train__num_steps=10, train__checkpoint_every=10, train__eval_every=10),
        "--config.data.name=parallel_text",
        f"--config.data.path={data_dir}",
        "--config.data.vocab_size=8000",
        *extra,
    ]
    return run(args)


def _pieces(workdir):
    import sentencepiece as spm

    model = os.path.join(workdir, "vocab", "shared.model")
    return spm.SentencePieceProcessor(model_file=model).get_piece_size()


@pytest.mark.slow
def test_first_run_on_a_small_corpus_trains_evaluates_and_decodes(tmp_path):
    data_dir, workdir = str(tmp_path / "data"), str(tmp_path / "run")
    _small_corpus(data_dir)
    proc = _train(workdir, data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pieces = _pieces(workdir)
    assert pieces < 8000
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["model"]["vocab_size"] == pieces and saved["data"]["vocab_size"] == 8000
    assert run(["eval.py", "--workdir", workdir]).returncode == 0
    proc = run(["decode.py", "--workdir", workdir, "--input", os.path.join(data_dir, "test.en")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.splitlines()) == 8
    resumed = _train(workdir, data_dir, "--config.train.num_steps=20")  # same command, resumed
    assert resumed.returncode == 0, resumed.stderr[-3000:]


@pytest.mark.slow
def test_a_model_vocab_size_below_the_pieces_fails_once_with_a_fix_that_works(tmp_path):
    data_dir, workdir = str(tmp_path / "data"), str(tmp_path / "run")
    _small_corpus(data_dir)
    proc = _train(workdir, data_dir, "--config.model.vocab_size=10")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    pieces = _pieces(workdir)
    assert f"has {pieces} pieces but model.vocab_size=10" in error
    assert f"at least {pieces}" in error
    fixed = _train(workdir, data_dir, f"--config.model.vocab_size={pieces + 6}")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    saved = json.load(open(os.path.join(workdir, "config.json")))
    assert saved["model"]["vocab_size"] == pieces + 6  # spare rows are allowed and recorded
    proc = run(["decode.py", "--workdir", workdir, "--input", os.path.join(data_dir, "test.en")])
    assert proc.returncode == 0, proc.stderr[-3000:]


class _Pieces:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size


@pytest.mark.parametrize(
    "configured,src,tgt,expected",
    [(None, 300, 300, 300), (None, 250, 310, 310), (320, 300, 300, 320), (300, 300, 300, 300)],
)
def test_model_vocab_size_follows_the_larger_tokenizer_unless_set(configured, src, tgt, expected):
    from transformer.training import run_config
    from transformer.training.base_config import get_base_config

    config = get_base_config()
    config.model.vocab_size = configured
    assert run_config.resolve_vocab_size(config, _Pieces(src), _Pieces(tgt)) == expected
    assert config.model.vocab_size == expected


def test_model_vocab_size_below_the_pieces_is_a_one_line_error():
    from transformer.common.errors import UserError
    from transformer.training import run_config
    from transformer.training.base_config import get_base_config

    config = get_base_config()
    config.model.vocab_size = 299
    with pytest.raises(UserError, match="has 300 pieces but model.vocab_size=299") as e:
        run_config.resolve_vocab_size(config, _Pieces(300), _Pieces(120))
    assert "\n" not in str(e.value) and "at least 300" in str(e.value)
