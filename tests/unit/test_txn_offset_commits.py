"""Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) in the GroupCoordinator over
real ``__consumer_offsets`` logs: offsets pending until the transaction's marker, decided by
it in memory and on replay, ordered against plain commits by their offset in the log, the
KIP-447 member checks, and what DeleteGroups / OffsetDelete do with pending offsets.

Markers are appended as WriteTxnMarkers appends them (a control batch, origin COORDINATOR),
then the coordinator is told, as the handler tells it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_core.clock import ManualClock
from storage_core.common import TopicPartition
from storage_core.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offsets_records import (
    OFFSETS_TOPIC_NAME,
    OffsetCommitKey,
    decode_key,
    partition_for,
)
from storage_core.coordinator.group.txn_offsets import (
    CommitRecordMetadataAndOffset,
    PendingTxnOffsetCommits,
    materialize,
)
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.records.end_transaction_marker import (
    ControlRecordType,
    build_end_txn_marker_batch,
)
from tests.unit.test_group_coordinator import (
    GROUP,
    NUM_PARTITIONS,
    Member,
    OffsetsLogs,
    code,
    make_coordinator,
    run,
    stable_pair,
)

TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
PID, EPOCH = 4000, 0
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC_NAME, partition_for(GROUP, NUM_PARTITIONS))


@pytest.fixture
def logs(tmp_path: Path, clock: ManualClock) -> Iterator[OffsetsLogs]:
    opened = OffsetsLogs(tmp_path, clock)
    yield opened
    opened.close()


def offset(value: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset=value, metadata=f"m{value}", commit_timestamp_ms=1)


async def txn_commit(
    coordinator: GroupCoordinator,
    offsets: dict[TopicPartition, int],
    *,
    producer_id: int = PID,
    epoch: int = EPOCH,
    member: Member | None = None,
    generation_id: int | None = None,
    group_id: str = GROUP,
) -> dict[TopicPartition, str]:
    result = await coordinator.commit_transactional_offsets(
        group_id=group_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        member_id="" if member is None else member.member_id,
        generation_id=(
            generation_id
            if generation_id is not None
            else (-1 if member is None else member.generation)
        ),
        offsets={tp: offset(o) for tp, o in offsets.items()},
    )
    return {tp: code(e) for tp, e in result.items()}


async def end_txn(
    logs: OffsetsLogs,
    coordinator: GroupCoordinator | None,
    *,
    commit: bool,
    producer_id: int = PID,
    epoch: int = EPOCH,
) -> None:
    """Append the marker as WriteTxnMarkers does, then tell the coordinator (if running)."""
    batch = build_end_txn_marker_batch(
        producer_id=producer_id,
        producer_epoch=epoch,
        coordinator_epoch=0,
        control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        timestamp=logs.clock.milliseconds(),
    )
    results = await logs.replica_manager.append_records(
        {OFFSETS_TP: batch}, required_acks=-1, timeout_ms=5000, origin=AppendOrigin.COORDINATOR
    )
    assert results[OFFSETS_TP].error is None
    if coordinator is not None:
        coordinator.on_transaction_completed(producer_id, [OFFSETS_TP], is_commit=commit)


def committed(
    coordinator: GroupCoordinator, *partitions: TopicPartition, group_id: str = GROUP
) -> dict[TopicPartition, int | None]:
    fetched = coordinator.fetch_offsets(group_id=group_id, partitions=list(partitions))
    assert fetched.error is None and not fetched.partition_errors
    return {tp: None if o is None else o.offset for tp, o in fetched.offsets.items()}


def stable_errors(
    coordinator: GroupCoordinator, *partitions: TopicPartition
) -> dict[TopicPartition, str]:
    fetched = coordinator.fetch_offsets(
        group_id=GROUP, partitions=list(partitions), require_stable=True
    )
    assert fetched.error is None
    return {tp: code(fetched.partition_errors.get(tp)) for tp in partitions}


def restart(logs: OffsetsLogs, clock: ManualClock) -> GroupCoordinator:
    logs.close()
    logs.open()
    return make_coordinator(logs, clock)


# ====================================================================== pending, commit, abort
def test_offsets_are_pending_until_the_commit_marker(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        assert await txn_commit(coordinator, {TP: 10, TP1: 3}) == {TP: "none", TP1: "none"}
        assert committed(coordinator, TP, TP1) == {TP: 5, TP1: None}
        assert stable_errors(coordinator, TP, TP1) == {
            TP: "unstable_offset_commit",
            TP1: "unstable_offset_commit",
        }
        await end_txn(logs, coordinator, commit=True)
        assert committed(coordinator, TP, TP1) == {TP: 10, TP1: 3}
        assert stable_errors(coordinator, TP, TP1) == {TP: "none", TP1: "none"}

    run(scenario)


def test_an_abort_marker_drops_the_pending_offsets(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        await txn_commit(coordinator, {TP: 10})
        await end_txn(logs, coordinator, commit=False)
        assert committed(coordinator, TP) == {TP: 5}
        assert stable_errors(coordinator, TP) == {TP: "none"}

    run(scenario)


def test_the_commit_is_one_transactional_batch_of_the_producer(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await txn_commit(coordinator, {TP: 10, TP1: 3}, epoch=7)
        (batch,) = logs.get(OFFSETS_TP.partition).read_batches(0)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (PID, 7, 0)
        assert batch.is_transactional and not batch.is_control
        keys = [decode_key(r.key or b"") for r in batch.records()]
        assert keys == [
            OffsetCommitKey(group=GROUP, topic="orders", partition=0),
            OffsetCommitKey(group=GROUP, topic="orders", partition=1),
        ]
        # The partition's last stable offset waits for the marker, as for any transaction.
        log = logs.get(OFFSETS_TP.partition)
        assert log.last_stable_offset == 0
        await end_txn(logs, coordinator, commit=True, epoch=7)
        assert log.last_stable_offset == log.log_end_offset == 3

    run(scenario)


def test_a_fenced_epoch_is_refused_and_leaves_nothing_pending(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await txn_commit(coordinator, {TP: 10}, epoch=1)
        await end_txn(logs, coordinator, commit=True, epoch=1)
        assert await txn_commit(coordinator, {TP: 20}, epoch=0) == {TP: "invalid_producer_epoch"}
        assert stable_errors(coordinator, TP) == {TP: "none"}
        assert committed(coordinator, TP) == {TP: 10}

    run(scenario)


# ====================================================================== ordering
def test_a_plain_commit_written_after_the_transactional_one_wins(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await txn_commit(coordinator, {TP: 10})
        await Member(coordinator, "simple").commit({TP: 20})
        await end_txn(logs, coordinator, commit=True)
        assert committed(coordinator, TP) == {TP: 20}  # its batch is the newer one

    run(scenario)
    assert committed(restart(logs, clock), TP) == {TP: 20}


def test_a_transactional_commit_written_after_a_plain_one_wins(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 20})
        await txn_commit(coordinator, {TP: 10})
        await end_txn(logs, coordinator, commit=True)
        assert committed(coordinator, TP) == {TP: 10}

    run(scenario)
    assert committed(restart(logs, clock), TP) == {TP: 10}


def test_materialize_keeps_the_newer_batch() -> None:
    current = {TP: CommitRecordMetadataAndOffset(append_offset=50, offset=offset(1))}
    decided = {
        TP: CommitRecordMetadataAndOffset(append_offset=40, offset=offset(2)),
        TP1: CommitRecordMetadataAndOffset(append_offset=45, offset=offset(3)),
    }
    assert materialize(current, decided, group_id=GROUP, producer_id=PID) == [TP1]
    assert current[TP].offset.offset == 1 and current[TP1].offset.offset == 3


def test_pending_commits_follow_their_append() -> None:
    pending = PendingTxnOffsetCommits()
    pending.prepare(PID, {TP: offset(1), TP1: offset(2)})
    assert pending.has_partition(TP) and pending.has_producer(PID)
    pending.on_append(PID, {TP: offset(1), TP1: offset(99)}, 17)  # TP1 was replaced meanwhile
    assert pending.of_producer(PID)[TP].append_offset == 17
    assert pending.of_producer(PID)[TP1].append_offset is None
    pending.fail(PID, [TP, TP1])
    assert not pending and not pending.has_producer(PID)


# ====================================================================== replay
def test_offsets_still_pending_at_a_restart_are_decided_by_the_marker_after_it(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        await txn_commit(coordinator, {TP: 10})
        await txn_commit(coordinator, {TP1: 1}, producer_id=PID + 1)
        await coordinator.shutdown()

    run(before)
    coordinator = restart(logs, clock)

    async def after() -> None:
        assert committed(coordinator, TP, TP1) == {TP: 5, TP1: None}
        assert stable_errors(coordinator, TP, TP1) == {
            TP: "unstable_offset_commit",
            TP1: "unstable_offset_commit",
        }
        await end_txn(logs, coordinator, commit=True)
        await end_txn(logs, coordinator, commit=False, producer_id=PID + 1)
        assert committed(coordinator, TP, TP1) == {TP: 10, TP1: None}
        assert stable_errors(coordinator, TP, TP1) == {TP: "none", TP1: "none"}

    run(after)
    assert committed(restart(logs, clock), TP, TP1) == {TP: 10, TP1: None}


def test_markers_written_while_the_coordinator_was_away_are_replayed(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5, TP1: 5})
        await txn_commit(coordinator, {TP: 10})
        await txn_commit(coordinator, {TP1: 10}, producer_id=PID + 1)
        await coordinator.shutdown()
        await end_txn(logs, None, commit=True)
        await end_txn(logs, None, commit=False, producer_id=PID + 1)

    run(scenario)
    coordinator = restart(logs, clock)
    assert committed(coordinator, TP, TP1) == {TP: 10, TP1: 5}
    assert stable_errors(coordinator, TP, TP1) == {TP: "none", TP1: "none"}


# ====================================================================== KIP-447 checks
def test_kip_447_member_and_generation_are_checked(logs: OffsetsLogs, clock: ManualClock) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        a, _b = await stable_pair(coordinator)
        assert await txn_commit(coordinator, {TP: 1}, member=a, generation_id=1) == {
            TP: "illegal_generation"
        }
        stranger = Member(coordinator, "stranger")
        stranger.member_id, stranger.generation = "stranger-1", 2
        assert await txn_commit(coordinator, {TP: 1}, member=stranger) == {TP: "unknown_member_id"}
        assert stable_errors(coordinator, TP) == {TP: "none"}
        assert await txn_commit(coordinator, {TP: 1}, member=a) == {TP: "none"}
        # A producer without group management (before KIP-447) may commit for a group
        # with members, unlike a plain commit.
        assert await txn_commit(coordinator, {TP1: 1}, producer_id=PID + 1) == {TP1: "none"}
        assert await a.commit({TP1: 1}) == {TP1: "none"}
        plain = await Member(coordinator, "simple").commit({TP1: 2})
        assert plain == {TP1: "unknown_member_id"}

    run(scenario)


def test_a_generation_for_an_unknown_group_leaves_no_group(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        ghost = Member(coordinator, "ghost", group_id="ghost")
        ghost.member_id, ghost.generation = "ghost-1", 3
        result = await txn_commit(coordinator, {TP: 1}, member=ghost, group_id="ghost")
        assert result == {TP: "unknown_member_id"}
        assert coordinator.manager.get_group("ghost") is None
        assert await txn_commit(coordinator, {TP: 1}, group_id="") == {TP: "invalid_group_id"}

    run(scenario)


# ====================================================================== deletion
def test_offset_delete_keeps_a_group_with_pending_offsets(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        await txn_commit(coordinator, {TP1: 7})
        deleted = await coordinator.delete_offsets(group_id=GROUP, partitions=[TP])
        assert deleted.error is None and code(deleted.partitions[TP]) == "none"
        assert coordinator.manager.get_group(GROUP) is not None  # TP1 is still pending
        await end_txn(logs, coordinator, commit=True)
        assert committed(coordinator, TP, TP1) == {TP: None, TP1: 7}

    run(scenario)
    assert committed(restart(logs, clock), TP, TP1) == {TP: None, TP1: 7}


def test_delete_groups_drops_pending_offsets_for_good(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def scenario() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        await txn_commit(coordinator, {TP1: 7})
        assert {k: code(v) for k, v in (await coordinator.delete_groups([GROUP])).items()} == {
            GROUP: "none"
        }
        assert coordinator.manager.get_group(GROUP) is None
        await end_txn(logs, coordinator, commit=True)
        assert committed(coordinator, TP, TP1) == {TP: None, TP1: None}

    run(scenario)
    # The tombstones of the deletion came after the transactional records: a replay does
    # not bring the committed transaction's offset back.
    assert committed(restart(logs, clock), TP, TP1) == {TP: None, TP1: None}


class _MarkerAtTheEnd:
    """The offsets log, with a marker told to the coordinator (on its loop) just after its
    replay read the last batch, as a WriteTxnMarkers landing during the load would."""

    def __init__(self, log: Any, tell: Callable[[], None]) -> None:
        self._log = log
        self._tell = tell

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def read_batches(self, start_offset: int, **kwargs: Any) -> Iterator[Any]:
        yield from self._log.read_batches(start_offset, **kwargs)
        if self._log.topic_partition == OFFSETS_TP:
            self._tell()


def test_a_marker_told_while_the_partition_loads_is_decided_after_the_load(
    logs: OffsetsLogs, clock: ManualClock
) -> None:
    async def before() -> None:
        coordinator = make_coordinator(logs, clock)
        await Member(coordinator, "simple").commit({TP: 5})
        await txn_commit(coordinator, {TP: 10})
        await coordinator.shutdown()

    run(before)
    logs.close()
    logs.open()

    async def after() -> None:
        loop = asyncio.get_running_loop()
        told = threading.Event()
        coordinator: GroupCoordinator

        def tell_on_the_loop() -> None:
            def tell() -> None:
                coordinator.on_transaction_completed(PID, [OFFSETS_TP], is_commit=True)
                told.set()

            loop.call_soon_threadsafe(tell)
            assert told.wait(5)

        coordinator = GroupCoordinator(
            GroupCoordinatorConfig(offsets_topic_num_partitions=NUM_PARTITIONS),
            lambda p: _MarkerAtTheEnd(logs.get(p), tell_on_the_loop),  # type: ignore[arg-type,return-value]
            logs.replica_manager,
            clock,
        )
        await coordinator.startup()
        try:
            assert told.is_set()
            assert stable_errors(coordinator, TP) == {TP: "none"}
            assert committed(coordinator, TP) == {TP: 10}
        finally:
            await coordinator.shutdown()

    run(after)
