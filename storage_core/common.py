"""Identifiers shared by every layer: topic partitions and Kafka's 128-bit ``Uuid``."""

from __future__ import annotations

import base64
import functools
import re
import secrets
from dataclasses import dataclass

from storage_core.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(topic: str) -> None:
    """Kafka's ``Topic.validate``: raises ``InvalidTopicError`` naming the broken rule.

    Because ``/``, ``\\`` and NUL are not legal and ``.``/``..`` are refused, a valid topic
    name can never escape a log dir when used as a path component.
    """
    if not topic:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters,"
            f" topic name: {topic[:40]}..."
        )
    if not _LEGAL_TOPIC_CHARS.match(topic):
        raise InvalidTopicError(
            f"Topic name {topic!r} is illegal, it contains a character other than"
            " ASCII alphanumerics, '.', '_' and '-'"
        )


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and partition number; ``str()`` gives Kafka's ``topic-0`` form."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        """Name of the partition directory inside a log dir."""
        return f"{self.topic}-{self.partition}"

    @staticmethod
    def parse_dir_name(name: str) -> TopicPartition:
        """Inverse of ``dir_name`` (the topic itself may contain ``-``)."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            raise InvalidTopicError(f"{name!r} is not a partition directory name (<topic>-<n>)")
        validate_topic_name(topic)
        return TopicPartition(topic, int(partition))


@dataclass(frozen=True, slots=True, order=True)
class Uuid:
    """Kafka's ``Uuid``: two signed 64-bit halves, shown as URL-safe base64 without padding."""

    most_significant_bits: int
    least_significant_bits: int

    @staticmethod
    def random() -> Uuid:
        # Kafka never hands out ZERO, the metadata topic id (1) or ids whose text starts with '-'.
        while True:
            raw = secrets.token_bytes(16)
            uuid = Uuid.from_bytes(raw)
            if uuid.most_significant_bits == 0 and uuid.least_significant_bits in (0, 1):
                continue
            if not str(uuid).startswith("-"):
                return uuid

    @staticmethod
    def from_bytes(raw: bytes) -> Uuid:
        if len(raw) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(raw)}")
        return Uuid(
            int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)
        )

    @staticmethod
    def from_string(text: str) -> Uuid:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{text!r} is not a base64 Uuid") from exc
        if len(raw) != 16 or len(text) != 22:
            raise ValueError(f"{text!r} is not a 22-character base64 Uuid")
        return Uuid.from_bytes(raw)

    def to_bytes(self) -> bytes:
        return self.most_significant_bits.to_bytes(
            8, "big", signed=True
        ) + self.least_significant_bits.to_bytes(8, "big", signed=True)

    def __str__(self) -> str:
        return _uuid_text(self.most_significant_bits, self.least_significant_bits)


@functools.lru_cache(maxsize=1 << 14)
def _uuid_text(most_significant_bits: int, least_significant_bits: int) -> str:
    """Kafka's base64 form; cached: a read names its segment and topic ids several times."""
    raw = most_significant_bits.to_bytes(8, "big", signed=True)
    raw += least_significant_bits.to_bytes(8, "big", signed=True)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


ZERO_UUID = Uuid(0, 0)


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """A partition together with the id of its topic (survives topic re-creation)."""

    topic_id: Uuid
    topic_partition: TopicPartition

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic_partition}"
