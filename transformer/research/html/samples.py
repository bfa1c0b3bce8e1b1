"""Test sentences side by side: which sentences a page shows, by a fixed rule stated on the
page, and each output with the words that differ from a comparison text marked.

A study shows the sentences on which its arms disagree most (`most_disputed`); a run, the
sentences at evenly spaced positions of the split (`evenly_spaced`). Words are compared as
whitespace-separated tokens by difflib's longest-matching-blocks alignment: a word of the
output that the alignment does not match in the other text is marked.
"""

from __future__ import annotations

import difflib
import itertools
import statistics
from collections.abc import Mapping, Sequence

from transformer.research.html.markup import escape, tag

COUNT = 6  # sentences a page shows

STUDY_RULE = (
    "The {count} test sentences on which the arms' outputs differ most: for each sentence, the "
    "mean over every pair of arms of the word-level distance between their outputs (1 - "
    "difflib's similarity ratio of the word sequences), largest first, ties by position; "
    "each arm's output is its first reported seed's. Marked: the words of an output that "
    "differ from the baseline's output."
)
RUN_RULE = (
    "{count} sentences at evenly spaced positions of the {split} split (every n/{count}-th, "
    "from the first). Marked: the words of the output that differ from the reference."
)


def most_disputed(outputs: Mapping[str, Sequence[str]], count: int = COUNT) -> list[int]:
    """The positions of the `count` sentences of STUDY_RULE, in order."""
    arms = [[text.split() for text in texts] for texts in outputs.values()]
    if len(arms) < 2:
        return []

    def score(i: int) -> float:
        pairs = itertools.combinations((words[i] for words in arms), 2)
        return statistics.fmean(_word_distance(a, b) for a, b in pairs)

    ranked = sorted(range(len(arms[0])), key=lambda i: (-score(i), i))
    return sorted(ranked[:count])


def _word_distance(a: list[str], b: list[str]) -> float:
    return 1.0 - difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def evenly_spaced(n: int, count: int = COUNT) -> list[int]:
    """`count` positions of n at equal spacing from the first (all of them when n <= count)."""
    if n <= count:
        return list(range(n))
    return [i * n // count for i in range(count)]


def marked(text: str, other: str | None) -> str:
    """`text` escaped, its words that `other` does not have (by the alignment) in <mark>."""
    words = text.split()
    if other is None:
        return escape(text)
    matcher = difflib.SequenceMatcher(None, words, other.split(), autojunk=False)
    out = []
    for op, i1, i2, _, _ in matcher.get_opcodes():
        chunk = escape(" ".join(words[i1:i2]))
        if chunk:
            out.append(chunk if op == "equal" else tag("mark", chunk))
    return " ".join(out)


def table(
    positions: Sequence[int],
    outputs: Mapping[str, Sequence[str]],
    compare_with: Mapping[str, Sequence[str] | None],
    sources: Sequence[str] | None,
    references: Sequence[str] | None,
) -> str:
    """Per sentence: its source, its reference, then each output marked against its
    `compare_with` text (None: unmarked)."""
    rows = []
    for i in positions:
        rows.append(_row(f"#{i + 1} source", escape(sources[i]) if sources else "–", "source"))
        rows.append(_row("reference", escape(references[i]) if references else "–"))
        for name, texts in outputs.items():
            other = compare_with.get(name)
            rows.append(_row(name, marked(texts[i], other[i] if other else None)))
    return tag("div", tag("table", tag("tbody", "".join(rows)), class_="samples"), class_="scroll")


def _row(name: str, content_html: str, cls: str | None = None) -> str:
    return tag("tr", tag("td", escape(name), class_="arm") + tag("td", content_html), class_=cls)


def missing_texts_note(references, sources) -> str:
    """A caption naming the flags that would add the sources or references the runs lack
    ('' when both are there)."""
    missing = [
        (flag, what)
        for flag, what, found in (
            ("--references FILE", "references", references),
            ("--sources FILE", "sources", sources),
        )
        if found is None
    ]
    if not missing:
        return ""
    text = (
        "The runs keep no copy of the split's "
        + " or ".join(what for _, what in missing)
        + f"; pass {' and '.join(flag for flag, _ in missing)} to show them."
    )
    return tag("p", escape(text), class_="caption")
