"""``storage-core remote-log-metadata dump``: print the events of ``__remote_log_metadata``.

Kafka's ``RemoteLogMetadataFormatter`` (KIP-405 "Internal message format"), one line per
record, ``<sep>`` = ``separator`` (default ``,``)::

    partition:<n><sep>message-offset:<n><sep>type:<type><sep>version:<n><sep>event-value:<value>

``partition`` with ``print.partition=true``, ``message-offset`` with
``print.message.offset=true``, ``version`` with ``print.version=true`` (all default false).
``type`` is ``RemoteLogSegmentMetadata``, ``RemoteLogSegmentMetadataUpdate`` or
``DeletePartitionState``. Event values (``print.all.event.value.fields=true`` adds every
other field: broker id, timestamps, leader epochs, size, custom metadata, txn index)::

    RemoteLogSegmentMetadata        {remote-log-segment-id:<id><sep>start-offset:<n><sep>
                                     end-offset:<n><sep>leader-epoch:<n><sep>
                                     remote-log-segment-state:<state>}
    RemoteLogSegmentMetadataUpdate  {remote-log-segment-id:<id><sep>leader-epoch:<n><sep>
                                     remote-log-segment-state:<state>}
    DeletePartitionState            {topic-id-partition:<tip><sep>epoch:<n><sep>
                                     remote-partition-delete-state:<state>}

    <id>  = {id:<uuid><sep>topicId:<uuid><sep>topicName:<name><sep>partition:<n>}
    <tip> = {topicId:<uuid><sep>topicName:<name><sep>partition:<n>}

A segment copied in the chunked format (``storage_core.tiered.chunked``: its custom metadata
says so, in the COPY_SEGMENT_FINISHED update) adds, before its state,
``remote-format:chunked<sep>remote-format-version:<n><sep>remote-stored-size-in-bytes:<n>``
(the stored size of all its objects); ``storage-core dump-log`` on its ``rsm-manifest`` shows
the chunk size, compression and key id.

A segment's ``leader-epoch`` is the last leader epoch with records in it. Updates and
partition deletions carry no leader epoch in the version 0 records written here (Kafka adds
it as a v1 tagged field), so theirs prints as -1. A record that does not decode prints
``error:<reason>`` in place of type and value.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicIdPartition
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.tiered.chunked.custom_metadata import chunked_format_version, remote_size
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME

TYPE_NAMES = {
    serde.REMOTE_LOG_SEGMENT_METADATA_API_KEY: "RemoteLogSegmentMetadata",
    serde.REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: "RemoteLogSegmentMetadataUpdate",
    serde.REMOTE_PARTITION_DELETE_API_KEY: "DeletePartitionState",
    serde.REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY: "RemoteLogSegmentMetadataSnapshot",
}
PROPERTIES = (
    "print.partition",
    "print.message.offset",
    "print.version",
    "print.all.event.value.fields",
    "separator",
)
NO_EPOCH = -1
IDLE_POLL_S = 0.2


def _header(value: bytes) -> tuple[int, int]:
    """``(api key, version)`` from the frame of a serialized event (three uvarints)."""
    fields = []
    position = 0
    for _ in range(3):
        result = shift = 0
        while True:
            if position >= len(value) or shift > 28:
                raise CorruptRemoteLogMetadataError("truncated frame header")
            byte = value[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        fields.append(result)
    return fields[1], fields[2]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogMetadataFormatter:
    """Formats one record of the metadata topic; options are the ``print.*`` properties."""

    print_partition: bool = False
    print_message_offset: bool = False
    print_version: bool = False
    print_all_event_value_fields: bool = False
    separator: str = ","

    @staticmethod
    def from_properties(properties: Mapping[str, str]) -> RemoteLogMetadataFormatter:
        unknown = sorted(set(properties) - set(PROPERTIES))
        if unknown:
            raise ValueError(f"unknown properties {unknown}; known: {', '.join(PROPERTIES)}")

        def flag(name: str) -> bool:
            text = properties.get(name, "false").strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"{name} must be true or false, got {text!r}")
            return text == "true"

        return RemoteLogMetadataFormatter(
            print_partition=flag("print.partition"),
            print_message_offset=flag("print.message.offset"),
            print_version=flag("print.version"),
            print_all_event_value_fields=flag("print.all.event.value.fields"),
            separator=properties.get("separator", ","),
        )

    def format(self, partition: int, offset: int, value: bytes | None) -> str:
        sep = self.separator
        parts = []
        if self.print_partition:
            parts.append(f"partition:{partition}")
        if self.print_message_offset:
            parts.append(f"message-offset:{offset}")
        try:
            if value is None:
                raise CorruptRemoteLogMetadataError("null value")
            api_key, version = _header(value)
            event = serde.deserialize(value)
        except CorruptRemoteLogMetadataError as exc:
            parts.append(f"error:{exc}")
            return sep.join(parts)
        parts.append(f"type:{TYPE_NAMES.get(api_key, api_key)}")
        if self.print_version:
            parts.append(f"version:{version}")
        parts.append(f"event-value:{self.event_value(event)}")
        return sep.join(parts)

    def _braces(self, fields: Sequence[tuple[str, object]]) -> str:
        return "{" + self.separator.join(f"{name}:{value}" for name, value in fields) + "}"

    def topic_id_partition(self, tip: TopicIdPartition) -> str:
        return self._braces(
            [
                ("topicId", tip.topic_id),
                ("topicName", tip.topic_partition.topic),
                ("partition", tip.topic_partition.partition),
            ]
        )

    def segment_id(self, segment_id: RemoteLogSegmentId) -> str:
        tip = segment_id.topic_id_partition
        return self._braces(
            [
                ("id", segment_id.id),
                ("topicId", tip.topic_id),
                ("topicName", tip.topic_partition.topic),
                ("partition", tip.topic_partition.partition),
            ]
        )

    def event_value(self, event: RemoteLogMetadata) -> str:
        if isinstance(event, RemoteLogSegmentMetadata):
            fields: list[tuple[str, object]] = [
                ("remote-log-segment-id", self.segment_id(event.remote_log_segment_id)),
                ("start-offset", event.start_offset),
                ("end-offset", event.end_offset),
                ("leader-epoch", max(event.segment_leader_epochs)),
            ]
            if self.print_all_event_value_fields:
                fields += self._segment_details(event)
            fields += _remote_format(event.custom_metadata)
            fields.append(("remote-log-segment-state", event.state.name))
            return self._braces(fields)
        if isinstance(event, RemoteLogSegmentMetadataUpdate):
            fields = [
                ("remote-log-segment-id", self.segment_id(event.remote_log_segment_id)),
                ("leader-epoch", NO_EPOCH),
            ]
            if self.print_all_event_value_fields:
                fields += [
                    ("broker-id", event.broker_id),
                    ("event-timestamp-ms", event.event_timestamp_ms),
                    ("custom-metadata", _hex(event.custom_metadata)),
                ]
            fields += _remote_format(event.custom_metadata)
            fields.append(("remote-log-segment-state", event.state.name))
            return self._braces(fields)
        if isinstance(event, RemotePartitionDeleteMetadata):
            fields = [
                ("topic-id-partition", self.topic_id_partition(event.topic_id_partition)),
                ("epoch", NO_EPOCH),
            ]
            if self.print_all_event_value_fields:
                fields += [
                    ("broker-id", event.broker_id),
                    ("event-timestamp-ms", event.event_timestamp_ms),
                ]
            fields.append(("remote-partition-delete-state", event.state.name))
            return self._braces(fields)
        return self._snapshot_value(event)

    def _segment_details(
        self, event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot
    ) -> list[tuple[str, object]]:
        epochs = self._braces([(str(e), o) for e, o in event.segment_leader_epochs.items()])
        return [
            ("broker-id", event.broker_id),
            ("max-timestamp-ms", event.max_timestamp_ms),
            ("event-timestamp-ms", event.event_timestamp_ms),
            ("segment-leader-epochs", epochs),
            ("segment-size-in-bytes", event.segment_size_in_bytes),
            ("custom-metadata", _hex(event.custom_metadata)),
            ("txn-idx-empty", str(event.txn_idx_empty).lower()),
        ]

    def _snapshot_value(self, event: RemoteLogSegmentMetadataSnapshot) -> str:
        fields: list[tuple[str, object]] = [
            ("segment-id", event.segment_id),
            ("start-offset", event.start_offset),
            ("end-offset", event.end_offset),
            ("leader-epoch", max(event.segment_leader_epochs)),
        ]
        if self.print_all_event_value_fields:
            fields += self._segment_details(event)
        fields.append(("remote-log-segment-state", event.state.name))
        return self._braces(fields)


def _remote_format(custom_metadata: bytes | None) -> list[tuple[str, object]]:
    """``remote-format:chunked``, its version and the stored size of the segment's objects
    when the custom metadata says the chunked format (``storage_core.tiered.chunked``);
    nothing for the plain format (Kafka's line as it is)."""
    version = chunked_format_version(custom_metadata)
    if version is None:
        return []
    size = remote_size(custom_metadata)
    return [
        ("remote-format", "chunked"),
        ("remote-format-version", version),
        ("remote-stored-size-in-bytes", -1 if size is None else size),
    ]


def _hex(data: bytes | None) -> str:
    return "null" if data is None else data.hex()


def run_remote_log_metadata_dump(
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    partitions: Sequence[int] | None,
    from_beginning: bool,
    properties: Mapping[str, str],
    max_messages: int | None,
    timeout_ms: int | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """Print the records of the metadata partitions (all, or ``partitions``).

    From the earliest offset with ``from_beginning``, else from the end. Stops after
    ``max_messages`` records or once none came for ``timeout_ms``; with neither it follows
    the topic until interrupted. Ends with ``Processed a total of N messages`` on ``err``.
    """
    formatter = RemoteLogMetadataFormatter.from_properties(properties)
    if max_messages is not None and max_messages < 0:
        raise ValueError(f"--max-messages must not be negative, got {max_messages}")
    topic = REMOTE_LOG_METADATA_TOPIC_NAME
    processed = 0
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        described = cluster.refresh_metadata([topic]).topic(topic)
        if described is None or not described.partitions:
            raise UnknownTopicOrPartitionError(
                f"{topic} does not exist on {bootstrap_server} (remote storage is not enabled)"
            )
        count = len(described.partitions)
        chosen = list(range(count)) if partitions is None else list(partitions)
        for partition in chosen:
            if not 0 <= partition < count:
                raise ValueError(f"--partition {partition} is not in [0, {count}) (exclusive)")
        consumer = KafkaConsumer(cluster, max_wait_ms=0, min_bytes=0)
        offsets = {
            p: consumer.earliest_offset(topic, p)
            if from_beginning
            else consumer.latest_offset(topic, p)
            for p in chosen
        }
        last_progress = time.monotonic()
        while max_messages is None or processed < max_messages:
            progressed = False
            for partition in chosen:
                fetched = consumer.fetch(topic, partition, offsets[partition])
                offsets[partition] = fetched.next_offset
                for record in fetched.records:
                    print(formatter.format(partition, record.offset, record.value), file=out)
                    processed += 1
                    progressed = True
                    if max_messages is not None and processed >= max_messages:
                        break
                if max_messages is not None and processed >= max_messages:
                    break
            if progressed:
                last_progress = time.monotonic()
                continue
            if timeout_ms is not None and (time.monotonic() - last_progress) * 1000 >= timeout_ms:
                break
            time.sleep(IDLE_POLL_S)
    out.flush()
    print(f"Processed a total of {processed} messages", file=err)
    return 0
