"""The ``metrics.jsonl`` format: a run's training, evaluation and info rows, one JSON object a
line, in the order they were written.

Rows::

    {"step": 1200, "kind": "train", "time": 1717000000.0, "loss": 2.3, "learning_rate": ...}
    {"step": 2000, "kind": "eval", "split": "valid", "time": ..., "bleu": 27.1, ...}
    {"kind": "info", "time": ..., "message": "parameters: 60,512,768", ...}

Train rows are expected to carry at least ``loss``, ``learning_rate`` and
``tokens_per_s``; eval rows ``bleu`` when it was computed. Metric values are stored as
floats (NaN/inf are written as the JSON extensions ``NaN``/``Infinity`` that Python reads).

A writer appends and flushes one line per row (``row_line``), so a process killed mid-write
leaves at most a partial last line: ``read_metrics`` skips it, and ``parse_row`` tells a
writer whether an unterminated last line is a whole row.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformer.common.errors import UserError

METRICS_FILE = "metrics.jsonl"
# The row's own fields; a metric or info field of one of these names would overwrite them.
RESERVED_KEYS = frozenset({"step", "kind", "split", "time", "message"})


def _to_float(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {key!r} must be a number (or 0-d array), got {type(value).__name__}"
        ) from None


def float_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metric values of a train or eval row as floats; a bad name or value raises."""
    out = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"metric names must be non-empty strings, got {key!r}")
        if key in RESERVED_KEYS:
            raise ValueError(f"metric name {key!r} is reserved for the row itself")
        out[key] = _to_float(key, value)
    return out


def train_row(step: int, values: Mapping[str, float]) -> dict:
    """A train row of ``float_metrics`` values, stamped with the wall time."""
    return {"step": int(step), "kind": "train", "time": time.time(), **values}


def eval_row(step: int, split: str, values: Mapping[str, float]) -> dict:
    """An eval row of ``float_metrics`` values for ``split``, stamped with the wall time."""
    if not split or "/" in split:  # the split names TensorBoard tags (<split>/<metric>)
        raise ValueError(f"split must be a non-empty name without '/', got {split!r}")
    return {"step": int(step), "kind": "eval", "split": split, "time": time.time(), **values}


def info_row(message: str, step: int | None, data: Mapping[str, Any]) -> dict:
    """An info row: ``message`` with JSON-able ``data`` fields (TypeError when not JSON-able)."""
    for key in data:
        if key in RESERVED_KEYS:
            raise ValueError(f"field name {key!r} is reserved for the row itself")
    row: dict[str, Any] = {"kind": "info", "time": time.time(), "message": str(message)}
    if step is not None:
        row["step"] = int(step)
    row.update(data)
    row_line(row)  # fail before anything is written if data is not JSON-able
    return row


def row_line(row: Mapping[str, Any]) -> str:
    """One row as its line of the file, newline included."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def parse_row(line: bytes) -> dict | None:
    """The row a line holds, or None when it is no JSON object (cut short, or not a row)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) else None


def read_metrics(path: str | os.PathLike, kind: str | None = None) -> list[dict]:
    """Rows of a ``metrics.jsonl`` (or of a run directory's), optionally only one ``kind``,
    in file order.

    A truncated final line (the process was killed mid-write) is skipped; a bad line
    anywhere else raises UserError naming the file and line. A missing file gives ``[]``.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = parse_row(line)
        if row is None:
            if lineno == len(lines):  # no newline after it: possibly cut short
                break
            raise UserError(f"{path}: line {lineno} is not a JSON object; fix or delete that line")
        if kind is None or row.get("kind") == kind:
            rows.append(row)
    return rows
