"""acks=-1 produces on one connection: the next produce is read and appended while the first
waits for its follower, and every response still comes back in request order.

Brokers 1 and 2 on a real ZooKeeper; ``piped`` lives on both, led by 1, min.insync.replicas
2. Broker 2 is stopped (SIGSTOP, well within its session and ``replica.lag.time.max.ms``;
every one of its threads stopped, see ``tests.process_pause``), so no acks=-1 produce can
complete. One raw connection then sends two produces and a ListOffsets
without waiting. Broker 1's log holds both produces' batches while no response has come (a
Kafka broker, which mutes the connection, would have read only the first). Once broker 2 runs
again the three answers arrive in request order, and ListOffsets, which waited behind the
produces, sees both replicated.

The test holds only while the cluster stays as it was. A ZooKeeper starved of CPU on a
loaded machine can expire live sessions; if broker 1's expires, leadership moves and the
produces are rightly answered with NOT_LEADER_OR_FOLLOWER. So every round checks the znodes
it stands on (the partition's state, both registrations); a round in which one changed proves
nothing and runs again, on a new topic, at most ``ROUNDS`` times. A response while none
changed fails the test, showing the response.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from benchmarks.replication import log_size
from storage_core.records import SimpleRecord, build_batch
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_states
from tests.integration import raw_wire
from tests.process_pause import pause

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

TOPIC = "piped"
PRODUCE_V = 9
LIST_OFFSETS_V = 7
RECORDS_PER_BATCH = 10
ROUNDS = 3
LATEST = -1


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[int, BrokerProcess], str]]:
    """Brokers 1 and 2 and their ZooKeeper connect string (with the cluster's chroot)."""
    with (
        cluster_support.zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk,
        cluster_support.brokers_in_cluster(
            zk,
            tmp_path_factory.mktemp("brokers"),
            (1, 2),
            {"min.insync.replicas": "2", "replica.lag.time.max.ms": "60000"},
        ) as (started, connect),
    ):
        yield started, connect


def create_piped_topic(brokers: dict[int, BrokerProcess], connect: str, topic: str) -> None:
    # after a dropped round, once both brokers are registered again
    eventually(lambda: None not in cluster_znodes(connect, topic)[1:], what="brokers registered")
    admin = cluster_support.admin(brokers)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])]
    ).values():
        future.result(30)
    eventually(
        lambda: partition_states(brokers[1].bootstrap, topic).get(0, (None, None, ()))[2] == (1, 2),
        what=f"{topic}-0 led by 1 with ISR [1, 2]",
    )


def cluster_znodes(connect: str, topic: str) -> tuple[object, ...]:
    """What the round stands on: the partition's state (leader, ISR) by its version, and each
    broker's registration by the session that owns it."""
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        state = zk.exists(f"/brokers/topics/{topic}/partitions/0/state")
        owners = [zk.exists(f"/brokers/ids/{b}") for b in (1, 2)]
        return (
            state.version if state else None,
            *(o.ephemeralOwner if o else None for o in owners),
        )
    finally:
        zk.stop()
        zk.close()


def produce_frame(topic: str, correlation_id: int, first_value: int) -> tuple[bytes, int]:
    """An acks=-1 Produce of one batch of ``RECORDS_PER_BATCH`` records, and the batch's size."""
    batch = build_batch(
        [
            SimpleRecord(value=b"v%04d" % (first_value + i), timestamp=1_700_000_000_000)
            for i in range(RECORDS_PER_BATCH)
        ]
    )
    module = raw_wire.request_classes(0, PRODUCE_V)
    return raw_wire.request_bytes(
        0,
        PRODUCE_V,
        correlation_id,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=60),
        topic_data=(
            module.TopicProduceData(
                name=topic,
                partition_data=(module.PartitionProduceData(index=0, records=batch),),
            ),
        ),
    ), len(batch)


def list_offsets_frame(topic: str, correlation_id: int) -> bytes:
    module = raw_wire.request_classes(2, LIST_OFFSETS_V)
    return raw_wire.request_bytes(
        2,
        LIST_OFFSETS_V,
        correlation_id,
        replica_id=-1,
        isolation_level=0,
        topics=(
            module.ListOffsetsTopic(
                name=topic,
                partitions=(
                    module.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=LATEST
                    ),
                ),
            ),
        ),
    )


def nothing_to_read(sock: socket.socket, wait_s: float) -> bool:
    sock.settimeout(wait_s)
    try:
        return not sock.recv(1, socket.MSG_PEEK)  # b"": closed; else a response came
    except TimeoutError:
        return True
    finally:
        sock.settimeout(raw_wire.SOCKET_TIMEOUT_S)


def test_produces_pipeline_and_answer_in_order(
    cluster: tuple[dict[int, BrokerProcess], str],
) -> None:
    brokers, connect = cluster
    for round_index in range(ROUNDS):
        topic = f"{TOPIC}-{round_index}"
        create_piped_topic(brokers, connect, topic)
        if pipeline_round(brokers, connect, topic):
            return
    pytest.fail(f"the cluster changed under each of {ROUNDS} rounds (sessions or the ISR)")


def pipeline_round(brokers: dict[int, BrokerProcess], connect: str, topic: str) -> bool:
    """One round on a fresh topic; False if the cluster changed under it."""
    leader = brokers[1]
    first, first_bytes = produce_frame(topic, 1, 0)
    second, second_bytes = produce_frame(topic, 2, RECORDS_PER_BATCH)
    warm_up, _ = produce_frame(topic, 0, 1000)
    with raw_wire.connect(leader.port) as sock:
        sock.sendall(warm_up)  # broker 2 fetches and joins the answer: replication flows
        (correlation_id, answer) = raw_wire.read_response(sock, 0, PRODUCE_V)
        assert correlation_id == 0
        assert answer.responses[0].partition_responses[0].error_code == 0
        before = log_size(leader.port, topic)
        znodes = cluster_znodes(connect, topic)

        follower = brokers[2].process
        assert follower is not None
        pause(follower.pid)  # every thread stopped: no fetch from here on
        try:
            sock.sendall(first + second + list_offsets_frame(topic, 3))
            # Both produces are appended, though the first still waits for broker 2.
            eventually(
                lambda: log_size(leader.port, topic) == before + first_bytes + second_bytes,
                timeout_s=10,
                what="both batches in the leader's log",
            )
            quiet = nothing_to_read(sock, 1.0)
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        if not quiet:
            changed = cluster_znodes(connect, topic)
            if changed != znodes:
                print(f"round on {topic} dropped: the cluster changed, {znodes} -> {changed}")
                return False
            (correlation_id, answer) = raw_wire.read_response(sock, 0, PRODUCE_V)
            pytest.fail(
                f"a response came while the follower was stopped: correlation id"
                f" {correlation_id}, {answer}"
            )

        answers = [raw_wire.read_response(sock, 0, PRODUCE_V) for _ in range(2)]
        (offsets_id, offsets) = raw_wire.read_response(sock, 2, LIST_OFFSETS_V)
    assert [correlation_id for correlation_id, _ in answers] == [1, 2]
    firsts = []
    for _, answer in answers:
        (partition,) = answer.responses[0].partition_responses
        assert partition.error_code == 0, partition
        firsts.append(partition.base_offset)
    assert firsts == [RECORDS_PER_BATCH, 2 * RECORDS_PER_BATCH]  # after the warm-up's batch
    assert offsets_id == 3
    (listed,) = offsets.topics[0].partitions
    assert (listed.error_code, listed.offset) == (0, 3 * RECORDS_PER_BATCH)
    return True
