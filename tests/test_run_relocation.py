"""A run directory that travels, and training logs without progress-bar control characters.

One tiny train.py run (configs/default.py shrunk; the synthetic corpus written into the run
and prepared as TFDS ArrayRecord there). Its log, captured as a file captures it, holds no
carriage return or ANSI escape although the run built its TFDS data. A copy of the run in
another directory, its files' modification times new and the original gone, evaluates,
decodes and resumes without preparing its data again: no new TFDS build directory, no new
token cache, no 'preparing' line. A dataset prepared under the path-based name (the corpus's
absolute path and modification times hashed) is used where it lies, and so is its token
cache. decode.py warns about a planted prefix outside the vocabulary and, with
--strict_vocab, refuses it in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, run, tiny_config
from tests.shared_runs import CHECKPOINTED_RUN
from tests.test_bad_inputs import copy_run

# What TFDS prints when it prepares a dataset (dataset_builder._log_download_bytes).
PREPARING = "Downloading and preparing dataset"


@pytest.fixture
def trained_run(checkpointed_run):
    """(workdir, its train.py output, stdout then stderr, as `> log 2>&1` would keep it)."""
    return checkpointed_run


def built_data(workdir) -> dict[str, list[str]]:
    """What preparing the data leaves in a run: TFDS build directories, token caches and
    vocabulary files."""
    listing = {}
    for sub in (os.path.join("tfds", "parallel_text"), "data_cache", "vocab"):
        path = os.path.join(workdir, sub)
        listing[sub] = sorted(os.listdir(path)) if os.path.isdir(path) else []
    return listing


def moved(workdir, tmp_path) -> str:
    """The run copied into another directory with new modification times (as a copy to
    another machine has), the copy it was made from deleted."""
    first, final = tmp_path / "first" / "run", tmp_path / "elsewhere" / "run"
    shutil.copytree(workdir, first)
    shutil.copytree(first, final, copy_function=shutil.copy)  # contents only, new mtimes
    shutil.rmtree(first)
    return str(final)


def test_a_training_log_that_built_tfds_data_has_no_control_characters(trained_run):
    workdir, log = trained_run
    assert PREPARING in log  # this run prepared its TFDS data
    assert [d for d in built_data(workdir)["tfds/parallel_text"] if d.startswith("de_en_")]
    assert "\r" not in log
    assert "\x1b" not in log


def test_a_moved_run_evaluates_decodes_and_resumes_without_rebuilding(trained_run, tmp_path, capfd):
    """eval.py's, decode.py's and train.py's code in this process (their CLIs add flag
    parsing only)."""
    from transformer.evaluation.evaluator import evaluate
    from transformer.evaluation.restore import restore_run
    from transformer.training.loop import train_and_evaluate

    workdir = moved(trained_run[0], tmp_path)
    before = built_data(workdir)
    evaluate(workdir, split="valid")
    run = restore_run(workdir)
    decoded = run.translator.translate(run.params, ["The boy sees the dog."], prefixes=["Der"])
    train_and_evaluate(tiny_config(**{**CHECKPOINTED_RUN, "train__num_steps": 25}), workdir)
    assert built_data(workdir) == before
    assert PREPARING not in "".join(capfd.readouterr())
    assert os.path.isfile(os.path.join(workdir, "eval", "valid.json"))
    assert decoded.best[0].startswith("Der")
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        messages = [json.loads(line).get("message", "") for line in f]
    assert "resumed from checkpoint at step 20" in messages
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["10", "20", "25"]


def test_data_prepared_under_the_legacy_name_is_used_where_it_lies(trained_run, tmp_path):
    """Older versions named a corpus's TFDS config by its absolute path and mtimes, and keyed
    token caches by the build directory: such a run reads both without preparing again."""
    from transformer.data import bundle, text_builder, tokenized
    from transformer.data.parallel_files import find_parallel_splits
    from transformer.training import run_config

    workdir = str(tmp_path / "run")
    shutil.copytree(trained_run[0], workdir)
    corpus, data_dir = os.path.join(workdir, "synthetic_corpus"), os.path.join(workdir, "tfds")
    languages = ("de", "en")
    splits = find_parallel_splits(corpus, languages)
    legacy = text_builder._legacy_name(corpus, languages, splits)
    builder = text_builder._builder(legacy, corpus, languages, splits, data_dir)
    text_builder._prepare(builder, corpus, languages, splits)  # as an older version did
    current = text_builder._content_name(languages, splits, data_dir)
    shutil.rmtree(os.path.join(data_dir, "parallel_text", current))
    data = bundle.make_datasets(run_config.load(workdir), workdir)
    pairs, src_tok, tgt_tok = data.train_pairs, data.source_tokenizer, data.target_tokenizer
    assert pairs.fingerprint == f"parallel_text/{legacy}|train|en->de"
    cache = os.path.join(workdir, bundle.CACHE_DIR)
    (trained_cache,) = os.listdir(cache)
    old_key = f"{builder.data_dir}|train|en->de"  # the key older versions gave the cache
    old_cache = tokenized._cache_path(cache, old_key, pairs, src_tok, tgt_tok)
    os.rename(os.path.join(cache, trained_cache), old_cache)
    before = built_data(workdir)
    assert len(data.train_tokens) == 1500
    after = built_data(workdir)
    assert after["tfds/parallel_text"] == before["tfds/parallel_text"]
    current_cache = tokenized._cache_path(cache, pairs.fingerprint, pairs, src_tok, tgt_tok)
    assert after["data_cache"] == [os.path.basename(current_cache)]  # renamed, not redone


def decode(workdir, text, *flags, check=True):
    proc = subprocess.run(
        [sys.executable, "decode.py", "--workdir", workdir, "--with_prefix", *flags],
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        input=text,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# The synthetic corpus has no 'Ü' and no digits, so its vocabulary has none of them.
PLANTED = "The boy sees the dog.\tDer Hund\nThe girl reads.\tÜbrigens, 42 Zebras\n"


@pytest.mark.slow  # the fast tier has tests/test_forced_vocabulary.py
def test_a_prefix_outside_the_vocabulary_is_a_warning_naming_the_line(trained_run):
    proc = decode(trained_run[0], PLANTED)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: input line 2: the target prefix has characters outside the target "
        "vocabulary ('Ü', '4', '2'); they become <unk> in the output"
    ]
    assert len(proc.stdout.splitlines()) == 2
    assert not proc.stdout.splitlines()[1].startswith("Übrigens")  # what the warning is for


@pytest.mark.slow
def test_strict_vocab_refuses_such_a_prefix_in_one_line(trained_run):
    proc = decode(trained_run[0], PLANTED, "--strict_vocab", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: input line 2: the target prefix has characters outside the target vocabulary "
        "('Ü', '4', '2'); remove or replace them (without --strict_vocab they become <unk>)"
    ]


@pytest.mark.slow
def test_eval_strict_vocab_refuses_such_a_prefix_file_in_one_line(trained_run, tmp_path):
    """eval.py --prefix takes the same option: the planted prefix on source line 2 of the
    test split is refused before anything is translated; without it, a warning."""
    workdir = copy_run(trained_run[0], tmp_path)  # eval.py writes its results into the run
    (tmp_path / "src.txt").write_text("The boy sees the dog.\nThe girl reads.\n")
    (tmp_path / "ref.txt").write_text("Der Hund sieht.\nDas Mädchen liest.\n")
    (tmp_path / "prefix.txt").write_text("Der\nÜbrigens, 42 Zebras\n")
    files = [f"--{k}={tmp_path / k}.txt" for k in ("src", "ref", "prefix")]
    args = ["eval.py", "--workdir", workdir, *files, "--name", "planted"]
    strict = run([*args, "--strict_vocab"])
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    errors = [line for line in strict.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: input line 2: the target prefix has characters outside the target vocabulary "
        "('Ü', '4', '2'); remove or replace them (without --strict_vocab they become <unk>)"
    ]
    lenient = run(args)
    assert lenient.returncode == 0, lenient.stderr[-3000:]
    assert any("line 2: the target prefix" in line for line in lenient.stderr.splitlines())
