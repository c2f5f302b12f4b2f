"""The stage of the tiered-storage stories: a broker process, a remote store, the pictures.

A story drives a ``TieredStage`` step by step (after Kafka's ``TieredStorageTestBuilder``):
produce single-record batches, run ``storage-core tier`` in-process, wait for the broker,
and after each step assert the picture of what sits where::

    local: [20-29][30-34]* remote: [0-9][10-19][20-29] | earliest=0 local=20 tiered=29 end=35

- ``local``: the partition directory's segment files (``[base-last]``, both inclusive; the
  active segment is starred and shown ``[base-]*`` while empty), files renamed for
  deletion left out;
- ``remote``: the COPY_SEGMENT_FINISHED segments a fresh client-mode RLMM lists, which must
  be exactly the segments whose ``.log`` object the remote store holds (nothing orphaned,
  nothing missing);
- ListOffsets v9 of the partition: ``earliest`` (-2, the log start offset), ``local`` (-4,
  the local log start offset), ``tiered`` (-5, highest copied offset, -1 for none) and
  ``end`` (-1, the high watermark).

Every topic has ``index.interval.bytes=1`` and ``segment.index.bytes=12*N``, so with one
record per batch (and increasing timestamps) each segment holds exactly N records.

The pieces of the picture are ``tests.scenarios.harness.segment_picture``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kafka import KafkaProducer

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.broker_process import BrokerProcess
from tests.scenarios.harness import clients, segment_picture
from tests.scenarios.harness.waiting import settle
from tests.tiered_broker_support import LATEST, list_offset

RECORDS_PER_SEGMENT = 10
PICTURE_WAIT_S = 15.0


def value_of(offset: int) -> bytes:
    return f"value-{offset:04d}".encode()


def topic_configs(**extra: str) -> dict[str, str]:
    """N records per segment (see the module docstring), plus ``extra`` (``_`` for ``.``)."""
    configs = {
        "index.interval.bytes": "1",
        "segment.index.bytes": str(12 * RECORDS_PER_SEGMENT),
    }
    configs.update({key.replace("_", "."): value for key, value in extra.items()})
    return configs


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteStore:
    """How the broker and the tier command reach the remote store of one run."""

    name: str
    broker_settings: dict[str, str]

    def manager(self) -> RemoteStorageManager:
        class_name = self.broker_settings["remote.log.storage.manager.class.name"]
        rsm_config = {k: v for k, v in self.broker_settings.items() if k.startswith("rsm.config.")}
        return load_remote_storage_manager(class_name, rsm_config)


class TieredStage:
    """One broker process with remote storage on, shared by the stories of one store."""

    def __init__(self, broker: BrokerProcess, store: RemoteStore) -> None:
        self.broker = broker
        self.store = store
        self._timestamp_ms = int(time.time() * 1000)
        self._producer: KafkaProducer | None = None

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    # ------------------------------------------------------------------ topics
    def create_topic(self, topic: str, configs: dict[str, str]) -> Uuid:
        with KafkaCluster(self.bootstrap) as cluster:
            created = KafkaAdminClient(cluster).create_topic(
                topic, num_partitions=1, replication_factor=1, configs=configs
            )
        assert created.topic_id is not None
        return created.topic_id

    def alter_topic(self, topic: str, **configs: str) -> None:
        clients.alter_topic(self.bootstrap, topic, **configs)

    def delete_topic(self, topic: str) -> None:
        with KafkaCluster(self.bootstrap) as cluster:
            KafkaAdminClient(cluster).delete_topics([topic])

    def delete_records(self, topic: str, before_offset: int) -> None:
        clients.delete_records(self.bootstrap, topic, 0, before_offset)

    # ------------------------------------------------------------------ records
    def produce(self, topic: str, count: int, *, timestamp_ms: int | None = None) -> None:
        """``count`` single-record batches with increasing timestamps (from ``timestamp_ms``
        when given, else after the last ones); values are ``value_of(offset)``."""
        if self._producer is None:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", linger_ms=0
            )
        if timestamp_ms is not None:
            self._timestamp_ms = timestamp_ms
        start = self.list_offset(topic, LATEST)
        for i in range(count):
            self._timestamp_ms += 1
            metadata = self._producer.send(
                topic, value=value_of(start + i), partition=0, timestamp_ms=self._timestamp_ms
            ).get(timeout=10)
            assert metadata.offset == start + i

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    # ------------------------------------------------------------------ the tier command
    def tier(self, topic: str, *args: str) -> list[str]:
        """``storage-core tier --topic T ARGS`` in-process, with the broker's config (which
        names the remote store); returns its stdout lines and checks the exit code."""
        code, lines = clients.tier_in_process(
            self.bootstrap, str(self.broker.config_path), topic, *args
        )
        assert code == 0, lines
        assert lines[-1].startswith("summary "), lines
        return lines

    # ------------------------------------------------------------------ offsets
    def list_offset(self, topic: str, timestamp: int) -> int:
        """ListOffsets v9 for partition 0."""
        return list_offset(self.bootstrap, topic, timestamp)[0]

    # ------------------------------------------------------------------ the picture
    def local_segments(self, topic: str) -> list[int]:
        return segment_picture.local_segments(self.broker.log_dir, topic, 0) or []

    def remote_segments(self, topic_id: Uuid, topic: str) -> list[tuple[int, int]]:
        """``(start, end)`` (inclusive) of the COPY_SEGMENT_FINISHED segments; checks that
        the store holds the ``.log`` of exactly those segments."""
        tip = TopicIdPartition(topic_id, TopicPartition(topic, 0))
        finished = segment_picture.finished_segments(self.bootstrap, tip)
        return segment_picture.remote_ranges(finished, self.stored_segments(topic_id, topic))

    def stored_segments(self, topic_id: Uuid, topic: str) -> list[tuple[int, Uuid]]:
        """``(base offset, segment id)`` of the segments with any object in the store; each
        of them must have its ``.log``."""
        rsm = self.store.manager()
        try:
            keys = [info.key for info in rsm.list_objects()]  # type: ignore[attr-defined]
            prefix = rsm.prefix  # type: ignore[attr-defined]
        finally:
            rsm.close()
        return segment_picture.stored_segments(keys, prefix, topic_id, topic, 0)

    def picture(self, topic: str, topic_id: Uuid) -> str:
        end = self.list_offset(topic, LATEST)
        local = segment_picture.render_local(self.local_segments(topic), end)
        remote = segment_picture.render_remote(self.remote_segments(topic_id, topic))
        offsets = segment_picture.render_offsets(
            lambda timestamp: self.list_offset(topic, timestamp), end
        )
        return f"local: {local or '-'} remote: {remote} | {offsets}"

    def expect(self, topic: str, topic_id: Uuid, expected: str, timeout_s: float = PICTURE_WAIT_S):
        """Wait (the broker's retention and log start moves are periodic) until the picture
        is ``expected``; print it for the story's log."""
        seen = settle(
            lambda: self.picture(topic, topic_id), expected, timeout_s=timeout_s, poll_s=0.1
        )
        print(f"{topic}: {seen}")
        assert seen == expected


@contextlib.contextmanager
def stage_of(broker: BrokerProcess, store: RemoteStore) -> Iterator[TieredStage]:
    stage = TieredStage(broker, store)
    try:
        yield stage
    finally:
        stage.close()


# ---------------------------------------------------------------------------- consumers
def consume_kafka_python(bootstrap: str, topic: str, *, start: int | None) -> list[int]:
    """Offsets read by kafka-python from ``start`` (``None``: from earliest) to the end,
    each value checked against ``value_of``."""
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3_000,
        max_partition_fetch_bytes=512,  # several fetches per remote segment
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        end = consumer.end_offsets([tp])[tp]
        offsets = []
        for message in consumer:
            assert message.value == value_of(message.offset)
            offsets.append(message.offset)
            if message.offset + 1 >= end:
                break
        return offsets
    finally:
        consumer.close()


def consume_confluent(bootstrap: str, topic: str, *, start: int | None) -> list[int]:
    """As ``consume_kafka_python``, with confluent-kafka (librdkafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer  # noqa: PLC0415
    from confluent_kafka import TopicPartition as ConfluentTopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"scenario-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 1024,
        }
    )
    try:
        _low, end = consumer.get_watermark_offsets(
            ConfluentTopicPartition(topic, 0), timeout=10, cached=False
        )
        first = OFFSET_BEGINNING if start is None else start
        consumer.assign([ConfluentTopicPartition(topic, 0, first)])
        offsets: list[int] = []
        deadline = time.monotonic() + 20
        while (not offsets or offsets[-1] + 1 < end) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.value() == value_of(message.offset())
            offsets.append(message.offset())
        return offsets
    finally:
        consumer.close()


def read_with_both_clients(bootstrap: str, topic: str, *, start: int | None) -> list[int]:
    """The offsets both reference clients read (they must agree)."""
    with_python = consume_kafka_python(bootstrap, topic, start=start)
    with_librdkafka = consume_confluent(bootstrap, topic, start=start)
    assert with_python == with_librdkafka
    return with_python
