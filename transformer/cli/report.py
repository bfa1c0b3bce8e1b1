"""transformer-report: render eval results (<run>/eval/*.json) as a Markdown table, or a
study's or a run's page as one self-contained HTML file.

transformer-report [--runs DIR ...] [--readme README.md --section Results] [--out FILE]
transformer-report --html DIR [--out FILE] [--config SWEEP] [--references FILE]
    [--sources FILE] [--analysis DIR]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from transformer.common.errors import UserError, exit_on_user_error
from transformer.common.fileio import atomic_write
from transformer.research.report import find_results, render, update_readme


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-report",
        description="Render eval results (<run>/eval/*.json) as a Markdown table, or (--html) "
        "a study's or a run's page as one self-contained HTML file.",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["runs"],
        metavar="DIR",
        help="run directories, or directories of runs (default: runs)",
    )
    parser.add_argument("--readme", help="README to update between the section's markers")
    parser.add_argument("--section", default="Results", help="marker section name")
    parser.add_argument(
        "--out", help="also write the report to this file (--html: the page's file)"
    )
    html = parser.add_argument_group("--html")
    html.add_argument(
        "--html",
        metavar="DIR",
        help="write the HTML page of a study (a sweep's --workdir; default file "
        "DIR/results.html) or of a run (default RUN/report.html)",
    )
    html.add_argument("--config", help="the study's sweep config, where DIR has no sweep.json")
    html.add_argument(
        "--references", help="the eval split's references, where the runs keep no copy"
    )
    html.add_argument("--sources", help="the eval split's sources, where the runs keep no copy")
    html.add_argument("--analysis", help="a run's transformer-analyze --out directory")
    return parser


def _html(args: argparse.Namespace, argv: Sequence[str]) -> None:
    from transformer.research.html import pages  # loads the sweep code (and JAX): --html only

    if args.readme:
        raise UserError("--html writes a page, not a README section; drop --readme")
    path = pages.write(
        args.html,
        args.out,
        shlex.join(["transformer-report", *argv]),
        config=args.config,
        references=args.references,
        sources=args.sources,
        analysis=args.analysis,
    )
    print(f"wrote {path}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    with exit_on_user_error():
        if args.html:
            _html(args, argv)
            return 0
        if args.section and any(c in args.section for c in "\n:"):
            raise UserError(f"--section must not contain ':' or newlines, got {args.section!r}")
        report = render(find_results(args.runs))
        if args.out:
            atomic_write(Path(args.out), report)
        if args.readme:
            changed = update_readme(args.readme, args.section, report)
            print(
                f"{'updated' if changed else 'unchanged'}: {args.readme} section {args.section!r}",
                file=sys.stderr,
            )
        if not args.out and not args.readme:
            sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
