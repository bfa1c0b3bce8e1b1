"""Corpus BLEU and chrF exactly as the ``sacrebleu`` command line reports them.

``score(hyps, refs)`` gives the same numbers and signatures as::

    sacrebleu REF -i HYP -m bleu chrf

i.e. corpus BLEU (tokenize ``13a``, mixed case, ``exp`` smoothing) and chrF2 on
detokenized hypotheses against raw references, one reference per segment. Like the
command line, every segment is right-stripped of whitespace before scoring (which
never changes a score, but keeps the two paths identical by construction).

``write_lines`` / ``read_lines`` store one segment per line and round-trip exactly:
an empty hypothesis is an empty line, nothing is dropped or added.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from transformer.common.errors import UserError

BLEU_TOKENIZE = "13a"


@dataclasses.dataclass(frozen=True)
class Scores:
    """Corpus scores of one system output, with the details sacreBLEU prints."""

    bleu: float
    chrf: float
    bleu_signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    chrf_signature: str  # e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
    precisions: tuple[float, ...]  # 1- to 4-gram precisions, in percent
    brevity_penalty: float
    ratio: float  # sys_len / ref_len
    sys_len: int
    ref_len: int
    num_segments: int
    chrf_name: str = "chrF2"

    @property
    def bleu_verbose(self) -> str:
        """The details string of the command line, e.g. ``80.0/50.0/33.3/25.0 (BP = ...)``."""
        precisions = "/".join(f"{p:.1f}" for p in self.precisions)
        return (
            f"{precisions} (BP = {self.brevity_penalty:.3f} ratio = {self.ratio:.3f} "
            f"hyp_len = {self.sys_len:d} ref_len = {self.ref_len:d})"
        )

    @property
    def signatures(self) -> dict[str, str]:
        """``{"bleu": ..., "chrf": ...}``: the form eval results store as ``signature``."""
        return {"bleu": self.bleu_signature, "chrf": self.chrf_signature}

    def bleu_line(self, width: int = 1) -> str:
        """``BLEU|<signature> = <score> <details>`` as ``sacrebleu --format text`` prints it."""
        return f"BLEU|{self.bleu_signature} = {self.bleu:.{width}f} {self.bleu_verbose}"

    def chrf_line(self, width: int = 1) -> str:
        """``chrF2|<signature> = <score>`` as ``sacrebleu --format text`` prints it."""
        return f"{self.chrf_name}|{self.chrf_signature} = {self.chrf:.{width}f}"

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        d = dataclasses.asdict(self)
        d["precisions"] = list(self.precisions)
        return d


def sacrebleu_metrics() -> dict:
    """{'BLEU': ..., 'chrF': ...}: fresh sacreBLEU metric objects with this module's settings
    (the command line's defaults), for everything that scores."""
    from sacrebleu.metrics import BLEU, CHRF

    return {"BLEU": BLEU(tokenize=BLEU_TOKENIZE), "chrF": CHRF()}


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against raw ``references``.

    Raises UserError if the two lists differ in length or are empty.
    """
    hypotheses = list(hypotheses)
    references = list(references)
    if len(hypotheses) != len(references):
        raise UserError(
            f"cannot score: {len(hypotheses)} hypotheses but {len(references)} references; "
            "each reference line needs exactly one hypothesis line"
        )
    if not hypotheses:
        raise UserError("cannot score: no hypotheses and no references (the test set is empty)")
    for name, segs in (("hypothesis", hypotheses), ("reference", references)):
        for i, seg in enumerate(segs):
            if not isinstance(seg, str):
                raise TypeError(f"{name} {i} is {type(seg).__name__}, expected str")
    # The command line right-strips every line it reads; do the same.
    hyps = [h.rstrip() for h in hypotheses]
    refs = [r.rstrip() for r in references]

    metrics = sacrebleu_metrics()
    bleu_metric, chrf_metric = metrics["BLEU"], metrics["chrF"]
    bleu = bleu_metric.corpus_score(hyps, [refs])
    chrf = chrf_metric.corpus_score(hyps, [refs])
    return Scores(
        bleu=float(bleu.score),
        chrf=float(chrf.score),
        bleu_signature=str(bleu_metric.get_signature()),
        chrf_signature=str(chrf_metric.get_signature()),
        precisions=tuple(float(p) for p in bleu.precisions),
        brevity_penalty=float(bleu.bp),
        ratio=float(bleu.ratio),
        sys_len=int(bleu.sys_len),
        ref_len=int(bleu.ref_len),
        num_segments=len(hyps),
        chrf_name=str(chrf.name),
    )


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Writes one segment per line, UTF-8, each terminated by ``\\n``.

    An empty segment becomes an empty line, so ``read_lines`` gives back the same list.
    Raises UserError if a segment contains a line break (it would split into two lines).
    """
    path = Path(path)
    parts = []
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"line {i + 1} is {type(line).__name__}, expected str")
        if "\n" in line or "\r" in line:
            raise UserError(
                f"cannot write {path}: segment {i + 1} contains a line break "
                f"({line[:40]!r}...); remove newlines from segments before writing"
            )
        parts.append(line + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    # newline="" writes "\n" as is on every platform.
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


def read_lines(path: str | os.PathLike) -> list[str]:
    """Reads one segment per line; the exact inverse of ``write_lines``.

    Lines are split on ``\\n`` only (a trailing ``\\r`` of a CRLF line is dropped); a
    missing final newline is accepted. Whitespace inside lines is kept. Raises UserError
    naming the file and line when the file is missing or not valid UTF-8.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise UserError(f"expected a text file but found a directory: {path}") from None
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    out = []
    for lineno, raw in enumerate(raw_lines, 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise UserError(
                f"{path}: line {lineno}: invalid UTF-8 at byte {e.start} of the line "
                f"({raw[e.start : e.start + 4]!r}); convert the file to UTF-8"
            ) from None
    return out
