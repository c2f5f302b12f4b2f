"""Cluster admin APIs on three broker processes and a real ZooKeeper: ElectLeaders through
confluent-kafka's AdminClient (preferred and unclean) and with raw frames (NOT_CONTROLLER from
a broker that is not the controller), DescribeTopicPartitions page by page with raw frames,
and ``storage-core topics describe`` with its two filters while brokers are down.

One cluster for the module. The controller's broker stays up throughout; the story test kills
the two other brokers (one then returns)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import (
    ReplicaAssignment,
    encode_topic_assignment,
    topic_path,
)
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import BROKER_IDS, SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration import raw_wire

cluster_support.require_java()

pytestmark = pytest.mark.timeout(300)

DEATH_S = SESSION_TIMEOUT_MS / 1000 + 20  # a SIGKILLed broker's session expires, then some


class Cluster:
    def __init__(self, brokers: dict[int, BrokerProcess], connect: str) -> None:
        self.brokers = brokers
        self.connect = connect
        self.admin: AdminClient = cluster_support.admin(brokers)
        self.controller = eventually(
            lambda: (c := cluster_support.controller_id(brokers[1].bootstrap)) in BROKER_IDS and c,
            what="a controller",
        )
        self.x, self.y = (b for b in BROKER_IDS if b != self.controller)

    def bootstrap(self, broker_id: int | None = None) -> str:
        return self.brokers[broker_id or self.controller].bootstrap

    def port(self, broker_id: int | None = None) -> int:
        return self.brokers[broker_id or self.controller].port

    def create(self, topic: str, assignment: list[list[int]]) -> None:
        new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)
        self.admin.create_topics([new])[topic].result(30)
        eventually(
            lambda: all(p[0] >= 0 for p in partition_states(self.bootstrap(), topic).values()),
            what=f"{topic} online",
        )

    def elect(self, election: ElectionType, topic: str, partition: int = 0) -> int | None:
        """The partition's error code (None: elected) as confluent-kafka reports it."""
        tp = CkTopicPartition(topic, partition)
        results = self.admin.elect_leaders(election, [tp]).result(30)
        (error,) = [
            e for key, e in results.items() if (key.topic, key.partition) == (topic, partition)
        ]
        return None if error is None else int(error.code())

    def storage_core(self, *argv: str) -> str:
        command = [sys.executable, "-m", "storage_core.cli", "topics", *argv]
        done = subprocess.run(
            [*command, "--bootstrap-server", self.bootstrap()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    zk: ZooKeeperEnsemble
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.three_brokers(zk, tmp_path_factory.mktemp("brokers")) as (brokers, conn),
    ):
        yield Cluster(brokers, conn)


def elect_raw(port: int, version: int, **fields: Any) -> Any:
    with raw_wire.connect(port) as sock:
        return raw_wire.call(sock, 43, version, timeout=datetime.timedelta(seconds=10), **fields)


def describe_partitions(port: int, topics: list[str], limit: int, cursor: Any = None) -> Any:
    module = raw_wire.request_classes(75, 0)
    with raw_wire.connect(port) as sock:
        return raw_wire.call(
            sock,
            75,
            0,
            topics=tuple(module.TopicRequest(name=t) for t in topics),
            response_partition_limit=limit,
            cursor=cursor,
        )


def test_elect_leaders_only_on_the_controller_and_describe_topic_partitions_pages(
    cluster: Cluster,
) -> None:
    cluster.create("paged", [[1], [2], [3], [1], [2]])
    module = raw_wire.request_classes(43, 2)
    wanted = (module.TopicPartitions(topic="paged", partitions=(0, 1)),)

    # a broker that is not the controller refuses the whole request
    refused = elect_raw(cluster.port(cluster.x), 2, election_type=0, topic_partitions=wanted)
    assert refused.error_code == ErrorCode.not_controller
    ((topic, parts),) = [(r.topic, r.partition_result) for r in refused.replica_election_results]
    assert topic == "paged"
    assert [(p.partition_id, p.error_code) for p in parts] == [
        (0, ErrorCode.not_controller),
        (1, ErrorCode.not_controller),
    ]
    at_v0 = elect_raw(cluster.port(cluster.y), 0, topic_partitions=wanted)  # no top-level error
    assert {p.error_code for r in at_v0.replica_election_results for p in r.partition_result} == {
        ErrorCode.not_controller
    }
    # the controller: nothing to do; unknown partitions and election types named
    unknown = (module.TopicPartitions(topic="paged", partitions=(0, 9)),)
    answered = elect_raw(cluster.port(), 2, election_type=0, topic_partitions=unknown)
    assert answered.error_code == ErrorCode.none
    assert [
        (p.partition_id, p.error_code, p.error_message)
        for p in answered.replica_election_results[0].partition_result
    ] == [
        (0, ErrorCode.election_not_needed, "Leader election not needed for topic partition."),
        (9, ErrorCode.unknown_topic_or_partition, "The partition does not exist."),
    ]
    bad_type = elect_raw(cluster.port(), 1, election_type=3, topic_partitions=wanted)
    assert bad_type.error_code == ErrorCode.invalid_request

    # DescribeTopicPartitions, two partitions a page, from any broker
    port = cluster.port(cluster.y)
    names = ["paged", "zz-missing", "bad name"]
    first = describe_partitions(port, names, 2)
    assert [(t.name, t.error_code) for t in first.topics] == [
        ("bad name", ErrorCode.invalid_topic_exception),
        ("paged", ErrorCode.none),
    ]
    pages = [first.topics[1]]
    cursor = first.next_cursor
    assert (cursor.topic_name, cursor.partition_index) == ("paged", 2)
    second = describe_partitions(port, names, 2, cursor)
    pages += second.topics
    cursor = second.next_cursor
    assert (cursor.topic_name, cursor.partition_index) == ("paged", 4)
    last = describe_partitions(port, names, 2, cursor)
    assert [(t.name, t.error_code) for t in last.topics] == [
        ("paged", ErrorCode.none),
        ("zz-missing", ErrorCode.unknown_topic_or_partition),
    ]
    assert last.next_cursor is None
    pages.append(last.topics[0])
    described = [p for page in pages for p in page.partitions]
    assert [p.partition_index for p in described] == [0, 1, 2, 3, 4]
    assert [tuple(p.replica_nodes) for p in described] == [(1,), (2,), (3,), (1,), (2,)]
    states = partition_states(cluster.bootstrap(), "paged")
    for p in described:
        assert (p.leader_id, p.leader_epoch, tuple(p.isr_nodes)) == states[p.partition_index]
        assert tuple(p.eligible_leader_replicas) == () and tuple(p.offline_replicas) == ()
    assert len({page.topic_id for page in pages}) == 1 and not pages[0].is_internal


def test_elections_and_describe_filters_as_brokers_die(cluster: Cluster) -> None:
    c, x, y = cluster.controller, cluster.x, cluster.y
    cluster.create("reordered", [[c, x]])  # leader c, ISR c,x
    cluster.create("moved", [[y, c]])  # leader y
    cluster.create("lost", [[x, y]])  # leader x
    cluster.create("solo", [[x]])

    # preferred: x becomes the preferred replica of "reordered" (a reassignment that only
    # reorders its replicas, written as Kafka's controller writes it); x is in the ISR
    zk = KafkaZkClient(cluster.connect, session_timeout_ms=10_000).start()
    try:
        read = zk.get_topic_assignment("reordered")
        assert read is not None
        assignment, version = read
        reordered = type(assignment)(
            topic="reordered",
            topic_id=assignment.topic_id,
            partitions={0: ReplicaAssignment(replicas=(x, c))},
        )
        zk.zk.set(topic_path("reordered"), encode_topic_assignment(reordered), version=version)
    finally:
        zk.close()
    eventually(
        lambda: cluster.elect(ElectionType.PREFERRED, "reordered") is None,
        what="the preferred replica elected once the controller saw the new order",
    )
    # answered once the controller's broker shows the new leader, one epoch on
    assert partition_states(cluster.bootstrap(), "reordered")[0] == (x, 1, (c, x))
    assert cluster.elect(ElectionType.PREFERRED, "reordered") == ErrorCode.election_not_needed

    # y dies: "moved" goes to c, y leaves the ISR of "moved" and "lost"
    cluster.brokers[y].kill()
    eventually(
        lambda: partition_states(cluster.bootstrap(), "moved")[0] == (c, 1, (c,)),
        timeout_s=DEATH_S,
        what="moved led by the controller's broker",
    )
    # x dies too: "solo" and "lost" have no live in-sync replica, "reordered" goes back to c
    cluster.brokers[x].kill()
    eventually(
        lambda: (
            partition_states(cluster.bootstrap(), "lost")[0][0] == -1
            and partition_states(cluster.bootstrap(), "solo")[0][0] == -1
            and partition_states(cluster.bootstrap(), "reordered")[0][0] == c
        ),
        timeout_s=DEATH_S,
        what="x's partitions offline or moved",
    )
    ours = ("reordered", "moved", "lost", "solo")

    def lines(*flags: str) -> set[str]:
        text = cluster.storage_core("describe", *flags)
        return {line for line in text.splitlines() if line.split("\t")[1][7:] in ours}

    lost_offline = ",".join(str(b) for b in (x, y))
    assert lines("--unavailable-partitions") == {
        f"\tTopic: lost\tPartition: 0\tLeader: none\tReplicas: {x},{y}\tIsr: {x}"
        f"\tOffline: {lost_offline}",
        f"\tTopic: solo\tPartition: 0\tLeader: none\tReplicas: {x}\tIsr: {x}\tOffline: {x}",
    }
    assert lines("--under-replicated-partitions") == {
        f"\tTopic: reordered\tPartition: 0\tLeader: {c}\tReplicas: {x},{c}\tIsr: {c}\tOffline: {x}",
        f"\tTopic: moved\tPartition: 0\tLeader: {c}\tReplicas: {y},{c}\tIsr: {c}\tOffline: {y}",
        f"\tTopic: lost\tPartition: 0\tLeader: none\tReplicas: {x},{y}\tIsr: {x}"
        f"\tOffline: {lost_offline}",
    }
    full = cluster.storage_core("describe", "--topic", "moved").splitlines()
    assert full[0].startswith("Topic: moved\tTopicId: ")
    assert full[0].endswith("\tPartitionCount: 1\tReplicationFactor: 2\tConfigs: ")
    assert full[1:] == [
        f"\tTopic: moved\tPartition: 0\tLeader: {c}\tReplicas: {y},{c}\tIsr: {c}\tOffline: {y}"
    ]

    # every partition: those already led by their preferred replica are left out
    results = cluster.admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    answered = {
        (tp.topic, tp.partition): None if e is None else int(e.code())
        for tp, e in results.items()
        if tp.topic in (*ours, "paged")
    }
    not_available = ErrorCode.preferred_leader_not_available
    assert answered == {
        ("reordered", 0): not_available,  # x is dead
        ("moved", 0): not_available,  # y is dead
        ("lost", 0): not_available,
        ("solo", 0): not_available,
        **{("paged", p): not_available for p, b in enumerate([1, 2, 3, 1, 2]) if b in (x, y)},
    }

    # y returns. "lost" has no leader for y to catch up from, so y stays out of its ISR: only
    # an unclean election (asked for explicitly) brings it back; "solo" has no live replica
    cluster.brokers[y].start()
    eventually(
        lambda: len(cluster.admin.describe_cluster().result(10).nodes) == 2,
        what="y registered again",
    )
    assert cluster.elect(ElectionType.UNCLEAN, "moved") == ErrorCode.election_not_needed
    epoch = partition_states(cluster.bootstrap(), "lost")[0][1]
    assert partition_states(cluster.bootstrap(), "lost")[0] == (-1, epoch, (x,))
    assert cluster.elect(ElectionType.UNCLEAN, "lost") is None
    assert partition_states(cluster.bootstrap(), "lost")[0] == (y, epoch + 1, (y,))
    assert cluster.elect(ElectionType.UNCLEAN, "solo") == ErrorCode.eligible_leaders_not_available
    assert lines("--unavailable-partitions") == {
        f"\tTopic: solo\tPartition: 0\tLeader: none\tReplicas: {x}\tIsr: {x}\tOffline: {x}",
    }
    # "moved" has a leader: y fetches from it, rejoins its ISR, and can lead it again
    eventually(
        lambda: sorted(partition_states(cluster.bootstrap(), "moved")[0][2]) == sorted((c, y)),
        timeout_s=DEATH_S,
        what="y back in the ISR of moved",
    )
    assert cluster.elect(ElectionType.PREFERRED, "moved") is None
    assert partition_states(cluster.bootstrap(), "moved")[0][0] == y
