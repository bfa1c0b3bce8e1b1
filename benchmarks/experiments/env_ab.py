"""A benchmark command run under several environments side by side: each arm's run a fresh
process (environment variables such as XLA_FLAGS are read once, when JAX starts), the arms
alternating round after round in a rotated order, so drift in the machine's speed falls on
every arm alike.

    python -m benchmarks.experiments.env_ab \
        --arms "XLA_FLAGS=;XLA_FLAGS=--xla_cpu_experimental_onednn_custom_call=true" \
        [--rounds 3] [--json] -- python -m benchmarks.throughput \
        --config configs/bench_base.py --what train,decode --nocache_lengths= --json

--arms lists environment assignments, arms separated by ';' and variables within an arm by
whitespace (`NAME=` sets NAME empty); an item starting with '--' is an argument appended to
the command for that arm instead (`--config.train.fused_qkv=True`: a config setting A/B'd
the same way); an empty arm runs the command as it is. The
command must print this package's JSON lines (benchmarks/common.py's `emit`). Figures per
(figure, impl) and arm: `env_ab_value`, the median over the rounds with its min/max, and for
every arm after the first `env_ab_speedup`, this arm over the first round by round (median,
min, max; above 1: faster, whatever the unit: seconds are inverted), where the figure is a
rate, a time or a fraction.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import numpy as np

from benchmarks import common

TIMES = ("s",)  # units where less is faster
SKIPPED = ("setup", "loadavg_end")


def parse_arms(text: str) -> list[dict[str, str]]:
    """'A=1 B=2;;C= --x=1' -> [{'A': '1', 'B': '2'}, {}, {'C': '', '--x': '1'}]: environment
    variables, and arguments (keys starting with '--') appended to the command."""
    arms = []
    for arm in text.split(";"):
        env = {}
        for item in shlex.split(arm):
            name, sep, value = item.partition("=")
            if name.startswith("--"):
                env[name] = value if sep else None
                continue
            if not sep or not name:
                raise SystemExit(f"error: --arms: {item!r} is not NAME=VALUE")
            env[name] = value
        arms.append(env)
    if len(arms) < 2:
        raise SystemExit("error: --arms needs at least two arms separated by ';'")
    return arms


def label(env: dict[str, str]) -> str:
    items = (k if v is None else f"{k}={v}" for k, v in env.items())
    return " ".join(items) or "(as is)"


def run_once(command: list[str], arm: dict[str, str]) -> dict[tuple[str, str], tuple]:
    """{(figure, impl): (value, unit)} of one fresh run of `command` under `arm`'s
    environment, with its arguments appended."""
    env = {k: v for k, v in arm.items() if not k.startswith("--")}
    extra = [k if v is None else f"{k}={v}" for k, v in arm.items() if k.startswith("--")]
    command = [*command, *extra]
    proc = subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"error: {label(arm)}: {shlex.join(command)} failed:\n{proc.stderr[-2000:]}"
        )
    figures = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record["figure"] not in SKIPPED and isinstance(record["value"], int | float):
                figures[(record["figure"], record["impl"])] = (record["value"], record["unit"])
    return figures


def interleaved_runs(command, arms, rounds: int) -> list[list[dict]]:
    """runs[arm][round]: every arm run once per round, the order rotated each round."""
    runs = [[] for _ in arms]
    for r in range(rounds):
        for i in [(r + j) % len(arms) for j in range(len(arms))]:
            print(f"round {r + 1}: {label(arms[i])}", file=sys.stderr)
            runs[i].append(run_once(command, arms[i]))
    return runs


def speedups(first: list[dict], other: list[dict], key) -> list[float]:
    """Round-by-round speed of `other` over `first` for one figure (times inverted)."""
    out = []
    for a, b in zip(first, other, strict=True):
        if key in a and key in b and a[key][0] and b[key][0]:
            ratio = b[key][0] / a[key][0]
            out.append(1 / ratio if a[key][1] in TIMES else ratio)
    return out


def _range(values: list[float]) -> dict[str, float]:
    return {"min": float(min(values)), "max": float(max(values))}


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.rounds < 1:
        raise SystemExit("error: give --rounds >= 1 and the command after --")
    arms = parse_arms(args.arms)
    common.emit(
        "setup",
        0,
        "-",
        "env_ab",
        args.json,
        cpus=os.cpu_count(),
        loadavg_1m=round(os.getloadavg()[0], 2),
        rounds=args.rounds,
        arms=[label(a) for a in arms],
        command=shlex.join(command),
    )
    runs = interleaved_runs(command, arms, args.rounds)
    for key in sorted(set().union(*runs[0])):
        for i, arm in enumerate(arms):
            values = [run[key][0] for run in runs[i] if key in run]
            if not values:
                continue
            unit = runs[0][0].get(key, (0, "-"))[1]
            common.emit(
                "env_ab_value",
                float(np.median(values)),
                unit,
                key[1],
                args.json,
                figure_of=key[0],
                arm=label(arm),
                **_range(values),
            )
            ratios = speedups(runs[0], runs[i], key) if i else []
            if ratios:
                common.emit(
                    "env_ab_speedup",
                    float(np.median(ratios)),
                    "x",
                    key[1],
                    args.json,
                    figure_of=key[0],
                    arm=label(arm),
                    **_range(ratios),
                )
    common.emit("loadavg_end", round(os.getloadavg()[0], 2), "-", "env_ab", args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
