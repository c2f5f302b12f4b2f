"""The topic manifest: which topic a ``<topic>-<topicId>`` directory of the bucket holds, with
which configuration, and how far each partition's remote log reaches.

One object per topic incarnation, ``<prefix>/<topic>-<topicId>/topic-manifest.json``
(``remote_object_keys.topic_manifest_key``), replaced whole on each write by the
``topic_manifests`` job. JSON (UTF-8), so that an operator can read it with any tool::

    {"format": "topic-manifest", "version": 1,
     "topic": "orders", "topicId": "fQZ8ZtKuRjqUmbdf4t1OyQ",
     "partitionCount": 3, "replicationFactor": 3,
     "configs": {"remote.storage.enable": "true", "retention.ms": "604800000"},
     "partitions": [
       {"partition": 0, "remoteLogStartOffset": 0, "remoteLogEndOffset": 4199,
        "remoteSegments": 3, "remoteBytes": 3145728},
       {"partition": 1, "remoteLogStartOffset": null, "remoteLogEndOffset": null,
        "remoteSegments": 0, "remoteBytes": 0},
       ...],
     "writtenAtMs": 1764454800000}

- ``configs``: the topic's own settings as DescribeConfigs returns them for the topic (source
  TOPIC_CONFIG, i.e. ``DYNAMIC_TOPIC_CONFIG``: what a restore must set again; defaults are the
  target cluster's). Sensitive entries are never written (``topic_configs``).
- ``partitions``: one entry per partition ``0 .. partitionCount - 1``, in order. The offsets are
  the lowest start offset and the highest end offset (both inclusive) of the partition's
  COPY_SEGMENT_FINISHED segments in the remote log metadata, ``null`` when it has none;
  ``remoteSegments`` and ``remoteBytes`` count those segments (a rewritten segment's two
  copies are both counted while both are finished).
- ``writtenAtMs``: when the manifest was built (ms since the epoch).

Two writers: the ``topic_manifests`` job (every tiering run) writes it whole from the cluster
and the remote log metadata; the broker leading partition 0 rewrites it as soon as the topic's
configs, partition count or replication factor change (``TopicManifestWriter``), keeping each
partition's figures of the last manifest (``with_topic_settings``), so that a restore after a
config change finds the new configs without waiting for the next tiering run.

A manifest of another format or of a later version is refused by name; a malformed one with
an error naming the object key and what is wrong (``TopicManifestError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from storage_core.common import Uuid, validate_topic_name
from storage_core.errors import InvalidTopicError
from storage_core.protocol.config_resource import ConfigSource
from storage_core.tiered.remote_storage_manager import RemoteStorageError

FORMAT_NAME = "topic-manifest"
FORMAT_VERSION = 1
PARTITIONS_MAX = 100_000  # bounds what a reader accepts (Kafka's own limit is far lower in use)
CONFIGS_MAX = 1_000


class TopicManifestError(RemoteStorageError):
    """A topic manifest that cannot be read: not JSON, another format, a newer version, or
    fields missing or contradicting each other. The message names the object key."""


class DescribedConfig(Protocol):
    """What ``topic_configs`` reads of a DescribeConfigs entry (``client.admin.ConfigEntry``)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...
    @property
    def source(self) -> ConfigSource: ...
    @property
    def is_sensitive(self) -> bool: ...


def topic_configs(entries: Iterable[DescribedConfig]) -> dict[str, str]:
    """The configs a manifest keeps of DescribeConfigs' answer for a topic: the topic's own
    (source TOPIC_CONFIG), never a sensitive one nor one without a value."""
    kept: dict[str, str] = {}
    for entry in entries:
        if (
            entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG
            and not entry.is_sensitive
            and entry.value is not None
        ):
            kept[entry.name] = entry.value
    return kept


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRemoteLog:
    """One partition's remote log as the manifest records it; offsets inclusive, ``None``
    (both) when nothing of the partition is in the remote tier."""

    partition: int
    remote_log_start_offset: int | None
    remote_log_end_offset: int | None
    remote_segments: int
    remote_bytes: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition {self.partition} is negative")
        if self.remote_segments < 0 or self.remote_bytes < 0:
            raise ValueError(
                f"partition {self.partition}: remote segments {self.remote_segments} and bytes"
                f" {self.remote_bytes} must be >= 0"
            )
        start, end = self.remote_log_start_offset, self.remote_log_end_offset
        if (start is None) != (end is None) or (start is None) != (self.remote_segments == 0):
            raise ValueError(
                f"partition {self.partition}: remote log offsets {start}..{end} with"
                f" {self.remote_segments} segment(s): offsets are given exactly when there"
                " are segments"
            )
        if start is not None and end is not None and not 0 <= start <= end:
            raise ValueError(
                f"partition {self.partition}: remote log end offset {end} (inclusive) is below"
                f" its start offset {start}, or the start is negative"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicManifest:
    """A topic manifest (format in the module docstring); validated when built."""

    topic: str
    topic_id: Uuid
    partition_count: int
    replication_factor: int
    configs: Mapping[str, str]
    partitions: tuple[PartitionRemoteLog, ...]
    written_at_ms: int
    version: int = field(default=FORMAT_VERSION)

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if not 0 < self.partition_count <= PARTITIONS_MAX:
            raise ValueError(
                f"partition count {self.partition_count} is not within 1..{PARTITIONS_MAX}"
            )
        if self.replication_factor <= 0:
            raise ValueError(f"replication factor {self.replication_factor} is not positive")
        if len(self.configs) > CONFIGS_MAX:
            raise ValueError(f"{len(self.configs)} configs: at most {CONFIGS_MAX}")
        indexes = [p.partition for p in self.partitions]
        if indexes != list(range(self.partition_count)):
            raise ValueError(
                f"partitions must be 0..{self.partition_count - 1} in order (the partition"
                f" count), got {_ranges(indexes)}"
            )
        if self.written_at_ms < 0:
            raise ValueError(f"writtenAtMs {self.written_at_ms} is negative")

    def to_bytes(self) -> bytes:
        document: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": self.version,
            "topic": self.topic,
            "topicId": str(self.topic_id),
            "partitionCount": self.partition_count,
            "replicationFactor": self.replication_factor,
            "configs": dict(sorted(self.configs.items())),
            "partitions": [
                {
                    "partition": p.partition,
                    "remoteLogStartOffset": p.remote_log_start_offset,
                    "remoteLogEndOffset": p.remote_log_end_offset,
                    "remoteSegments": p.remote_segments,
                    "remoteBytes": p.remote_bytes,
                }
                for p in self.partitions
            ],
            "writtenAtMs": self.written_at_ms,
        }
        return json.dumps(document, indent=1, ensure_ascii=False).encode() + b"\n"

    @staticmethod
    def from_bytes(data: bytes, *, where: str) -> TopicManifest:
        """``TopicManifestError`` naming ``where`` (the object key) and what is wrong."""
        try:
            document = json.loads(data.decode("utf-8"))
            if not isinstance(document, dict):
                raise TypeError("not a JSON object")
            check_format(document, FORMAT_NAME, FORMAT_VERSION)
            configs = document["configs"]
            if not isinstance(configs, dict) or not all(
                isinstance(v, str) for v in configs.values()
            ):
                raise TypeError("configs is not an object of strings")
            return TopicManifest(
                topic=_str(document["topic"]),
                topic_id=Uuid.from_string(_str(document["topicId"])),
                partition_count=_int(document["partitionCount"]),
                replication_factor=_int(document["replicationFactor"]),
                configs={str(k): v for k, v in configs.items()},
                partitions=tuple(
                    PartitionRemoteLog(
                        partition=_int(p["partition"]),
                        remote_log_start_offset=_optional_int(p["remoteLogStartOffset"]),
                        remote_log_end_offset=_optional_int(p["remoteLogEndOffset"]),
                        remote_segments=_int(p["remoteSegments"]),
                        remote_bytes=_int(p["remoteBytes"]),
                    )
                    for p in _list(document["partitions"])
                ),
                written_at_ms=_int(document["writtenAtMs"]),
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
            raise TopicManifestError(f"topic manifest {where} is unreadable: {detail}") from None


def with_topic_settings(
    previous: TopicManifest | None,
    *,
    topic: str,
    topic_id: Uuid,
    partition_count: int,
    replication_factor: int,
    configs: Mapping[str, str],
    written_at_ms: int,
) -> TopicManifest:
    """The manifest after a change of the topic's configs, partition count or replication
    factor, as a broker rewrites it: the new settings, and each partition's remote log as
    ``previous`` recorded it (the ``topic_manifests`` job's figures; none for a partition it
    did not list). Partitions only grow, so a partition of ``previous`` beyond the new count
    means another topic: ``ValueError``."""
    if previous is not None and previous.topic_id != topic_id:
        raise ValueError(
            f"the previous manifest is of topic id {previous.topic_id}, not {topic_id}"
        )
    kept = previous.partitions if previous is not None else ()
    if len(kept) > partition_count:
        raise ValueError(
            f"the previous manifest lists {len(kept)} partitions, the topic has"
            f" {partition_count}: partitions are never removed"
        )
    added = tuple(
        PartitionRemoteLog(
            partition=p,
            remote_log_start_offset=None,
            remote_log_end_offset=None,
            remote_segments=0,
            remote_bytes=0,
        )
        for p in range(len(kept), partition_count)
    )
    return TopicManifest(
        topic=topic,
        topic_id=topic_id,
        partition_count=partition_count,
        replication_factor=replication_factor,
        configs=dict(configs),
        partitions=kept + added,
        written_at_ms=written_at_ms,
    )


def same_topic_settings(manifest: TopicManifest, other: TopicManifest) -> bool:
    """Whether both record the same topic with the same configs, partition count and
    replication factor (the per-partition figures and the time aside)."""
    return (
        manifest.topic == other.topic
        and manifest.topic_id == other.topic_id
        and manifest.partition_count == other.partition_count
        and manifest.replication_factor == other.replication_factor
        and dict(manifest.configs) == dict(other.configs)
    )


def check_format(document: Mapping[str, Any], name: str, version: int) -> None:
    """``ValueError`` unless ``document`` is of format ``name`` at ``version``: another
    format, a later version (by name: it was written by newer code) or a missing one."""
    if document.get("format") != name:
        raise ValueError(f"format {document.get('format')!r} is not {name!r}")
    found = document.get("version")
    if type(found) is not int or found < 1:
        raise ValueError(f"format version {found!r} is not a positive integer")
    if found > version:
        raise ValueError(
            f"written by a newer format version {found}; this reader knows {version}:"
            " read it with a newer storage-core"
        )
    if found != version:
        raise ValueError(f"format version {found} is not one this reader knows ({version})")


def _ranges(indexes: list[int]) -> str:
    return ", ".join(str(i) for i in indexes[:10]) + (" ..." if len(indexes) > 10 else "")


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r:.80} is not a list")
    return value
