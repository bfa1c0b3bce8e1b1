"""Shared plumbing of the command-line front ends: one-line errors and multi-host flags."""

from __future__ import annotations

import logging as py_logging
import os
import sys

from absl import app, flags, logging

from transformer.common.errors import UserError, exit_on_user_error, report_user_error


def distributed_flags():
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process).")
    flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process).")
    flags.DEFINE_integer("process_id", None, "This process's index (multi-process).")
    flags.DEFINE_bool(
        "distributed", False, "Call jax.distributed.initialize() with the cluster's settings."
    )


def restore_flags():
    """The flags of the commands that restore a run's parameters (eval.py, decode.py): the
    run, its checkpoint, averaging and ensemble members."""
    flags.DEFINE_string("workdir", None, "Training run directory.", required=True)
    flags.DEFINE_string(
        "checkpoint",
        "auto",
        "latest, best (by validation score), a step, or auto: best for a run trained with "
        "early stopping, else latest.",
    )
    flags.DEFINE_integer("average_last", 1, "Average the parameters of the last N checkpoints.")
    flags.DEFINE_list(
        "ensemble",
        [],
        "Other runs (DIR or DIR:latest|best|STEP, comma-separated) decoding with --workdir's "
        "as an ensemble: the mean of the members' log-probabilities at every step.",
    )


def strict_vocab_flag():
    """--strict_vocab of the commands that take target prefixes or constraint phrases."""
    flags.DEFINE_bool(
        "strict_vocab",
        False,
        "A prefix or constraint phrase with characters outside the target vocabulary is an "
        "error naming the line, not a warning (they would become <unk>).",
    )


def initialize_distributed(FLAGS) -> None:  # noqa: N803 - absl's FLAGS object
    import jax

    given = [FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id]
    if any(v is not None for v in given):
        if any(v is None for v in given):
            raise UserError(
                "multi-process runs need all of --coordinator_address, --num_processes and "
                "--process_id (or --distributed to read them from the cluster)"
            )
        if os.environ.get("JAX_PLATFORMS", "") in ("", "cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=FLAGS.coordinator_address,
            num_processes=FLAGS.num_processes,
            process_id=FLAGS.process_id,
        )
    elif FLAGS.distributed:
        jax.distributed.initialize()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# absl's help flags, given as -NAME or --NAME.
HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "h", "?")


def _parse_flags(argv, keep_config_overrides=False):
    """absl flag parsing with one-line errors (exit 2) instead of usage dumps or tracebacks."""
    try:
        if keep_config_overrides:
            overrides = [a for a in argv[1:] if a.startswith("--config.")]
            rest = [a for a in argv if not a.startswith("--config.")]
            return flags.FLAGS(rest) + overrides
        return flags.FLAGS(argv)
    except SystemExit:  # absl printed the asked-for help, then exits 1: a success here
        if any(a.lstrip("-") in HELP_FLAGS for a in argv[1:] if a.startswith("-")):
            sys.exit(0)
        raise
    except (AttributeError, KeyError) as e:  # ml_collections: an unknown --config.* key
        message = (
            f"unknown config key {_one_line(e)} in a --config.* override; "
            "see transformer/training/base_config.py"
        )
    except Exception as e:  # noqa: BLE001 - flags.Error, bad values, unloadable config file
        message = _one_line(e)
    sys.exit(report_user_error(message))


def load_config_flag(name: str = "config"):
    """The config of a DEFINE_config_file flag; an unloadable file is a UserError."""
    try:
        config = getattr(flags.FLAGS, name)
        list(config)  # ml_collections defers load errors to first use
    except OSError as e:
        raise UserError(f"cannot load --{name}: {_one_line(e)}") from None
    return config


def config_override_args(argv) -> list[str]:
    """`--config.section.key=value` arguments left over by absl (eval.py, decode.py)."""
    return [a[len("--config.") :] for a in argv[1:] if a.startswith("--config.")]


# Warnings that libraries log on every normal run, about choices this project makes on
# purpose: TFDS on each local-text dataset config, Orbax on each read-only checkpoint open
# (eval.py, decode.py). They are shown at INFO verbosity (-v 0) only; every other warning is.
ROUTINE_NOTICES = (
    "Using custom data configuration",  # tensorflow_datasets, our parallel_text builder
    "CheckpointManagerOptions.read_only=True",  # orbax, restoring for eval/decode
    "Given directory is read only",  # orbax, the same
    "Requested `tracked_metric`",  # orbax, on a checkpoint saved without a validation score
)


class _RoutineNoticeFilter(py_logging.Filter):
    def filter(self, record: py_logging.LogRecord) -> bool:
        if not str(record.msg).startswith(ROUTINE_NOTICES):
            return True
        return py_logging.getLogger("absl").isEnabledFor(py_logging.INFO)


def demote_routine_notices() -> None:
    """Shows ROUTINE_NOTICES only at INFO verbosity (idempotent)."""
    absl_logger = py_logging.getLogger("absl")
    if not any(isinstance(f, _RoutineNoticeFilter) for f in absl_logger.filters):
        absl_logger.addFilter(_RoutineNoticeFilter())


def run_cli(main, *, config_overrides: bool = False) -> None:
    """absl's app.run with user errors as one line `error: ...` and exit status 2.

    config_overrides: leave `--config.section.key=value` arguments in argv for main (the
    front ends that restore a run's saved config and apply overrides to it).
    """

    def wrapped(argv):
        if not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
            logging.set_verbosity(logging.WARNING)  # Orbax/TFDS info chatter off by default
        demote_routine_notices()
        with exit_on_user_error():
            main(argv)

    _list_flags_in_help(main.__module__)
    app.run(
        wrapped,
        flags_parser=lambda argv: _parse_flags(argv, keep_config_overrides=config_overrides),
    )


def _list_flags_in_help(command_module: str) -> None:
    """absl's --help shows the docstring and flags of the file run (a console script, or the
    checkout's `decode.py`), which has neither: show the command module's docstring, its
    flags and the shared ones defined here."""
    sys.modules["__main__"].__doc__ = sys.modules[command_module].__doc__
    for module in (command_module, __name__):
        for flag in flags.FLAGS.get_key_flags_for_module(module):
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
