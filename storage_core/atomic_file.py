"""Replacing a whole file atomically: readers see the old content or the new, never a mix.

Steps: write the bytes to a temp file in the target's directory, fsync it, rename it over the
target, fsync the directory. The temp file is never the target itself, so a crash before the
rename leaves the old file intact (plus a ``*.tmp`` leftover, which log dirs delete when they
are loaded); after the directory fsync the new content is durable.

The temp file is ``<name>.tmp`` by default: writers of one path must then not run
concurrently. ``unique_temp=True`` gives each write its own ``.<name>.<random>.tmp``, for
files that several processes may write at once (run summaries, reports).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_FILE_SUFFIX = ".tmp"
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def write_file_atomically(path: Path, data: bytes, *, unique_temp: bool = False) -> None:
    """Replace ``path`` with ``data`` (temp file, fsync, rename, fsync dir).

    Raises ``OSError`` on any I/O failure, after removing the temp file; ``path`` then still
    holds its previous content (or is still absent). Callers wrap it in their named error.
    """
    path = Path(path)
    if unique_temp:
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=TEMP_FILE_SUFFIX, dir=path.parent
        )
        temp_path = Path(name)
        temp_file = os.fdopen(fd, "wb")
    else:
        temp_path = path.with_name(path.name + TEMP_FILE_SUFFIX)
        temp_file = open(temp_path, "wb")  # noqa: SIM115 (closed by the with below)
    try:
        with temp_file:
            temp_file.write(data)
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp_path.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | _O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
