"""User-facing errors: one line that names the culprit and the fix, no traceback."""

from __future__ import annotations

import contextlib
import sys

# Exit status of every command that stops on a UserError (a usage error, as argparse's).
USER_ERROR_STATUS = 2


class UserError(Exception):
    """An error caused by the user's input (config, data, files, flags).

    The message must be one line naming what is wrong and how to fix it. Command-line
    front ends print it as ``error: <message>`` and exit with status 2.
    """


def report_user_error(e: UserError | str) -> int:
    """The one rendering of a user error: ``error: <message>`` on one stderr line.

    Returns the exit status for it, so a ``main()`` can ``return report_user_error(e)``.
    """
    print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
    return USER_ERROR_STATUS


@contextlib.contextmanager
def exit_on_user_error():
    """Turns a UserError raised inside the block into `report_user_error` and that exit."""
    try:
        yield
    except UserError as e:
        sys.exit(report_user_error(e))
