"""The stage of the tiered-storage stories on a replicated cluster (after Kafka's
``TieredStorageTestBuilder`` on two brokers): broker processes 1 and 2 on a real ZooKeeper,
one remote store (a local directory) they share, ``storage-core tier`` run in-process for
one broker at a time (as that broker's tiering job would be), real clients.

After each step a story asks for the picture of one partition and waits until it shows::

    1: [4-]* 2: [4-]* remote: [0-1][2-3] | earliest=0 local=4 tiered=3 end=5

- ``1:``, ``2:``: each replica's segment files (``[base-last]``, both inclusive; the active
  segment starred, ``[base-]*`` while empty), of the brokers hosting the partition;
- ``remote``: the COPY_SEGMENT_FINISHED segments a fresh client-mode RLMM lists, which must be
  exactly the segments whose objects the store holds (nothing orphaned, nothing missing);
- the leader's ListOffsets v9 answers: ``earliest`` (-2), ``local`` (-4), ``tiered`` (-5) and
  ``end`` (-1).

Topics have ``index.interval.bytes=1`` and ``segment.index.bytes=12*N`` and the stage
produces single-record batches, so every segment holds N records, on every replica.

The brokers are the harness's ``BrokerSet``; the pieces of the picture are
``tests.scenarios.harness.segment_picture``.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient as PythonAdmin
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.client import KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from tests import cluster_support
from tests.prometheus_text import parse_exposition
from tests.scenarios.harness import clients, segment_picture
from tests.scenarios.harness.brokers import BrokerSet
from tests.scenarios.harness.waiting import settle, until
from tests.tiered_broker_support import LATEST, list_offset

BROKER_IDS = (1, 2)
PICTURE_WAIT_S = 20.0
CLIENT_TIMEOUT_S = 20.0
_REMOTE_FETCHES = "kafka_server_brokertopicmetrics_remotefetchrequestspersec_count"


def value_of(partition: int, offset: int) -> bytes:
    return f"v{partition}-{offset}".encode()


def tiered_topic_configs(records_per_segment: int, **extra: str) -> dict[str, str]:
    """``records_per_segment`` single-record batches per segment, remote storage on with
    ``local.retention.bytes=1`` (unless ``extra``, ``_`` for ``.``, says otherwise)."""
    configs = {
        "index.interval.bytes": "1",
        "segment.index.bytes": str(12 * records_per_segment),
        "remote.storage.enable": "true",
        "local.retention.bytes": "1",
    }
    configs.update({key.replace("_", "."): value for key, value in extra.items()})
    return configs


class ClusterTieredStage(BrokerSet):
    """Brokers 1 and 2 with remote storage on; broker 1 starts first (the controller)."""

    def __init__(self, zookeeper: ZooKeeperEnsemble, directory: Path) -> None:
        self.zookeeper = zookeeper
        self.directory = directory
        self.remote_dir = directory / "remote-tier"
        self.metrics_ports = {broker_id: free_port() for broker_id in BROKER_IDS}
        settings = {
            "zookeeper.session.timeout.ms": str(cluster_support.SESSION_TIMEOUT_MS),
            "offsets.topic.replication.factor": "1",
            "auto.leader.rebalance.enable": "false",
            "auto.create.topics.enable": "false",
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(self.remote_dir),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "100",
            "log.segment.delete.delay.ms": "0",
            "replica.fetch.backoff.ms": "100",
        }
        per_broker = {b: {"metrics.port": str(port)} for b, port in self.metrics_ports.items()}
        super().__init__(
            zookeeper, directory, BROKER_IDS, settings, chroot="cluster", per_broker=per_broker
        )
        self._producer: KafkaProducer | None = None
        self._timestamp_ms = int(time.time() * 1000)

    def stop(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
            self._producer = None
        super().stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    # ------------------------------------------------------------------ topics
    def create_topic(
        self, topic: str, assignment: Sequence[Sequence[int]], configs: Mapping[str, str]
    ) -> Uuid:
        """Partition ``p`` on the brokers ``assignment[p]``, the first one leading; waits
        until both brokers report those leaders; returns the topic id."""
        new_topic = NewTopic(
            topic,
            num_partitions=len(assignment),
            replica_assignment=[list(r) for r in assignment],
            config=dict(configs),
        )
        admin = self.admin()  # kept alive until the answer is in
        admin.create_topics([new_topic])[topic].result(CLIENT_TIMEOUT_S)
        for partition, replicas in enumerate(assignment):
            self.wait_leader(topic, partition, replicas[0])
        return self.topic_id(topic)

    def topic_id(self, topic: str) -> Uuid:
        with KafkaCluster(self.bootstrap) as cluster:
            described = cluster.refresh_metadata([topic]).topic(topic)
        assert described is not None and described.topic_id is not None, topic
        return described.topic_id

    def create_partitions(self, topic: str, assignment: Sequence[Sequence[int]]) -> None:
        """CreatePartitions: the new partitions on ``assignment`` (first replica leading);
        waits for their leaders."""
        total = len(self.leaders_of(topic)) + len(assignment)
        admin = self.admin()
        new = NewPartitions(topic, total, replica_assignment=[list(r) for r in assignment])
        admin.create_partitions([new])[topic].result(CLIENT_TIMEOUT_S)
        for offset, replicas in enumerate(assignment):
            self.wait_leader(topic, total - len(assignment) + offset, replicas[0])
        if self._producer is not None:  # its metadata knows the old partitions only
            self._producer.close(timeout=5)
            self._producer = None

    def leaders_of(self, topic: str) -> dict[int, tuple[int, int]]:
        return cluster_support.partition_leaders(self.brokers[1].bootstrap, topic)

    def alter_topic(self, topic: str, **configs: str) -> None:
        """IncrementalAlterConfigs SET of ``configs`` (``_`` for ``.``) on ``topic``."""
        clients.alter_topic(self.bootstrap, topic, **configs)

    def delete_topic(self, topic: str) -> None:
        admin = self.admin()
        admin.delete_topics([topic])[topic].result(CLIENT_TIMEOUT_S)

    def wait_gone(self, broker_id: int, topic: str) -> None:
        """Waits until ``broker_id`` holds no partition directory of ``topic``."""
        log_dir = self.brokers[broker_id].log_dir
        until(
            lambda: (
                not any(
                    path.name.rsplit("-", 1)[0] == topic
                    for path in log_dir.iterdir()
                    if path.is_dir()
                )
            ),
            what=f"broker {broker_id} without {topic}",
        )

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader, leader epoch) as broker 1's Metadata answers."""
        return cluster_support.partition_leaders(self.brokers[1].bootstrap, topic)[partition]

    def wait_leader(self, topic: str, partition: int, broker_id: int) -> int:
        """Waits until every running broker names ``broker_id`` leader; its epoch."""

        def agreed() -> int | None:
            seen = {
                cluster_support.partition_leaders(b.bootstrap, topic)[partition]
                for b in self.brokers.values()
                if b.process is not None
            }
            if len(seen) != 1:
                return None
            ((leader, epoch),) = seen
            return epoch + 1 if leader == broker_id else None  # epoch 0 is falsy

        return until(agreed, what=f"broker {broker_id} leading {topic}-{partition}") - 1

    def reassign(self, topic: str, partition: int, replicas: Sequence[int]) -> None:
        """AlterPartitionReassignments to ``replicas``; waits until it completed (the new
        replicas caught up and joined the ISR, the removed ones left)."""
        admin = PythonAdmin(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        try:
            tp = KTopicPartition(topic, partition)
            admin.alter_partition_reassignments({tp: list(replicas)})
            until(
                lambda: admin.list_partition_reassignments() == {},
                what=f"the reassignment of {topic}-{partition} to {list(replicas)} done",
            )
        finally:
            admin.close()

    def move_leader(self, topic: str, partition: int, replicas: Sequence[int]) -> int:
        """Kafka's ``expectLeader(..., electLeader=true)``: reassign the partition to
        ``replicas`` (the first is the preferred leader), elect it; its new leader epoch."""
        self.reassign(topic, partition, replicas)
        if self.leader(topic, partition)[0] != replicas[0]:
            admin_client = self.admin()
            results = admin_client.elect_leaders(
                ElectionType.PREFERRED, [CTopicPartition(topic, partition)]
            )
            for error in results.result(CLIENT_TIMEOUT_S).values():
                assert error is None, error
        return self.wait_leader(topic, partition, replicas[0])

    def hand_over_leadership(self, topic: str, partition: int) -> int:
        """The leader shuts down cleanly (controlled shutdown: the other replica of the ISR
        takes over in the next epoch) and starts again as a follower; waits until it is back
        in the ISR. Returns the new leader epoch.

        Kafka's stories move leaders by reassignment and preferred election, which in
        KRaft bumps the epoch once; a ZooKeeper-mode controller (this one, as Kafka's) bumps
        it on the reassignment too, so the stories that count epochs use this."""
        old_leader, old_epoch = self.leader(topic, partition)
        (new_leader,) = [b for b in BROKER_IDS if b != old_leader]
        self.brokers[old_leader].stop()
        epoch = self.wait_leader(topic, partition, new_leader)
        self.brokers[old_leader].start()
        until(
            lambda: (
                len(
                    cluster_support.partition_states(self.brokers[new_leader].bootstrap, topic)[
                        partition
                    ][2]
                )
                == len(BROKER_IDS)
            ),
            what=f"broker {old_leader} back in the ISR of {topic}-{partition}",
        )
        assert epoch == old_epoch + 1, (old_epoch, epoch)
        return epoch

    # ------------------------------------------------------------------ records
    def produce(
        self, topic: str, partition: int, count: int, *, timestamp_ms: int | None = None
    ) -> list[int]:
        """``count`` single-record batches (acks=all) with increasing timestamps (the first
        ``timestamp_ms`` when given, else 1 ms after the previous one); values
        ``value_of(partition, offset)``. Returns the offsets."""
        if self._producer is None:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                acks="all",
                linger_ms=0,
                retries=10,
                retry_backoff_ms=200,
                enable_idempotence=False,
            )
        if timestamp_ms is not None:
            self._timestamp_ms = timestamp_ms - 1
        start = self.list_offset(topic, partition, LATEST)[0]
        offsets = []
        for i in range(count):
            self._timestamp_ms += 1
            metadata = self._producer.send(
                topic,
                value=value_of(partition, start + i),
                partition=partition,
                timestamp_ms=self._timestamp_ms,
            ).get(timeout=CLIENT_TIMEOUT_S)
            offsets.append(metadata.offset)
        assert offsets == list(range(start, start + count)), offsets
        return offsets

    def consume(self, topic: str, partition: int, start: int) -> list[int]:
        """Offsets kafka-python reads from ``start`` up to the end (values checked)."""
        read = clients.read_to_end(self.bootstrap, topic, partition, start=start)
        for record in read:
            assert record.value == value_of(partition, record.offset)
        return [record.offset for record in read]

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        clients.delete_records(
            self.bootstrap, topic, partition, before_offset, request_timeout_ms=10_000
        )

    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """ListOffsets v9 to the partition's leader: (offset, leader epoch)."""
        return list_offset(self.bootstrap, topic, timestamp, partition=partition)

    # ------------------------------------------------------------------ the tier command
    def tier(self, broker_id: int, topic: str, *args: str) -> list[str]:
        """``storage-core tier --topic T ARGS`` in-process with broker ``broker_id``'s config
        (its log dir, broker id and remote store): that broker's tiering job. Returns the
        stdout lines; the exit code must be 0."""
        code, lines = clients.tier_in_process(
            self.bootstrap, str(self.brokers[broker_id].config_path), topic, *args
        )
        print("\n".join(f"tier[{broker_id}] {line}" for line in lines))
        assert code == 0, lines
        return lines

    def remote_fetches(self, broker_id: int) -> int:
        """RemoteFetchRequestsPerSec count of ``broker_id`` (all topics)."""
        url = f"http://127.0.0.1:{self.metrics_ports[broker_id]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            samples = parse_exposition(response.read().decode("utf-8"))[1]
        return int(samples.get((_REMOTE_FETCHES, frozenset()), 0))

    # ------------------------------------------------------------------ the picture
    def local_segments(self, broker_id: int, topic: str, partition: int) -> list[int] | None:
        return segment_picture.local_segments(self.log_dir(broker_id), topic, partition)

    def remote_segments(self, topic_id: Uuid, topic: str, partition: int) -> list[tuple[int, int]]:
        """(start, end) (inclusive) of the COPY_SEGMENT_FINISHED segments; the store must hold
        objects of exactly those, each with its ``.log``."""
        tip = TopicIdPartition(topic_id, TopicPartition(topic, partition))
        finished = segment_picture.finished_segments(self.bootstrap, tip)
        stored = self.stored_segments(topic_id, topic, partition)
        return segment_picture.remote_ranges(finished, stored)

    def stored_segments(self, topic_id: Uuid, topic: str, partition: int) -> list[tuple[int, Uuid]]:
        """(base offset, segment id) of the partition's segments with any object in the
        store; each one must have its ``.log``."""
        if not self.remote_dir.is_dir():
            return []
        store = LocalTieredStorage(self.remote_dir, fsync=False)
        keys = [info.key for info in store.list_objects()]
        return segment_picture.stored_segments(keys, store.prefix, topic_id, topic, partition)

    def picture(self, topic: str, topic_id: Uuid, partition: int = 0) -> str:
        end = self.list_offset(topic, partition, LATEST)[0]
        replicas = []
        for broker_id in BROKER_IDS:
            bases = self.local_segments(broker_id, topic, partition)
            if bases is None:
                continue
            replicas.append(f"{broker_id}: {segment_picture.render_local(bases, end) or '-'}")
        remote = segment_picture.render_remote(self.remote_segments(topic_id, topic, partition))
        offsets = segment_picture.render_offsets(
            lambda timestamp: self.list_offset(topic, partition, timestamp)[0], end
        )
        return f"{' '.join(replicas)} remote: {remote} | {offsets}"

    def expect(
        self,
        topic: str,
        topic_id: Uuid,
        expected: str,
        partition: int = 0,
        timeout_s: float = PICTURE_WAIT_S,
    ) -> None:
        """Waits until the picture of ``topic-partition`` is ``expected`` (retention, log
        start moves and replication are periodic); prints it for the story's log."""
        seen = settle(
            lambda: self.picture(topic, topic_id, partition),
            expected,
            timeout_s=timeout_s,
            poll_s=0.1,
        )
        print(f"{topic}-{partition}: {seen}")
        assert seen == expected
