"""User-facing errors: one line that names the culprit and the fix, no traceback."""

from __future__ import annotations

import contextlib
import sys


class UserError(Exception):
    """An error caused by the user's input (config, data, files, flags).

    The message must be one line naming what is wrong and how to fix it. Command-line
    front ends print it as ``error: <message>`` and exit with status 2.
    """


@contextlib.contextmanager
def exit_on_user_error():
    """Turns a UserError raised inside the block into ``error: ...`` on stderr and exit 2."""
    try:
        yield
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
