"""Names of the remote objects of a segment, and their parser.

One object per file of a remote segment::

    <prefix>/<topic>-<topicId>/<partition>/<20-digit base offset>-<segmentId>.<suffix>

    e.g.  tiered/orders-fQZ8ZtKuRjqUmbdf4t1OyQ/3/00000000000000004200-Xo1cU9h0TgS2lHKqWgKb7A.log

- ``prefix`` is the configured key prefix without leading or trailing ``/``; when empty the
  key starts at ``<topic>-<topicId>``.
- ``topic`` is the topic name (legal Kafka names contain no ``/``); ``topicId`` and
  ``segmentId`` are Kafka ``Uuid`` strings (22 characters of URL-safe base64, which may
  contain ``-`` and ``_`` but never ``.`` or ``/``), so a key splits unambiguously from the
  right: the topic id is the last 22 characters of its path component, the segment id the 22
  characters after ``<base offset>-``.
- ``suffix`` is one of ``log``, ``index``, ``timeindex``, ``snapshot``, ``txnindex``,
  ``leader-epoch-checkpoint`` and ``rsm-manifest`` (the chunked format's segment manifest,
  written last: see ``storage_core.tiered.chunked``).

The topic id keeps a re-created topic of the same name apart; the segment id (fresh per copy
attempt) keeps two copies of the same local segment apart, and lets the reconcile job map an
object back to the segment metadata it belongs to (``parse_object_key``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from storage_core.common import TopicIdPartition, Uuid, validate_topic_name
from storage_core.errors import InvalidTopicError
from storage_core.tiered.remote_storage_manager import IndexType, RemoteSegmentRef

_UUID_TEXT_LENGTH = 22
_OFFSET_DIGITS = 20


class InvalidRemoteObjectKeyError(ValueError):
    """A key does not follow the layout of the module docstring (not an object of ours)."""


class RemoteObjectSuffix(enum.Enum):
    """The suffix of each object of a remote segment."""

    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    PRODUCER_SNAPSHOT = "snapshot"
    TRANSACTION_INDEX = "txnindex"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    SEGMENT_MANIFEST = "rsm-manifest"  # last: its presence says every other object is there

    @staticmethod
    def for_index(index_type: IndexType) -> RemoteObjectSuffix:
        return _INDEX_SUFFIXES[index_type]


_INDEX_SUFFIXES = {
    IndexType.OFFSET: RemoteObjectSuffix.OFFSET_INDEX,
    IndexType.TIMESTAMP: RemoteObjectSuffix.TIME_INDEX,
    IndexType.PRODUCER_SNAPSHOT: RemoteObjectSuffix.PRODUCER_SNAPSHOT,
    IndexType.TRANSACTION: RemoteObjectSuffix.TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT,
}
_SUFFIXES_BY_TEXT = {suffix.value: suffix for suffix in RemoteObjectSuffix}


def normalize_prefix(prefix: str) -> str:
    """The prefix without leading/trailing ``/``; ``ValueError`` for empty path components."""
    stripped = prefix.strip("/")
    if stripped and any(part in ("", ".", "..") for part in stripped.split("/")):
        raise ValueError(f"key prefix {prefix!r} has an empty, '.' or '..' path component")
    return stripped


def partition_key_prefix(prefix: str, topic_id_partition: TopicIdPartition) -> str:
    """``<prefix>/<topic>-<topicId>/<partition>/``: every object of one partition."""
    tp = topic_id_partition.topic_partition
    head = normalize_prefix(prefix)
    path = f"{tp.topic}-{topic_id_partition.topic_id}/{tp.partition}/"
    return f"{head}/{path}" if head else path


def segment_key(prefix: str, segment: RemoteSegmentRef, suffix: RemoteObjectSuffix) -> str:
    """The key of one object of ``segment``."""
    return (
        partition_key_prefix(prefix, segment.topic_id_partition)
        + f"{segment.start_offset:0{_OFFSET_DIGITS}d}-{segment.segment_id}.{suffix.value}"
    )


def segment_keys(prefix: str, segment: RemoteSegmentRef) -> dict[RemoteObjectSuffix, str]:
    """The keys of every object ``segment`` can have, in upload order (``.log`` first)."""
    return {suffix: segment_key(prefix, segment, suffix) for suffix in RemoteObjectSuffix}


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteObjectKey:
    """A parsed object key: which segment (and which of its files) an object holds."""

    segment: RemoteSegmentRef
    suffix: RemoteObjectSuffix


def parse_object_key(key: str, prefix: str = "") -> RemoteObjectKey:
    """Inverse of ``segment_key``; raises ``InvalidRemoteObjectKeyError`` for foreign keys."""
    head = normalize_prefix(prefix)
    rest = key
    if head:
        if not key.startswith(head + "/"):
            raise InvalidRemoteObjectKeyError(f"key {key!r} is not under prefix {head!r}")
        rest = key[len(head) + 1 :]
    parts = rest.split("/")
    if len(parts) != 3:
        raise InvalidRemoteObjectKeyError(
            f"key {key!r} is not"
            " <prefix>/<topic>-<topicId>/<partition>/<offset>-<segmentId>.<suffix>"
        )
    topic_dir, partition_text, file_name = parts
    try:
        topic, topic_id = _split_id(topic_dir, "topic directory")
        validate_topic_name(topic)
        if not partition_text.isdigit() or not partition_text.isascii():
            raise InvalidRemoteObjectKeyError(f"partition {partition_text!r} is not a number")
        stem, dot, suffix_text = file_name.partition(".")
        if not dot or suffix_text not in _SUFFIXES_BY_TEXT:
            raise InvalidRemoteObjectKeyError(f"unknown object suffix in {file_name!r}")
        offset_text, segment_id = _split_id(stem, "file name")
        if len(offset_text) != _OFFSET_DIGITS or not offset_text.isdigit():
            raise InvalidRemoteObjectKeyError(f"{offset_text!r} is not a 20-digit base offset")
        segment = RemoteSegmentRef(
            topic=topic,
            topic_id=topic_id,
            partition=int(partition_text),
            segment_id=segment_id,
            start_offset=int(offset_text),
        )
    except (InvalidTopicError, ValueError) as exc:
        raise InvalidRemoteObjectKeyError(f"key {key!r}: {exc}") from exc
    return RemoteObjectKey(segment=segment, suffix=_SUFFIXES_BY_TEXT[suffix_text])


def check_keys_to_delete(keys: Sequence[str], prefix: str, store: str) -> list[str]:
    """``keys`` as a list once every one parses as an object key under ``prefix``; else
    ``InvalidRemoteObjectKeyError`` naming the first bad key and ``store`` (a deletion by key
    refuses the whole batch, so a bad key never costs an object)."""
    checked = list(keys)
    for key in checked:
        try:
            parse_object_key(key, prefix)
        except InvalidRemoteObjectKeyError as exc:
            raise InvalidRemoteObjectKeyError(
                f"refusing to delete {len(checked)} object(s) of {store}: {exc}; only objects"
                " of the remote tier under the key prefix are deleted by key, nothing was deleted"
            ) from exc
    return checked


def _split_id(text: str, what: str) -> tuple[str, Uuid]:
    """``<name>-<22-character Uuid>`` -> (name, Uuid)."""
    cut = len(text) - _UUID_TEXT_LENGTH - 1
    if cut < 1 or text[cut] != "-":
        raise InvalidRemoteObjectKeyError(f"{what} {text!r} does not end in -<Uuid>")
    return text[:cut], Uuid.from_string(text[cut + 1 :])
