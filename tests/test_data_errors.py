"""Bad data raises a one-line UserError naming the file (and line); empty lines are counted."""

import pytest

from transformer.common.errors import UserError
from transformer.data import load_split
from transformer.training.base_config import get_base_config


def cfg_for(path):
    c = get_base_config()
    c.data.name = "parallel_text"
    c.data.path = str(path)
    return c.data


def write(path, name, data):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def raises(data_cfg, tmp_path, split="train", match=None):
    with pytest.raises(UserError, match=match) as e:
        load_split(data_cfg, split, str(tmp_path / "work"))
    assert "\n" not in str(e.value)
    return str(e.value)


def test_missing_directory(tmp_path):
    msg = raises(cfg_for(tmp_path / "nope"), tmp_path, match="not a directory")
    assert "nope" in msg and "train.en" in msg


def test_no_files(tmp_path):
    (tmp_path / "c").mkdir()
    msg = raises(cfg_for(tmp_path / "c"), tmp_path, match="no {split}.{lang} files")
    assert "train.en" in msg and "train.de" in msg


def test_missing_one_side(tmp_path):
    write(tmp_path / "c", "train.en", "a\nb\n")
    msg = raises(cfg_for(tmp_path / "c"), tmp_path, match="is missing")
    assert str(tmp_path / "c" / "train.de") in msg and "train.en exists" in msg


def test_missing_split(tmp_path):
    write(tmp_path / "c", "train.en", "a\n")
    write(tmp_path / "c", "train.de", "A\n")
    msg = raises(cfg_for(tmp_path / "c"), tmp_path, split="test", match="no split 'test'")
    assert "train" in msg


def test_line_count_mismatch(tmp_path):
    write(tmp_path / "c", "train.en", "a\nb\nc\n")
    write(tmp_path / "c", "train.de", "A\nB\n")
    msg = raises(cfg_for(tmp_path / "c"), tmp_path, match="must be line-aligned")
    assert "train.en has 3 lines" in msg or "train.en has 3;" in msg
    assert "train.de has 2" in msg


def test_invalid_utf8(tmp_path):
    write(tmp_path / "c", "train.en", "a\nb\n")
    write(tmp_path / "c", "train.de", b"A\n\xe4\xff B\n")
    raises(cfg_for(tmp_path / "c"), tmp_path, match=r"train\.de:2: invalid UTF-8")


def test_empty_file(tmp_path):
    write(tmp_path / "c", "train.en", "")
    write(tmp_path / "c", "train.de", "A\n")
    raises(cfg_for(tmp_path / "c"), tmp_path, match=r"train\.en is empty")


def test_only_empty_lines(tmp_path):
    write(tmp_path / "c", "train.en", "\n \n")
    write(tmp_path / "c", "train.de", "\n\n")
    raises(cfg_for(tmp_path / "c"), tmp_path, match="no line where both sides are non-empty")


def test_empty_lines_skipped_and_counted(tmp_path):
    write(tmp_path / "c", "train.en", "\ufeffa\n\nc\nd\n  \nf")  # BOM, no final newline
    write(tmp_path / "c", "train.de", "A\nB\n\nD\nE\nF\n")
    pairs = load_split(cfg_for(tmp_path / "c"), "train", str(tmp_path / "work"))
    assert list(pairs) == [("a", "A"), ("d", "D"), ("f", "F")]
    assert pairs.num_empty_skipped == 3
    assert pairs.line_numbers(range(3)) == [1, 4, 6]
    # the count survives reopening the prepared dataset
    again = load_split(cfg_for(tmp_path / "c"), "train", str(tmp_path / "work"))
    assert again.num_empty_skipped == 3


def test_bad_languages(tmp_path):
    data = cfg_for(tmp_path)
    data.target_lang = "en"
    raises(data, tmp_path, match="both 'en'")


def test_bad_batching_and_lengths(tmp_path):
    from transformer.data import make_layout

    c = get_base_config()
    c.data.batching = "sorted"
    with pytest.raises(UserError, match="data.batching='sorted'"):
        make_layout(c)
    c = get_base_config()
    c.data.max_source_len = 1000
    with pytest.raises(UserError, match="exceeds model.max_len"):
        make_layout(c)
