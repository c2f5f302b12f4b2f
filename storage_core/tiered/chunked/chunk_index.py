"""Where each chunk of a segment's ``.log`` lies, before and after its transformation.

A segment's ``.log`` is cut into chunks of ``chunk_size`` original bytes (the last one may be
shorter); chunk boundaries ignore record batches, a reader reassembles what it needs. Each
chunk is cut again into frames of ``frame_size`` original bytes from its start (its last frame
may be shorter). A frame is the unit of transformation and of checking: each is compressed,
encrypted and checksummed on its own, so a reader can check and serve one frame of a chunk
without reading the rest of it. A chunk is the unit of caching and prefetching. Stored frames
follow one another, so the stored object is the concatenation of the stored chunks, each the
concatenation of its stored frames.

Format version 1 had no frames: each chunk was one frame (``frame_size == chunk_size``) whose
authenticated data names the chunk alone (``framed`` False).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

_CHUNK_NUMBER = struct.Struct(">q")
_FRAME_NUMBER = struct.Struct(">qi")
# Chunks built lately, kept per index: every fetch looks its chunk up, and a sequential
# reader's fetches (a chunk serves several) ask for the same one again.
RECENT_CHUNKS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One frame: its place in its chunk, where its bytes are in the original ``.log`` and in
    the stored object, the CRC32C of its stored bytes, and what its encryption authenticates
    beside the segment's AAD (``context``)."""

    number: int  # within its chunk
    original_position: int
    original_size: int
    stored_position: int
    stored_size: int
    checksum: int
    context: bytes

    @property
    def original_end(self) -> int:
        return self.original_position + self.original_size


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One chunk: its number, where its bytes are in the original ``.log`` and in the stored
    object, and its frames."""

    id: int
    original_position: int
    original_size: int
    stored_position: int
    stored_size: int
    frame_size: int
    frames: tuple[Frame, ...]

    @property
    def original_end(self) -> int:
        """One past the chunk's last original byte."""
        return self.original_position + self.original_size

    @property
    def stored_end(self) -> int:
        return self.stored_position + self.stored_size

    def frames_for(self, first: int, last: int) -> tuple[Frame, ...]:
        """The frames holding the chunk's original bytes ``[first, last]`` (chunk-relative,
        inclusive)."""
        return self.frames[first // self.frame_size : last // self.frame_size + 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkIndex:
    """The chunks of one ``.log``: ``stored_sizes[i]`` and ``checksums[i]`` of frame ``i``,
    frames numbered across chunks in order. ``frame_size`` defaults to ``chunk_size`` (one
    frame per chunk, as format version 1)."""

    chunk_size: int
    original_size: int
    stored_sizes: tuple[int, ...]
    checksums: tuple[int, ...]
    frame_size: int = 0
    framed: bool = False  # frames authenticate (chunk, frame); version 1: the chunk alone
    _stored_positions: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _frames_per_chunk: int = field(init=False, repr=False, compare=False)
    _recent: dict[int, Chunk] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ValueError(f"chunk size must be > 0, got {self.chunk_size}")
        if self.original_size < 0:
            raise ValueError(f"original size must be >= 0, got {self.original_size}")
        if self.frame_size == 0:
            object.__setattr__(self, "frame_size", self.chunk_size)
        if not 0 < self.frame_size <= self.chunk_size:
            raise ValueError(
                f"frame size must be between 1 and the chunk size {self.chunk_size},"
                f" got {self.frame_size}"
            )
        per_chunk = -(-self.chunk_size // self.frame_size)
        object.__setattr__(self, "_frames_per_chunk", per_chunk)
        expected = self._frame_count()
        if len(self.stored_sizes) != expected or len(self.checksums) != expected:
            raise ValueError(
                f"{self.original_size} bytes in chunks of {self.chunk_size} and frames of"
                f" {self.frame_size} make {expected} frames, the index lists"
                f" {len(self.stored_sizes)} sizes and {len(self.checksums)} checksums"
            )
        if min(self.stored_sizes, default=1) <= 0:
            raise ValueError("every stored frame size must be > 0")
        object.__setattr__(
            self, "_stored_positions", tuple(itertools.accumulate(self.stored_sizes, initial=0))
        )
        object.__setattr__(self, "_recent", {})

    def _frame_count(self) -> int:
        full_chunks, rest = divmod(self.original_size, self.chunk_size)
        return full_chunks * self._frames_per_chunk + -(-rest // self.frame_size)

    @property
    def stored_size(self) -> int:
        """The size of the stored object."""
        return self._stored_positions[-1]

    def __len__(self) -> int:
        return (self.original_size + self.chunk_size - 1) // self.chunk_size

    def chunk(self, chunk_id: int) -> Chunk:
        recent = self._recent.get(chunk_id)
        if recent is not None:
            return recent
        if not 0 <= chunk_id < len(self):
            raise IndexError(f"chunk {chunk_id} is not one of the {len(self)} chunks")
        position = chunk_id * self.chunk_size
        size = min(self.chunk_size, self.original_size - position)
        first_frame = chunk_id * self._frames_per_chunk
        frames = tuple(
            Frame(
                number=number,
                original_position=position + offset,
                original_size=min(self.frame_size, size - offset),
                stored_position=self._stored_positions[first_frame + number],
                stored_size=self.stored_sizes[first_frame + number],
                checksum=self.checksums[first_frame + number],
                context=frame_context(chunk_id, number, framed=self.framed),
            )
            for number, offset in enumerate(range(0, size, self.frame_size))
        )
        chunk = Chunk(
            id=chunk_id,
            original_position=position,
            original_size=size,
            stored_position=frames[0].stored_position,
            stored_size=frames[-1].stored_position
            + frames[-1].stored_size
            - frames[0].stored_position,
            frame_size=self.frame_size,
            frames=frames,
        )
        if len(self._recent) >= RECENT_CHUNKS:
            self._recent.clear()  # one call, safe beside other threads (unlike evicting one)
        self._recent[chunk_id] = chunk
        return chunk

    def chunks_for_range(self, start: int, end: int | None = None) -> Sequence[Chunk]:
        """The chunks holding original bytes ``[start, end]`` (inclusive; ``None``: to the
        end), each built when it is looked at: a fetch reads a few of a segment's hundreds.
        ``ValueError`` when ``start`` is past the end."""
        if start < 0 or (start >= self.original_size and self.original_size > 0):
            raise ValueError(
                f"start position {start} is beyond the segment's {self.original_size} bytes"
            )
        last = self.original_size - 1 if end is None else min(end, self.original_size - 1)
        if last < start:
            return ()
        return _ChunkRange(self, range(start // self.chunk_size, last // self.chunk_size + 1))


class _ChunkRange(Sequence[Chunk]):
    def __init__(self, index: ChunkIndex, ids: range) -> None:
        self._index = index
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, item: int) -> Chunk: ...

    @overload
    def __getitem__(self, item: slice) -> Sequence[Chunk]: ...

    def __getitem__(self, item: int | slice) -> Chunk | Sequence[Chunk]:
        if isinstance(item, slice):
            return _ChunkRange(self._index, self._ids[item])
        return self._index.chunk(self._ids[item])


def frame_context(chunk_id: int, frame_number: int, *, framed: bool) -> bytes:
    """What a frame's encryption authenticates beside the segment's AAD."""
    return _FRAME_NUMBER.pack(chunk_id, frame_number) if framed else _CHUNK_NUMBER.pack(chunk_id)
