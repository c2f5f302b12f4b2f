"""Partition reassignment (KIP-455) on four broker processes and a real ZooKeeper, driven by
kafka-python's KafkaAdminClient, ``storage-core reassign-partitions`` and raw frames.

A reassignment that only removes or reorders replicas completes at once. One that adds a
replica completes once the new replica has caught up and joined the ISR; to look at one while
it is pending (listed, cancellable, resumed by a new controller) the tests cut the added
broker's fetchers: every broker advertises a ``KafkaRelay`` in front of it, and the relays drop
the connections of ``broker-<id>-fetcher-*`` (the client id of a follower's fetcher). One
cluster for the module; the failover test SIGKILLs the controller's broker and starts it again.
See test_reassignment_data_movement.py for a reassignment that moves data.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import NoReassignmentInProgressError
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.chaos.tcp_relay import KafkaRelay
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration import raw_wire

cluster_support.require_java()

pytestmark = pytest.mark.timeout(300)

BROKERS = (1, 2, 3, 4)
DEATH_S = SESSION_TIMEOUT_MS / 1000 + 20  # a SIGKILLed broker's session expires, then some


class Cluster:
    def __init__(
        self, brokers: dict[int, BrokerProcess], directory: Path, relays: dict[int, KafkaRelay]
    ) -> None:
        self.brokers = brokers
        self.directory = directory
        self.relays = relays
        self.admin: AdminClient = cluster_support.admin(brokers)
        eventually(
            lambda: len(self.admin.describe_cluster().result(10).nodes) == len(BROKERS),
            what="four brokers",
        )

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.process is not None]

    def controller(self) -> int:
        some = self.brokers[self.live()[0]].bootstrap
        return eventually(
            lambda: (c := cluster_support.controller_id(some)) in self.live() and c,
            timeout_s=DEATH_S,
            what="a live controller",
        )

    def kafka_admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=10_000)

    def create(self, topic: str, assignment: list[list[int]]) -> None:
        new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)
        self.admin.create_topics([new])[topic].result(30)
        for broker in self.live():
            eventually(
                lambda b=broker: (
                    all(
                        s[0] >= 0
                        for s in partition_states(self.brokers[b].bootstrap, topic).values()
                    )
                    and len(partition_states(self.brokers[b].bootstrap, topic)) == len(assignment)
                ),
                what=f"{topic} online on broker {broker}",
            )

    def replicas(self, broker: int, topic: str) -> dict[int, tuple[int, ...]]:
        """partition -> replicas as one broker's Metadata answers."""
        (answer,) = cluster_support.metadata(self.brokers[broker].bootstrap, topic).topics
        return {p.partition_index: tuple(p.replica_nodes) for p in answer.partitions}

    def states(self, topic: str, broker: int | None = None) -> dict[int, Any]:
        return partition_states(self.brokers[broker or self.live()[0]].bootstrap, topic)

    @contextmanager
    def fetchers_cut(self, follower: int) -> Iterator[None]:
        """The follower's fetchers reach no leader (its replicas stay out of the ISR) until the
        block ends."""
        pattern = f"broker-{follower}-fetcher-*"
        for relay in self.relays.values():
            relay.cut(pattern)
        try:
            yield
        finally:
            for relay in self.relays.values():
                relay.heal(pattern)

    def hosts(self, broker: int, topic: str, partition: int) -> bool:
        """Whether the broker has the partition's directory in its log dir."""
        return (self.brokers[broker].log_dir / f"{topic}-{partition}").is_dir()

    def storage_core(self, *argv: str, expect_code: int = 0) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "reassign-partitions",
                "--bootstrap-server",
                self.bootstrap_servers,
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == expect_code, (done.stdout, done.stderr)
        return done.stdout + done.stderr

    def reassignment_file(self, name: str, partitions: dict[tuple[str, int], list[int]]) -> str:
        path = self.directory / f"{name}.json"
        path.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": t, "partition": p, "replicas": r}
                        for (t, p), r in partitions.items()
                    ],
                }
            )
        )
        return str(path)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    relay_ports = {b: free_port() for b in BROKERS}
    advertised = {
        b: {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"}
        for b, port in relay_ports.items()
    }
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.brokers_in_cluster(
            zk, tmp_path_factory.mktemp("brokers"), BROKERS, per_broker=advertised
        ) as (brokers, _connect),
    ):
        relays = {
            b: KafkaRelay(target_port=brokers[b].port, port=port).start()
            for b, port in relay_ports.items()
        }
        try:
            yield Cluster(brokers, tmp_path_factory.mktemp("files"), relays)
        finally:
            for relay in relays.values():
                relay.stop()


def consume(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5_000)
    tp = KpTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = [record.value for record in consumer]
    consumer.close()
    return values


def test_removing_replicas_completes_at_once_moves_the_leader_and_deletes_them(
    cluster: Cluster,
) -> None:
    cluster.create("shrink", [[1, 2, 3]])
    cluster.create("shrink-rf2", [[1, 2]])
    assert cluster.states("shrink") == {0: (1, 0, (1, 2, 3))}
    assert cluster.states("shrink-rf2") == {0: (1, 0, (1, 2))}
    assert cluster.hosts(1, "shrink", 0) and cluster.hosts(1, "shrink-rf2", 0)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=10)
    producer.send("shrink-rf2", b"before", partition=0).get(30)

    admin = cluster.kafka_admin()
    tp3, tp2 = KpTopicPartition("shrink", 0), KpTopicPartition("shrink-rf2", 0)
    assert admin.alter_partition_reassignments({tp3: [2, 3], tp2: [2]}) == {tp3: None, tp2: None}

    # broker 1 led both: a reassignment election gives them to broker 2 (the first target
    # replica in the ISR) at the next epoch; then broker 1 leaves the ISRs (one more epoch);
    # the assignment itself becomes the target last
    for broker in (2, 3, 4):
        for topic, isr, replicas in (("shrink", (2, 3), (2, 3)), ("shrink-rf2", (2,), (2,))):
            eventually(
                lambda b=broker, t=topic, i=isr, r=replicas: (
                    cluster.states(t, b) == {0: (2, 2, i)} and cluster.replicas(b, t) == {0: r}
                ),
                what=f"broker {broker} shows {topic} reassigned",
            )
    assert admin.list_partition_reassignments() == {}

    # broker 1 deleted its replicas (StopReplica with delete); the others kept theirs
    eventually(
        lambda: not cluster.hosts(1, "shrink", 0) and not cluster.hosts(1, "shrink-rf2", 0),
        what="broker 1's replicas deleted",
    )
    assert cluster.hosts(2, "shrink", 0) and cluster.hosts(3, "shrink", 0)
    assert cluster.hosts(2, "shrink-rf2", 0)
    assert "replicas reassigned away deleted" in cluster.brokers[1].output()

    # the producer follows the leader to broker 2; broker 2 had replicated what broker 1 was
    # acknowledged for (acks=all), so every record is read back from it
    sent = [f"after-{i}".encode() for i in range(5)]
    for value in sent:
        producer.send("shrink-rf2", value, partition=0).get(30)
    producer.send("shrink", b"after", partition=0).get(30)  # acked by leader 2
    producer.close(10)
    assert consume(cluster.bootstrap_servers, "shrink-rf2", 0) == [b"before", *sent]
    admin.close()


def test_reordering_completes_at_once_and_the_new_preferred_replica_is_elected(
    cluster: Cluster,
) -> None:
    cluster.create("reorder", [[1, 2, 3]])
    path = cluster.reassignment_file("reorder", {("reorder", 0): [3, 2, 1]})
    out = cluster.storage_core("--execute", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"reorder","partition":0,"replicas":[1,2,3],'
        '"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignment for reorder-0",
    ]
    for broker in BROKERS:
        eventually(
            lambda b=broker: cluster.replicas(b, "reorder") == {0: (3, 2, 1)},
            what=f"broker {broker} shows the new order",
        )
    verified = cluster.storage_core("--verify", "--reassignment-json-file", path)
    assert "Reassignment of partition reorder-0 is completed." in verified
    # the leader stays (in the targets, alive) at the next epoch; nothing was deleted
    assert cluster.states("reorder") == {0: (1, 1, (1, 2, 3))}
    assert all(cluster.hosts(b, "reorder", 0) for b in (1, 2, 3))

    results = cluster.admin.elect_leaders(
        ElectionType.PREFERRED, [CkTopicPartition("reorder", 0)]
    ).result(30)
    assert list(results.values()) == [None]
    eventually(
        lambda: cluster.states("reorder") == {0: (3, 2, (1, 2, 3))},
        what="broker 3 elected as the preferred replica",
    )


def test_a_pending_reassignment_is_listed_and_cancelled(cluster: Cluster) -> None:
    cluster.create("grow", [[1, 2, 3]])
    assert not cluster.hosts(4, "grow", 0)
    with cluster.fetchers_cut(4):  # broker 4 hosts the added replica, never catches up
        path = cluster.reassignment_file("grow", {("grow", 0): [1, 2, 4]})
        cluster.storage_core("--execute", "--reassignment-json-file", path)

        admin = cluster.kafka_admin()
        tp = KpTopicPartition("grow", 0)
        assert admin.list_partition_reassignments() == {
            tp: {"replicas": [1, 2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}
        }
        assert cluster.storage_core("--list").splitlines() == [
            "Current partition reassignments:",
            "grow-0: replicas: 1,2,4,3. adding: 4. removing: 3.",
        ]
        assert "Reassignment of partition grow-0 is still in progress." in cluster.storage_core(
            "--verify", "--reassignment-json-file", path
        )
        # every broker learns RS = TRS + ORS, at the next leader epoch; broker 4 starts hosting
        for broker in BROKERS:
            eventually(
                lambda b=broker: cluster.replicas(b, "grow") == {0: (1, 2, 4, 3)},
                what=f"broker {broker} shows the reassigning replicas",
            )
        assert cluster.states("grow") == {0: (1, 1, (1, 2, 3))}
        eventually(lambda: cluster.hosts(4, "grow", 0), what="broker 4 hosts the added replica")
        more = cluster.storage_core(
            "--execute", "--reassignment-json-file", path, expect_code=1
        )  # another is in progress
        assert "Cannot execute because there is an existing partition assignment." in more

        out = cluster.storage_core("--cancel", "--reassignment-json-file", path)
        assert "Successfully cancelled partition reassignment for: grow-0" in out
        for broker in BROKERS:
            eventually(
                lambda b=broker: cluster.replicas(b, "grow") == {0: (1, 2, 3)},
                what=f"broker {broker} shows the original replicas",
            )
        eventually(
            lambda: not cluster.hosts(4, "grow", 0), what="broker 4 deleted the added replica"
        )
        assert all(cluster.hosts(b, "grow", 0) for b in (1, 2, 3))
        assert admin.list_partition_reassignments() == {}
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
        assert "None of the specified partition reassignments are active." in cluster.storage_core(
            "--cancel", "--reassignment-json-file", path
        )
        admin.close()


def alter_raw(
    port: int, version: int, topics: list[tuple[str, int, list[int] | None]], **fields: Any
) -> Any:
    module = raw_wire.request_classes(45, version)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, replicas in topics:
        by_topic.setdefault(topic, []).append(
            module.ReassignablePartition(
                partition_index=partition, replicas=None if replicas is None else tuple(replicas)
            )
        )
    with raw_wire.connect(port) as sock:
        return raw_wire.call(
            sock,
            45,
            version,
            timeout=datetime.timedelta(seconds=10),
            topics=tuple(
                module.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            ),
            **fields,
        )


def list_raw(port: int, topics: Any) -> Any:
    with raw_wire.connect(port) as sock:
        return raw_wire.call(sock, 46, 0, timeout=datetime.timedelta(seconds=10), topics=topics)


def test_bad_requests_get_kafkas_errors(cluster: Cluster) -> None:
    cluster.create("strict", [[1, 2, 3]])
    controller = cluster.controller()
    other = next(b for b in cluster.live() if b != controller)

    refused = alter_raw(cluster.brokers[other].port, 0, [("strict", 0, [1, 2])])
    assert (refused.error_code, refused.responses) == (ErrorCode.not_controller, ())
    listed = list_raw(cluster.brokers[other].port, None)
    assert (listed.error_code, listed.topics) == (ErrorCode.not_controller, ())

    answer = alter_raw(
        cluster.brokers[controller].port,
        0,
        [
            ("missing", 0, [1]),
            ("strict", 7, [1]),
            ("strict", 0, []),
            ("strict", 0, [1, 1]),
        ],
    )
    assert answer.error_code == ErrorCode.none
    # the last target of a partition named twice wins: [1, 1]
    results = {
        (t.name, p.partition_index): (p.error_code, p.error_message)
        for t in answer.responses
        for p in t.partitions
    }
    assert results == {
        ("missing", 0): (ErrorCode.unknown_topic_or_partition, "The partition does not exist."),
        ("strict", 7): (ErrorCode.unknown_topic_or_partition, "The partition does not exist."),
        ("strict", 0): (
            ErrorCode.invalid_replica_assignment,
            "Duplicate replica ids in partition reassignment replica list: [1, 1]",
        ),
    }

    def one(version: int, replicas: list[int] | None, **fields: Any) -> tuple[ErrorCode, str]:
        response = alter_raw(
            cluster.brokers[controller].port, version, [("strict", 0, replicas)], **fields
        )
        ((partition,),) = [t.partitions for t in response.responses]
        return partition.error_code, partition.error_message

    assert one(0, []) == (
        ErrorCode.invalid_replica_assignment,
        "Empty replica list specified in partition reassignment.",
    )
    assert one(0, [1, 99]) == (
        ErrorCode.invalid_replica_assignment,
        "Replica assignment has brokers that are not alive. Replica list: [99], live broker"
        " list: [1, 2, 3, 4]",
    )
    assert one(0, [-1]) == (
        ErrorCode.invalid_replica_assignment,
        "Invalid broker id in replica list: [-1]",
    )
    assert one(0, None) == (
        ErrorCode.no_reassignment_in_progress,
        "No partition reassignment is in progress for this topic-partition.",
    )
    assert one(1, [1, 2], allow_replication_factor_change=False) == (
        ErrorCode.invalid_replication_factor,
        "The replication factor is changed from 3 to 2",
    )
    # nothing changed: no reassignment in progress, the replicas as they were
    listed = list_raw(cluster.brokers[controller].port, None)
    assert (listed.error_code, listed.topics) == (ErrorCode.none, ())
    assert cluster.replicas(controller, "strict") == {0: (1, 2, 3)}

    # and through kafka-python: the error classes a client sees
    admin = cluster.kafka_admin()
    tp = KpTopicPartition("strict", 0)
    result = admin.alter_partition_reassignments({tp: [1, 99]})
    assert result[tp].__name__ == "InvalidReplicationAssignmentError"
    admin.close()


def test_a_pending_reassignment_survives_a_controller_failover(cluster: Cluster) -> None:
    controller = cluster.controller()
    a, b, c = (x for x in cluster.live() if x != controller)
    cluster.create("survive", [[controller, a, b]])
    with cluster.fetchers_cut(c):  # broker c hosts the added replica, never catches up
        admin = cluster.kafka_admin()
        tp = KpTopicPartition("survive", 0)
        assert admin.alter_partition_reassignments({tp: [controller, a, c]}) == {tp: None}
        pending = {
            tp: {
                "replicas": [controller, a, c, b],
                "adding_replicas": [c],
                "removing_replicas": [b],
            }
        }
        assert admin.list_partition_reassignments() == pending
        admin.close()

        cluster.brokers[controller].kill()  # SIGKILL: the controller and the partition's leader
        new_controller = cluster.controller()
        assert new_controller != controller
        admin = cluster.kafka_admin()
        assert eventually(admin.list_partition_reassignments, timeout_s=DEATH_S) == pending
        # the new controller resumed it (one more epoch) after electing a new leader
        states = eventually(
            lambda: (s := cluster.states("survive", new_controller)) and s[0][0] == a and s,
            timeout_s=DEATH_S,
            what="the partition led by the next in-sync replica",
        )
        assert controller not in states[0][2]
        out = cluster.storage_core(
            "--cancel",
            "--reassignment-json-file",
            cluster.reassignment_file("survive", {("survive", 0): [controller, a, c]}),
        )
        assert "Successfully cancelled partition reassignment for: survive-0" in out
        eventually(lambda: not cluster.hosts(c, "survive", 0), what="the added replica deleted")
        assert cluster.replicas(new_controller, "survive") == {0: (controller, a, b)}
        admin.close()

    cluster.brokers[controller].start()  # whole again
    eventually(
        lambda: len(cluster.admin.describe_cluster().result(10).nodes) == len(BROKERS),
        what="four brokers again",
    )
