"""Topics and their partitions through DescribeTopicPartitions (key 75, v0; Kafka 3.7+,
KIP-966), as ``kafka-topics.sh --describe`` asks for them: page by page, each page at most
``PAGE_PARTITIONS`` partitions, following the broker's ``next_cursor`` (at most ``MAX_PAGES``
pages). Unlike Metadata, the ISR is the one the controller wrote, with brokers that are down.

A broker without the API raises ``UnsupportedVersionError`` from ``session.version``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.describe_topic_partitions.v0.response import (
    DescribeTopicPartitionsResponse,
)
from kio.schema.types import TopicName
from kio.static.primitive import i32

from storage_core.client.errors import ClientError
from storage_core.client.metadata import TopicMetadata, partition_metadata
from storage_core.client.negotiation import ApiKey, BrokerSession
from storage_core.common import Uuid

PAGE_PARTITIONS = 2000  # Kafka's default max.request.partition.size.limit
MAX_PAGES = 10_000


class TooManyPagesError(ClientError):
    """The broker kept sending pages (a cursor that never ends)."""

    error_code = "invalid_request"


def describe_topic_partitions(session: BrokerSession, names: Sequence[str]) -> list[TopicMetadata]:
    """The topics ``names`` (none: every topic, internal ones included), sorted by name; a
    topic spread over several pages comes back whole. A topic the broker could not describe
    has its ``error`` set."""
    session.version(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
    topics: dict[str, TopicMetadata] = {}
    cursor: dtp_v0.Cursor | None = None
    for _page in range(MAX_PAGES):
        response = session.send(
            dtp_v0.DescribeTopicPartitionsRequest(
                topics=tuple(dtp_v0.TopicRequest(name=TopicName(n)) for n in names),
                response_partition_limit=i32(PAGE_PARTITIONS),
                cursor=cursor,
            ),
            DescribeTopicPartitionsResponse,
        )
        for t in response.topics:
            name = str(t.name)
            partitions = tuple(partition_metadata(p) for p in t.partitions)
            earlier = topics.get(name)
            topics[name] = TopicMetadata(
                name=name,
                topic_id=_topic_id(t.topic_id),
                is_internal=bool(t.is_internal),
                partitions=(earlier.partitions if earlier is not None else ()) + partitions,
                error=t.error_code,
            )
        if response.next_cursor is None:
            return [topics[n] for n in sorted(topics)]
        cursor = dtp_v0.Cursor(
            topic_name=response.next_cursor.topic_name,
            partition_index=response.next_cursor.partition_index,
        )
    raise TooManyPagesError(
        f"DescribeTopicPartitions still had partitions after {MAX_PAGES} pages of"
        f" {PAGE_PARTITIONS}: describe fewer topics at a time"
    )


def _topic_id(value: uuid.UUID | None) -> Uuid | None:
    return None if value is None or value.int == 0 else Uuid.from_bytes(value.bytes)
