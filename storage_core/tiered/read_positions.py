"""``ReadPositions``: where recent remote reads ended, so that the next read starts there.

A consumer reading history fetches offset after offset: each fetch starts where the previous
one ended. Kafka looks every fetch offset up in the segment's offset index, which a cold read
must download first (the offset, time and transaction indexes of the segment). The reader
instead remembers, per remote segment, the offset after the last batch it returned and the
``.log`` position of the batch that follows: a fetch at exactly that offset starts there, and
a sequential reader downloads no index at all. Anything else (a seek, another consumer's
offset) falls back to the index.

A remembered position is never wrong for the offset it is kept under: it is the position of
the first batch after the returned ones, whose offsets are all at or above it. Entries are
bounded (least recently used dropped first); those of deleted segments age out, as their
segment ids are never used again.

Thread-safety: every method may be called from any reader thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from storage_core.common import Uuid

READ_POSITIONS_MAX = 4096


class ReadPositions:
    def __init__(self, capacity: int = READ_POSITIONS_MAX) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._positions: OrderedDict[tuple[Uuid, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def position(self, segment_id: Uuid, offset: int) -> int | None:
        """The ``.log`` position a read of ``segment_id`` at ``offset`` can start from, if a
        read ended there (kept: a fetch retried, or a second consumer, finds it again)."""
        key = (segment_id, offset)
        with self._lock:
            found = self._positions.get(key)
            if found is not None:
                self._positions.move_to_end(key)
                self.hits += 1
            return found

    def remember(self, segment_id: Uuid, next_offset: int, position: int) -> None:
        """A read of ``segment_id`` returned batches up to ``next_offset`` - 1, and the next
        batch starts at ``position``."""
        with self._lock:
            self._positions[(segment_id, next_offset)] = position
            self._positions.move_to_end((segment_id, next_offset))
            while len(self._positions) > self._capacity:
                self._positions.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._positions)
