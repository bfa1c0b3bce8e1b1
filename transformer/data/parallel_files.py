"""Local parallel text: line-aligned ``{split}.{lang}`` files in one directory.

`find_parallel_splits` finds the splits that have a file for both languages,
`read_parallel_files` streams a split's line pairs (skipping pairs with an empty side) after
checking that both files exist, are non-empty and have the same number of lines, and
`validate_parallel_files` reads a split completely to count its lines. Bad data raises
`UserError` with a one-line message naming the file (and line): invalid UTF-8, misaligned or
missing files, a directory without any split.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Sequence

from transformer.common.errors import UserError

_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The two aligned files of one split of a local corpus."""

    split: str
    files: dict[str, str]  # language -> absolute file path


def find_parallel_splits(path: str, languages: Sequence[str]) -> dict[str, SplitFiles]:
    """Returns ``{split: SplitFiles}`` for every ``{split}.{lang}`` pair in directory ``path``.

    Raises `UserError` if the directory is missing, if a split has the file of one language
    but not the other, or if no split has both files.
    """
    if not path:
        raise UserError(
            "data.name='parallel_text' needs data.path: set it to a directory of "
            f"{{split}}.{{lang}} files (e.g. train.{languages[0]}, train.{languages[1]})"
        )
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise UserError(
            f"data.path={path} is not a directory; it must hold aligned {{split}}.{{lang}} "
            f"files such as train.{languages[0]} and train.{languages[1]}"
        )
    by_split: dict[str, dict[str, str]] = {}
    for entry in sorted(os.listdir(path)):
        stem, dot, lang = entry.rpartition(".")
        if not dot or lang not in languages or not _SPLIT_NAME_RE.match(stem):
            continue
        full = os.path.join(path, entry)
        if os.path.isfile(full):
            by_split.setdefault(stem, {})[lang] = full
    splits = {}
    for split, files in by_split.items():
        missing = [lang for lang in languages if lang not in files]
        if missing:
            have = os.path.basename(next(iter(files.values())))
            want = os.path.join(path, f"{split}.{missing[0]}")
            raise UserError(
                f"{want} is missing: {have} exists, and every split needs one file per "
                f"language ({split}.{languages[0]} and {split}.{languages[1]})"
            )
        splits[split] = SplitFiles(split, files)
    if not splits:
        raise UserError(
            f"data.path={path} has no {{split}}.{{lang}} files for languages "
            f"{languages[0]}/{languages[1]}: expected e.g. train.{languages[0]} and "
            f"train.{languages[1]} (and valid.*, test.*)"
        )
    return splits


def _count_lines(filename: str) -> int:
    """Lines in a file; a last line without a trailing newline counts."""
    count = 0
    last = b"\n"
    with open(filename, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _decode_lines(filename: str) -> Iterator[str]:
    """Yields the stripped lines of a UTF-8 file; UserError names the first bad line."""
    with open(filename, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{filename}:{number}: invalid UTF-8 ({e.reason} at byte {e.start} of the "
                    "line); convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
                ) from None
            if number == 1:
                text = text.removeprefix("\ufeff")  # byte order mark
            yield text.strip()


def read_parallel_files(
    source_file: str, target_file: str
) -> Iterator[tuple[int, str, str] | tuple[None, int, int]]:
    """Yields ``(line_number, source, target)`` for every line pair where both sides are
    non-empty, then one final ``(None, num_lines, num_empty_skipped)``.

    Checks, before yielding anything, that both files are non-empty and have the same
    number of lines; checks UTF-8 line by line. All failures raise `UserError`.
    """
    counts = {}
    for filename in (source_file, target_file):
        if not os.path.isfile(filename):
            raise UserError(f"{filename} does not exist; it is needed for this split")
        if os.path.getsize(filename) == 0:
            raise UserError(f"{filename} is empty; give it one sentence per line")
        counts[filename] = _count_lines(filename)
    if counts[source_file] != counts[target_file]:
        raise UserError(
            f"{source_file} has {counts[source_file]} lines but {target_file} has "
            f"{counts[target_file]}; the two files must be line-aligned translations"
        )
    empty = 0
    number = 0
    for number, (src, tgt) in enumerate(
        zip(_decode_lines(source_file), _decode_lines(target_file), strict=True), start=1
    ):
        if not src or not tgt:
            empty += 1
            continue
        yield number, src, tgt
    if empty == number:
        raise UserError(
            f"{source_file} and {target_file} have no line where both sides are non-empty"
        )
    yield None, number, empty


def validate_parallel_files(source_file: str, target_file: str) -> dict[str, int]:
    """Reads both files completely; returns ``{'lines': n, 'empty': n_empty_skipped}``."""
    for line, *rest in read_parallel_files(source_file, target_file):
        if line is None:
            return {"lines": rest[0], "empty": rest[1]}
    raise AssertionError("unreachable")
