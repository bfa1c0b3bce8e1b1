"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: bytes | str, *, keep_mode: bool = True) -> None:
    """Writes data to a temporary file beside `path`, fsyncs it and renames it into place.

    Text is written as UTF-8 with newlines unchanged. With keep_mode, an existing file's
    permission bits are kept (else 0o644).
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mode = path.stat().st_mode & 0o7777 if keep_mode and path.exists() else 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def make_workdir(workdir: str) -> None:
    """`workdir` exists and is writable, or a one-line UserError naming it."""
    from transformer.common.errors import UserError

    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create workdir {workdir} ({e.strerror}); choose another") from None
    if not os.access(workdir, os.W_OK):
        raise UserError(f"workdir {workdir} is not writable; choose a writable --workdir")
