"""restore_topic on three brokers (``tests/integration/restore_cluster_support``): a replicated,
remote-enabled topic restored from the bucket, read back record for record from the remote
tier, served by every replica, and surviving the loss of its leader.

    orders, ledger: 3 partitions, RF 3           keyed records with headers (acks=all), each
                                                 broker tiers what it leads; topic_manifests;
                                                 group "billing" committed, backed up
    orders: broker 1 shut down halfway           orders-0 goes on in epoch 1 on broker 2
    restore orders --target orders-copy          while orders lives: every record, key,
                                                 header and leader epoch of the bucket reads
                                                 back from the remote tier; ListOffsets
                                                 earliest/latest on each leader = the
                                                 restored range; ISR = 3; the target's
                                                 partitions lead above the restored epochs
    SIGKILL a target partition's leader          the new leader serves the same history and
                                                 takes the next record at E + 1
    DeleteTopics ledger (objects kept)           restore ledger (same name) --restore-offsets:
                                                 every record back; "billing" resumes at its
                                                 backed-up offsets (the records it consumed
                                                 after the backup come again, none skipped)
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import backup_consumer_offsets, restore_topic, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.client.admin_requests import AlterConfigOp
from storage_core.common import Uuid
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType
from tests import cluster_support
from tests.integration.restore_cluster_support import (
    ASSIGNMENT,
    RECORDS,
    TieredBrokers,
    commit,
    committed,
    read,
    remote_segments,
    seed_topic,
    tiered_brokers,
    wait_for_isr,
)
from tests.tiered_broker_support import EARLIEST, LATEST, list_offset

cluster_support.require_java()
pytestmark = pytest.mark.timeout(420)

SOURCE = "orders"
DELETED = "ledger"
BACKED_UP = {0: 10, 1: 25, 2: 0}  # "billing" in ledger at the backup
CONSUMED_AFTER = {0: 30, 1: 39, 2: 5}  # ... and after it


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TieredBrokers, dict[str, tuple[Uuid, dict[int, int]]]]]:
    with tiered_brokers(zookeeper, tmp_path_factory.mktemp("restore-cluster")) as brokers:
        seeded = {
            SOURCE: seed_topic(brokers, SOURCE, leader_change=True),
            DELETED: seed_topic(brokers, DELETED),
        }
        code, summary = brokers.job(topic_manifests)
        assert code == 0, summary
        commit(brokers.bootstrap, "billing", DELETED, BACKED_UP)
        code, summary = brokers.job(backup_consumer_offsets)
        assert code == 0, summary
        commit(brokers.bootstrap, "billing", DELETED, CONSUMED_AFTER)
        yield brokers, seeded


def test_a_topic_restored_beside_its_source_is_served_by_every_replica_and_survives_its_leader(
    cluster: tuple[TieredBrokers, dict[str, tuple[Uuid, dict[int, int]]]],
) -> None:
    brokers, seeded = cluster
    source_id, ends = seeded[SOURCE]
    target = "orders-copy"
    code, summary = brokers.job(
        restore_topic, "--topic", SOURCE, "--target", target, "--wait-s", "60"
    )
    assert code == 0, summary
    assert summary["counts"]["partitions_restored"] == 3
    segments = remote_segments(brokers.bootstrap, source_id, SOURCE)
    assert summary["counts"]["segments_restored"] == sum(len(s) for s in segments.values())

    bootstrap = brokers.bootstrap
    for partition, end in ends.items():
        source = read(bootstrap, SOURCE, partition, 0, end)
        restored = read(bootstrap, target, partition, 0, end)
        assert [r[0] for r in restored] == list(range(end + 1))
        assert restored == source  # every offset, leader epoch, key, value and header
        if partition == 0:
            assert {record[1] for record in restored} == {0, 1}
        assert list_offset(bootstrap, target, EARLIEST, partition=partition)[0] == 0
        assert list_offset(bootstrap, target, LATEST, partition=partition)[0] == end + 1
    # every replica follows the restored log: each partition's ISR is all three
    wait_for_isr(brokers, target, 3)
    # nothing of the target is local: the whole history was read from the remote tier
    for broker in brokers.brokers.values():
        for partition in range(len(ASSIGNMENT)):
            logs = list((broker.log_dir / f"{target}-{partition}").glob("*.log"))
            assert sum(path.stat().st_size for path in logs) == 0, logs

    states = cluster_support.partition_states(brokers.brokers[1].bootstrap, target)
    assert all(epoch >= 2 for _leader, epoch, _isr in states.values()), states
    leader, epoch, _isr = states[0]
    brokers.brokers[leader].kill()
    try:
        alive = next(b for b in brokers.brokers.values() if b.process is not None)
        _new_leader, new_epoch, _ = cluster_support.eventually(
            lambda: (
                state
                if (state := cluster_support.partition_states(alive.bootstrap, target)[0])[0]
                not in (-1, leader)
                else None
            ),
            what=f"a new leader of {target}-0 after broker {leader} died",
        )
        assert new_epoch > epoch
        bootstrap = brokers.bootstrap
        assert list_offset(bootstrap, target, EARLIEST)[0] == 0
        assert list_offset(bootstrap, target, LATEST)[0] == ends[0] + 1
        assert read(bootstrap, target, 0, 0, ends[0]) == read(bootstrap, SOURCE, 0, 0, ends[0])
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        offsets: list[int] = []
        producer.produce(
            target, value=b"after-the-leader-died", partition=0,
            on_delivery=lambda error, message: offsets.append(message.offset()),
        )  # fmt: skip
        assert producer.flush(30) == 0
        assert offsets == [ends[0] + 1]
    finally:
        brokers.brokers[leader].start()
    wait_for_isr(brokers, target, 3)


def test_a_deleted_topic_restored_under_its_name_resumes_its_group(
    cluster: tuple[TieredBrokers, dict[str, tuple[Uuid, dict[int, int]]]],
) -> None:
    brokers, seeded = cluster
    source_id, ends = seeded[DELETED]
    before = {p: read(brokers.bootstrap, DELETED, p, 0, end) for p, end in ends.items()}
    admin = cluster_support.admin(brokers.brokers)  # kept alive until the answer is in
    admin.delete_topics([DELETED])[DELETED].result(30)

    def gone() -> bool:
        with KafkaCluster(brokers.bootstrap) as client:
            found = client.refresh_metadata([DELETED]).topic(DELETED)
        return found is None or found.error != 0

    cluster_support.eventually(gone, what=f"{DELETED} to be deleted", timeout_s=60)

    code, summary = brokers.job(
        restore_topic, "--topic", DELETED, "--restore-offsets", "--wait-s", "60"
    )
    assert code == 0, summary
    assert summary["counts"]["partitions_restored"] == 3
    assert summary["counts"]["groups_restored"] == 1
    with KafkaCluster(brokers.bootstrap) as client:
        restored_id = client.refresh_metadata([DELETED]).topic(DELETED).topic_id
    assert restored_id not in (None, source_id)
    for partition, end in ends.items():
        assert read(brokers.bootstrap, DELETED, partition, 0, end) == before[partition]
    assert committed(brokers.bootstrap, "billing", DELETED) == BACKED_UP

    # The group resumes where the backup had it: what it consumed after comes again.
    consumer = Consumer(
        {
            "bootstrap.servers": brokers.bootstrap,
            "group.id": "billing",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([DELETED])
    first: dict[int, int] = {}
    try:
        # Until every partition gave its first record, at most 60 s: a bound on polls would
        # be spent on the records of the partitions read first.
        deadline = time.monotonic() + 60
        while len(first) < len(ASSIGNMENT) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            first.setdefault(message.partition(), message.offset())
    finally:
        consumer.close()
    assert first == BACKED_UP
    assert all(BACKED_UP[p] <= CONSUMED_AFTER[p] < RECORDS for p in BACKED_UP)


def test_a_restore_killed_after_its_partitions_came_online_finishes_with_records_written_since(
    cluster: tuple[TieredBrokers, dict[str, tuple[Uuid, dict[int, int]]]],
) -> None:
    """Once remote.log.restore.enable is set the partitions are online and producers write
    (a topic restored under its own name is written by the producers that wrote it before);
    a run killed before it removed the restore configs is finished by the next run all the
    same."""
    brokers, seeded = cluster
    _, ends = seeded[SOURCE]
    target = "orders-online"
    code, summary = brokers.job(
        restore_topic, "--topic", SOURCE, "--target", target, "--partitions", "0"
    )
    assert code == 0, summary
    # What a run killed after enabling the restore, before removing its configs, leaves.
    with KafkaCluster(brokers.bootstrap) as client:
        KafkaAdminClient(client).incremental_alter_configs(
            ConfigResourceType.TOPIC,
            target,
            [
                AlterConfigOp(name=name, op=AlterConfigOpType.SET, value=value)
                for name, value in (
                    ("remote.log.restore.leader.epoch", "1"),
                    ("remote.log.restore.enable", "true"),
                )
            ],
        )
    producer = Producer({"bootstrap.servers": brokers.bootstrap, "acks": "all"})
    offsets: list[int] = []
    producer.produce(
        target, value=b"written-while-restoring", partition=0,
        on_delivery=lambda error, message: offsets.append(message.offset()),
    )  # fmt: skip
    assert producer.flush(30) == 0
    assert offsets == [ends[0] + 1]

    code, summary = brokers.job(
        restore_topic, "--topic", SOURCE, "--target", target, "--partitions", "0",
        "--wait-s", "10",
    )  # fmt: skip
    assert code == 0, summary
    assert summary["counts"]["segments_already_restored"] == summary["counts"]["segments_planned"]
    with KafkaCluster(brokers.bootstrap) as client:
        configs = {
            e.name: e.value
            for e in KafkaAdminClient(client).describe_configs(ConfigResourceType.TOPIC, target)
        }
    assert configs["remote.log.restore.leader.epoch"] == "-1"
    assert configs["remote.log.restore.enable"] == "false"
    assert list_offset(brokers.bootstrap, target, LATEST)[0] == ends[0] + 2
