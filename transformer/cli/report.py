"""transformer-report: render eval results (<run>/eval/*.json) as a Markdown table.

transformer-report [--runs DIR ...] [--readme README.md --section Results] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from transformer.common.errors import UserError, exit_on_user_error
from transformer.common.fileio import atomic_write
from transformer.research.report import find_results, render, update_readme


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="transformer-report",
        description="Render eval results (<run>/eval/*.json) as a Markdown table.",
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
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args(argv)
    with exit_on_user_error():
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
