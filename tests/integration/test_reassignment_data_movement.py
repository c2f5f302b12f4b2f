"""A reassignment that moves a partition's data (KIP-455): four broker processes on a real
ZooKeeper, a topic with RF 2 on brokers [1, 2] holding several segments, reassigned to [3, 4]
while an idempotent acks=all producer keeps writing to it.

Brokers 3 and 4 fetch with a small ``replica.fetch.max.bytes``, so catching up takes many
fetches and the reassignment is seen pending meanwhile. Afterwards: broker 3 leads, brokers 1
and 2 deleted their replicas, every acknowledged record is read back exactly once where it was
acknowledged, and the logs of brokers 3 and 4 hold the very batches broker 1 had (same offsets,
leader epochs and CRCs, read with ``storage-core dump-log``).

    before:  1 [seg seg seg seg ...] (leader)   2 [same]        3 -          4 -
    during:  RS = [3, 4, 1, 2], adding 3, 4: they fetch from 1 and join the ISR
    after:   1 -   2 -   3 [same ... + new] (leader)   4 [same ... + new]
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.chaos import ledger
from tests.chaos.replica_logs import compare_replicas, dump_replica
from tests.cluster_support import eventually, partition_states

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

TOPIC = "moving"
BROKERS = (1, 2, 3, 4)
SEGMENT_BYTES = 256 * 1024
PRELOAD_RECORDS = 6000
PRELOAD_VALUE_BYTES = 1000  # ~6 MB: over 20 segments
SMALL_FETCH_BYTES = 4096  # brokers 3 and 4 fetch about one batch per request


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, BrokerProcess]]:
    slow = {"replica.fetch.max.bytes": str(SMALL_FETCH_BYTES)}
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.brokers_in_cluster(
            zk,
            tmp_path_factory.mktemp("brokers"),
            BROKERS,
            {"auto.create.topics.enable": "false"},
            per_broker={3: slow, 4: slow},
        ) as (started, _connect),
    ):
        yield started


def bootstrap(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def preload(servers: str) -> list[bytes]:
    """PRELOAD_RECORDS records of PRELOAD_VALUE_BYTES, acks=all, in small batches."""
    producer = Producer(
        {"bootstrap.servers": servers, "acks": "all", "linger.ms": 2, "batch.size": 16384}
    )
    values = [b"pre-%06d-" % i + b"x" * (PRELOAD_VALUE_BYTES - 11) for i in range(PRELOAD_RECORDS)]
    errors: list[str] = []
    for value in values:
        while True:
            try:
                producer.produce(
                    TOPIC,
                    value,
                    partition=0,
                    on_delivery=lambda e, _m: errors.append(str(e)) if e else None,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return values


def test_replicas_move_to_new_brokers_with_their_data(
    brokers: dict[int, BrokerProcess], tmp_path: Path
) -> None:
    servers = bootstrap(brokers)
    admin = AdminClient({"bootstrap.servers": servers})
    new = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[1, 2]],
        config={"segment.bytes": str(SEGMENT_BYTES)},
    )
    admin.create_topics([new])[TOPIC].result(30)
    for broker in brokers.values():
        eventually(
            lambda b=broker: partition_states(b.bootstrap, TOPIC) == {0: (1, 0, (1, 2))},
            what="the topic led by broker 1 with ISR [1, 2]",
        )
    preloaded = preload(servers)
    partition_dir = f"{TOPIC}-0"
    assert len(list((brokers[1].log_dir / partition_dir).glob("*.log"))) >= 10

    # broker 1's copy as it is now (nothing is being written): the reference
    shutil.copytree(brokers[1].log_dir / partition_dir, tmp_path / "broker-1")
    reference = dump_replica(1, tmp_path / "broker-1")
    assert reference.batches[-1].last_offset == PRELOAD_RECORDS - 1

    acks = ledger.Ledger()
    producer = ledger.LedgerProducer(
        producer_id=0, bootstrap=servers, topic=TOPIC, partitions=1, ledger=acks, interval_s=0.002
    )
    producer.start()
    kafka_admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=10_000)
    tp = KpTopicPartition(TOPIC, 0)
    started = time.monotonic()
    try:
        assert kafka_admin.alter_partition_reassignments({tp: [3, 4]}) == {tp: None}
        # catching up on ~6 MB a batch at a time: pending meanwhile, with RS = TRS + ORS
        assert kafka_admin.list_partition_reassignments() == {
            tp: {"replicas": [3, 4, 1, 2], "adding_replicas": [3, 4], "removing_replicas": [1, 2]}
        }
        eventually(
            lambda: kafka_admin.list_partition_reassignments() == {},
            timeout_s=90,
            what="the reassignment completed",
        )
        catch_up_s = time.monotonic() - started
        for broker in BROKERS:
            eventually(
                lambda b=broker: (
                    partition_states(brokers[b].bootstrap, TOPIC)[0][0::2] == (3, (3, 4))
                ),
                what=f"broker {broker} shows broker 3 leading with ISR [3, 4]",
            )
        eventually(
            lambda: not any((brokers[b].log_dir / partition_dir).exists() for b in (1, 2)),
            what="brokers 1 and 2 deleted their replicas",
        )
        time.sleep(0.5)  # the producer goes on writing to the new leader a little
    finally:
        unanswered = producer.stop()
        kafka_admin.close()
    assert producer.fatal is None and unanswered == 0
    assert acks.failures() == []
    print(f"caught up and moved in {catch_up_s:.1f} s; {len(acks.acks())} records acked meanwhile")

    # every record: the preloaded ones at offsets 0.., then every acknowledged one where acked
    consumed = ledger.read_partitions(servers, TOPIC, 1)
    assert [r.value for r in consumed[:PRELOAD_RECORDS]] == preloaded
    report = ledger.check(acks.acks(), consumed[PRELOAD_RECORDS:])
    assert report.ok, report.summary()
    assert report.acknowledged > 0 and report.consumed == len(consumed) - PRELOAD_RECORDS

    # brokers 3 and 4 hold broker 1's batches, and the same log as each other up to the HW
    high_watermark = ledger.high_watermarks(servers, TOPIC, 1)[0]
    moved = {b: dump_replica(b, brokers[b].log_dir / partition_dir) for b in (3, 4)}
    before = compare_replicas(partition_dir, {1: reference, **moved}, PRELOAD_RECORDS)
    assert before.ok, [str(d) for d in before.differences]
    assert before.batches_compared == 3 * len(reference.batches)
    after = compare_replicas(partition_dir, moved, high_watermark)
    assert after.ok, [str(d) for d in after.differences]
    assert len(list((brokers[3].log_dir / partition_dir).glob("*.log"))) >= 10
