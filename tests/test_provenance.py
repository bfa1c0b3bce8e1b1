"""Every training start writes its provenance into the run (common/provenance.py): the code's
source hash and git state, library versions, machine and data; a resume appends an entry.
Checked against facts made in the test: a tree whose file changes, a git checkout made clean
and then dirty, a run trained and resumed."""

import subprocess

import pytest

from tests.helpers import tiny_config
from transformer.common import provenance


def test_source_digest_follows_every_file_and_its_path(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    first = provenance.source_digest(tmp_path)
    assert provenance.source_digest(tmp_path) == first
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    changed = provenance.source_digest(tmp_path)
    assert changed != first
    (tmp_path / "sub" / "b.py").rename(tmp_path / "b.py")  # same bytes, another path
    assert provenance.source_digest(tmp_path) not in (first, changed)
    (tmp_path / "notes.txt").write_text("not code")
    assert provenance.source_digest(tmp_path) == provenance.source_digest(tmp_path)


def test_git_state_names_the_commit_and_a_dirty_tree(tmp_path):
    assert provenance.git_state(tmp_path) == {"git_commit": None, "git_dirty": None}

    def git(*args):
        command = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
        return subprocess.run([*command, *args], capture_output=True, text=True, check=True)

    git("init", "-q")
    (tmp_path / "m.py").write_text("x = 1\n")
    git("add", "m.py")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD").stdout.strip()
    assert provenance.git_state(tmp_path) == {"git_commit": head, "git_dirty": False}
    (tmp_path / "untracked.py").write_text("")  # not part of the commit's code
    assert provenance.git_state(tmp_path)["git_dirty"] is False
    (tmp_path / "m.py").write_text("x = 2\n")
    assert provenance.git_state(tmp_path) == {"git_commit": head, "git_dirty": True}


@pytest.mark.slow
def test_training_records_each_start_and_a_resume_appends_one(tmp_path):
    from transformer.training.loop import train_and_evaluate

    workdir = str(tmp_path / "run")
    common = dict(
        train__log_every=5,
        train__eval_every=100,
        train__checkpoint_every=5,
        train__eval_bleu_sentences=0,
    )
    train_and_evaluate(tiny_config(train__num_steps=5, **common), workdir)
    (first,) = provenance.read(workdir)
    assert first["start_step"] == 0
    assert first["code"]["source_sha256"] == provenance.source_digest()
    assert first["libraries"]["jax"] and first["machine"].endswith("cpu")
    data = first["data"]
    assert data["train_pairs"] > 0 and len(data["train_tokens_sha256"]) == 64
    train_and_evaluate(tiny_config(train__num_steps=10, **common), workdir)
    starts = provenance.read(workdir)
    assert [s["start_step"] for s in starts] == [0, 5]
    assert starts[1]["data"] == data and starts[1]["code"] == first["code"]
