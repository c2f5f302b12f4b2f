"""RemoteLogReader over LocalTieredStorage and real segments: batch boundaries, max bytes,
min-one-message, segment hand-over, timestamps, and a failing store."""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.errors import KafkaStorageError, OffsetOutOfRangeError
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.records import RecordBatch
from storage_core.tiered import remote_log_reader
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.metadata import RemoteLogSegmentMetadataUpdate
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_reader import (
    MemoryReadMissError,
    RemoteLogReader,
    RemoteReadQueueFullError,
    RemoteStorageFetchInfo,
)
from storage_core.tiered.remote_read_faults import RemoteSegmentMissingError
from storage_core.tiered.remote_storage_manager import (
    RemoteReadNeedsStoreError,
    RemoteStorageError,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.conftest import BASE_TIMESTAMP_MS
from tests.unit.tiered_fixtures import TIP, TieredLog, build_tiered_log


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[TieredLog]:
    t = build_tiered_log(tmp_path)
    yield t
    t.log.close()


@pytest.fixture
def reader(tiered: TieredLog, tmp_path: Path) -> Iterator[RemoteLogReader]:
    cache = RemoteIndexCache(tiered.rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    r = RemoteLogReader(rsm=tiered.rsm, rlmm=tiered.rlmm, index_cache=cache, threads=2)
    yield r
    r.close()
    cache.close()


def read(
    reader: RemoteLogReader,
    tiered: TieredLog,
    offset: int,
    max_bytes: int = 1 << 20,
    *,
    min_one_message: bool = True,
) -> bytes:
    info = RemoteStorageFetchInfo(
        topic_id_partition=TIP,
        fetch_offset=offset,
        max_bytes=max_bytes,
        min_one_message=min_one_message,
    )
    return reader.submit_read(info, tiered.log.leader_epoch_cache).result(timeout=10).records


def split(records: bytes) -> list[RecordBatch]:
    out, position = [], 0
    while position < len(records):
        batch = RecordBatch.from_buffer(records, position)
        batch.ensure_valid()
        out.append(batch)
        position += batch.size_in_bytes
    return out


def test_several_segments_are_tiered(tiered: TieredLog) -> None:
    assert len(tiered.copied) >= 4
    epochs = {epoch for m in tiered.copied for epoch in m.segment_leader_epochs}
    assert epochs == {0, 1}


def test_every_offset_reads_the_batch_holding_it_byte_for_byte(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    last_remote = tiered.copied[-1].end_offset
    for offset in range(0, last_remote + 1):
        batches = split(read(reader, tiered, offset, max_bytes=1))
        assert len(batches) == 1  # min-one-message: the first batch, though above max bytes
        assert bytes(batches[0].buffer) == tiered.batch_at(offset)
        assert batches[0].base_offset <= offset <= batches[0].last_offset


def test_max_bytes_keeps_whole_batches_and_stops_at_the_segment_end(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    batch_bytes = len(tiered.batches[0])
    got = split(read(reader, tiered, 7, max_bytes=3 * batch_bytes + batch_bytes // 2))
    assert [b.base_offset for b in got] == [5, 10, 15]
    first_segment = tiered.copied[0]
    everything = split(read(reader, tiered, 0, max_bytes=1 << 20))
    assert everything[-1].last_offset == first_segment.end_offset
    expected = b"".join(
        tiered.batches[o] for o in sorted(tiered.batches) if o <= first_segment.end_offset
    )
    assert b"".join(bytes(b.buffer) for b in everything) == expected


def test_without_min_one_message_an_oversized_first_batch_returns_nothing(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    info = RemoteStorageFetchInfo(
        topic_id_partition=TIP, fetch_offset=12, max_bytes=10, min_one_message=False
    )
    data = reader.read(info, tiered.log.leader_epoch_cache)
    assert data.records == b""
    assert data.first_entry_incomplete


def test_an_offset_in_the_second_epoch_uses_that_epochs_segment(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    epoch1_start = tiered.log.leader_epoch_cache.epoch_entries()[1].start_offset
    assert epoch1_start <= tiered.copied[-1].end_offset
    batches = split(read(reader, tiered, epoch1_start, max_bytes=1))
    assert batches[0].partition_leader_epoch == 1
    assert batches[0].base_offset == epoch1_start


def test_offset_without_remote_segment_is_out_of_range(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    beyond = tiered.copied[-1].end_offset + 1  # local only
    with pytest.raises(OffsetOutOfRangeError):
        read(reader, tiered, beyond)


def test_emptied_store_fails_the_read_quickly_naming_the_lost_segment(
    tiered: TieredLog, reader: RemoteLogReader, tmp_path: Path
) -> None:
    shutil.rmtree(tmp_path / "remote")
    started = time.monotonic()
    with pytest.raises(RemoteSegmentMissingError) as failure:
        read(reader, tiered, 3)
    assert time.monotonic() - started < 2
    assert isinstance(failure.value, KafkaStorageError)
    # As Kafka answers a RemoteResourceNotFoundException: not retriable, clients surface it.
    assert failure.value.error_code == "unknown_server_error"
    lost = tiered.copied[0]
    assert failure.value.segment_id == lost.remote_log_segment_id.id
    assert str(lost.remote_log_segment_id.id) in str(failure.value)
    assert "COPY_SEGMENT_FINISHED" in str(failure.value)


def test_cached_indexes_still_need_the_log_object(
    tiered: TieredLog, reader: RemoteLogReader, tmp_path: Path
) -> None:
    read(reader, tiered, 3)  # indexes now cached locally
    shutil.rmtree(tmp_path / "remote")
    with pytest.raises(RemoteStorageError):
        read(reader, tiered, 3)


def test_a_sequential_reader_downloads_no_index(tiered: TieredLog, reader: RemoteLogReader) -> None:
    """A read from a segment's start begins at its first byte (where the offset index would
    point), and a read at the offset after an earlier read's last batch begins where that
    read ended: a consumer going through history, batch by batch, waits for no index
    download. A seek elsewhere inside a segment uses the index."""
    first, second = tiered.copied[:2]
    offset = first.start_offset
    batches = []
    while offset <= second.end_offset:
        (batch,) = split(read(reader, tiered, offset, max_bytes=1))
        assert batch.base_offset <= offset <= batch.last_offset
        batches.append(batch)
        offset = batch.last_offset + 1
    cached = {m.remote_log_segment_id.id in reader.index_cache for m in (first, second)}
    assert cached == {False}
    assert reader.read_positions.hits == len(batches) - 2  # all but each segment's first

    inside = [b for b in batches if b.base_offset > second.start_offset][-1]
    assert inside.last_offset > inside.base_offset
    seek = inside.base_offset + 1
    (batch,) = split(read(reader, tiered, seek, max_bytes=1))
    assert (batch.base_offset, batch.last_offset) == (inside.base_offset, inside.last_offset)
    assert second.remote_log_segment_id.id in reader.index_cache


def test_timestamp_lookup_finds_the_first_record_at_or_after(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    epochs = tiered.log.leader_epoch_cache
    # Batch i holds offsets 5i..5i+4 with timestamps BASE + 50i + j (j = 0..4).
    found = reader.find_offset_by_timestamp(TIP, BASE_TIMESTAMP_MS + 50 * 3 + 2, 0, epochs)
    assert found is not None and (found.offset, found.timestamp) == (17, BASE_TIMESTAMP_MS + 152)
    between = reader.find_offset_by_timestamp(TIP, BASE_TIMESTAMP_MS + 50 * 3 + 7, 0, epochs)
    assert between is not None and between.offset == 20
    assert reader.find_offset_by_timestamp(TIP, BASE_TIMESTAMP_MS, 12, epochs).offset == 12  # type: ignore[union-attr]
    beyond = BASE_TIMESTAMP_MS + 50 * 1000
    assert reader.find_offset_by_timestamp(TIP, beyond, 0, epochs) is None


def test_pending_reads_are_bounded(tiered: TieredLog, tmp_path: Path) -> None:
    cache = RemoteIndexCache(tiered.rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    r = RemoteLogReader(
        rsm=tiered.rsm, rlmm=tiered.rlmm, index_cache=cache, threads=1, max_pending_reads=1
    )

    release = threading.Event()
    try:
        blocked = r.submit(release.wait)
        with pytest.raises(RemoteReadQueueFullError):
            r.submit(lambda: None)
        release.set()
        blocked.result(timeout=5)
        assert r.submit(lambda: 7).result(timeout=5) == 7
    finally:
        release.set()
        r.close()
        cache.close()


class Lineage:
    """A leader-epoch cache's lookups over fixed entries (another replica's lineage)."""

    def __init__(self, *entries: EpochEntry) -> None:
        self.entries = list(entries)

    def epoch_for_offset(self, offset: int) -> int | None:
        held = [entry.epoch for entry in self.entries if entry.start_offset <= offset]
        return held[-1] if held else None

    def epoch_entries(self) -> list[EpochEntry]:
        return list(self.entries)


def test_a_read_stops_where_the_lineage_ends_the_epoch_of_the_segment(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    """After an unclean election the new leader's lineage ends epoch 0 at offset 10, while the
    deposed leader's remote segment holds epoch 0 further: its offsets 10.. are not this
    lineage's records and are never returned."""
    first_segment = tiered.copied[0]
    assert first_segment.segment_leader_epochs == {0: 0}
    assert first_segment.end_offset >= 15
    lineage = Lineage(EpochEntry(0, 0), EpochEntry(2, 10))
    info = RemoteStorageFetchInfo(
        topic_id_partition=TIP, fetch_offset=0, max_bytes=1 << 20, min_one_message=True
    )
    got = split(reader.read(info, lineage).records)
    assert [(b.base_offset, b.last_offset) for b in got] == [(0, 4), (5, 9)]
    at_the_end = dataclasses.replace(info, fetch_offset=9)
    assert [b.base_offset for b in split(reader.read(at_the_end, lineage).records)] == [5]
    with pytest.raises(OffsetOutOfRangeError, match="leader epoch 2"):
        reader.read(dataclasses.replace(info, fetch_offset=10), lineage)


def chunked_reader(
    tmp_path: Path, **settings: str
) -> tuple[ChunkedRemoteStorageManager, TieredLog, RemoteIndexCache, RemoteLogReader]:
    """A tiered log copied in the chunked format (to the local store, with ``settings``) and
    a reader of it."""
    rsm = load_remote_storage_manager(
        "LocalTieredStorage",
        {
            "rsm.config.local.storage.dir": str(tmp_path / "remote"),
            "rsm.config.local.fsync": "false",
            **settings,
        },
    )
    assert isinstance(rsm, ChunkedRemoteStorageManager)
    tiered = build_tiered_log(tmp_path, rsm=rsm)
    cache = RemoteIndexCache(tiered.rsm, tmp_path / "logs", max_size_bytes=1 << 20)
    reader = RemoteLogReader(rsm=tiered.rsm, rlmm=tiered.rlmm, index_cache=cache, threads=2)
    return rsm, tiered, cache, reader


def test_a_memory_only_read_answers_from_cached_chunks_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What may run on the event loop: the same bytes as a reader thread's read once the
    segment's manifest and chunks are cached; before that, and for whatever needs the store
    or an index not cached (a plain segment, an offset inside a segment whose offset index
    was never downloaded, the aborted transactions of read_committed),
    ``RemoteReadNeedsStoreError`` and nothing read. A read of more batches or bytes than the
    event loop may take goes to a reader thread too."""
    rsm, tiered, cache, reader = chunked_reader(tmp_path)
    epochs = tiered.log.leader_epoch_cache
    second = tiered.copied[1]
    assert reader.reads_from_memory  # chunked, over the default chunk cache (memory)

    def info(offset: int, *, read_committed: bool = False) -> RemoteStorageFetchInfo:
        return RemoteStorageFetchInfo(
            topic_id_partition=TIP,
            fetch_offset=offset,
            max_bytes=1 << 20,
            min_one_message=True,
            include_aborted_txns=read_committed,
        )

    try:
        for offset in (0, second.start_offset):
            with pytest.raises(RemoteReadNeedsStoreError):
                reader.read(info(offset), epochs, memory_only=True)  # nothing cached yet
        assert rsm.fetcher.cache.stats().misses == 0  # a look from memory is no miss
        threaded = reader.read(info(second.start_offset), epochs)  # caches manifest and chunk
        from_memory = reader.read(info(second.start_offset), epochs, memory_only=True)
        assert bytes(from_memory.records) == bytes(threaded.records)
        assert split(bytes(from_memory.records))[0].base_offset == second.start_offset
        inside = second.start_offset + 7  # a seek inside the segment: its offset index
        with pytest.raises(RemoteReadNeedsStoreError):
            reader.read(info(inside), epochs, memory_only=True)  # not downloaded yet
        seeked = reader.read(info(inside), epochs)  # downloads it
        assert bytes(reader.read(info(inside), epochs, memory_only=True).records) == bytes(
            seeked.records
        )
        assert split(bytes(seeked.records))[0].last_offset >= inside
        with pytest.raises(RemoteReadNeedsStoreError):
            reader.read(info(second.start_offset, read_committed=True), epochs, memory_only=True)
        with pytest.raises(RemoteReadNeedsStoreError):
            reader.read(info(0), epochs, memory_only=True)  # another segment: not cached
        batches = len(split(bytes(threaded.records)))
        assert batches > 2
        monkeypatch.setattr(remote_log_reader, "MEMORY_READ_MAX_BATCHES", batches - 1)
        with pytest.raises(RemoteReadNeedsStoreError, match="too long a read for the event"):
            reader.read(info(second.start_offset), epochs, memory_only=True)
        monkeypatch.setattr(remote_log_reader, "MEMORY_READ_MAX_BATCHES", batches)
        assert reader.read(info(second.start_offset), epochs, memory_only=True).records
        monkeypatch.setattr(remote_log_reader, "MEMORY_READ_MAX_BYTES", (1 << 20) - 1)
        with pytest.raises(RemoteReadNeedsStoreError, match="too long a read for the loop"):
            reader.read(info(second.start_offset), epochs, memory_only=True)  # asks for 1 MiB
    finally:
        reader.close()
        cache.close()
        tiered.log.close()


def test_a_read_taken_over_from_memory_reads_the_segment_the_memory_read_found(
    tmp_path: Path,
) -> None:
    """A cold read tried from memory gives up once it has found its segment, and the reader
    thread taking it over reads that segment: the same bytes as a read that looks it up,
    unless the leader-epoch lineage changed in between (then it looks it up again). A
    segment deleted in between fails as one deleted while being read (the consumer fetches
    again and finds the new log start), not as lost records."""
    rsm, tiered, cache, reader = chunked_reader(tmp_path)
    epochs = tiered.log.leader_epoch_cache
    second, third = tiered.copied[1], tiered.copied[2]

    def info(offset: int) -> RemoteStorageFetchInfo:
        return RemoteStorageFetchInfo(
            topic_id_partition=TIP, fetch_offset=offset, max_bytes=1 << 20, min_one_message=True
        )

    try:
        with pytest.raises(MemoryReadMissError) as miss:
            reader.read(info(second.start_offset), epochs, memory_only=True)
        start = miss.value.start
        assert start.metadata.remote_log_segment_id == second.remote_log_segment_id
        assert start.epoch == epochs.epoch_for_offset(second.start_offset)
        taken_over = reader.read(info(second.start_offset), epochs, start=start)
        assert split(bytes(taken_over.records))[0].base_offset == second.start_offset
        looked_up = reader.read(info(second.start_offset), epochs)
        assert bytes(taken_over.records) == bytes(looked_up.records)
        # A start whose epoch no longer holds the offset (the lineage changed meanwhile): the
        # segment is looked up again.
        stale = dataclasses.replace(start, epoch=start.epoch + 100, metadata=third)
        again = reader.read(info(second.start_offset), epochs, start=stale)
        assert bytes(again.records) == bytes(looked_up.records)

        with pytest.raises(MemoryReadMissError) as miss:
            reader.read(info(third.start_offset), epochs, memory_only=True)
        tiered.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=third.remote_log_segment_id,
                event_timestamp_ms=BASE_TIMESTAMP_MS,
                state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                broker_id=0,
            )
        )
        rsm.delete_log_segment_data(third)
        with pytest.raises(RemoteStorageError, match="was deleted while being read") as failure:
            reader.read(info(third.start_offset), epochs, start=miss.value.start)
        assert not isinstance(failure.value, RemoteSegmentMissingError)
    finally:
        reader.close()
        cache.close()
        tiered.log.close()


def test_a_read_from_memory_counts_its_cache_hits_once_it_is_served(tmp_path: Path) -> None:
    """A read from memory that stops at a chunk not cached is read again on a reader thread,
    which counts that read's hits and misses: the chunks the first try had found are not
    counted twice. A read from memory that is served counts each chunk it read once."""
    rsm, tiered, cache, reader = chunked_reader(tmp_path, **{"rsm.config.chunk.size": "1000"})
    epochs = tiered.log.leader_epoch_cache
    segment = tiered.copied[1]
    whole_segment = RemoteStorageFetchInfo(
        topic_id_partition=TIP,
        fetch_offset=segment.start_offset,
        max_bytes=1 << 20,
        min_one_message=True,
    )
    try:
        readable = rsm.segment_manifest(segment) and rsm.cached_readable_segment(segment)
        chunks = readable.manifest.chunk_index
        assert len(chunks) > 2
        rsm.fetcher.chunk_part(readable, chunks.chunk(0), 0, 0)  # only the first one cached
        before = rsm.fetcher.cache.stats()
        with pytest.raises(RemoteReadNeedsStoreError, match="chunk 1 "):
            reader.read(whole_segment, epochs, memory_only=True)
        assert rsm.fetcher.cache.stats() == before  # chunk 0 was found, and not counted

        threaded = reader.read(whole_segment, epochs)
        after_thread = rsm.fetcher.cache.stats()
        assert after_thread.hits == before.hits + 1  # chunk 0, counted by the thread's read
        assert after_thread.misses == before.misses + len(chunks) - 1
        served = reader.read(whole_segment, epochs, memory_only=True)
        assert bytes(served.records) == bytes(threaded.records)
        assert rsm.fetcher.cache.stats().hits == after_thread.hits + len(chunks)
    finally:
        reader.close()
        cache.close()
        tiered.log.close()


def test_a_plain_segment_is_never_read_from_memory(
    tiered: TieredLog, reader: RemoteLogReader
) -> None:
    epochs = tiered.log.leader_epoch_cache
    info = RemoteStorageFetchInfo(
        topic_id_partition=TIP, fetch_offset=0, max_bytes=1 << 20, min_one_message=True
    )
    assert not reader.reads_from_memory
    assert reader.read(info, epochs).records  # the store's bytes, read on a thread
    with pytest.raises(RemoteReadNeedsStoreError):
        reader.read(info, epochs, memory_only=True)
