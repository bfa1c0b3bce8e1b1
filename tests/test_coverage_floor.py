"""benchmarks/coverage_floor.py: a suite's coverage against the recorded floor, on reports
made here in coverage.py's JSON form, and the committed floor's own figures."""

from __future__ import annotations

import json

from benchmarks import coverage_floor
from tests.helpers import run


def report(files: dict[str, tuple[int, int, int, int]]) -> dict:
    """A coverage.py JSON report of files given as (covered lines, statements, covered
    branches, branches)."""
    summaries = {
        path: dict(zip(coverage_floor.COUNTS, counts, strict=True))
        for path, counts in files.items()
    }
    totals = {k: sum(s[k] for s in summaries.values()) for k in coverage_floor.COUNTS}
    return {"files": {p: {"summary": s} for p, s in summaries.items()}, "totals": totals}


BASE = {"transformer/a.py": (90, 100, 40, 50), "transformer/b.py": (10, 10, 0, 0)}


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_percentages_are_the_covered_shares_of_lines_and_branches():
    assert coverage_floor.percentages(report(BASE)["totals"]) == (100 * 100 / 110, 80.0)
    assert coverage_floor.percentages(report({"x": (0, 0, 0, 0)})["totals"]) == (100.0, 100.0)


def test_the_same_report_meets_its_floor_and_a_lost_line_or_branch_does_not(tmp_path):
    floor = write(tmp_path, "floor.json", coverage_floor.record(report(BASE), "abc1234"))
    same = write(tmp_path, "same.json", report(BASE))
    assert coverage_floor.main([same, "--floor", floor]) == 0  # A/A
    for lost in ((89, 100, 40, 50), (90, 100, 39, 50)):  # one line, then one branch
        worse = write(tmp_path, "worse.json", report({**BASE, "transformer/a.py": lost}))
        assert coverage_floor.main([worse, "--floor", floor]) == 1
    # A file that moved its lines elsewhere is named, but the totals decide.
    moved = report({"transformer/a.py": (80, 90, 40, 50), "transformer/b.py": (20, 20, 0, 0)})
    failures, notes = coverage_floor.compare(json.load(open(floor)), moved)
    assert failures == [] and "transformer/a.py: lines 88.9% (was 90.0%)" in notes


def test_a_missing_report_is_one_line(tmp_path):
    proc = run(["-m", "benchmarks.coverage_floor", str(tmp_path / "none.json")])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"error: {tmp_path / 'none.json'} does not exist")


def test_the_committed_floor_is_a_whole_suite_run():
    with open(coverage_floor.FLOOR) as f:
        floor = json.load(f)
    assert floor["command"] == coverage_floor.COMMAND and floor["commit"]
    lines, branches = coverage_floor.percentages(floor["totals"])
    assert 50 < lines < 100 and 50 < branches < 100  # the whole package, not a file or two
    assert len(floor["files"]) > 50 and all(p.startswith("transformer/") for p in floor["files"])
