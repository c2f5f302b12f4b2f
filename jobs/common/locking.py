"""Run locks: one run of a job at a time per log dir.

A run takes an exclusive ``flock`` on ``<lock dir>/<job>-<hash of the log dir>.lock`` for
each of its log dirs (in sorted order, so two runs never deadlock) before it plans, and
holds them until it has published its last event. A second run of the same job on the
same log dir waits up to ``--lock-wait-s`` and then reports ``status=skipped`` and does
nothing. The lock dir is not the log dir (Spark workers may mount that read-only); runs on
different hosts share a lock dir on a shared file system (``--lock-dir``).

The lock is the first guard. The second is the metadata itself: every executor re-reads
the partition and the RLMM just before it copies and skips a segment that is already
remote, so even two runs without a common lock dir do not copy a segment a finished run
already copied.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

LOCK_DIR_ENV = "STORAGE_CORE_JOBS_LOCK_DIR"
LOCK_POLL_S = 0.2


def default_lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "storage-core-jobs"


def cluster_lock_key(bootstrap_server: str) -> Path:
    """The run lock's key for jobs that work on the whole cluster, not on a log dir."""
    return Path("/cluster") / bootstrap_server.replace("/", "_")


def lock_path(lock_dir: Path, job: str, log_dir: Path) -> Path:
    digest = hashlib.sha256(str(log_dir.resolve()).encode()).hexdigest()[:16]
    return lock_dir / f"{job}-{digest}.lock"


@contextmanager
def _flock(path: Path, wait_s: float) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(LOCK_POLL_S)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            return
    finally:
        os.close(fd)


@contextmanager
def log_dir_locks(
    lock_dir: Path | None, job: str, log_dirs: Sequence[Path], *, wait_s: float
) -> Iterator[Path | None]:
    """Hold every lock; yields ``None`` when held, else the lock file another run holds."""
    directory = default_lock_dir() if lock_dir is None else lock_dir
    paths = sorted({lock_path(directory, job, d) for d in log_dirs})
    with ExitStack() as stack:
        for path in paths:
            if not stack.enter_context(_flock(path, wait_s)):
                yield path
                return
        yield None
