"""The topics of a consumer-protocol subscription (Kafka's ``ConsumerProtocol``), read the way
the group coordinator reads them.

Wire format of a subscription (JoinGroup protocol metadata of protocol type ``consumer``),
big-endian; every version starts with the version 0 fields, so version 0 is read whatever
the version number says and anything after its fields is ignored::

    version      int16
    topics       int32 count, then per topic: int16 length + UTF-8 name (non-null)
    user_data    int32 length (-1: null) + bytes
    ... later versions add owned partitions, generation, rack: not read here

Only ``subscribed_topics`` is public: the union of the members' topics, or None when any
subscription does not parse (then the coordinator does not know what the group consumes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

CONSUMER_PROTOCOL_TYPE = "consumer"

# A subscription cannot name more topics than its bytes hold (2 bytes per empty name); the
# bound stops a corrupt count from driving a long loop.
_MIN_TOPIC_BYTES = 2


class SubscriptionFormatError(ValueError):
    """The bytes are not a consumer-protocol subscription (short, or a negative length)."""


def subscription_topics(metadata: bytes) -> frozenset[str]:
    """The topics one member subscribes to, read with the version 0 schema."""
    try:
        position = 2  # the version: any value is read as version 0
        (count,) = struct.unpack_from(">i", metadata, position)
        position += 4
        if count < 0 or count * _MIN_TOPIC_BYTES > len(metadata) - position:
            raise SubscriptionFormatError(f"topic count {count} does not fit the subscription")
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            end = position + length
            if length < 0 or end > len(metadata):
                raise SubscriptionFormatError(f"topic name length {length} is not valid")
            topics.add(metadata[position:end].decode("utf-8"))
            position = end
        (user_data_length,) = struct.unpack_from(">i", metadata, position)
        position += 4
        if user_data_length < -1 or position + max(user_data_length, 0) > len(metadata):
            raise SubscriptionFormatError(f"user data length {user_data_length} is not valid")
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionFormatError(f"subscription does not parse: {exc}") from exc
    return frozenset(topics)


def subscribed_topics(
    protocol_type: str | None, protocol_name: str | None, subscriptions: Iterable[bytes]
) -> frozenset[str] | None:
    """Kafka's ``computeSubscribedTopics``: what a consumer group consumes, or None if unknown.

    None when the group is not a consumer group, has members but no selected protocol yet,
    or a member's subscription does not parse; the empty set for a consumer group without
    members.
    """
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    metadata = list(subscriptions)
    if not metadata:
        return frozenset()
    if protocol_name is None:
        return None
    try:
        return frozenset().union(*(subscription_topics(m) for m in metadata))
    except SubscriptionFormatError:
        return None
