"""Where each chunk of a segment's ``.log`` lies, before and after its transformation.

A segment's ``.log`` is cut into chunks of ``chunk_size`` original bytes (the last one may be
shorter); chunk boundaries ignore record batches, a reader reassembles what it needs. Each
chunk is stored transformed (compressed, encrypted, or as it is), one after the other, so the
stored object is the concatenation of the stored chunks. The index maps an original byte
range to the chunks that hold it and to the stored byte range to read.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One chunk: its number, where its bytes are in the original ``.log`` and in the stored
    object, and the CRC32C of its stored bytes."""

    id: int
    original_position: int
    original_size: int
    stored_position: int
    stored_size: int
    checksum: int

    @property
    def original_end(self) -> int:
        """One past the chunk's last original byte."""
        return self.original_position + self.original_size

    @property
    def stored_end(self) -> int:
        return self.stored_position + self.stored_size


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkIndex:
    """The chunks of one ``.log``: ``stored_sizes[i]`` and ``checksums[i]`` of chunk ``i``."""

    chunk_size: int
    original_size: int
    stored_sizes: tuple[int, ...]
    checksums: tuple[int, ...]
    _stored_positions: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ValueError(f"chunk size must be > 0, got {self.chunk_size}")
        if self.original_size < 0:
            raise ValueError(f"original size must be >= 0, got {self.original_size}")
        expected = -(-self.original_size // self.chunk_size)
        if len(self.stored_sizes) != expected or len(self.checksums) != expected:
            raise ValueError(
                f"{self.original_size} bytes in chunks of {self.chunk_size} make {expected}"
                f" chunks, the index lists {len(self.stored_sizes)} sizes and"
                f" {len(self.checksums)} checksums"
            )
        if any(size <= 0 for size in self.stored_sizes):
            raise ValueError("every stored chunk size must be > 0")
        object.__setattr__(
            self, "_stored_positions", tuple(itertools.accumulate(self.stored_sizes, initial=0))
        )

    @property
    def stored_size(self) -> int:
        """The size of the stored object."""
        return self._stored_positions[-1]

    def __len__(self) -> int:
        return len(self.stored_sizes)

    def chunk(self, chunk_id: int) -> Chunk:
        if not 0 <= chunk_id < len(self.stored_sizes):
            raise IndexError(f"chunk {chunk_id} is not one of the {len(self)} chunks")
        position = chunk_id * self.chunk_size
        return Chunk(
            id=chunk_id,
            original_position=position,
            original_size=min(self.chunk_size, self.original_size - position),
            stored_position=self._stored_positions[chunk_id],
            stored_size=self.stored_sizes[chunk_id],
            checksum=self.checksums[chunk_id],
        )

    def chunks_for_range(self, start: int, end: int | None = None) -> list[Chunk]:
        """The chunks holding original bytes ``[start, end]`` (inclusive; ``None``: to the
        end). ``ValueError`` when ``start`` is past the end."""
        if start < 0 or (start >= self.original_size and self.original_size > 0):
            raise ValueError(
                f"start position {start} is beyond the segment's {self.original_size} bytes"
            )
        last = self.original_size - 1 if end is None else min(end, self.original_size - 1)
        if last < start:
            return []
        first_id = start // self.chunk_size
        last_id = last // self.chunk_size
        return [self.chunk(i) for i in range(first_id, last_id + 1)]
