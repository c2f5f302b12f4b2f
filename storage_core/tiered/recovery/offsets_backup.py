"""The consumer offsets backup: where each consumer group was in the remote-enabled topics,
and how far those topics' partitions reached, at one moment.

One object per backup, ``<prefix>/_consumer-offsets/<20-digit takenAtMs>.json``
(``remote_object_keys.offsets_backup_key``; keys sort by time), written by the
``backup_consumer_offsets`` job, which keeps the newest N. JSON (UTF-8), so that an operator
can read it with any tool::

    {"format": "consumer-offsets", "version": 1,
     "takenAtMs": 1764454800000,
     "topics": [
       {"topic": "orders", "topicId": "fQZ8ZtKuRjqUmbdf4t1OyQ",
        "highWatermarks": [{"partition": 0, "highWatermark": 4200}, ...]}],
     "groups": [
       {"groupId": "billing",
        "topics": [
          {"topic": "orders", "topicId": "fQZ8ZtKuRjqUmbdf4t1OyQ",
           "partitions": [{"partition": 0, "committedOffset": 4100,
                           "committedLeaderEpoch": 3, "metadata": ""}, ...]}]}]}

- ``takenAtMs``: when the backup began (ms since the epoch); offsets committed after it may
  or may not be in it.
- ``topics``: the remote-enabled topics, each partition's high watermark (ListOffsets latest,
  exclusive: the next offset to be written) read after the groups' offsets, so that every
  committed offset of a healthy group is at most its partition's high watermark.
- ``groups``: per group, its committed offsets (OffsetFetch) in those topics only, with the
  leader epoch committed alongside (-1 when none) and the metadata string as committed.
  A group with no offset in them is left out.

A backup of another format or of a later version is refused by name; a malformed one with an
error naming the object key and what is wrong (``OffsetsBackupError``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_core.common import Uuid, validate_topic_name
from storage_core.errors import InvalidTopicError
from storage_core.tiered.recovery.topic_manifest import check_format
from storage_core.tiered.remote_storage_manager import RemoteStorageError

FORMAT_NAME = "consumer-offsets"
FORMAT_VERSION = 1
GROUP_ID_CHARS_MAX = 32_767  # a Kafka string's length limit


class OffsetsBackupError(RemoteStorageError):
    """A consumer offsets backup that cannot be read: not JSON, another format, a newer
    version, or fields missing or contradicting each other. The message names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedOffset:
    """One partition's committed offset in a group."""

    partition: int
    committed_offset: int
    committed_leader_epoch: int = -1
    metadata: str = ""

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition {self.partition} is negative")
        if self.committed_offset < 0:
            raise ValueError(
                f"partition {self.partition}: committed offset {self.committed_offset} is negative"
            )
        if self.committed_leader_epoch < -1:
            raise ValueError(
                f"partition {self.partition}: committed leader epoch"
                f" {self.committed_leader_epoch} is below -1"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicOffsets:
    """A group's committed offsets in one topic (by name and id), by partition."""

    topic: str
    topic_id: Uuid
    partitions: tuple[CommittedOffset, ...]

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        _check_unique(self.topic, [p.partition for p in self.partitions])


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOffsets:
    group_id: str
    topics: tuple[TopicOffsets, ...]

    def __post_init__(self) -> None:
        if not self.group_id or len(self.group_id) > GROUP_ID_CHARS_MAX:
            raise ValueError(f"group id {self.group_id!r:.80} is empty or too long")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicHighWatermarks:
    """A topic's partitions' high watermarks (exclusive) when the backup was taken."""

    topic: str
    topic_id: Uuid
    high_watermarks: Mapping[int, int]

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        for partition, offset in self.high_watermarks.items():
            if partition < 0 or offset < 0:
                raise ValueError(
                    f"{self.topic}-{partition}: high watermark {offset} or the partition is"
                    " negative"
                )


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsBackup:
    """A consumer offsets backup (format in the module docstring); validated when built:
    every group's topic is one of ``topics`` (same name and id) and each partition it
    commits has a high watermark there."""

    taken_at_ms: int
    topics: tuple[TopicHighWatermarks, ...]
    groups: tuple[GroupOffsets, ...]
    version: int = field(default=FORMAT_VERSION)

    def __post_init__(self) -> None:
        if self.taken_at_ms < 0:
            raise ValueError(f"takenAtMs {self.taken_at_ms} is negative")
        by_name = {t.topic: t for t in self.topics}
        if len(by_name) != len(self.topics):
            raise ValueError("a topic is listed twice in topics")
        groups = [g.group_id for g in self.groups]
        if len(set(groups)) != len(groups):
            raise ValueError("a group is listed twice in groups")
        for group in self.groups:
            for offsets in group.topics:
                known = by_name.get(offsets.topic)
                if known is None or known.topic_id != offsets.topic_id:
                    raise ValueError(
                        f"group {group.group_id!r}: topic {offsets.topic!r} (id"
                        f" {offsets.topic_id}) is not one of the backup's topics"
                    )
                for p in offsets.partitions:
                    if p.partition not in known.high_watermarks:
                        raise ValueError(
                            f"group {group.group_id!r}: {offsets.topic}-{p.partition} has no"
                            " high watermark in the backup"
                        )

    def to_bytes(self) -> bytes:
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": self.version,
            "takenAtMs": self.taken_at_ms,
            "topics": [
                {
                    "topic": t.topic,
                    "topicId": str(t.topic_id),
                    "highWatermarks": [
                        {"partition": p, "highWatermark": hw}
                        for p, hw in sorted(t.high_watermarks.items())
                    ],
                }
                for t in self.topics
            ],
            "groups": [
                {
                    "groupId": g.group_id,
                    "topics": [
                        {
                            "topic": t.topic,
                            "topicId": str(t.topic_id),
                            "partitions": [
                                {
                                    "partition": p.partition,
                                    "committedOffset": p.committed_offset,
                                    "committedLeaderEpoch": p.committed_leader_epoch,
                                    "metadata": p.metadata,
                                }
                                for p in t.partitions
                            ],
                        }
                        for t in g.topics
                    ],
                }
                for g in self.groups
            ],
        }
        return json.dumps(document, indent=1, ensure_ascii=False).encode() + b"\n"

    @staticmethod
    def from_bytes(data: bytes, *, where: str) -> OffsetsBackup:
        """``OffsetsBackupError`` naming ``where`` (the object key) and what is wrong."""
        try:
            document = json.loads(data.decode("utf-8"))
            if not isinstance(document, dict):
                raise TypeError("not a JSON object")
            check_format(document, FORMAT_NAME, FORMAT_VERSION)
            topics = tuple(
                TopicHighWatermarks(
                    topic=_str(t["topic"]),
                    topic_id=Uuid.from_string(_str(t["topicId"])),
                    high_watermarks=_high_watermarks(t),
                )
                for t in _list(document["topics"])
            )
            groups = tuple(
                GroupOffsets(
                    group_id=_str(g["groupId"]),
                    topics=tuple(
                        TopicOffsets(
                            topic=_str(t["topic"]),
                            topic_id=Uuid.from_string(_str(t["topicId"])),
                            partitions=tuple(
                                CommittedOffset(
                                    partition=_int(p["partition"]),
                                    committed_offset=_int(p["committedOffset"]),
                                    committed_leader_epoch=_int(p["committedLeaderEpoch"]),
                                    metadata=_str(p["metadata"]),
                                )
                                for p in _list(t["partitions"])
                            ),
                        )
                        for t in _list(g["topics"])
                    ),
                )
                for g in _list(document["groups"])
            )
            return OffsetsBackup(
                taken_at_ms=_int(document["takenAtMs"]),
                topics=topics,
                groups=groups,
                version=document["version"],
            )
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            InvalidTopicError,
            UnicodeDecodeError,
        ) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise OffsetsBackupError(
                f"consumer offsets backup {where} is unreadable: {detail}"
            ) from None


def _high_watermarks(topic: Mapping[str, Any]) -> dict[int, int]:
    entries = [
        (_int(p["partition"]), _int(p["highWatermark"])) for p in _list(topic["highWatermarks"])
    ]
    _check_unique(str(topic["topic"]), [p for p, _ in entries])
    return dict(entries)


def _check_unique(topic: str, partitions: list[int]) -> None:
    if len(set(partitions)) != len(partitions):
        raise ValueError(f"topic {topic!r} lists a partition twice")


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r:.80} is not a string")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r:.80} is not a list")
    return value
