"""Text checkpoint files (Kafka's ``CheckpointFile`` and ``OffsetCheckpointFile``).

File format (UTF-8, ``\\n`` line ends, every line terminated)::

    0                   <- version (only 0 exists)
    N                   <- number of entries that follow
    <entry 1>
    ...
    <entry N>

For the offset checkpoints of a log dir an entry is ``<topic> <partition> <offset>``, e.g.::

    0
    2
    foo 0 5
    foo 1 7

Files are replaced atomically (``storage_core.atomic_file``): written to ``<name>.tmp`` in the
same directory, fsynced, renamed over the old file, then the directory is fsynced. A leftover
``.tmp`` is the trace of an interrupted write and is deleted when the log dir is loaded.

Reading follows Kafka: a missing or empty file, or one with only a version line, holds no
entries; anything else that does not match the format raises ``CorruptCheckpointError``.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeVar

from storage_core.atomic_file import write_file_atomically
from storage_core.common import TopicPartition, validate_topic_name
from storage_core.errors import CheckpointWriteError, CorruptCheckpointError, KafkaStorageError

CHECKPOINT_VERSION = 0

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Java's Pattern "\\s+" (ASCII whitespace only) and Integer/Long.parseInt syntax.
_WHITESPACES = re.compile(r"[ \t\n\x0b\f\r]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")

T = TypeVar("T")
T2 = TypeVar("T2")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (``write_file_atomically``).

    Raises ``CheckpointWriteError`` (a ``KafkaStorageError``) naming the file on any I/O
    failure; the previous content of ``path`` is then still in place. Writers of one path
    must not run concurrently (they share the temp file).
    """
    try:
        write_file_atomically(path, text.encode("utf-8"))
    except OSError as exc:
        raise CheckpointWriteError(
            f"Error while writing checkpoint file {path}: {exc}"
            " (check the disk and permissions of the log dir)"
        ) from exc


def parse_int(text: str, minimum: int, maximum: int, what: str) -> int:
    """Parse a decimal integer in ``[minimum, maximum]`` (inclusive); ``ValueError`` if not."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"expected {what} as a decimal integer, found {text!r}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ValueError(f"expected {what} in [{minimum}, {maximum}], found {value}")
    return value


def split_fields(line: str, count: int, layout: str) -> list[str]:
    """Split ``line`` on whitespace like Java's ``"\\\\s+"``; ``ValueError`` unless ``count``."""
    fields = _WHITESPACES.split(line)
    while fields and not fields[-1]:
        fields.pop()  # Java's String.split drops trailing empty strings
    if len(fields) != count:
        raise ValueError(f"expected '{layout}', found {line!r}")
    return fields


class CheckpointFile(Generic[T]):
    """One checkpoint file of entries of type ``T``; format in the module docstring.

    ``to_line`` turns an entry into its line (``ValueError`` if it cannot be written);
    ``from_line`` parses one line (``ValueError`` saying what was expected).

    Thread safety: ``write`` and ``read`` hold a lock per instance; two instances must not
    write the same path at the same time.
    """

    def __init__(
        self,
        path: Path,
        version: int,
        to_line: Callable[[T], str],
        from_line: Callable[[str], T],
    ) -> None:
        self.path = path
        self.version = version
        self._to_line = to_line
        self._from_line = from_line
        self._lock = threading.Lock()

    def write(self, entries: Iterable[T]) -> None:
        lines = [self._to_line(entry) for entry in entries]
        text = "".join(f"{line}\n" for line in [str(self.version), str(len(lines)), *lines])
        with self._lock:
            write_atomically(self.path, text)

    def read(self) -> list[T]:
        with self._lock:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise KafkaStorageError(
                    f"Error while reading checkpoint file {self.path}: {exc}"
                ) from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(
                f"Checkpoint file {self.path} is not valid UTF-8 at byte {exc.start}"
            ) from exc
        return self.parse(text)

    def parse(self, text: str) -> list[T]:
        """The entries of ``text`` in this file's format (``CorruptCheckpointError`` naming
        the file and line); for a copy of the file held in memory."""
        # Universal newlines, like Java's BufferedReader.readLine.
        lines = [line.rstrip("\n") for line in io.StringIO(text, newline=None)]
        return self._parse(lines)

    def _parse(self, lines: list[str]) -> list[T]:
        if not lines:
            return []
        version = self._parse_line(1, lines[0], lambda s: parse_int(s, 0, INT32_MAX, "version"))
        if version != self.version:
            raise CorruptCheckpointError(
                f"Unrecognised version {version} in checkpoint file {self.path} at line 1,"
                f" expected version {self.version}"
            )
        if len(lines) == 1:
            return []
        expected = self._parse_line(
            2, lines[1], lambda s: parse_int(s, 0, INT32_MAX, "the number of entries")
        )
        entries = [
            self._parse_line(number, line, self._from_line)
            for number, line in enumerate(lines[2:], start=3)
        ]
        if len(entries) != expected:
            raise CorruptCheckpointError(
                f"Expected {expected} entries in checkpoint file {self.path} (line 2), but found"
                f" {len(entries)}"
            )
        return entries

    def _parse_line(self, number: int, line: str, parse: Callable[[str], T2]) -> T2:
        try:
            return parse(line)
        except ValueError as exc:
            raise CorruptCheckpointError(
                f"Malformed line {number} in checkpoint file {self.path}: {exc}"
            ) from exc


def _offset_to_line(entry: tuple[TopicPartition, int]) -> str:
    topic_partition, offset = entry
    validate_topic_name(topic_partition.topic)  # a legal name never contains whitespace
    if not 0 <= topic_partition.partition <= INT32_MAX:
        raise ValueError(f"partition of {topic_partition} does not fit a non-negative int32")
    if not INT64_MIN <= offset <= INT64_MAX:
        raise ValueError(f"offset {offset} of {topic_partition} does not fit an int64")
    return f"{topic_partition.topic} {topic_partition.partition} {offset}"


def _offset_from_line(line: str) -> tuple[TopicPartition, int]:
    topic, partition, offset = split_fields(line, 3, "<topic> <partition> <offset>")
    return (
        TopicPartition(topic, parse_int(partition, INT32_MIN, INT32_MAX, "a partition")),
        parse_int(offset, INT64_MIN, INT64_MAX, "an offset"),
    )


class OffsetCheckpointFile:
    """Per-partition offsets of one log dir (recovery points, log start offsets, high
    watermarks): ``0\\n<N>\\n<topic> <partition> <offset>\\n...`` (module docstring).

    Entries are written sorted by topic and partition, so equal maps give equal files. On
    read a partition listed twice keeps its last offset, as in Kafka.

    Thread safety: ``write`` and ``read`` may be called from any thread; writes to one path
    must come through one instance (or be serialised by the caller).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._checkpoint: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, CHECKPOINT_VERSION, _offset_to_line, _offset_from_line
        )

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._checkpoint.write(sorted(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._checkpoint.read())
