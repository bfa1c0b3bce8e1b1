"""transformer-verify: check every checkpoint of a run against the manifest saved with it.

    transformer-verify RUN

One line per checkpoint, oldest first: `step 20: OK`, `step 20: damaged (FILE does not match
its checksum)` or `step 20: no manifest (saved before checksums were recorded; not
verified)`. Exit status 1 when a checkpoint is damaged, 0 when none is, 2 when RUN is not a
run with checkpoints. Nothing is changed: train.py sets damaged checkpoints aside itself.
What a manifest holds: transformer/training/checkpoint_manifest.py.
"""

from __future__ import annotations

import argparse
import sys

from transformer.cli.app import demote_routine_notices
from transformer.common.errors import UserError, report_user_error

DAMAGE_STATUS = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-verify", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run", help="the run directory (the --workdir it was trained in)")
    return parser


def _verify(workdir: str) -> bool:
    """Prints one line per checkpoint of `workdir`; whether one of them is damaged."""
    from transformer.training.checkpoint import Checkpointer
    from transformer.training.checkpoint_manifest import DAMAGED

    checkpoints = Checkpointer(workdir, read_only=True)
    steps = checkpoints.all_steps()
    if not steps:
        raise UserError(f"no checkpoint in {checkpoints.directory}; train first (train.py)")
    damaged = False
    for step in steps:
        verdict = checkpoints.verify(step)
        damaged = damaged or verdict.status == DAMAGED
        print(f"step {step}: {verdict}", flush=True)
    checkpoints.close()
    return damaged


def main(argv: list[str] | None = None) -> int:
    """The `transformer-verify` console script."""
    args = _parser().parse_args(argv)
    demote_routine_notices()
    try:
        damaged = _verify(args.run)
    except UserError as e:
        return report_user_error(e)
    return DAMAGE_STATUS if damaged else 0


if __name__ == "__main__":
    sys.exit(main())
