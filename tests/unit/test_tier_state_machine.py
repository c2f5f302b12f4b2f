"""The follower's remote log auxiliary state (``TierStateMachine``): the planning rules as
pure functions, and the build itself over a real leader log whose segments were copied to a
``LocalTieredStorage`` (leader-epoch checkpoint and producer snapshot included) with their
metadata in an in-memory RLMM, restoring into a real follower ``Log``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from storage_core.common import TopicPartition
from storage_core.errors import CorruptCheckpointError
from storage_core.log.leader_epoch_cache import EpochEntry, parse_leader_epoch_checkpoint
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.producer_snapshot import read_snapshot
from storage_core.replication.fetch_state import PartitionFetchState, ReplicaState
from storage_core.replication.leader_end_point import RemoteLeaderEndPoint
from storage_core.replication.offset_truncation import EpochEndOffset
from storage_core.replication.partition import Partition
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from storage_core.replication.tier_state_machine import (
    CorruptRemoteLogAuxStateError,
    RemoteLogAuxStateNotReadyError,
    TierStateMachine,
    restored_epoch_entries,
    target_epoch,
)
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.lineage import (
    epoch_entries_in_range,
    leader_epoch_checkpoint_bytes,
)
from storage_core.tiered.remote_log_manager import RemoteLogManager
from storage_core.tiered.remote_storage_manager import LogSegmentData
from tests.conftest import BASE_TIMESTAMP_MS, make_batch
from tests.unit.tiered_fixtures import TIP, TOPIC, TOPIC_ID

TP = TopicPartition(TOPIC, 0)


# ---------------------------------------------------------------------------- planning
def test_target_epoch_is_zero_when_the_local_start_is_in_epoch_zero() -> None:
    assert (
        target_epoch(
            epoch_for_leader_local_start=0,
            leader_local_log_start_offset=50,
            earlier_epoch_end_offset=None,
        )
        == 0
    )


def test_target_epoch_skips_an_epoch_without_records() -> None:
    # Kafka's example: 0@20, 1@85, (2: nothing written), 3@90, 4@98; local start 90 is in
    # epoch 3; asked for epoch 2 the leader answers epoch 1 ending at 90: 89 is in epoch 1.
    assert (
        target_epoch(
            epoch_for_leader_local_start=3,
            leader_local_log_start_offset=90,
            earlier_epoch_end_offset=EpochEndOffset(epoch=1, end_offset=90),
        )
        == 1
    )


def test_target_epoch_is_the_local_start_epoch_when_it_began_earlier() -> None:
    # epoch 2 started at 80 and the local start is 90: the epoch before ends at 80 <= 89
    assert (
        target_epoch(
            epoch_for_leader_local_start=2,
            leader_local_log_start_offset=90,
            earlier_epoch_end_offset=EpochEndOffset(epoch=1, end_offset=80),
        )
        == 2
    )


def test_target_epoch_needs_the_leaders_answer_above_epoch_zero() -> None:
    with pytest.raises(ValueError, match="needs the leader's end offset"):
        target_epoch(
            epoch_for_leader_local_start=1,
            leader_local_log_start_offset=10,
            earlier_epoch_end_offset=None,
        )


def test_restored_epoch_entries_refuse_entries_past_the_segment() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(1, 40)]
    assert restored_epoch_entries(entries, next_offset=41, source="s") == entries
    with pytest.raises(CorruptRemoteLogAuxStateError, match="does not belong to it"):
        restored_epoch_entries(entries, next_offset=40, source="s")
    with pytest.raises(CorruptRemoteLogAuxStateError, match="has no entry"):
        restored_epoch_entries([], next_offset=40, source="s")


def test_parse_leader_epoch_checkpoint() -> None:
    assert parse_leader_epoch_checkpoint(b"0\n2\n0 0\n3 120\n", source="x") == [
        EpochEntry(0, 0),
        EpochEntry(3, 120),
    ]
    for bad, what in [
        (b"0\n2\n0 0\n", "Expected 2 entries"),
        (b"0\n2\n3 0\n2 120\n", "strictly increase"),
        (b"0\n1\n0 -1\n", "start offset"),
        (b"\xff", "not valid UTF-8"),
        (b"1\n0\n", "Unrecognised version"),
    ]:
        with pytest.raises(CorruptCheckpointError, match=what):
            parse_leader_epoch_checkpoint(bad, source="x")


def test_fetch_state_building_remote_log_aux_state() -> None:
    fetching = PartitionFetchState(
        topic_id=None,
        fetch_offset=0,
        lag=None,
        current_leader_epoch=3,
        state=ReplicaState.FETCHING,
        last_fetched_epoch=None,
        delay_until_ms=5,
    )
    building = fetching.building_remote_log_aux_state(leader_log_start_offset=7)
    assert building.state is ReplicaState.BUILDING_REMOTE_LOG_AUX_STATE
    assert building.leader_log_start_offset == 7
    assert building.is_building_remote_log_aux_state(now_ms=0)
    assert not building.is_ready_for_fetch(now_ms=0)
    assert "state=BuildingRemoteLogAuxState" in str(building)
    assert not building.delayed(0, 100).is_building_remote_log_aux_state(now_ms=50)
    assert building.delayed(0, 100).is_building_remote_log_aux_state(now_ms=100)
    back = building.fetched(next_offset=9, lag=0, last_fetched_epoch=3)
    assert back.state is ReplicaState.FETCHING and back.leader_log_start_offset is None
    with pytest.raises(ValueError, match=r"only\s+there"):
        PartitionFetchState(
            topic_id=None,
            fetch_offset=0,
            lag=None,
            current_leader_epoch=3,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=None,
            leader_log_start_offset=0,
        )


# ---------------------------------------------------------------------------- the build
PRODUCER_ID = 4242


def leader_log(tmp_path: Path) -> Log:
    """Six segments or so: batches of an idempotent producer, epoch 0 then epoch 2."""
    log = Log(
        tmp_path / "leader" / f"{TOPIC}-0",
        LogConfig(segment_bytes=2048, remote_storage_enable=True),
        topic_id=TOPIC_ID,
    )
    sequence = 0
    now_ms = int(time.time() * 1000)  # recent: restored producers must not be expired
    for i in range(30):
        data = make_batch(
            3,
            value_size=100,
            tag=f"b{i}-",
            timestamp=now_ms + i,
            producer_id=PRODUCER_ID,
            producer_epoch=0,
            base_sequence=sequence,
        )
        sequence += 3
        log.append_as_leader(data, leader_epoch=0 if i < 20 else 2)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) >= 5
    return log


def copy(
    log: Log, index: int, rsm: LocalTieredStorage, rlmm: InMemoryRemoteLogMetadataManager
) -> RemoteLogSegmentMetadata:
    """Copy segment ``index`` as the copy path does: epochs up to its end, the producer
    snapshot at the next segment's base offset."""
    segments = log.segments
    segment, next_base = segments[index], segments[index + 1].base_offset
    entries = log.leader_epoch_cache.epoch_entries()
    snapshot = log.fetch_producer_snapshot(next_base)
    assert snapshot is not None
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TIP),
        start_offset=segment.base_offset,
        end_offset=next_base - 1,
        max_timestamp_ms=segment.max_timestamp_so_far,
        broker_id=1,
        event_timestamp_ms=BASE_TIMESTAMP_MS,
        segment_size_in_bytes=segment.size,
        segment_leader_epochs={
            e.epoch: e.start_offset
            for e in epoch_entries_in_range(entries, segment.base_offset, next_base)
        },
    )
    rlmm.add_remote_log_segment_metadata(metadata)
    segment.flush()
    rsm.copy_log_segment_data(
        metadata,
        LogSegmentData(
            log_segment=segment.log.path,
            offset_index=segment.offset_index.path,
            time_index=segment.time_index.path,
            producer_snapshot=snapshot,
            leader_epoch_index=leader_epoch_checkpoint_bytes(
                [e for e in entries if e.start_offset < next_base]
            ),
        ),
    )
    rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=BASE_TIMESTAMP_MS,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=1,
        )
    )
    return metadata


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.leader = leader_log(tmp_path)
        self.rsm = LocalTieredStorage(tmp_path / "remote", fsync=False)
        self.rlmm = InMemoryRemoteLogMetadataManager()
        self.follower_log = Log(
            tmp_path / "follower" / f"{TOPIC}-0",
            LogConfig(segment_bytes=2048, remote_storage_enable=True),
            topic_id=TOPIC_ID,
        )
        self.partition = Partition(TP, TOPIC_ID, self.follower_log, local_broker_id=2)
        self.rlm = RemoteLogManager(
            broker_id=2,
            rsm=self.rsm,
            rlmm=self.rlmm,
            log_dir=tmp_path / "follower",
            index_cache_max_bytes=1 << 20,
            reader_threads=1,
            task_interval_ms=1000,
        )
        # Never connected: an epoch-0 local start needs no request to the leader.
        leader = RemoteLeaderEndPoint(
            source_broker_id=1,
            local_broker_id=2,
            endpoint_of=lambda _broker: None,
            config=ReplicaFetcherConfig(),
            client_id="test",
        )
        self.machine = TierStateMachine(
            leader=leader,
            get_partition=lambda _tp: self.partition,
            remote_log_manager=lambda: self.rlm,
        )

    def build(self, local_start: int, epoch: int = 0) -> int:
        return self.machine.build_remote_log_aux_state(
            self.partition,
            current_leader_epoch=3,
            leader_local_log_start_offset=local_start,
            epoch_for_leader_local_start=epoch,
            leader_log_start_offset=0,
        )


def test_build_restores_epochs_and_producer_state_from_the_remote_segment(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    leader = setup.leader
    copied = [copy(leader, i, setup.rsm, setup.rlmm) for i in range(len(leader.segments) - 1)]
    # the local start: the end + 1 of the last copied segment still wholly in epoch 0 (an
    # epoch-0 local start needs no OffsetForLeaderEpoch to the leader)
    local_start = max(
        c.end_offset + 1
        for c in copied
        if leader.leader_epoch_cache.epoch_for_offset(c.end_offset + 1) == 0
    )
    assert local_start > copied[0].end_offset
    setup.follower_log.append_as_follower(make_batch(2))  # stale data: truncated away

    next_offset = setup.build(local_start)

    follower = setup.follower_log
    assert next_offset == local_start
    assert follower.log_end_offset == local_start
    assert follower.local_log_start_offset == local_start
    assert follower.log_start_offset == 0
    assert follower.leader_epoch_cache.epoch_entries() == [EpochEntry(0, 0)]
    # the producer state at the local start: the leader's snapshot there, as restored
    snapshot = leader.fetch_producer_snapshot(local_start)
    assert snapshot is not None
    (expected,) = read_snapshot(snapshot)
    restored = follower.active_producers[PRODUCER_ID]
    assert restored.producer_epoch == expected.producer_epoch == 0
    assert restored.batch_metadata == expected.batch_metadata
    assert restored.batch_metadata[-1].last_offset == local_start - 1
    assert (follower.dir / f"{local_start:020d}.snapshot").exists()


def test_build_waits_for_the_metadata_and_leaves_the_log_alone(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    leader = setup.leader
    first = copy(leader, 0, setup.rsm, setup.rlmm)
    setup.follower_log.append_as_follower(make_batch(2))
    # the RLMM knows no segment holding the offset before a later local start
    later_start = leader.segments[2].base_offset
    with pytest.raises(RemoteLogAuxStateNotReadyError, match="metadata was not found"):
        setup.build(later_start)
    assert setup.follower_log.log_end_offset == 2  # untouched
    # once it has it, the build goes through
    copy(leader, 1, setup.rsm, setup.rlmm)
    assert setup.build(later_start) == later_start
    assert first.end_offset < later_start


def test_build_refuses_a_corrupt_remote_checkpoint_and_keeps_the_log(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    metadata = copy(setup.leader, 0, setup.rsm, setup.rlmm)
    epoch_objects = list((tmp_path / "remote").rglob("*.leader-epoch-checkpoint"))
    assert len(epoch_objects) == 1
    epoch_objects[0].write_bytes(b"0\n1\n0 999999\n")  # an epoch past the segment
    setup.follower_log.append_as_follower(make_batch(2))
    with pytest.raises(CorruptRemoteLogAuxStateError, match="does not belong to it"):
        setup.build(metadata.end_offset + 1)
    assert setup.follower_log.log_end_offset == 2


def test_build_without_remote_storage_is_not_ready(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    setup.rlm = None  # type: ignore[assignment]
    with pytest.raises(RemoteLogAuxStateNotReadyError, match="not yet enabled"):
        setup.machine.build_remote_log_aux_state(
            setup.partition,
            current_leader_epoch=3,
            leader_local_log_start_offset=10,
            epoch_for_leader_local_start=0,
            leader_log_start_offset=0,
        )
