"""A readable stream of original ``.log`` bytes over the chunks that hold them."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

from storage_core.tiered.chunked.chunk_index import Chunk

# ``load(chunk, first, last)``: the chunk's original bytes from ``first`` (chunk-relative) on,
# at least through ``last`` and at most to the chunk's end.
ChunkLoader = Callable[[Chunk, int, int], memoryview]


class ChunkStream(io.RawIOBase):
    """Original bytes ``[start, end]`` (inclusive) of a segment, over ``chunks``: each chunk's
    original bytes come from ``load`` when the reader reaches it (a reader that stops early
    never loads the chunks after). ``read_view`` asks ``load`` for the bytes the read needs
    only, so a short read of a chunk nobody has read checks its first frames, not the chunk."""

    def __init__(
        self,
        chunks: Sequence[Chunk],
        load: ChunkLoader,
        *,
        start: int,
        end: int,
    ) -> None:
        self._chunks = chunks  # built as the reader reaches them (``chunks_for_range``)
        self._load = load
        self._position = start  # next original byte to hand out
        self._end = end  # last original byte (inclusive)
        self._next_chunk = 0
        self._buffer = memoryview(b"")

    def readable(self) -> bool:
        return True

    def read_view(self, size: int) -> memoryview:
        """Up to ``size`` next bytes as a view of the chunk that holds them (no copy; empty at
        the end). A reader uses either this or ``read``/``readinto``, never both."""
        if not self._buffer and not self._next(self._position + size - 1):
            return memoryview(b"")
        view = self._buffer[:size]
        self._buffer = self._buffer[len(view) :]
        self._position += len(view)
        return view

    def _next(self, wanted_last: int | None = None) -> bool:
        """Load the part of the next chunk to hand out, at least through original byte
        ``wanted_last`` when it is in that chunk (``None``: the whole rest of the chunk);
        ``False`` at the end."""
        if self._position > self._end or self._next_chunk == len(self._chunks):
            return False
        chunk = self._chunks[self._next_chunk]
        first = self._position - chunk.original_position
        last = min(self._end, chunk.original_end - 1) - chunk.original_position
        wanted = last if wanted_last is None else min(last, wanted_last - chunk.original_position)
        loaded = self._load(chunk, first, wanted)
        self._buffer = loaded[: last - first + 1]
        if len(self._buffer) == last - first + 1:
            self._next_chunk += 1  # else the rest of the chunk is loaded by the next read
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self._buffer and not self._next():
            return 0
        count = min(len(buffer), len(self._buffer))
        buffer[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        self._position += count
        return count
