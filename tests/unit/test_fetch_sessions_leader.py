"""A leader answering a follower's fetches in a fetch session (KIP-227), through the general
Fetch handler and the follower fast path alike: the full fetch opens the session, an idle
incremental fetch waits and answers no partition, an append wakes it at once with the new
records, a moved high watermark is answered, and a follower that keeps fetching idle stays
caught up (its session's fetches count as fetches at the log end while the partition is
quiet), while one that stops fetching, or whose session forgets the partition, does not."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from storage_core.client.replica_fetch_codec import (
    PartitionFetch,
    decode_fetch_session_response,
    encode_fetch_request,
)
from storage_core.clock import SYSTEM_CLOCK
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.metrics.registry import KafkaMetricsRegistry
from storage_core.replication.partition import IsrUpdate, IsrUpdateSubmitter, Partition
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.fetch_session import FetchManager
from storage_core.server.handlers import fetch, follower_fetch
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.protocol import parse_request
from storage_core.server.request_context import RequestContext
from tests.conftest import make_batch

TP = TopicPartition("events", 0)
OTHER = TopicPartition("events", 1)
LEADER, FOLLOWER = 0, 1
EPOCH = 5


def frame(
    *partitions: PartitionFetch,
    session_id: int,
    session_epoch: int,
    wait_ms: int,
    forgotten: tuple[TopicPartition, ...] = (),
) -> bytes:
    body = encode_fetch_request(
        replica_id=FOLLOWER,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        partitions=partitions,
        forgotten=[(tp.topic, tp.partition) for tp in forgotten],
    )
    return b"\x00\x01\x00\x0c\x00\x00\x00\x07\x00\x01f\x00" + body


def at(tp: TopicPartition, offset: int) -> PartitionFetch:
    return PartitionFetch(tp.topic, tp.partition, EPOCH, offset, EPOCH, 0, 1 << 20)


class Leader:
    def __init__(
        self,
        tmp_path: Path,
        *,
        isr: tuple[int, ...] = (LEADER, FOLLOWER),
        submit_isr_update: IsrUpdateSubmitter | None = None,
    ) -> None:
        logs = LogManager([tmp_path / "logs"], LogConfig())
        logs.startup(background_tasks=False)
        self.replicas = ReplicaManager(logs, local_broker_id=LEADER, replica_lag_time_max_ms=400)
        for tp in (TP, OTHER):
            log = logs.get_or_create_log(tp, topic_id=Uuid.random())
            partition = Partition(
                tp,
                log.topic_id or Uuid.random(),
                log,
                local_broker_id=LEADER,
                on_high_watermark_advanced=self.replicas.on_high_watermark_advanced,
                replica_lag_time_max_ms=400,
                submit_isr_update=submit_isr_update,
            )
            partition.make_leader(leader_epoch=EPOCH, replicas=(LEADER, FOLLOWER), isr=isr)
            self.replicas.add_partition(partition)
        self.services = SimpleNamespace(
            replica_manager=self.replicas,
            config=KafkaConfig.from_props({"log.dirs": str(tmp_path / "logs")}),
            authorizer=None,
            clock=SYSTEM_CLOCK,
            fetch_manager=FetchManager.for_broker(
                max_entries=10, now_ms=SYSTEM_CLOCK.milliseconds, registry=KafkaMetricsRegistry()
            ),
        )

    async def answer(self, request: bytes, *, general: bool) -> tuple[int, int, dict[Any, Any]]:
        """(error code, session id, {partition: (HW, records)}) of the answer, by the general
        handler, or else by the fast path when it takes the request (one partition or none)."""
        decoded = None if general else follower_fetch.decode(request)
        if decoded is None:
            header, body = parse_request(request)
            ctx = RequestContext(
                api_key=1,
                api_version=12,
                correlation_id=header.correlation_id,
                client_id=header.client_id,
                client_host="127.0.0.1",
                services=self.services,  # type: ignore[arg-type]
            )
            parts = await fetch.handle(ctx, body)
        else:
            parts = await follower_fetch.handle(self.services, decoded)  # type: ignore[arg-type]
        try:
            data = parts.to_bytes()
        finally:
            parts.close()
        # size, correlation id, header tags
        error, session_id, partitions = decode_fetch_session_response(memoryview(data)[9:])
        return (
            error,
            session_id,
            {
                TopicPartition(p.topic, p.partition): (p.high_watermark, _unstamped(p.records))
                for p in partitions
            },
        )


def _unstamped(records: Any) -> bytes:
    """The batch without what the leader assigned: its base offset (bytes 0-7) and partition
    leader epoch (12-15), which its CRC does not cover."""
    data = bytes(records or b"")
    return data[8:12] + data[16:]


@pytest.mark.parametrize("general", [True, False], ids=["general handler", "fast path"])
def test_a_session_answers_only_what_moved(tmp_path: Path, general: bool) -> None:
    leader = Leader(tmp_path)
    replicas = leader.replicas

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        batch = make_batch(3)
        await replicas.append_records({TP: batch}, required_acks=1, timeout_ms=1000)
        # Full fetch at the log end of both (the follower has the batch): a session opens.
        error, session_id, answered = await leader.answer(
            frame(at(TP, 3), at(OTHER, 0), session_id=0, session_epoch=0, wait_ms=0),
            general=general,
        )
        assert error == 0 and session_id != 0 and set(answered) == {TP, OTHER}
        # The follower's fetch at 3 moved the HW to 3: answered even though nothing is sent.
        error, same, answered = await leader.answer(
            frame(session_id=session_id, session_epoch=1, wait_ms=0), general=general
        )
        assert (error, same) == (0, session_id)
        assert answered == {TP: (3, b"")}
        # Idle: the answer waits the whole max wait and names no partition.
        started = time.monotonic()
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=2, wait_ms=300), general=general
        ) == (0, session_id, {})
        assert time.monotonic() - started >= 0.25
        # Idle for longer than replica.lag.time.max.ms: the idle partitions are not read,
        # but the session's fetches count as the follower's fetches at their log end, so an
        # append does not make it look stale before its next fetch.
        for epoch in range(3, 8):
            await leader.answer(
                frame(session_id=session_id, session_epoch=epoch, wait_ms=100), general=general
            )
        other = make_batch(2)
        await replicas.append_records({OTHER: other}, required_acks=1, timeout_ms=1000)
        assert replicas.maybe_shrink_isr() == 0
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=8, wait_ms=0), general=general
        ) == (0, session_id, {OTHER: (0, _unstamped(other))})
        # A fetcher that did not take them (say a batch larger than its partition max bytes)
        # names nothing new: it is sent them again, though nothing moved meanwhile.
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=9, wait_ms=0), general=general
        ) == (0, session_id, {OTHER: (0, _unstamped(other))})
        # A parked fetch is woken at once by an append to any partition of its session.
        fetching = asyncio.ensure_future(
            leader.answer(
                frame(at(OTHER, 2), session_id=session_id, session_epoch=10, wait_ms=5000),
                general=general,
            )
        )
        await asyncio.sleep(0.1)
        assert not fetching.done()
        started = time.monotonic()
        more = make_batch(4)
        await replicas.append_records({TP: more}, required_acks=1, timeout_ms=1000)
        error, _same, answered = await asyncio.wait_for(fetching, 2)
        assert time.monotonic() - started < 1
        assert error == 0 and answered[TP] == (3, _unstamped(more))

    asyncio.run(run())
    replicas.shutdown()


def open_idle_session(leader: Leader) -> int:
    """A session of the follower at the log end of both partitions (empty), looked at once
    incrementally (which finds them quiet); its id."""

    async def run() -> int:
        leader.replicas.bind_loop(asyncio.get_running_loop())
        error, session_id, _answered = await leader.answer(
            frame(at(TP, 0), at(OTHER, 0), session_id=0, session_epoch=0, wait_ms=0),
            general=True,
        )
        assert error == 0 and session_id != 0
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=1, wait_ms=0), general=True
        ) == (0, session_id, {})
        return session_id

    return asyncio.run(run())


def append_to(leader: Leader, *tps: TopicPartition) -> None:
    """A batch appended to each of ``tps`` on the leader (acks=1)."""

    async def run() -> None:
        leader.replicas.bind_loop(asyncio.get_running_loop())
        for tp in tps:
            await leader.replicas.append_records(
                {tp: make_batch(2)}, required_acks=1, timeout_ms=1000
            )

    asyncio.run(run())


def isr_of(leader: Leader, tp: TopicPartition) -> tuple[int, ...]:
    partition = leader.replicas.hosted_partition(tp)
    assert isinstance(partition, Partition)
    return tuple(partition.isr)


def test_a_follower_that_stopped_fetching_leaves_the_isr_once_the_log_end_moves(
    tmp_path: Path,
) -> None:
    """Idle partitions keep a silent follower in the ISR (it is at their log end, as in
    Kafka); the first append shows it has not fetched for replica.lag.time.max.ms."""
    leader = Leader(tmp_path)
    open_idle_session(leader)
    time.sleep(0.5)  # replica.lag.time.max.ms is 400 ms: no fetch since
    assert leader.replicas.maybe_shrink_isr() == 0

    append_to(leader, TP)
    assert leader.replicas.maybe_shrink_isr() == 1
    assert isr_of(leader, TP) == (LEADER,) and isr_of(leader, OTHER) == (LEADER, FOLLOWER)
    leader.replicas.shutdown()


def test_a_partition_its_session_forgot_is_not_fetched_by_the_sessions_later_fetches(
    tmp_path: Path,
) -> None:
    """The follower keeps fetching OTHER in its session but removed TP from it: TP's
    follower is stale once TP's log end moves."""
    leader = Leader(tmp_path)
    session_id = open_idle_session(leader)

    async def run() -> None:
        leader.replicas.bind_loop(asyncio.get_running_loop())
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=2, wait_ms=0, forgotten=(TP,)),
            general=True,
        ) == (0, session_id, {})
        for epoch in range(3, 9):  # 600 ms of fetches of OTHER alone
            await leader.answer(
                frame(session_id=session_id, session_epoch=epoch, wait_ms=100), general=True
            )

    asyncio.run(run())
    append_to(leader, TP, OTHER)
    assert leader.replicas.maybe_shrink_isr() == 1
    assert isr_of(leader, TP) == (LEADER,) and isr_of(leader, OTHER) == (LEADER, FOLLOWER)
    leader.replicas.shutdown()


def test_a_follower_outside_the_isr_at_an_idle_log_end_joins_at_a_later_fetch(
    tmp_path: Path,
) -> None:
    """Such a follower's fetches are read and recorded one by one, as at every fetch in
    Kafka: an ISR expansion refused once (the state changed meanwhile) is proposed again at
    the session's next idle fetch."""
    proposed: list[IsrUpdate] = []
    leader = Leader(
        tmp_path, isr=(LEADER,), submit_isr_update=lambda _p, update: proposed.append(update)
    )
    session_id = open_idle_session(leader)  # its full fetch proposed the follower
    partition = leader.replicas.hosted_partition(TP)
    assert isinstance(partition, Partition)
    first = [u for u in proposed if u.topic_partition == TP]
    assert [u.isr for u in first] == [(LEADER, FOLLOWER)]
    partition.complete_isr_update(first[0], new_partition_epoch=None)  # refused

    async def idle_fetch(epoch: int) -> None:
        leader.replicas.bind_loop(asyncio.get_running_loop())
        assert await leader.answer(
            frame(session_id=session_id, session_epoch=epoch, wait_ms=0), general=True
        ) == (0, session_id, {})

    asyncio.run(idle_fetch(2))
    again = [u for u in proposed if u.topic_partition == TP][1:]
    assert [u.isr for u in again] == [(LEADER, FOLLOWER)]
    partition.complete_isr_update(again[0], new_partition_epoch=again[0].partition_epoch + 1)
    assert isr_of(leader, TP) == (LEADER, FOLLOWER)
    leader.replicas.shutdown()
