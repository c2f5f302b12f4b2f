"""What a cluster holds, read three independent ways, and where the readings disagree: the
znodes in ZooKeeper (read with kazoo and parsed here, not with the broker's own ZooKeeper
code), each broker's Metadata v12 and DescribeTopicPartitions v0 answers (raw frames decoded
with kio), and the partition dirs in each broker's log dirs.

The ``*_problems`` functions are pure: they take readings and return one line per
disagreement, so a test can wait until the list is empty and print it when it is not.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tests.integration import raw_wire

NO_LEADER = -1
DESCRIBE_PARTITION_LIMIT = 2000  # one page holds every partition these tests create


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionView:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicView:
    topic_id: str  # Kafka's text form: 22 characters of URL-safe base64
    partitions: Mapping[int, PartitionView]


@dataclass(frozen=True, slots=True, kw_only=True)
class ZkReading:
    """The cluster as ZooKeeper holds it, with what is missing noted (not guessed)."""

    topics: Mapping[str, TopicView]
    controller_id: int  # -1: none
    controller_epoch: int
    live_brokers: frozenset[int]
    pending_deletions: frozenset[str]
    missing: tuple[str, ...]  # znodes a whole topic must have and this one lacks


def kafka_uuid_text(value: uuid.UUID | None) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    raw = value.bytes if value is not None else bytes(16)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# --- ZooKeeper --------------------------------------------------------------------------------


def read_zookeeper(connect: str) -> ZkReading:
    """One pass over the chroot in ``connect`` (Kafka's ZooKeeper layout)."""
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=15)
    try:
        return _read_zookeeper(zk)
    finally:
        zk.stop()
        zk.close()


def _json(zk: KazooClient, path: str) -> Any:
    data, _stat = zk.get(path)
    return json.loads(data)


def _children(zk: KazooClient, path: str) -> list[str]:
    return list(zk.get_children(path)) if zk.exists(path) else []


def _read_zookeeper(zk: KazooClient) -> ZkReading:
    topics: dict[str, TopicView] = {}
    missing: list[str] = []
    for name in sorted(_children(zk, "/brokers/topics")):
        try:
            assignment = _json(zk, f"/brokers/topics/{name}")
        except Exception as gone:  # removed between the listing and the read
            missing.append(f"/brokers/topics/{name}: {gone!r}")
            continue
        if not zk.exists(f"/config/topics/{name}"):
            missing.append(f"/config/topics/{name}")
        partitions: dict[int, PartitionView] = {}
        for index_text, replicas in sorted(assignment["partitions"].items()):
            index = int(index_text)
            path = f"/brokers/topics/{name}/partitions/{index}/state"
            if not zk.exists(path):
                missing.append(path)
                continue
            state = _json(zk, path)
            partitions[index] = PartitionView(
                replicas=tuple(replicas),
                leader=int(state["leader"]),
                leader_epoch=int(state["leader_epoch"]),
                isr=tuple(state["isr"]),
            )
        topics[name] = TopicView(topic_id=str(assignment.get("topic_id")), partitions=partitions)
    epoch_data, _stat = zk.get("/controller_epoch")
    controller = _json(zk, "/controller")["brokerid"] if zk.exists("/controller") else -1
    return ZkReading(
        topics=topics,
        controller_id=int(controller),
        controller_epoch=int(epoch_data),
        live_brokers=frozenset(int(b) for b in _children(zk, "/brokers/ids")),
        pending_deletions=frozenset(_children(zk, "/admin/delete_topics")),
        missing=tuple(missing),
    )


def read_controller(connect: str) -> tuple[int, int]:
    """(the controller's broker id or -1, the controller epoch) as ZooKeeper holds them."""
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=15)
    try:
        controller = _json(zk, "/controller")["brokerid"] if zk.exists("/controller") else -1
        epoch, _stat = zk.get("/controller_epoch")
        return int(controller), int(epoch)
    finally:
        zk.stop()
        zk.close()


# --- a broker's answers -----------------------------------------------------------------------


def metadata_view(port: int) -> tuple[int, dict[str, TopicView]]:
    """The controller and every topic as the broker's Metadata v12 answers (topics = null:
    all of them)."""
    with raw_wire.connect(port) as sock:
        answer = raw_wire.call(
            sock,
            3,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return int(answer.controller_id), {t.name: _topic_view(t) for t in answer.topics}


def describe_view(port: int) -> dict[str, TopicView]:
    """Every topic as the broker's DescribeTopicPartitions v0 answers (one page)."""
    with raw_wire.connect(port) as sock:
        answer = raw_wire.call(
            sock, 75, 0, topics=(), response_partition_limit=DESCRIBE_PARTITION_LIMIT, cursor=None
        )
    if answer.next_cursor is not None:
        raise AssertionError(f"more than {DESCRIBE_PARTITION_LIMIT} partitions: raise the limit")
    return {t.name: _topic_view(t) for t in answer.topics}


def _topic_view(topic: Any) -> TopicView:
    if topic.error_code != 0:
        raise AssertionError(f"topic {topic.name} answered with error {topic.error_code}")
    return TopicView(
        topic_id=kafka_uuid_text(topic.topic_id),
        partitions={
            p.partition_index: PartitionView(
                replicas=tuple(p.replica_nodes),
                leader=p.leader_id,
                leader_epoch=p.leader_epoch,
                isr=tuple(p.isr_nodes),
            )
            for p in topic.partitions
        },
    )


# --- log dirs ---------------------------------------------------------------------------------


def log_dir_topic_ids(log_dir: Path) -> dict[str, str | None]:
    """Partition dir name -> the topic id in its ``partition.metadata`` (None: no file).
    Dirs being deleted (``-delete``) count too: they must be gone once the cluster settled."""
    found: dict[str, str | None] = {}
    if not log_dir.is_dir():
        return found
    for entry in sorted(log_dir.iterdir()):
        if not entry.is_dir() or "-" not in entry.name:
            continue
        metadata = entry / "partition.metadata"
        topic_id = None
        if metadata.exists():
            for line in metadata.read_text().splitlines():
                if line.startswith("topic_id:"):
                    topic_id = line.split(":", 1)[1].strip()
        found[entry.name] = topic_id
    return found


# --- disagreements (pure) ---------------------------------------------------------------------


def zookeeper_problems(zk: ZkReading) -> list[str]:
    """A topic half made or half deleted, or a partition offline while a replica is alive."""
    problems = [f"missing znode {path}" for path in zk.missing]
    problems += [f"topic {t} still in /admin/delete_topics" for t in sorted(zk.pending_deletions)]
    for name, topic in sorted(zk.topics.items()):
        for index, p in sorted(topic.partitions.items()):
            alive = [r for r in p.replicas if r in zk.live_brokers]
            if p.leader == NO_LEADER and alive:
                problems.append(f"{name}-{index} has no leader while replicas {alive} are alive")
    return problems


def view_problems(
    who: str, expected: Mapping[str, TopicView], seen: Mapping[str, TopicView]
) -> list[str]:
    """Where a broker's answer differs from ZooKeeper's (internal topics included)."""
    problems = []
    for name in sorted(set(expected) | set(seen)):
        want, got = expected.get(name), seen.get(name)
        if want is None:
            problems.append(f"{who} answers topic {name}, which ZooKeeper does not hold")
        elif got is None:
            problems.append(f"{who} does not answer topic {name}")
        elif want != got:
            problems.append(f"{who} answers {name} as {got}, ZooKeeper holds {want}")
    return problems


def log_dir_problems(
    broker_id: int, dirs: Mapping[str, str | None], topics: Mapping[str, TopicView]
) -> list[str]:
    """A partition dir of a topic that is gone (or of an older incarnation of its name), or
    of a partition not assigned to this broker."""
    expected = {
        f"{name}-{index}": topic.topic_id
        for name, topic in topics.items()
        for index, p in topic.partitions.items()
        if broker_id in p.replicas
    }
    problems = []
    for dir_name, topic_id in sorted(dirs.items()):
        if dir_name not in expected:
            problems.append(f"broker {broker_id} keeps {dir_name} (topic {topic_id})")
        elif topic_id != expected[dir_name]:
            problems.append(
                f"broker {broker_id} keeps {dir_name} of topic id {topic_id},"
                f" the cluster's is {expected[dir_name]}"
            )
    problems += [
        f"broker {broker_id} has no dir for its replica {dir_name}"
        for dir_name in sorted(set(expected) - set(dirs))
    ]
    return problems


def cluster_problems(
    connect: str, brokers: Iterable[tuple[int, int, Path]]
) -> tuple[ZkReading, list[str]]:
    """Everything above for brokers given as (broker id, port, log dir)."""
    zk = read_zookeeper(connect)
    problems = zookeeper_problems(zk)
    for broker_id, port, log_dir in brokers:
        controller_id, topics = metadata_view(port)
        if controller_id != zk.controller_id:
            problems.append(
                f"broker {broker_id} answers controller {controller_id},"
                f" ZooKeeper holds {zk.controller_id}"
            )
        problems += view_problems(f"broker {broker_id} Metadata", zk.topics, topics)
        problems += view_problems(
            f"broker {broker_id} DescribeTopicPartitions", zk.topics, describe_view(port)
        )
        problems += log_dir_problems(broker_id, log_dir_topic_ids(log_dir), zk.topics)
    return zk, problems
