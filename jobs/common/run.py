"""``run_job``: the failure contract shared by every job's ``main``; ``exclusive_run``: the
lock contract (one run at a time per lock key)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from jobs.common.args import JobArgs
from jobs.common.locking import log_dir_locks
from jobs.common.output import log_line
from jobs.common.summary import RunSummary
from storage_core.errors import InvalidConfigError


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (its type when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def run_job(args: JobArgs, body: Callable[[RunSummary], None]) -> int:
    """Run ``body`` with a fresh summary; write the summary whatever happens.

    Returns 0 when the run did its work (or was skipped on purpose), 1 when a partition
    failed (noted in the summary) or ``body`` raised, 2 when what it raised is a wrong
    configuration (``InvalidConfigError``: a wrong log dirs map, say); when it raised, one
    line ``<job>: error: <message>`` goes to stderr.
    """
    summary = RunSummary(job=args.job, dry_run=args.dry_run)
    failure: Exception | None = None
    try:
        body(summary)
    except Exception as exc:
        failure = exc
        summary.error(f"{type(exc).__name__}: {one_line(exc)}")
        summary.finish("failed")
    else:
        summary.finish()
    finally:
        if summary.finished is None:  # KeyboardInterrupt and the like
            summary.finish("failed")
        if args.summary_path is not None:
            summary.write(args.summary_path)
    log_line(
        "summary",
        {
            "job": args.job,
            "status": summary.status,
            "dry_run": args.dry_run,
            **summary.counts,
            **{f"bytes_{k}": v for k, v in summary.bytes.items()},
            "duration_s": summary.duration_s,
        },
    )
    if failure is not None:
        print(f"{args.job}: error: {one_line(failure)}", file=sys.stderr, flush=True)
        return 2 if isinstance(failure, InvalidConfigError) else 1
    return summary.exit_code


@contextmanager
def exclusive_run(args: JobArgs, lock_keys: Sequence[Path], summary: RunSummary) -> Iterator[bool]:
    """Hold the job's locks on ``lock_keys`` (log dirs, or a cluster key) for the block; yields
    False, with the summary marked ``skipped`` and one stderr line, when another run still
    holds one after ``--lock-wait-s``."""
    with log_dir_locks(args.lock_dir, args.job, lock_keys, wait_s=args.lock_wait_s) as held_by:
        if held_by is not None:
            summary.details["skipped"] = f"another run holds {held_by}"
            summary.finish("skipped")
            print(f"{args.job}: another run holds {held_by}; nothing done", file=sys.stderr)
        yield held_by is None
