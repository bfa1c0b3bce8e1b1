"""Each test module's seconds (setup, call and teardown of its tests), from the report of
`python -m pytest -n auto --durations=0`, as tests/module_seconds.json: conftest.py hands the
costliest modules to the xdist workers first, so neither waits alone on a long one at the end.

    python -m pytest -n auto --durations=0 > durations.log
    python tests/scripts/module_seconds.py durations.log > tests/module_seconds.json
"""

from __future__ import annotations

import collections
import json
import re
import sys

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown) +(tests/[^:]+\.py)::")


def module_seconds(lines) -> dict[str, float]:
    """Seconds by module path, costliest first, rounded to a tenth."""
    seconds = collections.Counter()
    for line in lines:
        match = LINE.match(line)
        if match:
            seconds[match[2]] += float(match[1])
    return {path: round(s, 1) for path, s in seconds.most_common()}


def main(argv) -> int:
    if len(argv) != 1:
        print(f"usage: python {__file__} DURATIONS_LOG", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        table = module_seconds(f)
    if not table:
        print(f"error: no --durations=0 lines in {argv[0]}", file=sys.stderr)
        return 2
    json.dump(table, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
