"""A topic appears in a broker's Metadata together with its partitions' leaders.

Right after CreateTopics returns, the other brokers of the cluster may not have learned the
new topic yet. A Kafka broker learns a topic and its partitions' leaders at once (the
controller's UpdateMetadata carries the partition states), so until then a client is told
UNKNOWN_TOPIC_OR_PARTITION, which it retries. A broker that listed the topic with its
partitions at leader -1 (LEADER_NOT_AVAILABLE) made librdkafka cache an error for them (its
test 0081 failed "Local: Unknown partition" and "Leader not available" on a cluster).

The loop, 25 rounds: one thread per broker of three asks for a new topic name with
confluent-kafka (a fresh AdminClient per question, bootstrapped on that broker) from before
CreateTopics is sent until that broker itself lists the topic; the topic is created with
confluent-kafka meanwhile, and its creation must succeed. Every answer that lists the topic,
from whichever broker librdkafka asked, must list all its partitions, each with a leader.
Before the fix, 58 and 87 answers of 25 rounds listed partitions at leader -1 (all three, or
the ones whose state the controller had not written yet).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests.broker_process import BrokerProcess
from tests.cluster_support import admin, require_java, three_brokers

require_java()

pytestmark = pytest.mark.timeout(300)

ROUNDS = 25
PARTITIONS = 3
LISTED_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, BrokerProcess]]:
    # librdkafka's Metadata asks to create the topic it names: only CreateTopics creates here
    with three_brokers(
        zookeeper,
        tmp_path_factory.mktemp("new-topics"),
        {"auto.create.topics.enable": "false"},
    ) as (brokers, _):
        yield brokers


class Answers:
    """What the brokers answered, from the asking threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.leaderless: list[str] = []
        self.counts = {"unknown": 0, "listed": 0, "from_another_broker": 0}

    def add(self, kind: str, problem: str | None = None) -> None:
        with self._lock:
            self.counts[kind] += 1
            if problem is not None:
                self.leaderless.append(problem)


def answering_port(answer: ClusterMetadata) -> int:
    """The port of the broker that answered (librdkafka names it ``host:port/id``)."""
    return int(answer.orig_broker_name.split("/")[0].rsplit(":", 1)[1])


def describe_until_listed(broker: BrokerProcess, topic: str, answers: Answers) -> None:
    """Ask ``broker`` for ``topic`` until it lists it. A fresh client sends its first request
    to its bootstrap broker, but not always (it may learn the cluster first): answers of other
    brokers are checked as well, and asking goes on until ``broker`` itself has answered."""
    deadline = time.monotonic() + LISTED_WITHIN_S
    while time.monotonic() < deadline:
        client = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        answer = client.list_topics(topic=topic, timeout=10)
        from_broker = answering_port(answer) == broker.port
        listed = answer.topics[topic]
        if listed.error is not None:
            problem = None
            if listed.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                problem = f"{answer.orig_broker_name}: {topic}: {listed.error}"
            answers.add("unknown", problem)
            continue
        leaders = {p.id: (p.leader, p.error) for p in listed.partitions.values()}
        problem = None
        if sorted(leaders) != list(range(PARTITIONS)) or any(
            leader < 0 or error is not None for leader, error in leaders.values()
        ):
            problem = f"{answer.orig_broker_name}: {topic}: partitions {leaders}"
        answers.add("listed" if from_broker else "from_another_broker", problem)
        if from_broker:
            return
    answers.add("unknown", f"{broker.bootstrap} did not list {topic} within {LISTED_WITHIN_S} s")


def test_a_created_topic_is_listed_by_every_broker_only_with_its_leaders(
    cluster: dict[int, BrokerProcess],
) -> None:
    creator = admin(cluster)
    answers = Answers()
    for round_index in range(ROUNDS):
        topic = f"fresh-{round_index}-{uuid.uuid4().hex[:8]}"
        askers = [
            threading.Thread(target=describe_until_listed, args=(broker, topic, answers))
            for broker in cluster.values()
        ]
        for asker in askers:  # asking from before the creation to after every broker lists it
            asker.start()
        (future,) = creator.create_topics(
            [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)],
            operation_timeout=30,
        ).values()
        future.result(timeout=60)  # the creation succeeded
        for asker in askers:
            asker.join()

    print(f"answers: {answers.counts}, leaderless: {len(answers.leaderless)}")
    leaderless = answers.leaderless
    rounds = len({problem.split(": ")[1] for problem in leaderless})
    assert leaderless == [], (
        f"{len(leaderless)} answers in {rounds} of {ROUNDS} rounds listed a topic without"
        f" leaders, e.g. {leaderless[:3]}"
    )
    assert answers.counts["listed"] == ROUNDS * len(cluster)
