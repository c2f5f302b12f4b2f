"""The cache's segments kept in listing order (``SegmentListing``) and their summary, against
the plain answer: every segment of the cache sorted by (start offset, end offset, id), and
``summarize`` of that, after every event of random histories and after a restore."""

from __future__ import annotations

import random
import re
from dataclasses import fields

import pytest

from storage_core.tiered.metadata import RemoteLogSegmentState, segment_listing, serde
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.errors import CorruptRemoteLogMetadataError
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
)
from storage_core.tiered.metadata.segment_listing import summarize
from tests.remote_log_metadata_events import copy_started, state_update, user_partition

TIP = user_partition("listed", 0)
NEXT_STATE = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
}


def plain_listing(cache: RemoteLogMetadataCache) -> list[RemoteLogSegmentMetadata]:
    return sorted(
        cache._id_to_segment_metadata.values(),
        key=lambda m: (m.start_offset, m.end_offset, m.remote_log_segment_id),
    )


@pytest.mark.parametrize("seed", range(6))
def test_listing_and_summary_follow_every_event(seed: int) -> None:
    rng = random.Random(seed)
    cache = RemoteLogMetadataCache(TIP)
    live: list[RemoteLogSegmentMetadata] = []  # as added, to pick updates from
    for _ in range(400):
        if not live or rng.random() < 0.4:
            start = rng.randrange(0, 200)  # overlapping and equal offsets on purpose
            end = start + rng.randrange(0, 20)
            segment = copy_started(TIP, start, end, {rng.randrange(0, 3): start})
            cache.handle(segment)
            live.append(segment)
        else:
            segment = rng.choice(live)
            current = cache._id_to_segment_metadata[segment.remote_log_segment_id].state
            target = NEXT_STATE[current]
            cache.handle(state_update(segment, target))
            if target is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                live.remove(segment)
        expected = plain_listing(cache)
        assert cache.list_all_remote_log_segments() == expected
        assert cache.remote_log_segments_summary() == summarize(expected)
    restored = RemoteLogMetadataCache.restore(TIP, cache.snapshot_state())
    assert restored.list_all_remote_log_segments() == plain_listing(cache)
    assert restored.remote_log_segments_summary() == cache.remote_log_segments_summary()


def test_summary_is_computed_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[int] = []
    plain = segment_listing.summarize
    monkeypatch.setattr(
        segment_listing, "summarize", lambda segments: computed.append(1) or plain(segments)
    )
    cache = RemoteLogMetadataCache(TIP)
    first = copy_started(TIP, 0, 9, {0: 0})
    cache.handle(first)
    cache.handle(state_update(first, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    for _ in range(5):
        summary = cache.remote_log_segments_summary()
    assert (summary.copied_start_offset, summary.metadata_count) == (0, 1)
    assert len(computed) == 1
    cache.handle(state_update(first, RemoteLogSegmentState.DELETE_SEGMENT_STARTED))
    summary = cache.remote_log_segments_summary()
    assert summary.copied_start_offset is None
    assert summary.deleting_segment_ids == (first.remote_log_segment_id,)
    assert len(computed) == 2


def test_a_restored_segment_is_the_segment_snapshotted() -> None:
    """A checkpoint builds every segment's snapshot entry, and a restart every segment from
    its entry, without checking the fields again (they were checked when the value they come
    from was built): the results are the values the checking constructors build."""
    segment = copy_started(TIP, 5, 20, {1: 5, 3: 12})
    cache = RemoteLogMetadataCache(TIP)
    cache.handle(segment)
    cache.handle(state_update(segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    (entry,) = cache.snapshot_state().segments
    (expected,) = cache.list_all_remote_log_segments()
    checked = RemoteLogSegmentMetadataSnapshot(
        segment_id=expected.remote_log_segment_id.id,
        **{f.name: getattr(expected, f.name) for f in fields(expected)[1:]},
    )
    assert entry == checked
    assert hash(entry) == hash(checked)
    restored = entry.to_metadata(TIP)
    assert restored == expected
    assert hash(restored) == hash(expected)
    assert restored.epoch_end_offset(1) == 11
    assert dict(restored.segment_leader_epochs) == {1: 5, 3: 12}
    assert restored.topic_id_partition == TIP


def test_events_of_one_partition_share_its_decoded_partition() -> None:
    """Every event names its partition; decoding each one anew left a cache of 10^5 segments
    holding 10^5 copies of it. A topic name refused once is refused every time."""
    segment = copy_started(TIP, 0, 9, {0: 0})
    finished = state_update(segment, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    first = serde.deserialize(serde.serialize(segment))
    second = serde.deserialize(serde.serialize(finished))
    assert first == segment
    assert second == finished
    assert first.topic_id_partition is second.topic_id_partition
    bad_name = serde.serialize(segment).replace(b"listed", b"list.d/")
    bad_name = bad_name.replace(b"\x07list.d/", b"\x08list.d/")  # the compact length + 1
    for _ in range(2):
        with pytest.raises(CorruptRemoteLogMetadataError, match=re.escape("list.d/")):
            serde.deserialize(bad_name)
