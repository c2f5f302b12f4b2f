"""The copy deadline: a copy attempt that runs late can never commit.

Each segment copy gets ``deadline_ms = attempt start + copy timeout`` (wall clock, taken
before COPY_SEGMENT_STARTED is published, so ``deadline_ms <= STARTED event timestamp +
timeout``). ``deadline_fence`` wraps the library's ``LeaderEpochFence``: the fence is asked
before COPY_SEGMENT_STARTED and again before COPY_SEGMENT_FINISHED, and now refuses with
``CopyDeadlineExceededError`` once the deadline has passed. ``copy_segment`` then rolls the
attempt back (DELETE_SEGMENT_STARTED, objects deleted, DELETE_SEGMENT_FINISHED).

Hence the rule the reconcile job relies on: a COPY_SEGMENT_STARTED whose event timestamp is
older than the copy timeout (plus clock skew) will never be finished by its writer, so it
may be rolled back. Keep reconcile's ``copy deadline`` >= ``COPY_TIMEOUT_S_DEFAULT``.
"""

from __future__ import annotations

from collections.abc import Callable

from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.tiered.operations import LeaderEpochFence

COPY_TIMEOUT_S_DEFAULT = 600.0
COPY_TIMEOUT_S_MAX = 24 * 3600.0


class CopyDeadlineExceededError(StorageError):
    """A segment copy passed its deadline; it was not (and will never be) committed."""

    error_code = "request_timed_out"


def deadline_fence(
    *,
    topic_partition: TopicPartition,
    planned_leader_epoch: int,
    current_leader_epoch: Callable[[], int],
    deadline_ms: int,
    clock: Clock,
    what: str,
) -> LeaderEpochFence:
    """A ``LeaderEpochFence`` that also refuses once ``clock`` is past ``deadline_ms``."""

    def read_epoch_before_deadline() -> int:
        now_ms = clock.milliseconds()
        if now_ms > deadline_ms:
            raise CopyDeadlineExceededError(
                f"partition {topic_partition}: {what} passed its deadline by"
                f" {now_ms - deadline_ms} ms; it is not committed (rolled back if started);"
                " raise --copy-timeout-s or lower --bytes-per-second if copies are this slow"
            )
        return current_leader_epoch()

    return LeaderEpochFence(
        planned_leader_epoch=planned_leader_epoch,
        current_leader_epoch=read_epoch_before_deadline,
    )
