"""Random reads of a chunked segment on the local-directory store against the original bytes:
any chunk size (smaller than a batch, several a batch, one chunk for the whole segment), any
frame size within it, with compression and encryption on or off, any start and end, read at
once or in pieces (copied, or as views of the chunks as the broker reads them, which check
only the frames a piece needs), through the memory or the disk chunk cache, with or without
prefetch."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.remote_storage_manager import LogSegmentData, RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_support import closed_segment, encryption_settings, segment_ref, write_key_pair

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POSITION_MAX = 30_000  # beyond the segment's ~26 KB: starts past its end are drawn, and skipped


@dataclass(frozen=True, slots=True, kw_only=True)
class Read:
    """A read of original bytes ``[start, start + length]`` (inclusive; ``length`` None: to the
    end) of the segment copied with ``chunk_size``, ``compression`` and ``encryption``. A
    negative ``start`` counts from the end (-1: the last byte). ``piece``: read in pieces of
    that many bytes instead of at once, as views when ``views``. The reader's chunk cache is
    on disk or in memory and prefetches ``prefetch`` bytes. ``frame_size`` None: the
    default (256 KiB, so one frame per chunk here)."""

    chunk_size: int
    compression: bool
    encryption: bool
    start: int
    length: int | None
    piece: int | None = None
    disk_cache: bool = False
    prefetch: int = 0
    frame_size: int | None = None
    views: bool = False


@st.composite
def reads(draw: st.DrawFn) -> Read:
    return Read(
        chunk_size=draw(
            st.one_of(st.sampled_from([100, 1000, 4096, 1 << 20]), st.integers(50, 9000))
        ),
        compression=draw(st.booleans()),
        encryption=draw(st.booleans()),
        start=draw(st.one_of(st.integers(0, POSITION_MAX), st.integers(-200, -1))),
        length=draw(st.one_of(st.none(), st.integers(0, POSITION_MAX))),
        piece=draw(st.one_of(st.none(), st.integers(1, 5000))),
        disk_cache=draw(st.booleans()),
        prefetch=draw(st.one_of(st.just(0), st.integers(1, 8000))),
        frame_size=draw(st.one_of(st.none(), st.integers(20, 3000))),
        views=draw(st.booleans()),
    )


class CopiedSegments:
    """One real segment, copied once per format (chunk size, compression, encryption) to a
    store directory shared by the examples."""

    def __init__(self, directory: Path, keys: dict[str, dict[str, str]]) -> None:
        self.directory = directory
        self.data: LogSegmentData = closed_segment(directory / "segment")
        self.original = self.data.log_segment.read_bytes()
        self.keys = keys
        self._copies: dict[tuple[int, bool, bool, int | None], RemoteSegmentRef] = {}
        self._cache_directories = itertools.count()

    def manager(self, **settings: str) -> ChunkedRemoteStorageManager:
        manager = load_remote_storage_manager(
            "LocalTieredStorage",
            {"rsm.config.local.storage.dir": str(self.directory / "remote"), **settings},
        )
        assert isinstance(manager, ChunkedRemoteStorageManager)
        return manager

    def copy(self, read: Read) -> RemoteSegmentRef:
        key = (read.chunk_size, read.compression, read.encryption, read.frame_size)
        if key not in self._copies:
            segment = segment_ref()
            frames = (
                {}
                if read.frame_size is None
                else {"rsm.config.chunk.frame.size": str(read.frame_size)}
            )
            self.manager(
                **frames,
                **{
                    "rsm.config.chunk.size": str(read.chunk_size),
                    "rsm.config.compression.enabled": str(read.compression).lower(),
                    **encryption_settings(self.keys, "k1", enabled=read.encryption),
                },
            ).copy_log_segment_data(segment, self.data)
            self._copies[key] = segment
        return self._copies[key]

    def reader(self, read: Read) -> ChunkedRemoteStorageManager:
        """A reader that has seen nothing: manifests and chunks come from the store."""
        cache: dict[str, str] = {}
        if read.disk_cache:
            path = self.directory / f"cache-{next(self._cache_directories)}"
            path.mkdir()
            cache = {
                "rsm.config.fetch.chunk.cache.class": "disk",
                "rsm.config.fetch.chunk.cache.path": str(path),
            }
        return self.manager(
            **encryption_settings(self.keys, "k1", enabled=False),
            **cache,
            **{"rsm.config.fetch.chunk.cache.prefetch.max.size": str(read.prefetch)},
        )


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> CopiedSegments:
    directory = tmp_path_factory.mktemp("random-reads")
    keys = {"k1": write_key_pair(directory, "k1")}
    copied = CopiedSegments(directory, keys)
    assert 20_000 < len(copied.original) < POSITION_MAX
    return copied


@SETTINGS
@given(read=reads())
# Reads at chunk boundaries: the last byte of a chunk, the first of the next, both, a whole
# chunk, the segment's last byte, an end past it, chunks smaller than a batch, one chunk.
@example(read=Read(chunk_size=1000, compression=False, encryption=False, start=999, length=1))
@example(read=Read(chunk_size=1000, compression=True, encryption=True, start=999, length=0))
@example(read=Read(chunk_size=1000, compression=False, encryption=True, start=1000, length=None))
@example(read=Read(chunk_size=1000, compression=True, encryption=False, start=0, length=999))
@example(read=Read(chunk_size=1000, compression=True, encryption=True, start=-1, length=None))
@example(read=Read(chunk_size=1000, compression=False, encryption=False, start=-1, length=5))
@example(read=Read(chunk_size=100, compression=True, encryption=True, start=-101, length=100))
@example(read=Read(chunk_size=100, compression=False, encryption=True, start=0, length=None))
@example(read=Read(chunk_size=1 << 20, compression=True, encryption=True, start=0, length=None))
@example(
    read=Read(chunk_size=1000, compression=True, encryption=True, start=0, length=None, piece=999)
)
@example(
    read=Read(chunk_size=4096, compression=False, encryption=True, start=4095, length=1, piece=1)
)
@example(
    read=Read(
        chunk_size=1000,
        compression=True,
        encryption=True,
        start=999,
        length=None,
        piece=1000,
        disk_cache=True,
        prefetch=3000,
    )
)
@example(
    read=Read(
        chunk_size=4096,
        frame_size=1000,
        compression=True,
        encryption=True,
        start=999,
        length=None,
        piece=1500,
        prefetch=5000,
        views=True,
    )
)
@example(
    read=Read(
        chunk_size=4096,
        frame_size=1000,
        compression=False,
        encryption=False,
        start=4000,
        length=200,
        piece=1,
        views=True,
    )
)
def test_a_random_read_returns_the_original_bytes(copies: CopiedSegments, read: Read) -> None:
    size = len(copies.original)
    start = size + read.start if read.start < 0 else read.start
    assume(0 <= start < size)
    end = None if read.length is None else start + read.length
    segment = copies.copy(read)

    reader = copies.reader(read)
    with contextlib.closing(reader), reader.fetch_log_segment(segment, start, end) as stream:
        if read.piece is None:
            got = stream.read()
        else:
            take = stream.raw.read_view if read.views else stream.read
            pieces = []
            while piece := take(read.piece):
                assert len(piece) <= read.piece
                pieces.append(bytes(piece))
            got = b"".join(pieces)
    assert got == copies.original[start : None if end is None else end + 1]
