"""The test suite's coverage of `transformer/` against a recorded floor.

Record a floor from coverage.py's JSON report of a suite run:

    python -m pytest -n auto --cov=transformer --cov-branch --cov-report=json:cov.json
    python -m benchmarks.coverage_floor --record cov.json --commit "$(git rev-parse --short HEAD)"

Check a later run against it (exit status 1 when line or branch coverage fell below):

    python -m benchmarks.coverage_floor cov.json

The floor lives in benchmarks/results/coverage_floor.json: the totals, each file's, and the
command and commit that produced them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

FLOOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "coverage_floor.json")
COMMAND = "python -m pytest -n auto --cov=transformer --cov-branch --cov-report=json:cov.json"
COUNTS = ("covered_lines", "num_statements", "covered_branches", "num_branches")


def percentages(summary: dict) -> tuple[float, float]:
    """(line %, branch %) of a coverage.py summary."""
    lines = _percent(summary["covered_lines"], summary["num_statements"])
    return lines, _percent(summary["covered_branches"], summary["num_branches"])


def _percent(covered: int, total: int) -> float:
    return 100 * covered / total if total else 100.0  # nothing to cover: all of it covered


def summaries(report: dict) -> tuple[dict, dict[str, dict]]:
    """(totals, each file's counts) of a coverage.py JSON report, counts only."""
    files = {
        path: {k: f["summary"][k] for k in COUNTS} for path, f in sorted(report["files"].items())
    }
    return {k: report["totals"][k] for k in COUNTS}, files


def record(report: dict, commit: str) -> dict:
    totals, files = summaries(report)
    return {"commit": commit, "command": COMMAND, "totals": totals, "files": files}


def compare(floor: dict, report: dict) -> tuple[list[str], list[str]]:
    """(failures, notes): a failure where total line or branch coverage fell below the floor;
    a note for each file whose line coverage fell (a hint where the loss is, not a failure:
    code moves between files)."""
    totals, files = summaries(report)
    failures, notes = [], []
    for kind, was, now in zip(
        ("line", "branch"), percentages(floor["totals"]), percentages(totals), strict=True
    ):
        line = f"{kind} coverage {now:.2f}% (floor {was:.2f}% at {floor['commit']})"
        (failures if now < was - 1e-9 else notes).append(line)
    for path, counts in files.items():
        if path in floor["files"]:
            was, now = percentages(floor["files"][path])[0], percentages(counts)[0]
            if now < was - 1e-9:
                notes.append(f"{path}: lines {now:.1f}% (was {was:.1f}%)")
    return failures, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="coverage.py's JSON report (--cov-report=json:PATH)")
    parser.add_argument("--record", action="store_true", help="write the report as the floor")
    parser.add_argument("--commit", default="", help="the commit the report ran on (--record)")
    parser.add_argument("--floor", default=FLOOR, help=f"the floor file (default {FLOOR})")
    args = parser.parse_args(argv)
    for path in (args.report,) if args.record else (args.report, args.floor):
        if not os.path.isfile(path):
            print(f"error: {path} does not exist; see --help for the commands", file=sys.stderr)
            return 2
    with open(args.report) as f:
        report = json.load(f)
    if args.record:
        with open(args.floor, "w") as f:
            json.dump(record(report, args.commit), f, indent=1)
            f.write("\n")
        lines, branches = percentages(report["totals"])
        print(f"wrote {args.floor}: lines {lines:.2f}%, branches {branches:.2f}%")
        return 0
    with open(args.floor) as f:
        failures, notes = compare(json.load(f), report)
    for line in notes:
        print(line)
    for line in failures:
        print(f"BELOW THE FLOOR: {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
