"""Three broker processes on a real ZooKeeper, for the cluster tests: the ensemble, the brokers
(each with ``zookeeper.connect`` under its own chroot), and a broker's own Metadata answer read
with raw frames (no client-side caching)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient

from embedded.zookeeper import ZooKeeperEnsemble, ZooKeeperUnavailableError, java_executable
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

T = TypeVar("T")
SESSION_TIMEOUT_MS = 6000
BROKER_IDS = (1, 2, 3)


def require_java() -> None:
    """Skip the calling test module when no Java runs ZooKeeper here."""
    try:
        java_executable()
    except ZooKeeperUnavailableError as missing:
        pytest.skip(str(missing), allow_module_level=True)


def eventually(
    check: Callable[[], T], *, timeout_s: float = 30.0, what: str = "", poll_s: float = 0.2
) -> T:
    """``check()`` once it is truthy; errors while asking count as "not yet" (a broker or
    ZooKeeper may be restarting or electing)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as error:  # a broker may be restarting: keep asking
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last: {last!r})")
        time.sleep(poll_s)


@contextmanager
def zookeeper_ensemble(directory: Path) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(directory, size=1) as zk:
        yield zk


@contextmanager
def three_brokers(
    zookeeper: ZooKeeperEnsemble,
    directory: Path,
    overrides: dict[str, str] | None = None,
    *,
    per_broker: Mapping[int, Mapping[str, str]] | None = None,
) -> Iterator[tuple[dict[int, BrokerProcess], str]]:
    """Brokers 1, 2, 3 in one cluster under a fresh chroot; yields them and the
    ``zookeeper.connect`` string they use. ``overrides`` go into every broker's
    server.properties, then ``per_broker[id]`` into that broker's. Every broker is SIGKILLed at
    the end."""
    with brokers_in_cluster(
        zookeeper, directory, BROKER_IDS, overrides, per_broker=per_broker
    ) as cluster:
        yield cluster


@contextmanager
def brokers_in_cluster(
    zookeeper: ZooKeeperEnsemble,
    directory: Path,
    broker_ids: Sequence[int],
    overrides: dict[str, str] | None = None,
    *,
    per_broker: Mapping[int, Mapping[str, str]] | None = None,
) -> Iterator[tuple[dict[int, BrokerProcess], str]]:
    """The brokers ``broker_ids`` in one cluster under a fresh chroot (see ``three_brokers``);
    ``per_broker[id]`` goes into that broker's server.properties after ``overrides``."""
    connect = f"{zookeeper.connect_string}/cluster-{uuid.uuid4().hex[:8]}"
    started: dict[int, BrokerProcess] = {}
    try:
        for broker_id in broker_ids:
            started[broker_id] = BrokerProcess(
                directory / f"broker-{broker_id}",
                overrides={
                    "broker.id": str(broker_id),
                    "zookeeper.connect": connect,
                    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "offsets.topic.replication.factor": "1",
                    "auto.leader.rebalance.enable": "false",
                    **(overrides or {}),
                    **(per_broker or {}).get(broker_id, {}),
                },
            ).start()
        yield started, connect
    finally:
        for broker in started.values():
            broker.kill()


def admin(brokers: dict[int, BrokerProcess]) -> AdminClient:
    return AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values())})


def metadata(bootstrap: str, topic: str) -> Any:
    """One broker's own answer to Metadata v12 for the topic."""
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(int(bootstrap.rsplit(":", 1)[1])) as sock:
        return raw_wire.call(
            sock,
            3,
            12,
            topics=(raw_wire.build(module.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )


def partition_leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) as one broker's Metadata answers."""
    (answer,) = metadata(bootstrap, topic).topics
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in answer.partitions}


def partition_states(bootstrap: str, topic: str) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, leader epoch, ISR) as one broker's Metadata answers."""
    (answer,) = metadata(bootstrap, topic).topics
    return {
        p.partition_index: (p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
        for p in answer.partitions
    }


def controller_id(bootstrap: str) -> int:
    """The controller as one broker's Metadata answers (-1: none known)."""
    with raw_wire.connect(int(bootstrap.rsplit(":", 1)[1])) as sock:
        answer = raw_wire.call(
            sock,
            3,
            12,
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return int(answer.controller_id)
