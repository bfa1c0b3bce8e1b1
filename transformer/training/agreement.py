"""Decisions the processes of a multi-process run take together.

Every process of a run reads its checkpoints for itself, and two processes can see the same
checkpoint differently: a file damaged in one host's local cache or on a disk that only one
host reads, a listing one host sees late. Deciding alone, one process would resume from
another step than the others and the run would go on from mismatched states (or hang in its
next collective). So where a process's own view decides where to resume, the processes
exchange their views first and act on the same verdict.

Both functions are collective: every process calls them, in the same order. In a run of one
process they return at once, without JAX collectives.
"""

from __future__ import annotations

import jax
import numpy as np

REPORT_BYTES = 512  # a report travels as this many UTF-8 bytes; a longer one is cut


def process_zeros(values: list[int]) -> list[int]:
    """Process 0's list of ints, on every process (the other processes' lists are ignored)."""
    if jax.process_count() == 1:
        return list(values)
    from jax.experimental import multihost_utils

    # broadcast_one_to_all needs the same shape everywhere: the length first, then the list.
    length = int(multihost_utils.broadcast_one_to_all(np.int32(len(values))))
    padded = np.zeros(length, np.int64)
    padded[: min(length, len(values))] = values[:length]
    return [int(v) for v in multihost_utils.broadcast_one_to_all(padded)]


def first_report(report: str | None) -> tuple[int, str] | None:
    """Each process passes its own report (None: nothing to report); each gets back the
    report of the lowest-numbered process that had one, with that process's index, or None
    when no process had one."""
    if jax.process_count() == 1:
        return None if report is None else (0, report)
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(_encode(report))  # [processes, 1 + bytes]
    for process, row in enumerate(np.asarray(gathered)):
        if row[0]:
            return process, _decode(row)
    return None


def _encode(report: str | None) -> np.ndarray:
    """[1 + REPORT_BYTES] int32: a flag (1: a report) and the report's UTF-8 bytes, padded
    with zeros."""
    row = np.zeros(1 + REPORT_BYTES, np.int32)
    if report is not None:
        data = report.encode("utf-8")[:REPORT_BYTES]
        row[0] = 1
        row[1 : 1 + len(data)] = np.frombuffer(data, np.uint8)
    return row


def _decode(row: np.ndarray) -> str:
    data = bytes(row[1:].astype(np.uint8)).rstrip(b"\0")
    return data.decode("utf-8", errors="replace")  # a cut may split a character
