"""Consumer groups' committed offsets, as Kafka's ``Admin.listConsumerGroups`` and
``listConsumerGroupOffsets`` read them.

- ``list_group_ids``: ListGroups (key 16, v4) to every broker: each answers the groups it
  coordinates (those whose ``__consumer_offsets`` partition it leads), so the union is every
  group of the cluster.
- ``fetch_committed_offsets``: FindCoordinator (key 10, v4, keys in a batch, KIP-699) for the
  groups, then OffsetFetch (key 9, v8, groups in a batch, KIP-709) to each coordinator with
  ``topics`` null: every partition with a committed offset.
- ``commit_offsets``: OffsetCommit (key 8, v8) to the group's coordinator as Kafka's
  ``Admin.alterConsumerGroupOffsets`` sends it (generation -1, no member): the group must have
  no active member (its coordinator answers UNKNOWN_MEMBER_ID otherwise).
- ``delete_offsets``: OffsetDelete (key 47, v0) to the group's coordinator, as Kafka's
  ``Admin.deleteConsumerGroupOffsets`` (a restore drill removes its scratch topic's offsets
  before deleting the topic, which would drop them too, as Kafka's coordinator does).

A coordinator still loading its partition (COORDINATOR_LOAD_IN_PROGRESS) or no longer the
group's (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) is asked again after a pause, at most
``ATTEMPTS_MAX`` times; any other error raises ``BrokerResponseError`` naming the group (a
denied Describe on it names the ACL). Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i64

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import BrokerResponseError, raise_for_error
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema

ATTEMPTS_MAX = 10
RETRY_BACKOFF_S = 0.2
GROUPS_PER_REQUEST_MAX = 100
GROUP_KEY_TYPE = 0
_RETRIED = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndMetadata:
    """Kafka's ``OffsetAndMetadata``: a committed offset, its leader epoch (-1: none) and the
    metadata string committed with it."""

    offset: int
    leader_epoch: int
    metadata: str


def list_group_ids(cluster: KafkaCluster) -> list[str]:
    """Every group of the cluster (ListGroups to each broker), sorted."""
    found: set[str] = set()
    for broker in cluster.refresh_metadata([]).brokers:
        session = cluster.session_for_node(broker.node_id)
        version = session.version(ApiKey.LIST_GROUPS)
        m = request_module(ApiKey.LIST_GROUPS, version)
        for attempt in range(1, ATTEMPTS_MAX + 1):
            response = session.send(
                build(m.ListGroupsRequest, states_filter=()),
                response_schema(ApiKey.LIST_GROUPS, version),
            )
            if response.error_code in _RETRIED and attempt < ATTEMPTS_MAX:
                time.sleep(RETRY_BACKOFF_S)
                continue
            raise_for_error(
                response.error_code,
                resource=f"ListGroups of broker {broker.node_id}",
                operation="Describe",
            )
            found.update(str(g.group_id) for g in response.groups)
            break
    return sorted(found)


def fetch_committed_offsets(
    cluster: KafkaCluster, group_ids: Sequence[str]
) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
    """Each group's committed offsets, by partition (a group without any: an empty map)."""
    result: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    pending = sorted(set(group_ids))
    for attempt in range(1, ATTEMPTS_MAX + 1):
        retry: list[str] = []
        for start in range(0, len(pending), GROUPS_PER_REQUEST_MAX):
            batch = pending[start : start + GROUPS_PER_REQUEST_MAX]
            for node_id, groups in _coordinators(cluster, batch, retry).items():
                _offset_fetch(cluster, node_id, groups, result, retry)
        if not retry:
            return result
        if attempt == ATTEMPTS_MAX:
            raise BrokerResponseError(
                ErrorCode.coordinator_not_available,
                resource=f"group {retry[0]!r}",
                broker_message=f"no coordinator answered after {ATTEMPTS_MAX} attempts",
            )
        cluster.invalidate_metadata()
        time.sleep(RETRY_BACKOFF_S)
        pending = sorted(set(retry))
    return result


def _coordinators(
    cluster: KafkaCluster, group_ids: Sequence[str], retry: list[str]
) -> dict[int, list[str]]:
    """FindCoordinator for ``group_ids``: the groups by coordinator; those whose coordinator
    is not available yet go to ``retry``."""
    session = cluster.any_session()
    version = session.version(ApiKey.FIND_COORDINATOR)
    m = request_module(ApiKey.FIND_COORDINATOR, version)
    response = session.send(
        build(
            m.FindCoordinatorRequest,
            key_type=i8(GROUP_KEY_TYPE),
            coordinator_keys=tuple(group_ids),
        ),
        response_schema(ApiKey.FIND_COORDINATOR, version),
    )
    by_node: dict[int, list[str]] = {}
    for coordinator in response.coordinators:
        key = str(coordinator.key)
        if coordinator.error_code in _RETRIED:
            retry.append(key)
            continue
        raise_for_error(
            coordinator.error_code,
            resource=f"group {key!r}",
            broker_message=coordinator.error_message,
            operation="Describe",
        )
        by_node.setdefault(int(coordinator.node_id), []).append(key)
    return by_node


def _offset_fetch(
    cluster: KafkaCluster,
    node_id: int,
    group_ids: Sequence[str],
    result: dict[str, dict[TopicPartition, OffsetAndMetadata]],
    retry: list[str],
) -> None:
    session = cluster.session_for_node(node_id)
    version = session.version(ApiKey.OFFSET_FETCH)
    m = request_module(ApiKey.OFFSET_FETCH, version)
    response = session.send(
        build(
            m.OffsetFetchRequest,
            groups=tuple(
                build(m.OffsetFetchRequestGroup, group_id=GroupId(g), topics=None)
                for g in group_ids
            ),
            require_stable=False,
        ),
        response_schema(ApiKey.OFFSET_FETCH, version),
    )
    for group in response.groups:
        group_id = str(group.group_id)
        if group.error_code in _RETRIED:
            retry.append(group_id)
            continue
        raise_for_error(group.error_code, resource=f"group {group_id!r}", operation="Describe")
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic in group.topics:
            for p in topic.partitions:
                tp = TopicPartition(str(topic.name), int(p.partition_index))
                raise_for_error(
                    p.error_code, resource=f"group {group_id!r} {tp}", operation="Describe"
                )
                if int(p.committed_offset) < 0:
                    continue  # nothing committed (or pending in a transaction)
                offsets[tp] = OffsetAndMetadata(
                    offset=int(p.committed_offset),
                    leader_epoch=int(p.committed_leader_epoch),
                    metadata=p.metadata or "",
                )
        result[group_id] = offsets


def commit_offsets(
    cluster: KafkaCluster, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> None:
    """Commit ``offsets`` for ``group_id``; ``BrokerResponseError`` for the first partition
    or group refused (a group with active members: UNKNOWN_MEMBER_ID)."""
    _at_coordinator(
        cluster,
        group_id,
        lambda node_id: _offset_commit(cluster, node_id, group_id, offsets),
        what="the commit",
    )


def _at_coordinator(
    cluster: KafkaCluster, group_id: str, request: Callable[[int], bool], *, what: str
) -> None:
    """``request(coordinator node id)`` until it returns True (False: the coordinator moved
    or is loading), finding the group's coordinator again each time, at most
    ``ATTEMPTS_MAX`` times."""
    for attempt in range(1, ATTEMPTS_MAX + 1):
        retry: list[str] = []
        by_node = _coordinators(cluster, [group_id], retry)
        if not retry:
            (node_id,) = by_node
            if request(node_id):
                return
        if attempt == ATTEMPTS_MAX:
            raise BrokerResponseError(
                ErrorCode.coordinator_not_available,
                resource=f"group {group_id!r}",
                broker_message=f"no coordinator took {what} after {ATTEMPTS_MAX} attempts",
            )
        cluster.invalidate_metadata()
        time.sleep(RETRY_BACKOFF_S)


def _offset_commit(
    cluster: KafkaCluster,
    node_id: int,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> bool:
    """One OffsetCommit; False when the coordinator moved (ask again)."""
    session = cluster.session_for_node(node_id)
    version = session.version(ApiKey.OFFSET_COMMIT)
    m = request_module(ApiKey.OFFSET_COMMIT, version)
    by_topic: dict[str, list[tuple[TopicPartition, OffsetAndMetadata]]] = {}
    for tp, committed in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append((tp, committed))
    response = session.send(
        build(
            m.OffsetCommitRequest,
            group_id=GroupId(group_id),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=tuple(
                build(
                    m.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        build(
                            m.OffsetCommitRequestPartition,
                            partition_index=i32(tp.partition),
                            committed_offset=i64(committed.offset),
                            committed_leader_epoch=i32(committed.leader_epoch),
                            committed_metadata=committed.metadata,
                        )
                        for tp, committed in partitions
                    ),
                )
                for topic, partitions in by_topic.items()
            ),
        ),
        response_schema(ApiKey.OFFSET_COMMIT, version),
    )
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code in _RETRIED:
                return False
            raise_for_error(
                p.error_code,
                resource=f"group {group_id!r} {topic.name}-{p.partition_index}",
                operation="Read",
            )
    return True


def delete_offsets(
    cluster: KafkaCluster, group_id: str, partitions: Sequence[TopicPartition]
) -> None:
    """Delete ``group_id``'s committed offsets of ``partitions`` (OffsetDelete, key 47, v0,
    as Kafka's ``Admin.deleteConsumerGroupOffsets``); ``BrokerResponseError`` for the group
    or the first partition refused (a partition of a topic an active member subscribes to:
    GROUP_SUBSCRIBED_TO_TOPIC). Partitions without an offset are answered without error."""
    _at_coordinator(
        cluster,
        group_id,
        lambda node_id: _offset_delete(cluster, node_id, group_id, partitions),
        what="the deletion",
    )


def _offset_delete(
    cluster: KafkaCluster, node_id: int, group_id: str, partitions: Sequence[TopicPartition]
) -> bool:
    """One OffsetDelete; False when the coordinator moved (ask again)."""
    session = cluster.session_for_node(node_id)
    version = session.version(ApiKey.OFFSET_DELETE)
    m = request_module(ApiKey.OFFSET_DELETE, version)
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    response = session.send(
        build(
            m.OffsetDeleteRequest,
            group_id=GroupId(group_id),
            topics=tuple(
                build(
                    m.OffsetDeleteRequestTopic,
                    name=topic,
                    partitions=tuple(
                        build(m.OffsetDeleteRequestPartition, partition_index=i32(p))
                        for p in numbers
                    ),
                )
                for topic, numbers in by_topic.items()
            ),
        ),
        response_schema(ApiKey.OFFSET_DELETE, version),
    )
    if response.error_code in _RETRIED:
        return False
    raise_for_error(response.error_code, resource=f"group {group_id!r}", operation="Delete")
    for topic in response.topics:
        for p in topic.partitions:
            raise_for_error(
                p.error_code,
                resource=f"group {group_id!r} {topic.name}-{p.partition_index}",
                operation="Read",
            )
    return True
