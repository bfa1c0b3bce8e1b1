"""transformer-sweep: train and evaluate a sweep config's variants x seeds, then tabulate.

    transformer-sweep --config configs/sweeps/architecture.py --workdir runs/sweep \
        [--only VARIANT ...] [--dry_run] [--report_only] [--parallel N] [--retry_failed]
        [--references FILE] [--readme README.md [--section NAME]]
        [--reproduce N [--reproduce_seed S] [--scratch DIR]] [--plan GAP]

The sweep config's fields and the files it writes: transformer/research/sweep/__init__.py.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from transformer.common.errors import UserError, report_user_error
from transformer.research.html import study_page
from transformer.research.report import update_readme
from transformer.research.sweep import (
    DEFAULT_POLL_S,
    Run,
    Sweep,
    execute,
    is_finished,
    load_sweep,
    plan_runs,
    read_status,
    readme_block,
    write_report,
)
from transformer.research.sweep.lifecycle import INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer-sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="sweep config file (configs/sweeps/*.py)")
    parser.add_argument("--workdir", required=True, help="sweep directory")
    parser.add_argument(
        "--only", action="append", default=None, help="run only this variant (repeatable)"
    )
    parser.add_argument("--dry_run", action="store_true", help="print the plan and exit")
    parser.add_argument("--report_only", action="store_true", help="only rebuild the results")
    parser.add_argument("--parallel", type=int, default=None, help="override the config's")
    parser.add_argument("--retry_failed", action="store_true", help="rerun failed/diverged runs")
    parser.add_argument(
        "--poll_s", type=float, default=DEFAULT_POLL_S, help="seconds between progress checks"
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where the runs go: subprocesses here (local) or one Ray task each (ray)",
    )
    parser.add_argument(
        "--ray_address",
        help="the Ray cluster's HOST:PORT, 'auto' or 'local' (default: RAY_ADDRESS, else the "
        "cluster started on this machine)",
    )
    parser.add_argument("--cpus_per_run", type=float, default=1, help="Ray: CPUs each run asks")
    parser.add_argument("--gpus_per_run", type=float, default=0, help="Ray: GPUs each run asks")
    parser.add_argument(
        "--readme",
        help="also put results.md into this README, between the "
        "section's markers <!-- report:SECTION:start/end -->",
    )
    parser.add_argument("--section", default="Sweep", help="README marker section name")
    parser.add_argument(
        "--references",
        help="the eval split's reference file, for run "
        "directories kept without eval/<split>.ref.txt",
    )
    parser.add_argument(
        "--allow_mixed_provenance",
        action="store_true",
        help="pool an arm's runs even when they ran different code or data (their "
        "provenance.json differ); the report lists every such arm",
    )
    parser.add_argument(
        "--plan",
        type=float,
        metavar="GAP",
        help="read the finished runs in --workdir as a pilot and print the seeds per arm that "
        "detect a true gap of GAP BLEU with 80%% power, and the study's cost; runs nothing",
    )
    parser.add_argument(
        "--reproduce",
        type=int,
        metavar="N",
        help="retrain N finished reported runs, drawn at random (--reproduce_seed) over the "
        "arms, from their recorded configs into --scratch and report whether each matches "
        "its recorded figures; exit 1 where one differs on the same code and machine",
    )
    parser.add_argument("--reproduce_seed", type=int, default=0, help="draws --reproduce's runs")
    parser.add_argument("--scratch", help="where --reproduce retrains (default: WORKDIR/reproduce)")
    return parser


def _print_plan(sweep: Sweep, runs: list[Run]) -> None:
    """--dry_run: each run's state and the commands that would train and evaluate it."""
    for i, run in enumerate(runs, 1):
        state = (
            f"invalid config: {run.config_error}"
            if run.config_error
            else "finished, skip"
            if is_finished(run)
            else read_status(run).get("status", "to run")
        )
        print(f"[{i}/{len(runs)}] {run.label} ({state})")
        if not run.config_error:
            print("    " + " ".join(run.train_command()[1:]))
            print("    " + " ".join(run.eval_command()[1:]))
    if sweep.lr_grid:
        print("(the learning-rate search plans further runs as these finish)")


# Exit status on Ctrl-C, as a shell reports a command that SIGINT ended (128 + 2).
INTERRUPTED_STATUS = 130
RAY_LOG = "ray.log"  # Ray's own log lines, in the sweep directory


def _executor(args: argparse.Namespace):
    """What runs a round of runs, with `execute`'s signature: `execute` itself (local), or
    `execute_on_ray` with the --ray_* flags, where the cluster sets how many run at once and
    Ray's own log lines go to WORKDIR/ray.log."""
    if args.executor == "local":
        return execute
    from transformer.research.sweep.ray_execution import execute_on_ray

    def on_ray(runs, *, parallel=None, retry_failed=False, poll_s=DEFAULT_POLL_S, out=None):
        del parallel  # the cluster's free CPUs/GPUs decide
        return execute_on_ray(
            runs,
            address=args.ray_address,
            cpus_per_run=args.cpus_per_run,
            gpus_per_run=args.gpus_per_run,
            retry_failed=retry_failed,
            poll_s=poll_s,
            log_path=os.path.join(args.workdir, RAY_LOG),
            out=out,
        )

    return on_ray


def _pace(args: argparse.Namespace, parallel: int) -> str:
    """How many runs go at once: the sweep's number locally, the cluster's resources on Ray."""
    if args.executor == "local":
        return f"{parallel} at a time"
    return "as many at once as the Ray cluster's free resources allow"


def _run_sweep(args: argparse.Namespace, sweep: Sweep, parallel: int) -> list[Run]:
    """Runs the sweep in rounds: the learning-rate search adds runs as runs finish, so the
    plan is made again after each round until it stops growing. Returns the final plan."""
    start = time.time()
    runs = plan_runs(sweep, args.workdir, args.only)
    totals: dict[str, int] = {}
    planned: set[str] = set()
    while {r.workdir for r in runs} != planned:
        planned = {r.workdir for r in runs}
        header = f"sweep {args.config}: {len(runs)} run(s), {_pace(args, parallel)}"
        print(f"{header} -> {args.workdir}", flush=True)
        counts = _executor(args)(
            runs, parallel=parallel, retry_failed=args.retry_failed, poll_s=args.poll_s
        )
        for outcome, n in counts.items():  # each round's endings; skips are counted below
            totals[outcome] = totals.get(outcome, 0) + (n if outcome != "skipped" else 0)
        runs = plan_runs(sweep, args.workdir, args.only)
    # Skipped: the runs no round of this invocation ended (a later round skips those an
    # earlier one ended, which are not skips of the sweep).
    totals["skipped"] = max(0, len(runs) - sum(totals.values()))
    summary = ", ".join(f"{v} {k}" for k, v in totals.items())
    print(f"sweep finished in {time.time() - start:.0f} s: {summary}", flush=True)
    return runs


def _print_study_plan(sweep: Sweep, runs: list[Run], gap: float) -> None:
    """--plan GAP: the seeds a study needs, from the finished runs of --workdir as a pilot."""
    from transformer.research.sweep import planning

    if gap <= 0:
        raise UserError(f"--plan takes a positive gap in BLEU points, got {gap:g}")
    print("\n".join(planning.plan_lines(planning.read_pilot(sweep, runs), gap)), flush=True)


def _reproduce(args: argparse.Namespace, sweep: Sweep, runs: list[Run]) -> int:
    """--reproduce N: reruns N reported runs from their recorded configs, compares them with
    the recorded figures (research/sweep/reproduce.py); 1 where one is not reproducible."""
    from transformer.research.sweep import reproduce

    chosen = reproduce.choose(
        reproduce.reported_runs(sweep, runs), args.reproduce, args.reproduce_seed
    )
    scratch = args.scratch or os.path.join(args.workdir, reproduce.SCRATCH)
    reruns = [reproduce.rerun_of(run, args.workdir, scratch) for run in chosen]
    print(f"reproduce: {len(reruns)} run(s) of {args.workdir} -> {scratch}", flush=True)
    _executor(args)(reruns, parallel=args.parallel or sweep.parallel, poll_s=args.poll_s)
    comparisons = [reproduce.compare(run, rerun) for run, rerun in zip(chosen, reruns, strict=True)]
    print(reproduce.write(comparisons, sweep, scratch, _reproduce_command(args)), flush=True)
    return 1 if any(c.failed for c in comparisons) else 0


def _reproduce_command(args: argparse.Namespace) -> str:
    """The command that redraws and reruns the same runs into the same scratch directory."""
    command = (
        f"transformer-sweep --config {args.config} --workdir {args.workdir} "
        f"--reproduce {args.reproduce} --reproduce_seed {args.reproduce_seed}"
    )
    return command + (f" --scratch {args.scratch}" if args.scratch else "")


def _update_readme(args: argparse.Namespace) -> None:
    """Puts results.md into --readme, headed by the command that rebuilds it."""
    command = (
        f"transformer-sweep --config {args.config} --workdir "
        f"{args.workdir} --report_only --readme {args.readme}"
    )
    if args.section != "Sweep":
        command += f" --section {args.section}"
    changed = update_readme(args.readme, args.section, readme_block(args.workdir, command))
    print(
        f"{'updated' if changed else 'unchanged'}: {args.readme} section {args.section!r}",
        flush=True,
    )


def _run_and_report(args: argparse.Namespace, sweep: Sweep, runs: list[Run], command: str) -> None:
    if not args.report_only:
        runs = _run_sweep(args, sweep, args.parallel or sweep.parallel)
    write_report(sweep, runs, args.workdir, allow_mixed=args.allow_mixed_provenance)
    page = study_page.write(args.workdir, None, command, references=args.references)
    grid = ", lr_grid.csv, lr_valid_loss.png" if sweep.lr_grid else ""
    print(
        f"wrote {os.path.join(args.workdir, 'results.md')} (+ results.csv, runs.csv, "
        f"sweep.json, valid_loss.png, bleu.png, length_bleu.png{grid}) and {page}",
        flush=True,
    )
    if args.readme:
        _update_readme(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.readme and any(c in args.section for c in "\n:"):
            raise UserError(f"--section must not contain ':' or newlines, got {args.section!r}")
        sweep = load_sweep(args.config)
        if args.references and not os.path.isfile(args.references):
            raise UserError(f"--references {args.references}: no such file")
        sweep.references = args.references
        runs = plan_runs(sweep, args.workdir, args.only)
        if args.plan is not None:
            _print_study_plan(sweep, runs, args.plan)
        elif args.reproduce is not None:
            return _reproduce(args, sweep, runs)
        elif args.dry_run:
            _print_plan(sweep, runs)
        else:
            _run_and_report(args, sweep, runs, shlex.join(["transformer-sweep", *argv]))
    except UserError as e:
        return report_user_error(e)
    except KeyboardInterrupt:
        # The executors have stopped the runs in flight (each train.py checkpoints on
        # SIGTERM), so the one thing left to say is how to go on.
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return INTERRUPTED_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
