"""Collects eval results of runs into a Markdown table, optionally into a README section.

Usage::

    transformer-report [--runs DIR ...] [--readme README.md --section Results] [--out FILE]

Each ``DIR`` is a run directory (with ``eval/*.json`` written by eval.py, that is
``transformer.evaluation``) or a directory of such runs (default: ``runs``). The report is a
table (run, direction, split, BLEU, chrF, step, decoding, speed, train time, machine), the
sacreBLEU signature(s) and the commands that produced the numbers. It goes to ``--out``,
into the README between ``<!-- report:<section>:start -->`` and
``<!-- report:<section>:end -->`` with ``--readme``, or to stdout when neither is given.
The output is deterministic, so rerunning on unchanged results leaves the README
byte-identical.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer.common.errors import UserError
from transformer.common.fileio import atomic_write

EVAL_DIR = "eval"
REQUIRED_KEYS = ("bleu", "chrf", "signature", "step", "split", "name", "decode", "sentences_per_s")
COLUMNS = (
    "Run",
    "Direction",
    "Split",
    "BLEU",
    "chrF",
    "Step",
    "Decoding",
    "Sent/s",
    "Train time",
    "Machine",
)


def start_marker(section: str) -> str:
    return f"<!-- report:{section}:start -->"


def end_marker(section: str) -> str:
    return f"<!-- report:{section}:end -->"


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def load_result(path: str | os.PathLike, run: str | None = None) -> dict:
    """One eval JSON, validated; ``_run`` and ``_path`` are added for the report."""
    path = Path(path)
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot read eval result {path}: {msg}") from None
    if not isinstance(result, dict):
        raise UserError(f"eval result {path} is not a JSON object; rerun eval for that run")
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise UserError(
            f"eval result {path} lacks key(s) {', '.join(missing)}; rerun eval for that run"
        )
    for key in ("bleu", "chrf", "step"):
        if not _is_number(result[key]):
            raise UserError(f"eval result {path}: {key!r} must be a number, got {result[key]!r}")
    if not isinstance(result["decode"], dict):
        raise UserError(f"eval result {path}: 'decode' must be an object of decode settings")
    result = dict(result)
    result["_run"] = run if run is not None else path.parent.parent.name
    result["_path"] = str(path)
    return result


def find_results(dirs: Sequence[str | os.PathLike]) -> list[dict]:
    """Eval results of every run in ``dirs`` (each a run directory or a parent of runs)."""
    results = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise UserError(f"runs directory not found: {d}")
        if (d / EVAL_DIR).is_dir():
            run_dirs = [d]
        else:
            run_dirs = sorted(p for p in d.iterdir() if (p / EVAL_DIR).is_dir())
        for run_dir in run_dirs:
            for path in sorted((run_dir / EVAL_DIR).glob("*.json")):
                results.append(load_result(path, run=run_dir.name))
    if not results:
        where = ", ".join(str(d) for d in dirs)
        raise UserError(f"no eval results (<run>/eval/*.json) found under {where}; run eval first")
    results.sort(key=lambda r: (r["_run"], str(r.get("direction", "")), r["split"], r["step"]))
    return results


def _cell(x: Any) -> str:
    s = "" if x is None else str(x)
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or "–"


def format_score(x: float) -> str:
    return f"{x:.1f}"


def format_duration(seconds: Any) -> str:
    """``3h 12m``, ``12m 5s``, ``42s``; ``–`` when unknown."""
    if not _is_number(seconds) or not math.isfinite(seconds) or seconds < 0:
        return "–"
    total = int(round(seconds))
    hours, rem = divmod(total, 3600)
    minutes, secs = divmod(rem, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_decode(decode: dict) -> str:
    """``beam 4, α=0.6`` / ``greedy`` / ``key=value, ...`` for unknown settings."""
    strategy = decode.get("strategy", decode.get("method", decode.get("mode")))
    beam = decode.get("beam_size", decode.get("beam"))
    alpha = decode.get("alpha", decode.get("length_penalty"))
    if strategy is None and beam is None:
        return ", ".join(f"{k}={v}" for k, v in sorted(decode.items()))
    parts = [str(strategy if strategy is not None else "beam")]
    if beam is not None and strategy != "greedy":
        parts[0] += f" {beam}"
    if alpha is not None and strategy != "greedy":
        parts.append(f"α={alpha}")
    return ", ".join(parts)


def format_step(r: dict) -> str:
    """``2000``, or ``avg 1600-2000 (5)`` for parameters averaged over checkpoints."""
    averaged = r.get("averaged_steps") or []
    if len(averaged) > 1:
        return f"avg {averaged[0]}-{averaged[-1]} ({len(averaged)})"
    return str(r["step"])


def _run_name(r: dict) -> str:
    name = str(r.get("name") or r["_run"])
    config = r.get("config_name")
    if config and config != name:
        name += f" ({config})"
    return name


def _signatures(r: dict) -> list[str]:
    sig = r["signature"]
    if isinstance(sig, dict):
        labels = {"bleu": "BLEU", "chrf": "chrF2"}
        return [f"{labels.get(k.lower(), k)}|{v}" for k, v in sig.items()]
    if isinstance(sig, list | tuple):
        return [str(s) for s in sig]
    return [str(sig)]


def render(results: Sequence[dict]) -> str:
    """The Markdown report (table, signatures, commands) of loaded results."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in results:
        speed = r["sentences_per_s"]
        row = [
            _run_name(r),
            r.get("direction"),
            r["split"],
            format_score(r["bleu"]),
            format_score(r["chrf"]),
            format_step(r),
            format_decode(r["decode"]),
            f"{speed:,.1f}" if _is_number(speed) else speed,
            format_duration(r.get("train_time_s")),
            r.get("machine"),
        ]
        lines.append("| " + " | ".join(_cell(x) for x in row) + " |")
        longer = r.get("longer")
        if isinstance(longer, dict) and _is_number(longer.get("bleu")):
            # eval.py --longer_than: the same translations scored on the long sources only.
            subset = f"{r['split']}, source > {longer.get('source_tokens_over')} tokens"
            row[2:5] = [
                f"{subset} ({longer.get('sentences')} sent.)",
                format_score(longer["bleu"]),
                format_score(longer.get("chrf")),
            ]
            lines.append("| " + " | ".join(_cell(x) for x in row) + " |")

    signatures: list[str] = []
    for r in results:
        for s in _signatures(r):
            if s not in signatures:
                signatures.append(s)
    lines += ["", "sacreBLEU signature" + ("s:" if len(signatures) > 1 else ":"), ""]
    lines += [f"- `{s}`" for s in signatures]

    commands = [(r, r["command"]) for r in results if r.get("command")]
    if commands:
        lines += ["", "Commands:", "", "```sh"]
        seen = set()
        for r, command in commands:
            if isinstance(command, list | tuple):
                command = " ".join(str(c) for c in command)
            key = (_run_name(r), r["split"], command)
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"# {_run_name(r)} / {r['split']}")
            lines.append(str(command))
        lines.append("```")
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str, content: str, *, source: str = "README") -> str:
    """``text`` with everything between the section's start/end markers set to ``content``."""
    start, end = start_marker(section), end_marker(section)
    n_start, n_end = text.count(start), text.count(end)
    if n_start == 0 or n_end == 0:
        raise UserError(
            f"{source} has no {start} ... {end} markers; add both lines where the "
            f"{section!r} report should go"
        )
    if n_start > 1 or n_end > 1:
        raise UserError(
            f"{source} has the {section!r} report markers more than once; keep one pair"
        )
    i, j = text.index(start), text.index(end)
    if j < i:
        raise UserError(f"{source}: {end} comes before {start}; swap them")
    body = "\n" + content.strip("\n") + "\n"
    return text[: i + len(start)] + body + text[j:]


def update_readme(readme: str | os.PathLike, section: str, content: str) -> bool:
    """Replaces the README section in place; returns whether the file changed."""
    readme = Path(readme)
    try:
        text = readme.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"README not found: {readme}") from None
    except UnicodeDecodeError:
        raise UserError(f"README {readme} is not valid UTF-8") from None
    new = replace_section(text, section, content, source=str(readme))
    if new == text:
        return False
    atomic_write(readme, new)
    return True
