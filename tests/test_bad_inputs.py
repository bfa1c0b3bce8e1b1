"""The bad-input catalogue through the real CLIs: each case ends in exit code 2 and one
`error:` line naming the culprit and the fix, with no traceback; decode.py copes with awkward
input. (Bad config values and unknown keys: tests/test_train.py; eval --src/--ref line
counts and a missing workdir: tests/test_translate.py; data-file cases at the function level:
tests/test_data_errors.py.)
"""

import os
import shutil

import pytest

from tests.helpers import fast_subset, run, tiny_args
from tests.shared_runs import CHECKPOINTED_RUN


@pytest.fixture
def trained(checkpointed_run):
    """A tiny run with checkpoints at steps 10 and 20 (read only: tests change copies)."""
    return checkpointed_run[0]


def copy_run(workdir, tmp_path, *, checkpoints=True):
    dest = str(tmp_path / "copy")
    ignore = None if checkpoints else shutil.ignore_patterns("checkpoints")
    shutil.copytree(workdir, dest, ignore=ignore)
    return dest


def one_line_error(proc, *fragments):
    """Exit code 2, no traceback, exactly one `error:` line holding every fragment."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def train_cli(workdir, *overrides):
    """train.py as a user runs it: configs/default.py made tiny by --config flags."""
    args = ["train.py", "--config", "configs/default.py", "--workdir", workdir]
    return run([*args, *tiny_args(**CHECKPOINTED_RUN), *overrides])


# --------------------------------------------------------------------- architecture


def test_resume_with_another_architecture_names_the_differences(trained, tmp_path):
    workdir = copy_run(trained, tmp_path)
    proc = train_cli(workdir, "--config.model.d_ff=128", "--config.model.num_heads=2")
    one_line_error(proc, "d_ff: 64 -> 128", "num_heads: 4 -> 2", "new --workdir")


def test_eval_with_another_architecture_names_the_checkpoint(trained):
    proc = run(["eval.py", "--workdir", trained, "--config.model.d_ff=128"])
    one_line_error(proc, "checkpoints/20", "does not match the model config", "config (32, 128)")


# ------------------------------------------------------------------------ tokenizer


def _swap_two_pieces(model_path):
    """Same size, other vocabulary: two pieces trade ids."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    a, b = proto.pieces[10], proto.pieces[11]
    a.piece, b.piece = b.piece, a.piece
    with open(model_path, "wb") as f:
        f.write(proto.SerializeToString())


@pytest.mark.parametrize("command", fast_subset(["eval", "resume"], ["eval"]))
def test_a_workdir_whose_tokenizer_does_not_match(trained, tmp_path, command):
    workdir = copy_run(trained, tmp_path)
    _swap_two_pieces(os.path.join(workdir, "vocab", "shared.model"))
    if command == "eval":
        proc = run(["eval.py", "--workdir", workdir, "--split", "valid"])
    else:
        proc = train_cli(workdir, "--config.train.num_steps=30")
    one_line_error(proc, "source tokenizer", "is not the one", "restore the run's vocab/")


@pytest.mark.parametrize("pieces", fast_subset([60, 400], [400]))
def test_a_tokenizer_of_another_size(trained, tmp_path, pieces):
    from transformer.data.tokenizer import Tokenizer

    workdir = copy_run(trained, tmp_path)
    lines = [f"sentence {i} with words {i * 7} and {i * 13} of {i * i}" for i in range(3000)]
    tok = Tokenizer.train(lines, None, pieces)
    tok.save(os.path.join(workdir, "vocab", "shared.model"))
    proc = run(["eval.py", "--workdir", workdir, "--split", "valid"])
    if tok.vocab_size > 200:  # more pieces than the model has rows
        one_line_error(
            proc, f"has {tok.vocab_size} pieces but the checkpoint's model.vocab_size=200", "vocab/"
        )
    else:  # fewer: the fingerprint names it
        one_line_error(proc, "source tokenizer", "is not the one", "restore the run's vocab/")


# ---------------------------------------------------------------- no checkpoint yet


@pytest.mark.parametrize("script", fast_subset(["eval.py", "decode.py"], ["decode.py"]))
def test_a_run_without_checkpoints(trained, tmp_path, script):
    workdir = copy_run(trained, tmp_path, checkpoints=False)
    proc = run([script, "--workdir", workdir])
    one_line_error(proc, "no checkpoints in", "train first")


def test_decode_on_a_directory_that_is_not_a_run(tmp_path):
    proc = run(["decode.py", "--workdir", str(tmp_path)])
    one_line_error(proc, "not a training workdir")


# ----------------------------------------------------------------------- data files


def _write(directory, files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if content is not None:
            data = content if isinstance(content, bytes) else content.encode()
            (directory / name).write_bytes(data)


GOOD = "a b c\nd e f\n"
COMPLETE = {
    f"{split}.{lang}": GOOD for split in ("train", "valid", "test") for lang in ("en", "de")
}
DATA_CASES = {  # name: (files of the data directory, fragment of the error line)
    "missing_directory": (None, "is not a directory"),
    "missing_file": ({**COMPLETE, "train.de": None}, "train.de is missing"),
    "missing_split": ({k: v for k, v in COMPLETE.items() if not k.startswith("valid")}, "valid"),
    "line_counts": ({**COMPLETE, "train.de": "x y z\n"}, "train.de has 1 lines but"),
    "not_utf8": ({**COMPLETE, "train.de": b"ok\n\xff\xfe bad\n"}, "train.de:2: invalid UTF-8"),
    "empty_file": ({**COMPLETE, "train.en": "", "train.de": ""}, "is empty"),
}


@pytest.mark.parametrize("case", fast_subset(DATA_CASES, ["not_utf8"]))
def test_bad_data_files(tmp_path, case):
    files, fragment = DATA_CASES[case]
    data_dir = tmp_path / "data"
    if files is not None:
        _write(data_dir, files)
    proc = train_cli(
        str(tmp_path / "run"), "--config.data.name=parallel_text", f"--config.data.path={data_dir}"
    )
    one_line_error(proc, fragment)


# --------------------------------------------------------------- awkward decode input


def test_decode_handles_long_empty_and_unknown_input(trained, tmp_path):
    long_line = " ".join(["the clever boy sees the dog"] * 30)  # far beyond max_len 64
    lines = [long_line, "", "Ωμέγα 漢字 🙂 ß", "the dog sleeps", ""]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    proc = run(
        [
            "decode.py",
            "--workdir",
            trained,
            "--input",
            str(src),
            "--output",
            str(out),
            "--config.decode.strategy=greedy",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "translated 5 lines; 1 longer than model.max_len were truncated" in proc.stderr
    decoded = out.read_text(encoding="utf-8").split("\n")
    assert len(decoded) == 6 and decoded[-1] == ""  # one output line per input line
    assert decoded[1] == "" and decoded[4] == ""  # empty in, empty out
