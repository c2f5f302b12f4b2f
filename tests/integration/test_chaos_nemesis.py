"""Nemesis actions on real broker processes (three brokers on a real ZooKeeper, each behind
its relay): what the controller records in ZooKeeper after each fault and its heal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.chaos.cluster import BROKER_IDS, SESSION_TIMEOUT_MS, RelayedCluster
from tests.chaos.nemesis import Fault, FaultKind, Nemesis
from tests.cluster_support import eventually

cluster_support.require_java()
pytestmark = pytest.mark.timeout(180)
TOPIC = "nemesis"


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RelayedCluster]:
    with RelayedCluster(zookeeper, tmp_path_factory.mktemp("nemesis")) as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(20)
        eventually(lambda: started.partition_state(TOPIC, 2), what="partition states written")
        yield started


def _fault(kind: FaultKind, hold_s: float, partition: int = 0) -> Fault:
    return Fault(round=0, kind=kind, partition=partition, pick=1, hold_s=hold_s)


def test_kill_leader_elects_another_and_the_heal_brings_the_broker_back(
    cluster: RelayedCluster,
) -> None:
    before = cluster.partition_state(TOPIC, 0)
    assert before is not None
    nemesis = Nemesis(cluster, TOPIC)

    injected = nemesis.inject(_fault(FaultKind.KILL_LEADER, 0))

    assert injected.target == injected.leader == before.leader
    after = eventually(
        lambda: (
            (s := cluster.partition_state(TOPIC, 0)) and s.leader not in (-1, before.leader) and s
        ),
        timeout_s=3 * SESSION_TIMEOUT_MS / 1000,
        what="another leader elected",
    )
    assert after.leader_epoch > before.leader_epoch
    injected.heal()
    assert cluster.registered() == set(BROKER_IDS)
    assert [e.action for e in nemesis.events] == ["SIGKILL", "started"]
    assert nemesis.events[0].monotonic <= nemesis.events[1].monotonic


def test_a_pause_longer_than_the_session_expires_the_registration_until_sigcont(
    cluster: RelayedCluster,
) -> None:
    nemesis = Nemesis(cluster, TOPIC)
    injected = nemesis.inject(_fault(FaultKind.PAUSE, 0))
    target = injected.target
    eventually(
        lambda: target not in cluster.registered(),
        timeout_s=2 * SESSION_TIMEOUT_MS / 1000,
        what=f"broker {target}'s session expired while stopped",
    )
    injected.heal()
    eventually(
        lambda: cluster.registered() == set(BROKER_IDS),
        timeout_s=30,
        what=f"broker {target} registered again after SIGCONT",
    )
    assert [e.action for e in nemesis.events] == ["SIGSTOP", "SIGCONT"]


def test_cut_follower_drops_only_that_followers_fetcher_links_on_the_leader(
    cluster: RelayedCluster,
) -> None:
    state = cluster.partition_state(TOPIC, 1)
    assert state is not None and state.leader > 0
    leader_relay = cluster.relays[state.leader]
    follower = [b for b in cluster.replicas(TOPIC, 1) if b != state.leader][1 % 2]
    fetcher = _reader(leader_relay.bootstrap, f"broker-{follower}-fetcher-0")
    bystander = _reader(leader_relay.bootstrap, "bystander")
    for consumer in (fetcher, bystander):
        consumer.get_watermark_offsets(CTopicPartition(TOPIC, 1), timeout=10)
    assert f"broker-{follower}-fetcher-0" in leader_relay.client_ids()
    nemesis = Nemesis(cluster, TOPIC)

    injected = nemesis.inject(_fault(FaultKind.CUT_FOLLOWER, 0, partition=1))

    assert (injected.target, injected.leader) == (follower, state.leader)
    assert f"broker-{follower}-fetcher-0" not in leader_relay.client_ids()
    with pytest.raises(Exception):  # noqa: B017 (librdkafka's error type varies)
        fetcher.get_watermark_offsets(CTopicPartition(TOPIC, 1), timeout=3)
    assert bystander.get_watermark_offsets(CTopicPartition(TOPIC, 1), timeout=10) is not None
    injected.heal()
    eventually(
        lambda: fetcher.get_watermark_offsets(CTopicPartition(TOPIC, 1), timeout=5) is not None,
        what="the follower's link relayed again",
    )
    fetcher.close()
    bystander.close()
    assert [e.action for e in nemesis.events] == ["cut", "heal"]
    assert f"broker-{follower}-fetcher-*" in nemesis.events[0].detail


def _reader(bootstrap: str, client_id: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": client_id,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
