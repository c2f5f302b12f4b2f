"""``plan_rewrite`` and ``format_difference``: which copies ``storage-core tier --rewrite``
rewrites, keeps and deletes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.chunked.chunk_index import ChunkIndex
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig, split_format_config
from storage_core.tiered.chunked.key_ring import WrappedDataKey
from storage_core.tiered.chunked.segment_manifest import EncryptionMetadata, SegmentManifest
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.rewrite import format_difference, plan_rewrite
from tests.chunked_support import encryption_settings, write_key_pair

TIP = TopicIdPartition(Uuid(1, 2), TopicPartition("orders", 0))
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def segment(
    start: int, *, ts: int = 1, state: RemoteLogSegmentState = FINISHED
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid.random()),
        start_offset=start,
        end_offset=start + 9,
        max_timestamp_ms=1,
        broker_id=0,
        event_timestamp_ms=ts,
        segment_size_in_bytes=100,
        segment_leader_epochs={0: start},
        state=state,
    )


def manifest(
    *,
    chunk_size: int = 100,
    frame_size: int = 0,
    framed: bool = True,
    compression: bool = False,
    key_id: str | None = None,
) -> SegmentManifest:
    return SegmentManifest(
        chunk_index=ChunkIndex(
            chunk_size=chunk_size,
            frame_size=frame_size,
            framed=framed,
            original_size=10,
            stored_sizes=(10,),
            checksums=(0,),
        ),
        compression=compression,
        encryption=None
        if key_id is None
        else EncryptionMetadata(wrapped_data_key=WrappedDataKey(key_id, b"x"), aad=b"a"),
        objects={},
    )


def config(**settings: str) -> ChunkedFormatConfig:
    return ChunkedFormatConfig.from_settings(split_format_config(settings)[0])


def test_format_difference_names_each_setting(tmp_path: Path) -> None:
    plain = config(**{"rsm.config.chunk.size": "100"})
    assert format_difference(manifest(), plain) is None
    assert format_difference(None, plain) == "plain format"
    assert format_difference(manifest(chunk_size=50), plain) == "chunk size 50, not 100"
    assert format_difference(manifest(framed=False), plain) == (
        "format version 1: one check per chunk"
    )
    framed = config(**{"rsm.config.chunk.size": "100", "rsm.config.chunk.frame.size": "25"})
    assert format_difference(manifest(frame_size=25), framed) is None
    assert format_difference(manifest(), framed) == "frame size 100, not 25"
    assert format_difference(manifest(compression=True), plain) == "compressed, compression is off"
    zstd = config(**{"rsm.config.chunk.size": "100", "rsm.config.compression.enabled": "true"})
    assert format_difference(manifest(), zstd) == "not compressed, compression is on"
    heuristic = config(
        **{
            "rsm.config.chunk.size": "100",
            "rsm.config.compression.enabled": "true",
            "rsm.config.compression.heuristic.enabled": "true",
        },
    )
    assert format_difference(manifest(), heuristic) is None  # the heuristic may have said so
    pairs = {k: write_key_pair(tmp_path, k) for k in ("k1", "k2")}
    rotated = config(**{"rsm.config.chunk.size": "100", **encryption_settings(pairs, "k2")})
    assert format_difference(manifest(key_id="k2"), rotated) is None
    assert format_difference(manifest(key_id="k1"), rotated) == "key pair k1, not the active k2"
    assert format_difference(manifest(), rotated) == "not encrypted, encryption is on"
    assert format_difference(manifest(key_id="k1"), plain) == "encrypted, encryption is off"


def test_plan_rewrites_referenced_copies_keeps_those_in_format_and_leaves_displaced_ones() -> None:
    old_0, new_0 = segment(0, ts=1), segment(0, ts=5)  # interrupted before the swap
    only_10 = segment(10)
    displaced_20, current_20 = segment(20), segment(20)  # another leader's upload won
    starting_30 = segment(30, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    in_format = {new_0.remote_log_segment_id}
    referenced = {
        new_0.remote_log_segment_id,
        only_10.remote_log_segment_id,
        current_20.remote_log_segment_id,
    }
    plan = plan_rewrite(
        [old_0, new_0, only_10, displaced_20, current_20, starting_30],
        lambda m: None if m.remote_log_segment_id in in_format else "plain format",
        lambda m: m.remote_log_segment_id in referenced,
    )
    assert [(p.source, p.keep, p.obsolete, p.reason) for p in plan] == [
        (None, new_0, (old_0,), "superseded copy"),
        (only_10, None, (only_10,), "plain format"),
        (current_20, None, (current_20, displaced_20), "plain format"),
    ]


def test_plan_leaves_a_group_nobody_reads() -> None:
    off_lineage = dataclasses.replace(segment(0), segment_leader_epochs={3: 0})
    assert plan_rewrite([off_lineage], lambda m: "plain format", lambda m: False) == []
