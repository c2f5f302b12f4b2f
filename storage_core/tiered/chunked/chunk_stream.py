"""A readable stream of original ``.log`` bytes over the stored chunks that hold them."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import BinaryIO

from storage_core.tiered.chunked.chunk_index import Chunk
from storage_core.tiered.chunked.chunk_transform import ChunkTransform
from storage_core.tiered.chunked.errors import ChunkIntegrityError


class ChunkStream(io.RawIOBase):
    """Original bytes ``[start, end]`` read from ``stored``, a stream of the stored object from
    ``chunks[0]``'s first byte: each chunk is read whole, checked and restored when the reader
    reaches it (a reader that stops early never reads the chunks after). Owns ``stored``."""

    def __init__(
        self,
        stored: BinaryIO,
        chunks: Sequence[Chunk],
        transform: ChunkTransform,
        *,
        start: int,
        end: int,
        where: str,
    ) -> None:
        self._stored = stored
        self._chunks = list(chunks)
        self._transform = transform
        self._position = start  # next original byte to hand out
        self._end = end  # last original byte (inclusive)
        self._where = where
        self._next_chunk = 0
        self._buffer = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not self._buffer:
            if self._position > self._end or self._next_chunk == len(self._chunks):
                return 0
            self._buffer = memoryview(self._load(self._chunks[self._next_chunk]))
            self._next_chunk += 1
        count = min(len(buffer), len(self._buffer))
        buffer[:count] = self._buffer[:count]
        self._buffer = self._buffer[count:]
        self._position += count
        return count

    def _load(self, chunk: Chunk) -> bytes:
        """The part of ``chunk`` still to hand out."""
        where = (
            f"{self._where} chunk {chunk.id} (original bytes {chunk.original_position}"
            f"-{chunk.original_end - 1})"
        )
        stored = _read_exactly(self._stored, chunk.stored_size)
        if len(stored) != chunk.stored_size:
            raise ChunkIntegrityError(
                f"{where}: the object ends {chunk.stored_size - len(stored)} bytes early"
                " (truncated?)"
            )
        data = self._transform.restore_chunk(
            chunk.id,
            stored,
            checksum=chunk.checksum,
            original_size=chunk.original_size,
            where=where,
        )
        first = self._position - chunk.original_position
        last = min(self._end, chunk.original_end - 1) - chunk.original_position
        return data[first : last + 1]

    def close(self) -> None:
        if not self.closed:
            self._stored.close()
        super().close()


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    parts = []
    remaining = size
    while remaining > 0:
        part = stream.read(remaining)
        if not part:
            break
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)
