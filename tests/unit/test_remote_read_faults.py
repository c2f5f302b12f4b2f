"""``PendingRemoteReads`` (one kept read per partition) and ``WarningLimiter`` (WARN rate)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from storage_core.clock import ManualClock
from storage_core.tiered.pending_remote_reads import PendingRemoteReads
from storage_core.tiered.remote_read_faults import WarningLimiter


def submitter(futures: list[Future[str]]):  # type: ignore[no-untyped-def]
    def submit() -> Future[str]:
        future: Future[str] = Future()
        futures.append(future)
        return future

    return submit


def test_a_read_in_flight_is_joined_not_submitted_again() -> None:
    reads: PendingRemoteReads[str] = PendingRemoteReads(clock=ManualClock())
    futures: list[Future[str]] = []
    first = reads.read("t-0", (0, 100, True), submitter(futures))
    again = reads.read("t-0", (0, 100, True), submitter(futures))
    assert again is first and len(futures) == 1


def test_a_late_outcome_answers_the_next_fetch_once() -> None:
    reads: PendingRemoteReads[str] = PendingRemoteReads(clock=ManualClock())
    futures: list[Future[str]] = []
    first = reads.read("t-0", (0, 100, True), submitter(futures))
    first.future.set_exception(OSError("store failed after the fetch gave up"))
    late = reads.read("t-0", (0, 100, True), submitter(futures))
    assert late is first and len(futures) == 1
    reads.forget_if("t-0", late)
    fresh = reads.read("t-0", (0, 100, True), submitter(futures))
    assert fresh is not first and len(futures) == 2


def test_another_request_or_a_stale_result_submits_a_new_read() -> None:
    clock = ManualClock()
    reads: PendingRemoteReads[str] = PendingRemoteReads(result_ttl_ms=1_000, clock=clock)
    futures: list[Future[str]] = []
    first = reads.read("t-0", (0, 100, True), submitter(futures))
    other = reads.read("t-0", (50, 100, True), submitter(futures))
    assert other is not first and len(reads) == 1
    other.future.set_result("records")
    clock.sleep(1_001)
    assert reads.read("t-0", (50, 100, True), submitter(futures)) is not other
    assert len(futures) == 3


def test_entries_are_bounded() -> None:
    reads: PendingRemoteReads[str] = PendingRemoteReads(max_entries=2, clock=ManualClock())
    futures: list[Future[str]] = []
    for partition in ("t-0", "t-1", "t-2"):
        reads.read(partition, 0, submitter(futures))
    assert len(reads) == 2


def test_a_submit_that_raises_records_nothing() -> None:
    reads: PendingRemoteReads[str] = PendingRemoteReads(clock=ManualClock())

    def full() -> Future[str]:
        raise RuntimeError("queue full")

    with pytest.raises(RuntimeError):
        reads.read("t-0", 0, full)
    assert len(reads) == 0


def test_warning_limiter_logs_once_per_interval_and_counts_the_rest() -> None:
    clock = ManualClock()
    limiter = WarningLimiter(interval_ms=60_000, clock=clock)
    assert limiter.should_log("seg-a") == (True, 0)
    assert [limiter.should_log("seg-a")[0] for _ in range(100)] == [False] * 100
    assert limiter.should_log("seg-b") == (True, 0)
    clock.sleep(60_000)
    assert limiter.should_log("seg-a") == (True, 100)
