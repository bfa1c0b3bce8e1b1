"""Training/eval metrics: JSON lines, TensorBoard scalars and a plain progress line.

Every ``log_*`` call appends one row to ``<workdir>/metrics.jsonl`` (the format and its
reader: ``transformer.common.metrics_file``) and flushes it, so a run killed with SIGKILL
leaves at most a partial last line (``read_metrics`` skips it; the next ``MetricsLogger`` on
that workdir cuts it off before appending).

Scalars also go to TensorBoard (tensorboardX, no TensorFlow) under
``<workdir>/tensorboard/`` with tags ``train/<name>`` and ``<split>/<name>``.

On resume call ``truncate_after(resumed_step)``: rows with a larger step are dropped
(atomic rewrite) and TensorBoard is told to purge them too, so no step appears twice.
"""

from __future__ import annotations

import collections
import importlib.abc
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from transformer.common.fileio import atomic_write
from transformer.common.metrics_file import (
    METRICS_FILE,
    eval_row,
    float_metrics,
    info_row,
    parse_row,
    read_metrics,
    row_line,
    train_row,
)

TENSORBOARD_DIR = "tensorboard"

# Progress-line fields: (metric key, label, format).
_PROGRESS_FIELDS = (
    ("loss", "loss", "{:.3f}"),
    ("nll", "nll", "{:.3f}"),
    ("accuracy", "acc", "{:.3f}"),
    ("grad_norm", "gnorm", "{:.3f}"),
    ("learning_rate", "lr", "{:.1e}"),
)


def format_eta(seconds: float | None) -> str:
    """``H:MM:SS`` (hours unbounded, e.g. ``27:03:04``); ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    total = int(round(seconds))
    hours, rem = divmod(total, 3600)
    minutes, secs = divmod(rem, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _fmt(value: float, spec: str) -> str:
    if not math.isfinite(value):
        return str(value)
    return spec.format(value)


def format_progress(
    step: int, total_steps: int | None, metrics: Mapping[str, float], eta_s: float | None
) -> str:
    """``step 1200/20000 | loss 2.345 | nll 2.101 | lr 1.2e-03 | 12,345 tok/s | eta 0:12:34``."""
    parts = [f"step {step}/{total_steps}" if total_steps else f"step {step}"]
    for key, label, spec in _PROGRESS_FIELDS:
        if key in metrics:
            parts.append(f"{label} {_fmt(metrics[key], spec)}")
    if "tokens_per_s" in metrics:
        parts.append(f"{_fmt(metrics['tokens_per_s'], '{:,.0f}')} tok/s")
    if total_steps:
        parts.append(f"eta {format_eta(eta_s)}")
    return " | ".join(parts)


class _NoTorchForTensorboardX(importlib.abc.MetaPathFinder):
    """Fails ``import torch`` when tensorboardX's own code asks for it, and only then.

    tensorboardX's writer module runs ``try: import torch`` at import time, only to name
    ``torch.Tensor`` in type hints: where PyTorch is installed that costs seconds of startup
    and loads its GPU libraries into a JAX process. Every tensorboardX submodule loads that
    writer (the package ``__init__`` imports it), so no submodule avoids it. The finder sees
    the importing thread's frames: an import of torch from any other code, in this thread or
    another, goes on as usual, and ``sys.modules`` is never touched.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] != "torch":
            return None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__", "").partition(".")[0] == "tensorboardX":
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            frame = frame.f_back
        return None  # not tensorboardX's: the next finder imports it


def _import_summary_writer():
    """tensorboardX's SummaryWriter, imported without dragging in PyTorch.

    Where torch is already loaded, ``import torch`` finds it in ``sys.modules`` and no
    finder is asked, so tensorboardX then uses it as it would anyway.
    """
    finder = _NoTorchForTensorboardX()
    sys.meta_path.insert(0, finder)
    try:
        from tensorboardX import SummaryWriter
    finally:
        sys.meta_path.remove(finder)
    return SummaryWriter


class MetricsLogger:
    """Writes metrics rows, TensorBoard scalars and progress lines for one run.

    Args:
      workdir: run directory; ``metrics.jsonl`` and ``tensorboard/`` go there.
      enabled: False on non-zero processes: every method is then a no-op and nothing
        is created or printed.
      total_steps: planned number of training steps (for ``step N/total`` and the ETA).
      stream: where progress and info lines go (default stdout), one plain line each.
      tensorboard: also write TensorBoard event files.
      eta_window: number of recent ``log_train`` intervals averaged for the ETA.
      clock: monotonic clock for the ETA (tests inject a fake one).
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        enabled: bool = True,
        total_steps: int | None,
        stream: TextIO | None = None,
        tensorboard: bool = True,
        eta_window: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.workdir = Path(workdir)
        self.enabled = enabled
        self.total_steps = total_steps
        self.path = self.workdir / METRICS_FILE
        self.tensorboard_dir = self.workdir / TENSORBOARD_DIR
        self._stream = stream
        self._use_tensorboard = tensorboard
        self._clock = clock
        self._intervals: collections.deque[tuple[float, int]] = collections.deque(
            maxlen=max(1, eta_window)
        )
        self._last_train: tuple[float, int] | None = None
        self._file = None
        self._writer = None
        self._purge_step: int | None = None
        self._closed = False
        if enabled:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._drop_partial_last_line()

    # ---- files -------------------------------------------------------------------------

    def _drop_partial_last_line(self) -> None:
        """Cuts a line left unfinished by a killed process so appends start on a new line."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        with open(self.path, "rb+") as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            cut = data.rfind(b"\n") + 1
            if parse_row(data[cut:]) is not None:  # cut right before its newline: keep it
                f.seek(size)
                f.write(b"\n")
            else:
                f.truncate(cut)

    def _open_file(self):
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        return self._file

    def _tb(self):
        if not self._use_tensorboard:
            return None
        if self._writer is None:
            summary_writer = _import_summary_writer()
            self._writer = summary_writer(
                logdir=str(self.tensorboard_dir), purge_step=self._purge_step, flush_secs=30
            )
            self._purge_step = None
        return self._writer

    def _write_row(self, row: dict) -> None:
        f = self._open_file()
        f.write(row_line(row))
        f.flush()

    def _print(self, line: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        print(line, file=stream, flush=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MetricsLogger is closed")

    # ---- public API ----------------------------------------------------------------------

    def log_train(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One training row (at least ``loss``, ``learning_rate``, ``tokens_per_s``)."""
        if not self.enabled:
            return
        self._check_open()
        step = int(step)
        values = float_metrics(metrics)
        now = self._clock()
        if self._last_train is not None:
            t0, s0 = self._last_train
            if step > s0:
                self._intervals.append((now - t0, step - s0))
        self._last_train = (now, step)
        self._write_row(train_row(step, values))
        writer = self._tb()
        if writer is not None:
            for key, value in values.items():
                writer.add_scalar(f"train/{key}", value, step)
        self._print(format_progress(step, self.total_steps, values, self.eta_seconds(step)))

    def log_eval(self, step: int, metrics: Mapping[str, Any], split: str = "valid") -> None:
        """One evaluation row for ``split`` (``bleu`` when computed, ``loss``, ...)."""
        if not self.enabled:
            return
        self._check_open()
        step = int(step)
        values = float_metrics(metrics)
        self._write_row(eval_row(step, split, values))
        writer = self._tb()
        if writer is not None:
            for key, value in values.items():
                writer.add_scalar(f"{split}/{key}", value, step)
            writer.flush()
        shown = " | ".join(f"{k} {_fmt(v, '{:.4g}')}" for k, v in values.items())
        self._print(f"eval {split} step {step}" + (f" | {shown}" if shown else ""))

    def log_text(self, message: str, *, step: int | None = None, **data: Any) -> None:
        """A one-off message (parameter count, FLOPs/token, data counts): printed and
        stored as ``{"kind": "info", "message": ..., **data}``; ``data`` must be JSON-able."""
        if not self.enabled:
            return
        self._check_open()
        self._write_row(info_row(message, step, data))
        writer = self._tb()
        if writer is not None:
            writer.add_text("info", str(message), 0 if step is None else int(step))
        self._print(str(message))

    def eta_seconds(self, step: int) -> float | None:
        """Seconds left to ``total_steps`` from the recent average time per step."""
        if not self.total_steps or not self._intervals:
            return None
        dt = sum(t for t, _ in self._intervals)
        steps = sum(n for _, n in self._intervals)
        return max(0, self.total_steps - step) * dt / steps

    def truncate_after(self, step: int) -> int:
        """Drops rows with ``step > step`` (for resuming at ``step``); returns how many.

        The file is rewritten atomically (a partial last line is dropped too), and
        TensorBoard events after ``step`` are purged when the writer next opens.
        """
        if not self.enabled:
            return 0
        self._check_open()
        step = int(step)
        self._close_outputs()
        self._purge_step = step + 1
        self._last_train = None
        self._intervals.clear()
        if not self.path.exists():
            return 0
        rows = read_metrics(self.path)
        kept = [r for r in rows if not (isinstance(r.get("step"), int) and r["step"] > step)]
        text = "".join(row_line(r) for r in kept)
        atomic_write(self.path, text)
        return len(rows) - len(kept)

    def _close_outputs(self) -> None:
        """Closes metrics.jsonl and the TensorBoard writer where they are open."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_outputs()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
