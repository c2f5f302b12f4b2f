"""A client-mode RLMM catching up with ``__remote_log_metadata`` decodes each record about
once: its Fetches ask for about the records one read applies, instead of 1 MiB of which a
read kept ``max_records_per_read`` and the next Fetch decoded the rest again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_core.client import KafkaCluster
from storage_core.client import consumer as client_consumer
from storage_core.client.producer import ACKS_ALL, KafkaProducer
from storage_core.records import SimpleRecord
from storage_core.tiered.metadata import RemoteLogSegmentState, serde
from storage_core.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from storage_core.tiered.topic_based_rlmm import REMOTE_LOG_METADATA_TOPIC_NAME, ConsumerTaskConfig
from storage_core.tiered.topic_based_rlmm.consumer_task import ConsumerTask
from storage_core.tiered.topic_based_rlmm.readers import ClientMetadataReader
from tests.broker_process import BrokerProcess
from tests.remote_log_metadata_events import copy_started, state_update, user_partition

SEGMENTS = 5_000  # 10,000 events of about 190 bytes: 1.8 MiB
RECORDS_PER_READ = 500
EVENTS_PER_SEND = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.topic.num.partitions": "1",
        },
    ) as process:
        yield process


def test_catching_up_decodes_each_record_about_once(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    tip = user_partition("caught-up", 0)
    events = []
    for offset in range(SEGMENTS):
        segment = copy_started(tip, offset, offset, {0: offset})
        events += [segment, state_update(segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)]
    with KafkaCluster(broker.bootstrap) as cluster:
        producer = KafkaProducer(cluster, acks=ACKS_ALL)
        for first in range(0, len(events), EVENTS_PER_SEND):
            producer.send(
                REMOTE_LOG_METADATA_TOPIC_NAME,
                0,
                [
                    SimpleRecord(key=None, value=serde.serialize(e))
                    for e in events[first : first + EVENTS_PER_SEND]
                ],
            )
    decoded: list[int] = []
    plain = client_consumer.decode_records

    def counted(data: bytes, **kwargs: Any) -> Any:
        records, next_offset = plain(data, **kwargs)
        decoded.append(len(records))
        return records, next_offset

    monkeypatch.setattr(client_consumer, "decode_records", counted)
    cluster = KafkaCluster(broker.bootstrap)
    task = ConsumerTask(
        ClientMetadataReader(cluster),
        RemoteLogMetadataTopicPartitioner(1),
        config=ConsumerTaskConfig(max_records_per_read=RECORDS_PER_READ),
    )
    try:
        task.track([tip])
        deadline = time.monotonic() + 120
        while not task.is_ready(tip):
            assert time.monotonic() < deadline, "the consumer did not catch up in 120 s"
            task.poll_once()
        cache = task.cache(tip)
        assert cache is not None
        assert len(cache.list_all_remote_log_segments()) == SEGMENTS
        assert task.records_read == len(events)
        # a fixed 1 MiB per Fetch decoded 10.5 records per record applied here
        assert sum(decoded) < 1.2 * len(events), decoded
    finally:
        cluster.close()
