"""The metadata topic's compaction under random histories: copies, failed copies, expiry
(oldest first), partition deletions and compaction rounds at random limits, interleaved
across partitions sharing one metadata partition. A round's re-append comes later, after
other events (as the compactor's does after its read), filtered as the compactor filters it.

After every step, readers from the new log start (the brokers' caches and the quality
job's segment rows) see exactly what readers of the whole history see, and exactly the
segments the writers left live, in their states; with everything old enough the topic holds
a few records per live segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobs.tables.inputs import MetadataRecord
from jobs.tables.remote_segments import segment_base_rows
from jobs.tables.states import replay_segment_states
from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    serde,
)
from storage_core.tiered.metadata.compaction import (
    MetadataEntry,
    RestatedSegment,
    plan_metadata_compaction,
    replay_states,
    untouched_since_plan,
    verify_cut,
)
from storage_core.tiered.metadata.metadata import RemoteLogMetadata
from tests.remote_log_metadata_events import (
    copy_started,
    partition_delete,
    state_update,
    user_partition,
)

S = RemoteLogSegmentState
MIN_GAIN = 4
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPS = st.lists(
    st.tuples(
        st.sampled_from(["copy", "copy", "finish", "fail", "expire", "drop", "compact", "restate"]),
        st.integers(min_value=0, max_value=2),  # which partition
        # how far back the compaction's limit is (0: everything old enough)
        st.one_of(st.just(0), st.integers(min_value=0, max_value=100)),
    ),
    max_size=120,
)


@dataclass
class Topic:
    """One metadata partition as the brokers see it, and the whole history ever written."""

    log: list[MetadataEntry] = field(default_factory=list)
    history: list[MetadataEntry] = field(default_factory=list)
    next_offset: int = 0
    log_start_offset: int = 0
    planned: tuple[tuple[RestatedSegment, ...], int] = ((), 0)
    """The last plan's re-append not made yet, and the offset its read ended before."""

    def append(self, value: bytes) -> None:
        entry = MetadataEntry.decode(self.next_offset, value)
        self.next_offset += 1
        self.log.append(entry)
        self.history.append(entry)

    def publish(self, event: RemoteLogMetadata) -> None:
        self.append(serde.serialize(event))

    def compact(self, back: int) -> None:
        limit = max(self.log_start_offset, self.next_offset - back)
        plan = plan_metadata_compaction(
            self.log,
            log_start_offset=self.log_start_offset,
            cut_limit_offset=limit,
            min_restate_gain_records=MIN_GAIN,
        )
        if plan.cut_offset is not None:
            assert verify_cut(self.log, plan.cut_offset) is None
            self.log = [e for e in self.log if e.offset >= plan.cut_offset]
            self.log_start_offset = plan.cut_offset
        self.planned = (plan.restate, self.next_offset)

    def restate(self) -> None:
        """The last plan's re-append, as the compactor makes it: without the segments that
        events appended since its read touch."""
        segments, read_end = self.planned
        appended = [e for e in self.log if e.offset >= read_end]
        for segment in untouched_since_plan(segments, appended):
            self.append(segment.add)
            self.append(segment.finished)
        self.planned = ((), self.next_offset)


def job_rows(entries: list[MetadataEntry]) -> dict[str, tuple[str | None, str | None]]:
    """Per segment, (current state, first refused transition) as the quality job sees it."""
    records = [
        MetadataRecord(partition=0, offset=e.offset, timestamp_ms=e.offset, event=e.event)
        for e in entries
        if e.event is not None
    ]
    out = {}
    for row in segment_base_rows(records, []):
        replay = replay_segment_states(row["state_history"])
        out[row["segment_id"]] = (replay.current_state, replay.invalid_transition)
    return out


# a segment restated by a round and expired before the round's re-append
EXPIRED_BEFORE_ITS_RE_APPEND = [
    ("copy", 0, 0),
    ("finish", 0, 0),
    *[("copy", 1, 0), ("finish", 1, 0), ("expire", 1, 0)] * 3,
    ("compact", 0, 0),
    ("expire", 0, 0),
    ("restate", 0, 0),
]


@SETTINGS
@given(OPS)
@example(EXPIRED_BEFORE_ITS_RE_APPEND)
def test_readers_from_the_log_start_see_the_whole_history(ops: list[tuple[str, int, int]]) -> None:
    topic = Topic()
    partitions = [user_partition(f"t{i}", 0) for i in range(3)]
    segments: dict[TopicIdPartition, list[tuple[RemoteLogSegmentMetadata, S]]] = {
        tip: [] for tip in partitions
    }
    next_start = dict.fromkeys(partitions, 0)

    def move(tip: TopicIdPartition, index: int, *states: S) -> None:
        segment, _ = segments[tip][index]
        for state in states:
            topic.publish(state_update(segment, state))
        if states[-1] is S.DELETE_SEGMENT_FINISHED:
            del segments[tip][index]
        else:
            segments[tip][index] = (segment, states[-1])

    for kind, which, back in ops:
        tip = partitions[which]
        live = segments[tip]
        if kind == "copy":
            segment = copy_started(tip, next_start[tip], next_start[tip] + 9)
            next_start[tip] += 10
            topic.publish(segment)
            live.append((segment, S.COPY_SEGMENT_STARTED))
        elif kind == "finish":  # copies finish in order
            copying = [i for i, (_, s) in enumerate(live) if s is S.COPY_SEGMENT_STARTED]
            if copying:
                move(tip, copying[0], S.COPY_SEGMENT_FINISHED)
        elif kind == "fail":
            copying = [i for i, (_, s) in enumerate(live) if s is S.COPY_SEGMENT_STARTED]
            if copying:
                move(tip, copying[-1], S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
        elif kind == "expire":  # retention: the oldest copied segment
            copied = [i for i, (_, s) in enumerate(live) if s is S.COPY_SEGMENT_FINISHED]
            if copied:
                move(tip, copied[0], S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
        elif kind == "drop":  # the topic deleted: the partition's remote data removed
            topic.publish(partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED))
            topic.publish(
                partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
            )
            while live:
                move(tip, 0, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
            topic.publish(
                partition_delete(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
            )
            fresh = user_partition(f"t{which}", 0)  # recreated: a new topic id
            partitions[which] = fresh
            segments[fresh] = []
            next_start[fresh] = 0
        elif kind == "restate":
            topic.restate()
        else:
            topic.compact(back)
        read = replay_states(topic.log)
        assert read == replay_states(topic.history)
        assert {
            tip: sorted((str(s.segment_id), s.state.name) for s in state.segments)
            for tip, state in read.items()
            if state.segments
        } == {
            tip: sorted((str(seg.remote_log_segment_id.id), st.name) for seg, st in live)
            for tip, live in segments.items()
            if live
        }
        whole = job_rows(topic.history)
        seen = job_rows(topic.log)
        for segment_id, (state, refused) in seen.items():
            assert refused is None, (segment_id, refused)
            assert whole[segment_id][0] == state
        for segment_id, (state, _) in whole.items():
            if state != S.DELETE_SEGMENT_FINISHED.name:
                assert segment_id in seen

    # everything old enough, nothing in flight (copies left behind rolled back, as the
    # reconcile job does): a few records per live segment remain
    for tip, live in segments.items():
        for index in reversed(range(len(live))):
            if live[index][1] is S.COPY_SEGMENT_STARTED:
                move(tip, index, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)
    for _round in range(3):
        topic.compact(0)
        topic.restate()
    live_count = sum(len(live) for live in segments.values())
    assert len(topic.log) <= 4 * live_count + 2 * MIN_GAIN
