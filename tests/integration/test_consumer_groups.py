"""Consumer groups with real clients over loopback: ``subscribe()``, rebalances, commits and a
broker restart.

kafka-python: two consumers split a 4-partition topic, commit, leave; the broker restarts
(SIGTERM) and two new consumers of the group read exactly what was produced after the commit.
confluent-kafka and aiokafka: a subscribed consumer commits; a new one resumes there, across a
restart too. Every consumed record must equal what was produced (partition, offset, key, value).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(240)

Record = tuple[int, int, bytes | None, bytes]  # partition, offset, key, value
DEADLINE_S = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        yield process


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(
    broker: BrokerProcess, topic: str, tag: str, count: int, partitions: int
) -> list[Record]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    futures = []
    for i in range(count):
        key = f"{tag}-k{i}".encode()
        value = f"{tag}-value-{i}".encode()
        futures.append(
            (key, value, producer.send(topic, key=key, value=value, partition=i % partitions))
        )
    producer.flush()
    sent = []
    for key, value, future in futures:
        metadata = future.get(timeout=30)
        sent.append((metadata.partition, metadata.offset, key, value))
    producer.close()
    return sorted(sent)


def committed_offsets(broker: BrokerProcess, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        offsets = admin.list_group_offsets(group)
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets[group].items()}


def end_offsets(sent: list[Record]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for partition, offset, _key, _value in sent:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


# ====================================================================== kafka-python
class KafkaPythonMember(threading.Thread):
    """One subscribed kafka-python consumer, polled by its own thread.

    Polls are long (``POLL_MS``): kafka-python 3.0.12 never re-enables its heartbeat when a
    JoinGroup outlives the ``poll()`` that sent it, so the rebalance must fit in one poll.
    """

    POLL_MS = 3000

    def __init__(self, broker: BrokerProcess, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        self.consumer.subscribe([topic])
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._assigned: set[int] = set()
        self._stopping = threading.Event()
        self._commit_wanted = threading.Event()
        self._committed = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                batches = self.consumer.poll(timeout_ms=self.POLL_MS)
                with self._lock:
                    for records in batches.values():
                        self._records.extend(
                            (r.partition, r.offset, r.key, r.value) for r in records
                        )
                    self._assigned = {tp.partition for tp in self.consumer.assignment()}
                if self._commit_wanted.is_set():
                    self.consumer.commit()
                    self._commit_wanted.clear()
                    self._committed.set()
        except BaseException as error:  # reported by the test thread
            self.error = error
        finally:
            self.consumer.close()  # LeaveGroup

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    @property
    def assigned(self) -> set[int]:
        with self._lock:
            return set(self._assigned)

    def commit(self) -> None:
        self._committed.clear()
        self._commit_wanted.set()
        assert self._committed.wait(DEADLINE_S), "commit did not happen"

    def close(self) -> None:
        self._stopping.set()
        self.join(DEADLINE_S)
        assert not self.is_alive()
        assert self.error is None, self.error


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def is_split(members: list[KafkaPythonMember], partitions: int) -> bool:
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(partitions)) and all(m.assigned for m in members)


def received(members: list[KafkaPythonMember]) -> list[Record]:
    return sorted(r for m in members for r in m.records)


def test_kafka_python_group_splits_commits_and_resumes_after_restart(
    broker: BrokerProcess,
) -> None:
    topic, group, partitions = "orders", "kp-group", 4
    create_topic(broker, topic, partitions)
    first = [KafkaPythonMember(broker, topic, group) for _ in range(2)]
    try:
        wait_until(lambda: is_split(first, partitions), "the partitions to be split")
        halves = [m.assigned for m in first]
        assert all(len(h) == 2 for h in halves)
        before = produce(broker, topic, "before", 80, partitions)
        wait_until(lambda: len(received(first)) >= len(before), "the first records")
        time.sleep(0.5)  # anything delivered twice would show up now
        assert received(first) == before
        for member, half in zip(first, halves, strict=True):
            assert {r[0] for r in member.records} == half  # each read only its partitions
            member.commit()
        assert committed_offsets(broker, group) == end_offsets(before)
    finally:
        for member in first:
            member.close()

    after = produce(broker, topic, "after", 40, partitions)
    broker.restart()
    assert committed_offsets(broker, group) == end_offsets(before)

    second = [KafkaPythonMember(broker, topic, group) for _ in range(2)]
    try:
        wait_until(lambda: len(received(second)) >= len(after), "the records after the commit")
        wait_until(lambda: is_split(second, partitions), "the partitions to be split again")
        time.sleep(0.5)
        assert received(second) == after  # from the committed offsets on: nothing old, none lost
        for member in second:
            member.commit()
    finally:
        for member in second:
            member.close()
    assert committed_offsets(broker, group) == end_offsets(before + after)


def test_kafka_python_rebalances_when_a_member_leaves(broker: BrokerProcess) -> None:
    topic, group, partitions = "events", "kp-leave", 4
    create_topic(broker, topic, partitions)
    a, b = (KafkaPythonMember(broker, topic, group) for _ in range(2))
    try:
        wait_until(lambda: is_split([a, b], partitions), "the partitions to be split")
        b.close()
        wait_until(lambda: a.assigned == set(range(partitions)), "a to take every partition")
        sent = produce(broker, topic, "solo", 20, partitions)
        wait_until(lambda: len(a.records) >= len(sent), "the records")
        assert sorted(a.records) == sent
    finally:
        a.close()
        if b.is_alive():
            b.close()


# ====================================================================== confluent-kafka
def confluent_consume(broker: BrokerProcess, topic: str, group: str, count: int) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
        }
    )
    consumer.subscribe([topic])
    got: list[Record] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.partition(), message.offset(), message.key(), message.value()))
        extra = consumer.poll(0.5)
        assert extra is None or extra.error() is not None, "a record was delivered twice"
        if got:
            committed = consumer.commit(asynchronous=False)
            assert committed is not None
            assert all(tp.error is None for tp in committed)
    finally:
        consumer.close()
    return sorted(got)


def test_confluent_kafka_subscribe_commit_and_resume(broker: BrokerProcess) -> None:
    topic, group, partitions = "payments", "ck-group", 3
    create_topic(broker, topic, partitions)
    first = produce(broker, topic, "one", 30, partitions)
    assert confluent_consume(broker, topic, group, len(first)) == first
    assert committed_offsets(broker, group) == end_offsets(first)
    second = produce(broker, topic, "two", 15, partitions)
    assert confluent_consume(broker, topic, group, len(second)) == second
    third = produce(broker, topic, "three", 9, partitions)
    broker.restart()
    assert confluent_consume(broker, topic, group, len(third)) == third
    assert committed_offsets(broker, group) == end_offsets(first + second + third)


# ====================================================================== aiokafka
async def aiokafka_consume(
    broker: BrokerProcess, topic: str, group: str, count: int
) -> list[Record]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    got: list[Record] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend((r.partition, r.offset, r.key, r.value) for r in records)
        assert not await consumer.getmany(timeout_ms=500), "a record was delivered twice"
        await consumer.commit()
    finally:
        await consumer.stop()
    return sorted(got)


def test_aiokafka_group_commit_and_resume(broker: BrokerProcess) -> None:
    topic, group, partitions = "clicks", "aio-group", 2
    create_topic(broker, topic, partitions)
    first = produce(broker, topic, "a", 20, partitions)
    assert asyncio.run(aiokafka_consume(broker, topic, group, len(first))) == first
    second = produce(broker, topic, "b", 10, partitions)
    broker.restart()
    assert asyncio.run(aiokafka_consume(broker, topic, group, len(second))) == second
    assert committed_offsets(broker, group) == end_offsets(first + second)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Empty"
        assert described["protocol_type"] == "consumer"
    finally:
        admin.close()


def test_a_consumer_without_subscription_commits_offsets(broker: BrokerProcess) -> None:
    create_topic(broker, "known", 1)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="manual")
    try:
        consumer.commit({KTopicPartition("known", 0): OffsetAndMetadata(5, "", -1)})
        assert committed_offsets(broker, "manual") == {0: 5}
    finally:
        consumer.close()
