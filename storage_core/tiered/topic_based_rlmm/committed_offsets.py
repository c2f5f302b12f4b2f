"""``_rlmm_committed_offsets``: how far each ``__remote_log_metadata`` partition was consumed.

Kafka's ``CommittedOffsetsFile`` (KIP-405 "Committed offsets file format"), a text checkpoint
in the log dir (``storage_core.log.checkpoints`` format, version 0), one entry per metadata
partition::

    0
    3
    0 2022
    2 498
    4 104

An entry ``<partition> <offset>`` says that the metadata partition was read up to ``offset``
(inclusive) and every tracked user partition's snapshot was written first. On start the
consumer resumes a metadata partition at the smallest of ``offset + 1`` and its tracked user
partitions' snapshot offsets + 1 (0 for one without a snapshot).

Thread-safety: ``read`` and ``write`` may be called from any thread; one writer per file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from storage_core.log.checkpoints import (
    CHECKPOINT_VERSION,
    INT32_MAX,
    INT64_MAX,
    CheckpointFile,
    parse_int,
    split_fields,
)

COMMITTED_OFFSETS_FILE_NAME = "_rlmm_committed_offsets"


def _to_line(entry: tuple[int, int]) -> str:
    partition, offset = entry
    if not 0 <= partition <= INT32_MAX:
        raise ValueError(f"metadata partition {partition} is not a non-negative int32")
    if not -1 <= offset <= INT64_MAX:
        raise ValueError(f"offset {offset} of metadata partition {partition} is not >= -1")
    return f"{partition} {offset}"


def _from_line(line: str) -> tuple[int, int]:
    partition, offset = split_fields(line, 2, "<partition> <offset>")
    return (
        parse_int(partition, 0, INT32_MAX, "a metadata partition"),
        parse_int(offset, -1, INT64_MAX, "an offset"),
    )


class CommittedOffsetsFile:
    """The committed offsets of the metadata partitions, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / COMMITTED_OFFSETS_FILE_NAME
        self._file: CheckpointFile[tuple[int, int]] = CheckpointFile(
            self.path, CHECKPOINT_VERSION, _to_line, _from_line
        )

    def write(self, offsets: Mapping[int, int]) -> None:
        """Replace the file atomically (``CheckpointWriteError`` on I/O failure)."""
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[int, int]:
        """The stored offsets; empty when there is no file. ``CorruptCheckpointError`` for a
        damaged one (the caller then replays from the snapshots' offsets)."""
        return dict(self._file.read())
