"""Building a follower's remote log auxiliary state (Kafka's ``TierStateMachine``, KIP-405).

A follower whose fetch offset is below the leader's local log start offset gets
OFFSET_MOVED_TO_TIERED_STORAGE: the records there exist only in the remote tier, and a
follower never copies them. Before it can fetch from the leader's local log start offset it
needs what those records would have given it: the leader-epoch entries up to there and the
producer state. Both were uploaded with every remote segment (copy path: the LEADER_EPOCH and
PRODUCER_SNAPSHOT objects). ``start`` (Kafka's ``start`` / ``buildRemoteLogAuxState``)::

    leader's local start Lx and its epoch E   <- ListOffsets -4 to the leader
    target epoch                              =  E, or (E > 0) the epoch the leader's
                                                 OffsetForLeaderEpoch(E - 1) answers when its
                                                 end offset is above Lx - 1 (epoch gaps)
    remote segment holding Lx - 1 in epoch    <- this broker's RLMM (COPY_SEGMENT_FINISHED)
    next offset                               =  that segment's end offset + 1
    leader-epoch entries, producer snapshot   <- the RSM's objects of that segment (checked)
    truncate the log fully, start at next offset, log start offset = the leader's
    assign the epoch entries (cut at the log start offset); the snapshot becomes
    <next offset>.snapshot, the producer state reloaded from it
    -> Fetching from next offset, lag = leader's end offset - next offset

Everything is read and checked before the local log is touched, so a failure leaves the log
as it was. ``RemoteLogAuxStateNotReadyError`` (Kafka's ``RemoteStorageException``) means
"not yet": remote storage not enabled here yet, no RLMM, or the RLMM has not caught up with
the segment's metadata; the fetcher backs off and tries again.

The planning parts (``target_epoch``, ``restored_epoch_entries``) are pure functions.

Thread-safety: ``start`` runs on the fetcher thread holding its partition lock (as Kafka's
``handleOffsetsMovedToTieredStorage``); it is not safe to call for one partition from two
threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import BinaryIO, ClassVar

from kio.schema.errors import ErrorCode

from storage_core.client.errors import BrokerResponseError
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.errors import CorruptSnapshotError, StorageError
from storage_core.log.leader_epoch_cache import EpochEntry, parse_leader_epoch_checkpoint
from storage_core.log.log_file_utils import producer_snapshot_file
from storage_core.log.producer_snapshot import MAX_SNAPSHOT_BYTES, decode_snapshot, write_snapshot
from storage_core.log.producer_state_entry import ProducerStateEntry
from storage_core.replication.fetch_state import PartitionFetchState, ReplicaState
from storage_core.replication.leader_end_point import RemoteLeaderEndPoint
from storage_core.replication.offset_truncation import EpochEndOffset
from storage_core.replication.partition import Partition
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_log_manager import RemoteLogManager
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
)

logger = logging.getLogger(__name__)

# A leader-epoch-checkpoint of a segment: a line per epoch; far below this in practice.
MAX_LEADER_EPOCH_CHECKPOINT_BYTES = 16 * 1024 * 1024


class RemoteLogAuxStateNotReadyError(StorageError):
    """The remote log auxiliary state cannot be built yet (Kafka's ``RemoteStorageException``
    in the ``TierStateMachine``): the fetcher backs off and tries again."""

    error_code: ClassVar[str] = "kafka_storage_error"


class CorruptRemoteLogAuxStateError(StorageError):
    """A remote segment's leader-epoch checkpoint or producer snapshot is unreadable or does
    not fit the segment; the local log was left as it was."""

    error_code: ClassVar[str] = "kafka_storage_error"


# ---------------------------------------------------------------------------- planning
def target_epoch(
    *,
    epoch_for_leader_local_start: int,
    leader_local_log_start_offset: int,
    earlier_epoch_end_offset: EpochEndOffset | None,
) -> int:
    """The epoch of offset ``leader_local_log_start_offset - 1`` (Kafka's rule).

    With epoch 0 at the local start, the offset before it is in epoch 0 too. Otherwise the
    leader's answer for epoch ``E - 1`` decides: if that answer ends (exclusive) after the
    offset, the offset is in the answered epoch (the leader answers the epoch before a gap,
    e.g. 1 for a request of 2 when epoch 2 wrote nothing); else it is in ``E``.
    """
    if epoch_for_leader_local_start == 0:
        return 0
    if earlier_epoch_end_offset is None:
        raise ValueError(
            f"epoch {epoch_for_leader_local_start} > 0 needs the leader's end offset of the"
            " epoch before it"
        )
    previous_offset = leader_local_log_start_offset - 1
    if earlier_epoch_end_offset.end_offset > previous_offset:
        return earlier_epoch_end_offset.epoch
    return epoch_for_leader_local_start


def restored_epoch_entries(
    entries: Sequence[EpochEntry], *, next_offset: int, source: str
) -> list[EpochEntry]:
    """The entries a follower restarting at ``next_offset`` takes from a remote segment's
    checkpoint: all of them, as Kafka assigns them (they end at the segment's end, below
    ``next_offset``; the log's cache then cuts them at its log start offset). Raises
    ``CorruptRemoteLogAuxStateError`` for an entry at or above ``next_offset`` or a
    checkpoint without any entry."""
    if not entries:
        raise CorruptRemoteLogAuxStateError(
            f"{source}: the leader-epoch checkpoint has no entry; a copied segment always"
            " carries the epochs of its records"
        )
    for entry in entries:
        if entry.start_offset >= next_offset:
            raise CorruptRemoteLogAuxStateError(
                f"{source}: epoch entry {entry} starts at or after the segment's end"
                f" (next offset {next_offset}); the remote segment's leader-epoch checkpoint"
                " does not belong to it"
            )
    return list(entries)


# ---------------------------------------------------------------------------- the machine
class TierStateMachine:
    """One per fetcher thread, over that thread's leader end point."""

    def __init__(
        self,
        *,
        leader: RemoteLeaderEndPoint,
        get_partition: Callable[[TopicPartition], Partition],
        remote_log_manager: Callable[[], RemoteLogManager | None],
    ) -> None:
        self._leader = leader
        self._get_partition = get_partition
        self._remote_log_manager = remote_log_manager

    def start(self, tp: TopicPartition, state: PartitionFetchState) -> PartitionFetchState:
        """Build the auxiliary state of ``tp`` (in ``BuildingRemoteLogAuxState``) and return
        its ``Fetching`` state. Raises ``RemoteLogAuxStateNotReadyError`` (retry later),
        ``BrokerResponseError`` / ``ClientError`` from the leader, or a ``StorageError``."""
        if state.leader_log_start_offset is None:
            raise ValueError(f"partition {tp} is not in BuildingRemoteLogAuxState: {state}")
        epoch = state.current_leader_epoch
        local_start = self._leader.fetch_earliest_local_offset(tp, epoch)
        leader_log_start_offset = state.leader_log_start_offset
        if leader_log_start_offset < 0:  # not in the fetch response
            leader_log_start_offset = self._leader.fetch_earliest_offset(tp, epoch)
        partition = self._get_partition(tp)
        next_offset = self.build_remote_log_aux_state(
            partition,
            current_leader_epoch=epoch,
            leader_local_log_start_offset=local_start.offset,
            epoch_for_leader_local_start=local_start.leader_epoch,
            leader_log_start_offset=leader_log_start_offset,
        )
        leader_end_offset = self._leader.fetch_latest_offset(tp, epoch)
        return PartitionFetchState(
            topic_id=state.topic_id,
            fetch_offset=next_offset,
            lag=max(0, leader_end_offset - next_offset),
            current_leader_epoch=epoch,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=partition.log.latest_epoch,
        )

    def build_remote_log_aux_state(
        self,
        partition: Partition,
        *,
        current_leader_epoch: int,
        leader_local_log_start_offset: int,
        epoch_for_leader_local_start: int,
        leader_log_start_offset: int,
    ) -> int:
        """Kafka's ``buildRemoteLogAuxState``; returns the next offset to fetch."""
        tp = partition.topic_partition
        log = partition.log
        rlm = self._remote_log_manager()
        if rlm is None or not log.config.remote_storage_enable:
            raise RemoteLogAuxStateNotReadyError(
                f"Couldn't build the state from remote store for partition {tp}, as remote log"
                " storage is not yet enabled (remote.log.storage.system.enable on this broker,"
                " remote.storage.enable on the topic)"
            )
        if leader_local_log_start_offset <= 0 or epoch_for_leader_local_start < 0:
            raise RemoteLogAuxStateNotReadyError(
                f"partition {tp}: the leader's local log start offset"
                f" {leader_local_log_start_offset} (epoch {epoch_for_leader_local_start}) has"
                " nothing tiered below it; fetching again"
            )
        earlier = None
        if epoch_for_leader_local_start != 0:
            earlier = self._fetch_earlier_epoch_end_offset(
                tp, epoch_for_leader_local_start, current_leader_epoch
            )
        epoch = target_epoch(
            epoch_for_leader_local_start=epoch_for_leader_local_start,
            leader_local_log_start_offset=leader_local_log_start_offset,
            earlier_epoch_end_offset=earlier,
        )
        previous_offset = leader_local_log_start_offset - 1
        tip = TopicIdPartition(partition.topic_id, tp)
        try:
            metadata = rlm.rlmm.remote_log_segment_metadata(tip, epoch, previous_offset)
        except StorageError as exc:  # not tracked here yet, still loading, no RLMM yet
            raise RemoteLogAuxStateNotReadyError(
                f"Couldn't build the state from remote store for partition {tp}: the remote"
                f" log metadata is not available here yet ({exc})"
            ) from exc
        if metadata is None:
            raise RemoteLogAuxStateNotReadyError(
                f"Couldn't build the state from remote store for partition {tp},"
                f" currentLeaderEpoch: {current_leader_epoch}, leaderLocalLogStartOffset:"
                f" {leader_local_log_start_offset}, leaderLogStartOffset:"
                f" {leader_log_start_offset}, epoch: {epoch} as the previous remote log"
                " segment metadata was not found"
            )
        next_offset = metadata.end_offset + 1
        log_start_offset = min(leader_log_start_offset, next_offset)
        source = f"remote segment {metadata.remote_log_segment_id.id} of {tp}"
        entries = restored_epoch_entries(
            read_leader_epoch_entries(rlm.rsm, metadata, source=source),
            next_offset=next_offset,
            source=source,
        )
        snapshot = read_producer_snapshot(rlm.rsm, metadata, source=source)

        # Everything is read and checked: now the local log changes.
        log.truncate_fully_and_start_at(next_offset, log_start_offset=log_start_offset)
        cache = log.leader_epoch_cache
        for entry in entries:
            cache.assign(entry.epoch, entry.start_offset)
        cache.truncate_from_start(log_start_offset)
        if snapshot is not None:
            write_snapshot(producer_snapshot_file(log.dir, next_offset), snapshot)
            log.load_producer_state(next_offset)
        logger.info(
            "built the remote log auxiliary state partition=%s remote_segment=%s"
            " leader_local_log_start_offset=%d next_offset=%d log_start_offset=%d"
            " target_epoch=%d epoch_entries=%d producers=%d",
            tp,
            metadata.remote_log_segment_id.id,
            leader_local_log_start_offset,
            next_offset,
            log_start_offset,
            epoch,
            len(entries),
            len(snapshot or ()),
        )
        return next_offset

    def _fetch_earlier_epoch_end_offset(
        self, tp: TopicPartition, epoch: int, current_leader_epoch: int
    ) -> EpochEndOffset:
        """The leader's OffsetForLeaderEpoch answer for ``epoch - 1``."""
        answers = self._leader.fetch_epoch_end_offsets({tp: (current_leader_epoch, epoch - 1)})
        answer = answers.get(tp)
        if answer is None:
            raise RemoteLogAuxStateNotReadyError(
                f"partition {tp}: the leader answered OffsetForLeaderEpoch without it"
            )
        if answer.error != ErrorCode.none:
            raise BrokerResponseError(answer.error, resource=f"partition {tp}")
        return answer.epoch_end_offset


def read_leader_epoch_entries(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, *, source: str
) -> list[EpochEntry]:
    """The LEADER_EPOCH object of a remote segment, parsed and checked."""
    with rsm.fetch_index(metadata, IndexType.LEADER_EPOCH) as stream:
        data = _read_bounded(stream, MAX_LEADER_EPOCH_CHECKPOINT_BYTES, what=source)
    try:
        return parse_leader_epoch_checkpoint(data, source=f"leader-epoch checkpoint of {source}")
    except StorageError as exc:
        raise CorruptRemoteLogAuxStateError(str(exc)) from exc


def read_producer_snapshot(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, *, source: str
) -> list[ProducerStateEntry] | None:
    """The producer entries of a remote segment's PRODUCER_SNAPSHOT object, decoded and
    checked (CRC); None when the segment was copied without one (no producers then)."""
    try:
        with rsm.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT) as stream:
            data = _read_bounded(stream, MAX_SNAPSHOT_BYTES, what=source)
    except RemoteResourceNotFoundError:
        return None
    try:
        return list(decode_snapshot(data, file=f"producer snapshot of {source}"))
    except CorruptSnapshotError as exc:
        raise CorruptRemoteLogAuxStateError(str(exc)) from exc


def _read_bounded(stream: BinaryIO, max_bytes: int, *, what: str) -> bytes:
    """The whole stream (reads may come back short), at most ``max_bytes``."""
    data = bytearray()
    while len(data) <= max_bytes:
        chunk = stream.read(max_bytes + 1 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > max_bytes:
        raise CorruptRemoteLogAuxStateError(
            f"an object of {what} is larger than {max_bytes} bytes; it is not a leader-epoch"
            " checkpoint or producer snapshot"
        )
    return bytes(data)
