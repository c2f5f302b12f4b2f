"""Leader elections through ElectLeaders (key 43, v1/v2; KIP-460), sent to the controller.

``election_type`` 0 elects the preferred replica (the first of the assignment) where it is
alive and in sync; 1 (unclean) the first live replica of a partition without a leader in
sync. Per partition the controller answers NONE (elected), ELECTION_NOT_NEEDED (the preferred
replica leads already), PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION and the like, which come back to the caller. A top-level
NOT_CONTROLLER (the controller moved) is retried against the new controller, at most
``ATTEMPTS_MAX`` times; any other top-level error raises ``BrokerResponseError``.

Not thread-safe (it uses a ``KafkaCluster``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32

from storage_core.client.cluster import KafkaCluster
from storage_core.client.errors import BrokerResponseError, raise_for_error
from storage_core.client.framing import i32_timedelta
from storage_core.client.negotiation import ApiKey
from storage_core.common import TopicPartition
from storage_core.protocol.messages import build, request_module, response_schema

DEFAULT_TIMEOUT_MS = 30_000
ATTEMPTS_MAX = 3
PARTITIONS_MAX = 10_000  # the broker refuses larger requests


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionResult:
    """One partition's answer: ``ErrorCode.none`` when its leader was elected."""

    error: ErrorCode
    message: str | None = None


def elect_leaders(
    cluster: KafkaCluster,
    partitions: Sequence[TopicPartition] | None,
    *,
    election_type: ElectionType = ElectionType.PREFERRED,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, ElectionResult]:
    """Elect the leaders of ``partitions`` (None: every partition, where the controller then
    answers only those that needed an election)."""
    if partitions is not None and len(partitions) > PARTITIONS_MAX:
        raise ValueError(f"{len(partitions)} partitions in one election: at most {PARTITIONS_MAX}")
    by_topic: dict[str, list[int]] = {}
    for tp in partitions or ():
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    for attempt in range(1, ATTEMPTS_MAX + 1):
        session = cluster.controller_session()
        version = session.version(ApiKey.ELECT_LEADERS)
        m = request_module(ApiKey.ELECT_LEADERS, version)
        topic_partitions = (
            None
            if partitions is None
            else tuple(
                build(
                    m.TopicPartitions,
                    topic=TopicName(topic),
                    partitions=tuple(i32(p) for p in sorted(parts)),
                )
                for topic, parts in sorted(by_topic.items())
            )
        )
        response = session.send(
            build(
                m.ElectLeadersRequest,
                election_type=i8(int(election_type)),
                topic_partitions=topic_partitions,
                timeout=i32_timedelta(timeout_ms),
            ),
            response_schema(ApiKey.ELECT_LEADERS, version),
        )
        if response.error_code == ErrorCode.not_controller and attempt < ATTEMPTS_MAX:
            cluster.invalidate_metadata()
            continue
        # Kafka checks ALTER on the cluster for ElectLeaders
        raise_for_error(response.error_code, resource="ElectLeaders", operation="Alter")
        cluster.invalidate_metadata()  # leaders moved
        return {
            TopicPartition(str(r.topic), int(p.partition_id)): ElectionResult(
                error=p.error_code, message=p.error_message
            )
            for r in response.replica_election_results
            for p in r.partition_result
        }
    raise BrokerResponseError(ErrorCode.not_controller, resource="ElectLeaders")  # unreachable
