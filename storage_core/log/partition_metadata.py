"""The ``partition.metadata`` file of a partition directory (Kafka's ``PartitionMetadataFile``).

File format (UTF-8, exactly as Kafka writes it, no newline after the last line)::

    version: 0
    topic_id: <topic id as 22-character URL-safe base64, e.g. vDZRHcQXQyGvc1EESx0E4g>

It ties the directory to one incarnation of the topic: a topic deleted and re-created
under the same name gets a new id, so a stale directory is recognised. Reading accepts what
Kafka accepts: each line split at ``:`` followed by whitespace, a trailing newline and any
further lines are ignored; the zero id is refused.
"""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path

from storage_core.common import ZERO_UUID, Uuid
from storage_core.errors import CorruptCheckpointError, InconsistentTopicIdError, KafkaStorageError
from storage_core.log.checkpoints import write_atomically

PARTITION_METADATA_FILENAME = "partition.metadata"
CURRENT_VERSION = 0

# Kafka's PartitionMetadataReadBuffer splits each line with ":\\s+".
_KEY_VALUE_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")


def encode_partition_metadata(topic_id: Uuid) -> str:
    """The file content for ``topic_id`` (Kafka's ``PartitionMetadata.encode``)."""
    return f"version: {CURRENT_VERSION}\ntopic_id: {topic_id}"


class PartitionMetadataFile:
    """Remembers the topic id of a partition directory; format in the module docstring.

    ``record`` keeps an id in memory (refusing one that differs from the id already recorded
    or stored in the file) and ``maybe_flush`` writes a recorded id atomically; the file is
    written once per directory.

    Thread safety: every method holds one lock per instance.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._dirty_topic_id: Uuid | None = None
        self._stored_topic_id: Uuid | None = None

    def exists(self) -> bool:
        return self.path.exists()

    def record(self, topic_id: Uuid) -> None:
        """Remember ``topic_id`` for the next ``maybe_flush``.

        Raises ``InconsistentTopicIdError`` if a different id was recorded or is stored in the
        file, and ``CorruptCheckpointError`` if the existing file cannot be read.
        """
        with self._lock:
            current = self._dirty_topic_id or self._stored_topic_id
            if current is None and self.path.exists():
                current = self._read_locked()
            if current is not None and current != topic_id:
                raise InconsistentTopicIdError(
                    f"Tried to record topic ID {topic_id} to file {self.path} but had already"
                    f" recorded {current}; the directory belongs to another incarnation of"
                    " the topic"
                )
            if current is not None and current == self._stored_topic_id:
                return  # already on disk
            self._dirty_topic_id = topic_id

    def maybe_flush(self) -> None:
        """Write the recorded id (temp file, fsync, rename, fsync dir) if not yet written."""
        with self._lock:
            topic_id = self._dirty_topic_id
            if topic_id is None:
                return
            write_atomically(self.path, encode_partition_metadata(topic_id))
            self._stored_topic_id = topic_id
            self._dirty_topic_id = None

    def read(self) -> Uuid:
        """The topic id stored in the file.

        Raises ``CorruptCheckpointError`` naming the file and the problem when the content is
        malformed, and ``KafkaStorageError`` when the file cannot be read (e.g. missing).
        """
        with self._lock:
            return self._read_locked()

    def _read_locked(self) -> Uuid:
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise KafkaStorageError(
                f"Error while reading partition metadata file {self.path}: {exc}"
            ) from exc
        topic_id = self._parse(raw)
        self._stored_topic_id = topic_id
        return topic_id

    def _parse(self, raw: bytes) -> Uuid:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._malformed(f"not valid UTF-8 at byte {exc.start}") from exc
        lines = [line.rstrip("\n") for line in io.StringIO(text, newline=None)]
        version_text = self._value(lines, 0, "version")
        if not re.fullmatch(r"[+-]?[0-9]+", version_text):
            raise self._malformed(f"line 1: expected an integer version, found {version_text!r}")
        version = int(version_text)
        if version != CURRENT_VERSION:
            raise self._malformed(
                f"line 1: unrecognized version {version}, expected {CURRENT_VERSION}"
            )
        topic_id_text = self._value(lines, 1, "topic_id")
        try:
            topic_id = Uuid.from_string(topic_id_text)
        except ValueError as exc:
            raise self._malformed(f"line 2: {exc}") from exc
        if topic_id == ZERO_UUID:
            raise self._malformed("line 2: the topic id is the zero id, which is never assigned")
        return topic_id

    def _value(self, lines: list[str], index: int, key: str) -> str:
        if index >= len(lines):
            raise self._malformed(f"line {index + 1} ('{key}: <value>') is missing")
        fields = _KEY_VALUE_SEPARATOR.split(lines[index])
        if len(fields) != 2 or fields[0] != key:
            raise self._malformed(
                f"line {index + 1}: expected '{key}: <value>', found {lines[index]!r}"
            )
        return fields[1]

    def _malformed(self, problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"Malformed partition metadata file {self.path}: {problem}")
