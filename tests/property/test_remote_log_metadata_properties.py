"""Remote log metadata under random input: serde round trips and the cache's state machines."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    CorruptRemoteLogMetadataError,
    IllegalRemoteLogStateTransitionError,
    RemoteLogMetadataCache,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.serde import deserialize, serialize
from storage_core.tiered.metadata.snapshot_file import decode_snapshot, encode_snapshot, snapshot_of

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
S = RemoteLogSegmentState
INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)

uuids = st.builds(Uuid, INT64, INT64)
topic_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=249,
).filter(lambda name: name not in (".", ".."))
topic_id_partitions = st.builds(
    TopicIdPartition,
    uuids,
    st.builds(TopicPartition, topic_names, st.integers(min_value=0, max_value=(1 << 31) - 1)),
)
segment_ids = st.builds(
    lambda tip, u: RemoteLogSegmentId(topic_id_partition=tip, id=u), topic_id_partitions, uuids
)
custom_metadata = st.none() | st.binary(max_size=300)


@st.composite
def offsets_and_epochs(
    draw: st.DrawFn, max_offset: int = (1 << 63) - 1, max_epoch: int = (1 << 31) - 1
) -> tuple[int, int, dict[int, int]]:
    start = draw(st.integers(min_value=0, max_value=max_offset))
    end = draw(st.integers(min_value=start, max_value=max_offset))
    epochs = sorted(
        draw(st.sets(st.integers(min_value=0, max_value=max_epoch), min_size=1, max_size=5))
    )
    starts = sorted(
        draw(st.lists(st.integers(start, end), min_size=len(epochs) - 1, max_size=len(epochs) - 1))
    )
    return start, end, dict(zip(epochs, [start, *starts], strict=True))


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start, end, epochs = draw(offsets_and_epochs())
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=draw(segment_ids),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=draw(INT64),
        broker_id=draw(INT32),
        event_timestamp_ms=draw(INT64),
        segment_size_in_bytes=draw(st.integers(min_value=0, max_value=(1 << 31) - 1)),
        segment_leader_epochs=epochs,
        custom_metadata=draw(custom_metadata),
        state=draw(st.sampled_from(S)),
        txn_idx_empty=draw(st.booleans()),
    )


updates = st.builds(
    lambda segment_id, ts, state, broker, cm: RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment_id,
        event_timestamp_ms=ts,
        state=state,
        broker_id=broker,
        custom_metadata=cm,
    ),
    segment_ids,
    INT64,
    st.sampled_from(S),
    INT32,
    custom_metadata,
)
partition_deletes = st.builds(
    lambda tip, state, ts, broker: RemotePartitionDeleteMetadata(
        topic_id_partition=tip, state=state, event_timestamp_ms=ts, broker_id=broker
    ),
    topic_id_partitions,
    st.sampled_from(RemotePartitionDeleteState),
    INT64,
    INT32,
)
any_metadata = st.one_of(
    segment_metadata(),
    updates,
    partition_deletes,
    segment_metadata().map(RemoteLogSegmentMetadataSnapshot.create),
)


@SETTINGS
@given(any_metadata)
def test_serde_round_trip(metadata: object) -> None:
    encoded = serialize(metadata)  # type: ignore[arg-type]
    assert deserialize(encoded) == metadata
    assert serialize(deserialize(encoded)) == encoded


@SETTINGS
@given(any_metadata, st.data())
def test_damaged_values_decode_or_raise_the_named_error(
    metadata: object, data: st.DataObject
) -> None:
    encoded = bytearray(serialize(metadata))  # type: ignore[arg-type]
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
        encoded[position] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded)))
    try:
        decoded = deserialize(bytes(encoded[:cut]))
    except CorruptRemoteLogMetadataError:
        return
    # Whatever decodes is a valid value that encodes again (tags may be normalised away).
    assert deserialize(serialize(decoded)) == decoded


# ---- the cache as a state machine ---------------------------------------------------------

TIP = TopicIdPartition(Uuid(11, 12), TopicPartition("t", 0))
MAX_OFFSET = 60
MAX_EPOCH = 4


@st.composite
def segment_pool(draw: st.DrawFn) -> list[RemoteLogSegmentMetadata]:
    pool = []
    for n in range(draw(st.integers(min_value=1, max_value=6))):
        start, end, epochs = draw(offsets_and_epochs(max_offset=MAX_OFFSET, max_epoch=MAX_EPOCH))
        pool.append(
            RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid(1, n)),
                start_offset=start,
                end_offset=end,
                max_timestamp_ms=0,
                broker_id=0,
                event_timestamp_ms=0,
                segment_size_in_bytes=1,
                segment_leader_epochs=epochs,
            )
        )
    return pool


events = st.lists(
    st.tuples(st.integers(min_value=0, max_value=5), st.none() | st.sampled_from(S)),
    max_size=40,
)


def observable(cache: RemoteLogMetadataCache) -> object:
    return (
        cache.list_all_remote_log_segments(),
        {e: cache.list_remote_log_segments(e) for e in range(MAX_EPOCH + 1)},
        {e: cache.highest_offset_for_epoch(e) for e in range(MAX_EPOCH + 1)},
        {
            (e, o): cache.remote_log_segment_metadata(e, o)
            for e in range(MAX_EPOCH + 1)
            for o in range(MAX_OFFSET + 2)
        },
    )


@SETTINGS
@given(segment_pool(), events)
def test_cache_follows_the_state_machine(
    pool: list[RemoteLogSegmentMetadata], steps: list[tuple[int, RemoteLogSegmentState | None]]
) -> None:
    cache = RemoteLogMetadataCache(TIP)
    cache.mark_initialized()
    state: dict[RemoteLogSegmentId, RemoteLogSegmentState] = {}  # model: live segments
    highest: dict[int, int] = {}  # model: max epoch end offset over FINISHED events
    for index, target in steps:
        segment = pool[index % len(pool)]
        segment_id = segment.remote_log_segment_id
        current = state.get(segment_id)
        if target is None:  # publish the segment's COPY_SEGMENT_STARTED metadata
            # the same segment announced again in a later state is a repeat: no change
            repeat = current is not None and current is not S.COPY_SEGMENT_STARTED
            accepted = repeat or S.is_valid_transition(current, S.COPY_SEGMENT_STARTED)
            try:
                cache.add_copy_in_progress_segment(segment)
                assert accepted
                if not repeat:
                    state[segment_id] = S.COPY_SEGMENT_STARTED
            except IllegalRemoteLogStateTransitionError:
                assert not accepted
        else:
            update = RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=segment_id, event_timestamp_ms=1, state=target, broker_id=1
            )
            try:
                cache.update_remote_log_segment_metadata(update)
            except RemoteResourceNotFoundError:
                assert current is None
                continue
            except IllegalRemoteLogStateTransitionError:
                assert current is not None
                assert target is S.COPY_SEGMENT_STARTED or not S.is_valid_transition(
                    current, target
                )
                continue
            assert current is not None and S.is_valid_transition(current, target)
            assert target is not S.COPY_SEGMENT_STARTED
            if target is S.DELETE_SEGMENT_FINISHED:
                del state[segment_id]
            else:
                state[segment_id] = target
            if target is S.COPY_SEGMENT_FINISHED:
                for epoch in segment.segment_leader_epochs:
                    end = segment.epoch_end_offset(epoch)
                    highest[epoch] = max(highest.get(epoch, end), end)

        # Lookups only ever see copied segments that hold the offset in that epoch.
        for epoch in range(MAX_EPOCH + 1):
            for offset in range(MAX_OFFSET + 2):
                found = cache.remote_log_segment_metadata(epoch, offset)
                if found is not None:
                    assert found.state is S.COPY_SEGMENT_FINISHED
                    assert state[found.remote_log_segment_id] is S.COPY_SEGMENT_FINISHED
                    epoch_start = found.segment_leader_epochs[epoch]
                    assert epoch_start <= offset <= found.epoch_end_offset(epoch)
            # Highest offset per epoch: never decreases, = max over FINISHED events.
            assert cache.highest_offset_for_epoch(epoch) == highest.get(epoch)
            listed = {m.remote_log_segment_id for m in cache.list_remote_log_segments(epoch)}
            assert listed == {
                s.remote_log_segment_id
                for s in pool
                if s.remote_log_segment_id in state and epoch in s.segment_leader_epochs
            }
        listed_all = cache.list_all_remote_log_segments()
        assert {m.remote_log_segment_id: m.state for m in listed_all} == state
        assert [m.start_offset for m in listed_all] == sorted(m.start_offset for m in listed_all)

    # A snapshot restores a cache that answers every question the same way.
    data = encode_snapshot(snapshot_of(cache, metadata_partition=0, metadata_partition_offset=9))
    restored = RemoteLogMetadataCache.restore(TIP, decode_snapshot(data, TIP).state)
    assert observable(restored) == observable(cache)
    assert restored.snapshot_state() == cache.snapshot_state()
