"""Partition and ReplicaManager without the network: epochs, high watermark, long polling."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    LogEndOffsetMovedError,
    NotEnoughReplicasError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.log.log_segment import RECENT_APPENDS_MAX
from storage_core.records.file_region import FileRegion
from storage_core.records.memory_records import iter_batches
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.replication.partition import Partition
from storage_core.replication.replica_manager import ReplicaManager
from tests.conftest import make_batch

TP = TopicPartition("events", 0)


def _setup(
    tmp_path: Path,
    *,
    epoch: int = 5,
    isr: tuple[int, ...] = (0,),
    replicas: tuple[int, ...] | None = None,
) -> ReplicaManager:
    manager = LogManager([tmp_path], LogConfig())
    manager.startup(background_tasks=False)
    assignment = replicas if replicas is not None else (0, *[b for b in isr if b])
    manager_ = ReplicaManager(manager, local_broker_id=0)
    log = manager.get_or_create_log(TP, topic_id=Uuid.random())
    partition = Partition(
        TP,
        log.topic_id or Uuid.random(),
        log,
        local_broker_id=0,
        on_high_watermark_advanced=manager_.on_high_watermark_advanced,
    )
    partition.make_leader(leader_epoch=epoch, replicas=assignment, isr=isr)
    manager_.add_partition(partition)
    return manager_


def test_leader_appends_carry_the_leader_epoch_and_move_the_high_watermark(
    tmp_path: Path,
) -> None:
    replicas = _setup(tmp_path, epoch=5)
    partition = replicas.get_partition(TP)
    info = partition.append_records_to_leader(make_batch(3), required_acks=1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert partition.log.high_watermark == 3
    [batch] = list(partition.log.read_batches(0))
    assert batch.partition_leader_epoch == 5
    assert partition.last_offset_for_leader_epoch(5) == (5, 3)
    assert partition.last_offset_for_leader_epoch(4) == (4, 0)  # Kafka: start of epoch 5
    assert partition.last_offset_for_leader_epoch(6) == (-1, -1)


def test_epoch_fencing_follows_kip_320(tmp_path: Path) -> None:
    partition = _setup(tmp_path, epoch=5).get_partition(TP)
    with pytest.raises(FencedLeaderEpochError):
        partition.read_records(0, 1000, current_leader_epoch=4)
    with pytest.raises(UnknownLeaderEpochError):
        partition.read_records(0, 1000, current_leader_epoch=6)
    assert partition.read_records(0, 1000, current_leader_epoch=5).high_watermark == 0


def test_followers_in_the_isr_hold_the_high_watermark_back(tmp_path: Path) -> None:
    partition = _setup(tmp_path, isr=(0, 1)).get_partition(TP)
    partition.append_records_to_leader(make_batch(2), required_acks=1)
    assert partition.log.log_end_offset == 2
    assert partition.log.high_watermark == 0  # follower 1 has not fetched yet
    # Consumers do not see records above the high watermark.
    assert partition.read_records(0, 10_000).info.records is None


def test_acks_all_needs_min_insync_replicas(tmp_path: Path) -> None:
    replicas = _setup(tmp_path, replicas=(0, 1), isr=(0,))
    partition = replicas.get_partition(TP)
    partition.log.config = LogConfig(min_insync_replicas=2)
    with pytest.raises(NotEnoughReplicasError):
        partition.append_records_to_leader(make_batch(1), required_acks=-1)
    assert partition.log.log_end_offset == 0


def test_min_insync_replicas_is_capped_at_the_replication_factor(tmp_path: Path) -> None:
    """As Kafka's effectiveMinIsr: min.insync.replicas=2 on a one-replica partition is 1."""
    partition = _setup(tmp_path).get_partition(TP)
    partition.log.config = LogConfig(min_insync_replicas=2)
    partition.append_records_to_leader(make_batch(1), required_acks=-1)
    assert partition.log.high_watermark == 1


def test_append_results_and_errors_per_partition(tmp_path: Path) -> None:
    replicas = _setup(tmp_path)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        results = await replicas.append_records(
            {TP: make_batch(2), TopicPartition("nope", 0): make_batch(1)},
            required_acks=-1,
            timeout_ms=1000,
        )
        assert results[TP].info is not None and results[TP].info.last_offset == 1
        assert isinstance(results[TopicPartition("nope", 0)].error, UnknownTopicOrPartitionError)
        bad = await replicas.append_records({TP: make_batch(1)}, required_acks=2, timeout_ms=10)
        assert isinstance(bad[TP].error, InvalidRequiredAcksError)

    asyncio.run(run())
    replicas.shutdown()


def test_a_compare_and_append_writes_only_where_the_log_was_expected_to_end(
    tmp_path: Path,
) -> None:
    replicas = _setup(tmp_path)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        first = await replicas.append_records(
            {TP: make_batch(2)}, required_acks=-1, timeout_ms=1000, expected_log_end_offsets={TP: 0}
        )
        assert first[TP].info is not None and first[TP].info.last_offset == 1
        stale = await replicas.append_records(
            {TP: make_batch(1)}, required_acks=-1, timeout_ms=1000, expected_log_end_offsets={TP: 0}
        )
        assert isinstance(stale[TP].error, LogEndOffsetMovedError)
        assert "ends at 2, not 0" in str(stale[TP].error)
        assert replicas.get_partition(TP).log.log_end_offset == 2  # nothing written

    asyncio.run(run())
    # on the partition itself, as an I/O thread appends
    partition = replicas.get_partition(TP)
    partition.log.roll()
    with pytest.raises(LogEndOffsetMovedError):
        partition.append_records_to_leader(
            make_batch(1), required_acks=1, expected_log_end_offset=3
        )
    partition.append_records_to_leader(make_batch(1), required_acks=1, expected_log_end_offset=2)
    assert partition.log.log_end_offset == 3
    replicas.shutdown()


def test_a_long_poll_fetch_returns_as_soon_as_data_arrives(tmp_path: Path) -> None:
    replicas = _setup(tmp_path)

    async def run() -> float:
        replicas.bind_loop(asyncio.get_running_loop())
        request = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)}
        fetch = asyncio.create_task(
            replicas.fetch_messages(request, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20)
        )
        await asyncio.sleep(0.2)
        assert not fetch.done()  # parked in the purgatory: nothing to read yet
        started = time.monotonic()
        await replicas.append_records({TP: make_batch(4)}, required_acks=1, timeout_ms=1000)
        results = await asyncio.wait_for(fetch, 5)
        assert results[TP].records  # the appended batch
        assert results[TP].read is not None and results[TP].read.high_watermark == 4
        return time.monotonic() - started

    assert asyncio.run(run()) < 5
    replicas.shutdown()


def test_an_append_landing_while_a_fetch_reads_wakes_it(tmp_path: Path) -> None:
    """The fetch parks before it reads: an append (and its wake-up) that comes while the read
    runs on an I/O thread must not leave the fetch waiting out max_wait_ms. (The fetch starts
    inside the first batch, neither at the log end nor where an append began, which would be
    answered on the loop; it asks for more than is there.)"""
    replicas = _setup(tmp_path, replicas=(0, 2))
    first = make_batch(2)
    replicas.get_partition(TP).append_records_to_leader(first, required_acks=1)
    read_started = asyncio.Event()
    read_may_finish = asyncio.Event()
    original = replicas._read_all
    first_read = True

    def slow_first_read(*args: object, **kwargs: object) -> object:
        nonlocal first_read
        results = original(*args, **kwargs)  # type: ignore[arg-type]
        if first_read:
            first_read = False
            loop.call_soon_threadsafe(read_started.set)
            asyncio.run_coroutine_threadsafe(read_may_finish.wait(), loop).result(5)
        return results

    replicas._read_all = slow_first_read  # type: ignore[method-assign]
    loop: asyncio.AbstractEventLoop

    async def run() -> float:
        nonlocal loop
        loop = asyncio.get_running_loop()
        replicas.bind_loop(loop)
        request = {TP: FetchRequestPartition(fetch_offset=1, max_bytes=1 << 20)}
        fetch = asyncio.create_task(
            replicas.fetch_messages(
                request,
                max_wait_ms=10_000,
                min_bytes=len(first) + 1,
                max_bytes=1 << 20,
                replica_id=2,
            )
        )
        await read_started.wait()  # the first read found too little and is about to return
        started = time.monotonic()
        await replicas.append_records({TP: make_batch(4)}, required_acks=1, timeout_ms=1000)
        read_may_finish.set()
        results = await asyncio.wait_for(fetch, 9)
        assert len(results[TP].records) > len(first)  # read again once woken: both batches
        return time.monotonic() - started

    assert asyncio.run(run()) < 5
    replicas.shutdown()


def test_a_fetch_with_nothing_new_waits_max_wait_then_answers_empty(tmp_path: Path) -> None:
    replicas = _setup(tmp_path)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        started = time.monotonic()
        request = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1000)}
        results = await replicas.fetch_messages(
            request, max_wait_ms=300, min_bytes=1, max_bytes=1000
        )
        assert time.monotonic() - started >= 0.29
        assert results[TP].records == b"" and results[TP].error is None
        beyond = {TP: FetchRequestPartition(fetch_offset=99, max_bytes=1000)}
        results = await replicas.fetch_messages(beyond, max_wait_ms=300, min_bytes=1, max_bytes=1)
        assert isinstance(results[TP].error, OffsetOutOfRangeError)

    asyncio.run(run())
    replicas.shutdown()


def test_a_diverging_last_fetched_epoch_is_reported(tmp_path: Path) -> None:
    replicas = _setup(tmp_path, epoch=1)
    partition = replicas.get_partition(TP)
    partition.append_records_to_leader(make_batch(3), required_acks=1)  # epoch 1: [0, 3)
    partition.make_leader(leader_epoch=2, replicas=(0,), isr=(0,))
    partition.append_records_to_leader(make_batch(2), required_acks=1)  # epoch 2: [3, 5)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        # A consumer that believes epoch 1 lasted to offset 4 must truncate to 3.
        request = {TP: FetchRequestPartition(fetch_offset=4, max_bytes=1000, last_fetched_epoch=1)}
        results = await replicas.fetch_messages(request, max_wait_ms=0, min_bytes=1, max_bytes=1000)
        assert results[TP].diverging_epoch == (1, 3)
        assert results[TP].records == b""

    asyncio.run(run())
    replicas.shutdown()


def _count_reads(replicas: ReplicaManager) -> dict[int, int]:
    """Reads made per fetching replica id (-1: consumers), counted from now on."""
    reads: dict[int, int] = {}
    original = replicas._read_all

    def counted(*args: object, **kwargs: object) -> object:
        replica_id = kwargs.get("replica_id", args[4] if len(args) > 4 else -1)
        assert isinstance(replica_id, int)
        reads[replica_id] = reads.get(replica_id, 0) + 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    replicas._read_all = counted  # type: ignore[method-assign]
    return reads


def test_a_parked_follower_fetch_waits_for_records_not_for_the_high_watermark(
    tmp_path: Path,
) -> None:
    """As Kafka's DelayedFetch of a follower: it completes on bytes past its fetch offset. The
    HW moving (another follower's fetch) neither answers it nor makes it read again."""
    replicas = _setup(tmp_path, isr=(0, 1, 2))
    partition = replicas.get_partition(TP)
    partition.append_records_to_leader(make_batch(2), required_acks=1)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        reads = _count_reads(replicas)
        at_end = {TP: FetchRequestPartition(fetch_offset=2, max_bytes=1 << 20)}
        parked = asyncio.create_task(
            replicas.fetch_messages(
                at_end, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, replica_id=2
            )
        )
        await asyncio.sleep(0.2)
        assert partition.log.high_watermark == 0  # follower 1 has not fetched yet
        other = await replicas.fetch_messages(
            at_end, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=1
        )
        assert other[TP].records == b""
        assert partition.log.high_watermark == 2  # both followers at the log end
        await asyncio.sleep(0.2)
        assert not parked.done()
        assert reads[2] == 1  # not woken by the HW: no second read
        await replicas.append_records({TP: make_batch(3)}, required_acks=1, timeout_ms=1000)
        results = await asyncio.wait_for(parked, 5)
        assert results[TP].records  # the new batch
        assert reads[2] == 2

    asyncio.run(run())
    replicas.shutdown()


def _count_run_io(replicas: ReplicaManager) -> list[int]:
    """From now on, ``[n]``: how many reads or appends went to an I/O thread through
    ``run_io``."""
    calls = [0]
    original = replicas.run_io

    async def counted(function: Callable[[], object]) -> object:
        calls[0] += 1
        return await original(function)

    replicas.run_io = counted  # type: ignore[method-assign,assignment]
    return calls


def test_a_follower_fetch_at_the_log_end_completes_acks_all_without_an_io_thread(
    tmp_path: Path,
) -> None:
    """The follower's fetch after its append reads nothing: it is answered on the event loop
    and completes the waiting acks=all produce, without a round trip to an I/O thread."""
    replicas = _setup(tmp_path, isr=(0, 1))

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        producing = asyncio.create_task(
            replicas.append_records({TP: make_batch(3)}, required_acks=-1, timeout_ms=10_000)
        )
        await asyncio.sleep(0.2)
        assert not producing.done()  # waits for follower 1
        io_calls = _count_run_io(replicas)
        at_end = {TP: FetchRequestPartition(fetch_offset=3, max_bytes=1 << 20)}
        results = await replicas.fetch_messages(
            at_end, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=1
        )
        assert results[TP].records == b"" and results[TP].error is None
        assert replicas.get_partition(TP).log.high_watermark == 3
        produced = await asyncio.wait_for(producing, 5)
        assert produced[TP].error is None
        assert io_calls == [0]

    asyncio.run(run())
    replicas.shutdown()


def test_a_follower_fetch_a_few_appends_behind_reads_them_on_the_event_loop(
    tmp_path: Path,
) -> None:
    """A follower that fetches while the leader appends (produces pipelined on one
    connection) is a few batches behind: it gets what the last appends wrote, read on the
    event loop from the page cache. Further behind, its read goes to an I/O thread."""
    replicas = _setup(tmp_path, isr=(0, 1))

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        for _ in range(RECENT_APPENDS_MAX + 3):
            await replicas.append_records({TP: make_batch(2)}, required_acks=1, timeout_ms=1000)
        io_calls = _count_run_io(replicas)
        recent = 2 * 3  # three appends behind
        end = 2 * (RECENT_APPENDS_MAX + 3)
        behind = {TP: FetchRequestPartition(fetch_offset=end - recent, max_bytes=1 << 20)}
        results = await replicas.fetch_messages(
            behind, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=1
        )
        batches = [b for _, b in iter_batches(bytes(results[TP].records))]
        assert [b.base_offset for b in batches] == [end - 6, end - 4, end - 2]
        assert io_calls == [0]
        assert replicas.get_partition(TP).log.high_watermark == end - recent  # fetch state
        far = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)}
        results = await replicas.fetch_messages(
            far, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=1
        )
        assert results[TP].records
        assert io_calls == [1]

    asyncio.run(run())
    replicas.shutdown()


def test_a_zero_copy_follower_fetch_of_the_tail_is_a_resident_region(tmp_path: Path) -> None:
    """A follower a few large appends behind gets them as a file region marked resident (sent
    from the loop: the bytes are in the page cache); one further behind gets a region read
    and sent through an I/O thread."""
    replicas = _setup(tmp_path, isr=(0, 1))

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        large = make_batch(40, value_size=2048)  # over ZERO_COPY_MIN_BYTES
        for _ in range(RECENT_APPENDS_MAX + 2):
            await replicas.append_records({TP: large}, required_acks=1, timeout_ms=1000)
        io_calls = _count_run_io(replicas)
        end = 40 * (RECENT_APPENDS_MAX + 2)
        for fetch_offset, resident, calls in ((end - 40, True, 0), (0, False, 1)):
            wanted = {TP: FetchRequestPartition(fetch_offset=fetch_offset, max_bytes=1 << 20)}
            results = await replicas.fetch_messages(
                wanted,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                zero_copy=True,
                replica_id=1,
            )
            records = results[TP].records
            assert isinstance(records, FileRegion)
            assert records.resident is resident
            base_offset = int.from_bytes(records.read()[:8], "big")  # the first batch's
            assert base_offset == fetch_offset
            assert io_calls == [calls]
            records.close()

    asyncio.run(run())
    replicas.shutdown()


def test_a_follower_fetch_at_the_log_end_never_waits_on_the_loop_for_a_held_log(
    tmp_path: Path,
) -> None:
    """While another thread holds the log (an append, a roll, an fsync), a follower's fetch at
    the log end goes to an I/O thread: the event loop keeps serving meanwhile."""
    replicas = _setup(tmp_path, isr=(0, 1))
    log = replicas.get_partition(TP).log
    held = threading.Event()
    release = threading.Event()

    def hold_the_log() -> None:
        assert log.try_hold()
        try:
            held.set()
            release.wait(10)
        finally:
            log.release_hold()

    holder = threading.Thread(target=hold_the_log)
    holder.start()
    assert held.wait(5)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        at_end = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)}
        fetch = asyncio.create_task(
            replicas.fetch_messages(
                at_end, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=1
            )
        )
        started = time.monotonic()
        await asyncio.sleep(0.05)  # the loop is not stuck behind the log's lock
        assert time.monotonic() - started < 2
        assert not fetch.done()  # its read waits on an I/O thread
        release.set()
        results = await asyncio.wait_for(fetch, 5)
        assert results[TP].error is None

    try:
        asyncio.run(run())
    finally:
        release.set()
        holder.join()
    replicas.shutdown()


def test_an_append_reads_for_the_parked_follower_fetches_on_its_own_io_thread(
    tmp_path: Path,
) -> None:
    """As Kafka's appending request thread completes the delayed fetches it unblocks: the
    append's I/O thread reads the new batch for the parked follower fetch, which answers with
    it without a round trip of its own to an I/O thread. (With ``flush.messages`` 1 every
    append fsyncs: it runs on an I/O thread, not on the loop.)"""
    replicas = _setup(tmp_path, isr=(0, 1))
    log = replicas.get_partition(TP).log
    log.config = replace(log.config, flush_messages=1)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        io_calls = _count_run_io(replicas)
        at_end = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)}
        parked = asyncio.create_task(
            replicas.fetch_messages(
                at_end, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, replica_id=1
            )
        )
        await asyncio.sleep(0.2)
        assert not parked.done()
        produced = await replicas.append_records(
            {TP: make_batch(3)}, required_acks=1, timeout_ms=1000
        )
        assert produced[TP].error is None
        results = await asyncio.wait_for(parked, 5)
        [batch] = list(iter_batches(bytes(results[TP].records)))
        assert (batch[1].base_offset, batch[1].last_offset) == (0, 2)
        assert io_calls == [0]  # neither the fetch's two reads nor the append took one

    asyncio.run(run())
    replicas.shutdown()


def test_a_parked_follower_fetch_keeps_waiting_when_the_append_fails(tmp_path: Path) -> None:
    replicas = _setup(tmp_path, isr=(0, 1))

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        at_end = {TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20)}
        parked = asyncio.create_task(
            replicas.fetch_messages(
                at_end, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, replica_id=1
            )
        )
        await asyncio.sleep(0.2)
        refused = await replicas.append_records(
            {TP: b"not a record batch"}, required_acks=1, timeout_ms=1000
        )
        assert refused[TP].error is not None
        await asyncio.sleep(0.2)
        assert not parked.done()  # nothing new to read: still waiting
        await replicas.append_records({TP: make_batch(2)}, required_acks=1, timeout_ms=1000)
        results = await asyncio.wait_for(parked, 5)
        assert results[TP].records

    asyncio.run(run())
    replicas.shutdown()


def test_an_acks_all_produce_waits_only_when_the_isr_does_not_have_it_yet(
    tmp_path: Path,
) -> None:
    """As Kafka's DelayedProduce tries to complete before it waits: with the leader alone in
    the ISR the append is the whole answer; with a follower in it, the wait is left to the
    caller (the connection reads its next produce meanwhile)."""

    async def append(isr: tuple[int, ...], directory: Path) -> bool:
        replicas = _setup(directory, isr=isr)
        replicas.bind_loop(asyncio.get_running_loop())
        appended = await replicas.append_to_leaders(
            {TP: make_batch(2)}, required_acks=-1, timeout_ms=100
        )
        assert appended.results[TP].error is None
        waits = appended.replication is not None
        if waits:  # nobody fetches: the wait times out
            results = await appended.replicated()
            assert "not replicated to the ISR within 100 ms" in str(results[TP].error)
        replicas.shutdown()
        return waits

    assert asyncio.run(append((0,), tmp_path / "alone")) is False
    assert asyncio.run(append((0, 1), tmp_path / "followed")) is True


def test_an_append_that_only_writes_runs_on_the_loop_and_a_roll_on_an_io_thread(
    tmp_path: Path,
) -> None:
    """An append that copies bytes into the page cache costs less than a round trip to an
    I/O thread: it runs on the event loop. One that must wait for the disk (a roll fsyncs the
    rolled segment; so would ``flush.messages`` and a new leader epoch's checkpoint) runs on
    an I/O thread, as does one whose partition another thread holds."""
    replicas = _setup(tmp_path, isr=(0,))
    partition = replicas.get_partition(TP)
    partition.log.config = replace(partition.log.config, segment_bytes=4 * len(make_batch(2)))

    async def run() -> list[int]:
        replicas.bind_loop(asyncio.get_running_loop())
        io_calls = _count_run_io(replicas)
        counts = []
        for _ in range(6):
            produced = await replicas.append_records(
                {TP: make_batch(2)}, required_acks=1, timeout_ms=1000
            )
            assert produced[TP].error is None
            counts.append(io_calls[0])
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            assert partition.try_hold()
            try:
                held.set()
                release.wait(10)
            finally:
                partition.release_hold()

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(5)
        appending = asyncio.create_task(
            replicas.append_records({TP: make_batch(2)}, required_acks=1, timeout_ms=1000)
        )
        await asyncio.sleep(0.1)
        assert not appending.done()  # on an I/O thread, waiting for the partition
        release.set()
        assert (await asyncio.wait_for(appending, 5))[TP].error is None
        holder.join()
        counts.append(io_calls[0])
        return counts

    # the 5th fills the segment: it rolls; the 7th finds the partition held
    assert asyncio.run(run()) == [0, 0, 0, 0, 1, 1, 2]
    assert [s.base_offset for s in partition.log.segments] == [0, 8]
    assert partition.log.log_end_offset == 14
    replicas.shutdown()


def test_a_high_watermark_short_of_a_waiting_produce_does_not_wake_it(tmp_path: Path) -> None:
    """Produces pipelined on one connection wait together; each HW advance completes those it
    reached, and leaves the others parked, unchecked, until it reaches them."""
    replicas = _setup(tmp_path, isr=(0, 1))
    partition = replicas.get_partition(TP)
    checked: list[int] = []
    original = partition.check_enough_replicas_reach_offset

    def counted(required_offset: int) -> tuple[bool, object]:
        checked.append(required_offset)
        return original(required_offset)

    partition.check_enough_replicas_reach_offset = counted  # type: ignore[method-assign,assignment]

    async def follower_at(offset: int) -> None:
        at = {TP: FetchRequestPartition(fetch_offset=offset, max_bytes=1 << 20)}
        await replicas.fetch_messages(at, max_wait_ms=0, min_bytes=0, max_bytes=1, replica_id=1)

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        waiting = []
        for _ in range(3):  # offsets [0, 2), [2, 4), [4, 6)
            appended = await replicas.append_to_leaders(
                {TP: make_batch(2)}, required_acks=-1, timeout_ms=10_000
            )
            waiting.append(asyncio.create_task(appended.replicated()))
        await asyncio.sleep(0.05)
        assert checked == [2, 4, 6]  # each tried once as it was appended, then parked
        checked.clear()
        await follower_at(2)
        await asyncio.sleep(0.05)
        assert [t.done() for t in waiting] == [True, False, False]
        assert checked == [2]  # only the produce the HW reached
        checked.clear()
        await follower_at(6)
        results = await asyncio.wait_for(asyncio.gather(*waiting[1:]), 5)
        assert all(r[TP].error is None for r in results)
        assert sorted(checked) == [4, 6]

    asyncio.run(run())
    replicas.shutdown()


def test_a_produce_waiting_for_the_isr_answers_when_its_partition_leaves_this_broker(
    tmp_path: Path,
) -> None:
    """The controller removes a partition on its own thread: the acks=-1 produce waiting for
    a follower is answered on the loop, UNKNOWN_TOPIC_OR_PARTITION (as Kafka's DelayedProduce
    answers once the partition is no longer hosted), long before its timeout, and leaves
    nothing behind in the produce purgatory."""
    replicas = _setup(tmp_path, isr=(0, 1))

    async def run() -> tuple[object, float]:
        replicas.bind_loop(asyncio.get_running_loop())
        appended = await replicas.append_to_leaders(
            {TP: make_batch(2)}, required_acks=-1, timeout_ms=30_000
        )
        assert appended.replication is not None
        started = time.monotonic()
        remover = threading.Thread(target=replicas.remove_partition, args=(TP,))
        remover.start()
        results = await asyncio.wait_for(appended.replicated(), 5)
        remover.join()
        return results[TP].error, time.monotonic() - started

    error, waited_s = asyncio.run(run())
    assert isinstance(error, UnknownTopicOrPartitionError)
    assert waited_s < 5
    assert replicas._produce_purgatory._watchers == {}
    assert len(replicas._produce_purgatory) == 0
    replicas.shutdown()
