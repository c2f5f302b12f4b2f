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

Besides the segments, two kinds of objects make the bucket enough to restore topics
(``storage_core.tiered.recovery``), written and read whole with ``RemoteObjectStore.put_object``
and ``get_object``, which accept only these keys (the "bucket manifest" keys)::

    <prefix>/<topic>-<topicId>/topic-manifest.json           the topic manifest: the topic's
                                                             configs and partitions' offsets
    <prefix>/_consumer-offsets/<20-digit ms since epoch>.json  a consumer offsets backup

    e.g.  tiered/orders-fQZ8ZtKuRjqUmbdf4t1OyQ/topic-manifest.json
          tiered/_consumer-offsets/00000001764454800000.json

Neither parses as a segment object (two path components where a segment's key has three),
and ``_consumer-offsets`` can not be a topic directory (it does not end in ``-<Uuid>``). A
topic manifest is never deleted by key; an offsets backup may be (``check_keys_to_delete``:
the backup job keeps the newest N).

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
    """``keys`` as a list once every one parses as an object key under ``prefix`` (or as a
    consumer offsets backup or topic manifest key: the deletion job removes a deleted topic's
    manifest once its remote data is gone); else ``InvalidRemoteObjectKeyError`` naming the
    first bad key and ``store`` (a deletion by key refuses the whole batch, so a bad key never
    costs an object)."""
    checked = list(keys)
    for key in checked:
        try:
            parse_object_key(key, prefix)
        except InvalidRemoteObjectKeyError as exc:
            try:
                check_bucket_manifest_key(key, prefix, store)
            except InvalidRemoteObjectKeyError:
                pass
            else:
                continue
            raise InvalidRemoteObjectKeyError(
                f"refusing to delete {len(checked)} object(s) of {store}: {exc}; only objects"
                " of the remote tier under the key prefix are deleted by key, nothing was deleted"
            ) from exc
    return checked


# -- bucket manifests: topic manifests and consumer offsets backups ----------------------------

TOPIC_MANIFEST_FILE_NAME = "topic-manifest.json"
OFFSETS_BACKUP_DIRECTORY = "_consumer-offsets"
_OFFSETS_BACKUP_SUFFIX = ".json"


def _under_prefix(prefix: str, path: str) -> str:
    head = normalize_prefix(prefix)
    return f"{head}/{path}" if head else path


def topic_manifest_key(prefix: str, topic: str, topic_id: Uuid) -> str:
    """``<prefix>/<topic>-<topicId>/topic-manifest.json``."""
    validate_topic_name(topic)
    return _under_prefix(prefix, f"{topic}-{topic_id}/{TOPIC_MANIFEST_FILE_NAME}")


def offsets_backups_prefix(prefix: str) -> str:
    """``<prefix>/_consumer-offsets/``: the key prefix that lists every offsets backup."""
    return _under_prefix(prefix, f"{OFFSETS_BACKUP_DIRECTORY}/")


def offsets_backup_key(prefix: str, taken_at_ms: int) -> str:
    """``<prefix>/_consumer-offsets/<20-digit taken_at_ms>.json`` (keys sort by time)."""
    if not 0 <= taken_at_ms < 10**_OFFSET_DIGITS:
        raise ValueError(f"taken_at_ms must be within [0, 10^20), got {taken_at_ms}")
    return offsets_backups_prefix(prefix) + f"{taken_at_ms:0{_OFFSET_DIGITS}d}.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicManifestKey:
    """A parsed topic manifest key: whose topic (name and id) it describes."""

    topic: str
    topic_id: Uuid


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsBackupKey:
    """A parsed consumer offsets backup key: when the backup was taken (ms since epoch)."""

    taken_at_ms: int


def _relative(key: str, prefix: str) -> str:
    head = normalize_prefix(prefix)
    if not head:
        return key
    if not key.startswith(head + "/"):
        raise InvalidRemoteObjectKeyError(f"key {key!r} is not under prefix {head!r}")
    return key[len(head) + 1 :]


def parse_topic_manifest_key(key: str, prefix: str = "") -> TopicManifestKey:
    """Inverse of ``topic_manifest_key``; ``InvalidRemoteObjectKeyError`` for other keys."""
    parts = _relative(key, prefix).split("/")
    if len(parts) != 2 or parts[1] != TOPIC_MANIFEST_FILE_NAME:
        raise InvalidRemoteObjectKeyError(
            f"key {key!r} is not <prefix>/<topic>-<topicId>/{TOPIC_MANIFEST_FILE_NAME}"
        )
    try:
        topic, topic_id = _split_id(parts[0], "topic directory")
        validate_topic_name(topic)
    except (InvalidTopicError, ValueError) as exc:
        raise InvalidRemoteObjectKeyError(f"key {key!r}: {exc}") from exc
    return TopicManifestKey(topic=topic, topic_id=topic_id)


def parse_offsets_backup_key(key: str, prefix: str = "") -> OffsetsBackupKey:
    """Inverse of ``offsets_backup_key``; ``InvalidRemoteObjectKeyError`` for other keys."""
    parts = _relative(key, prefix).split("/")
    stem = parts[-1].removesuffix(_OFFSETS_BACKUP_SUFFIX)
    if (
        len(parts) != 2
        or parts[0] != OFFSETS_BACKUP_DIRECTORY
        or not parts[1].endswith(_OFFSETS_BACKUP_SUFFIX)
        or len(stem) != _OFFSET_DIGITS
        or not (stem.isdigit() and stem.isascii())
    ):
        raise InvalidRemoteObjectKeyError(
            f"key {key!r} is not <prefix>/{OFFSETS_BACKUP_DIRECTORY}/<20-digit ms since epoch>.json"
        )
    return OffsetsBackupKey(taken_at_ms=int(stem))


def check_bucket_manifest_key(key: str, prefix: str, store: str) -> str:
    """``key`` when it is a topic manifest or an offsets backup key under ``prefix`` (what
    ``put_object``/``get_object`` accept); else ``InvalidRemoteObjectKeyError`` naming the key
    and ``store``: those calls never write or read a segment's object."""
    try:
        parse_topic_manifest_key(key, prefix)
    except InvalidRemoteObjectKeyError:
        try:
            parse_offsets_backup_key(key, prefix)
        except InvalidRemoteObjectKeyError:
            raise InvalidRemoteObjectKeyError(
                f"key {key!r} of {store} is neither a topic manifest"
                f" (<prefix>/<topic>-<topicId>/{TOPIC_MANIFEST_FILE_NAME}) nor a consumer"
                f" offsets backup (<prefix>/{OFFSETS_BACKUP_DIRECTORY}/<20-digit ms>.json) under"
                f" the key prefix {normalize_prefix(prefix)!r}: only those are written or read"
                " whole by key"
            ) from None
    return key


def _split_id(text: str, what: str) -> tuple[str, Uuid]:
    """``<name>-<22-character Uuid>`` -> (name, Uuid)."""
    cut = len(text) - _UUID_TEXT_LENGTH - 1
    if cut < 1 or text[cut] != "-":
        raise InvalidRemoteObjectKeyError(f"{what} {text!r} does not end in -<Uuid>")
    return text[:cut], Uuid.from_string(text[cut + 1 :])
