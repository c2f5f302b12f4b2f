"""Hands out producer ids for InitProducerId (Kafka's ``ProducerIdManager``).

Ids are reserved in blocks of ``BLOCK_SIZE``: the end of the current block is persisted in
``producer-id-block`` (one decimal line, written atomically) before any id of the block is
handed out, so a restart never reuses an id, whatever happened before it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from storage_core.errors import CorruptCheckpointError
from storage_core.log.checkpoints import write_atomically

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / PRODUCER_ID_BLOCK_FILE
        self._lock = threading.Lock()
        self._next = self._read_block_end()
        self._block_end = self._next

    def _read_block_end(self) -> int:
        if not self._path.exists():
            return 0
        text = self._path.read_text(encoding="ascii").strip()
        try:
            value = int(text)
        except ValueError:
            raise CorruptCheckpointError(
                f"{self._path} must hold one non-negative integer, found {text[:40]!r}"
            ) from None
        if value < 0:
            raise CorruptCheckpointError(f"{self._path} holds a negative producer id {value}")
        return value

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                self._block_end = self._next + BLOCK_SIZE
                write_atomically(self._path, f"{self._block_end}\n")
            producer_id = self._next
            self._next += 1
            return producer_id
