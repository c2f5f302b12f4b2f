"""One partition on this broker: role, leader epoch, ISR, high watermark (Kafka's ``Partition``).

The leader appends with its leader epoch and moves the high watermark to the smallest log end
offset among the in-sync replicas (its own LEO counts; followers report theirs through their
fetch offsets). With a single replica the ISR is the leader alone, so the high watermark
follows the leader's LEO after every append.

Epoch checks follow KIP-320: a request that names an older leader epoch gets
FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH; -1 means "no check".

Thread-safety: appends and fetches run on I/O threads; ``_lock`` guards the role, the ISR
and the follower states. ``on_high_watermark_advanced`` is called outside the lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from storage_core.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from storage_core.log.log import Log, TimestampAndOffset
from storage_core.log.log_segment import FetchDataInfo
from storage_core.log.log_validator import LogAppendInfo

logger = logging.getLogger(__name__)

NO_EPOCH_CHECK = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class LogReadResult:
    """What a fetch of one partition returns, with the offsets the response reports."""

    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int


@dataclass(slots=True)
class ReplicaState:
    """A follower's position as the leader sees it (Kafka's ``Replica``)."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0


class Partition:
    """Role, epoch, ISR and high watermark of one partition hosted by this broker."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        topic_id: Uuid,
        log: Log,
        *,
        local_broker_id: int,
        on_high_watermark_advanced: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self._on_hw_advanced = on_high_watermark_advanced or (lambda _tp: None)
        self._lock = threading.RLock()
        self.leader_id: int = -1
        self.leader_epoch: int = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._followers: dict[int, ReplicaState] = {}

    # ------------------------------------------------------------------ roles
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def make_leader(
        self, *, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]
    ) -> None:
        """Become leader at ``leader_epoch``: the epoch starts at the current log end offset."""
        with self._lock:
            self.leader_id = self.local_broker_id
            self.leader_epoch = leader_epoch
            self.replicas = replicas
            self.isr = isr
            self._followers = {
                b: ReplicaState(broker_id=b) for b in replicas if b != self.local_broker_id
            }
            self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
            advanced = self._maybe_increment_high_watermark()
        logger.info(
            "became leader partition=%s leader_epoch=%d log_end_offset=%d high_watermark=%d",
            self.topic_partition,
            leader_epoch,
            self.log.log_end_offset,
            self.log.high_watermark,
        )
        if advanced:
            self._on_hw_advanced(self.topic_partition)

    def make_follower(
        self, *, leader_id: int, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]
    ) -> None:
        """Follow ``leader_id`` (-1: the partition has no leader) at ``leader_epoch``: this
        broker stops serving produce and consumer fetches for it (NOT_LEADER_OR_FOLLOWER sends
        clients to the leader). Its log stays as it is."""
        with self._lock:
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
            self.replicas = replicas
            self.isr = isr
            self._followers = {}
        logger.info(
            "became follower partition=%s leader=%d leader_epoch=%d log_end_offset=%d",
            self.topic_partition,
            leader_id,
            leader_epoch,
            self.log.log_end_offset,
        )

    # ------------------------------------------------------------------ epochs
    def _check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch == NO_EPOCH_CHECK:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"partition {self.topic_partition}: leader epoch {current_leader_epoch} is"
                f" older than the current leader epoch {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"partition {self.topic_partition}: leader epoch {current_leader_epoch} is"
                f" newer than this broker's {self.leader_epoch}"
            )

    def _require_leader(self, current_leader_epoch: int = NO_EPOCH_CHECK) -> None:
        self._check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition}"
                f" (leader {self.leader_id})"
            )

    # ------------------------------------------------------------------ appends
    def append_records_to_leader(
        self, records: bytes | bytearray | memoryview, *, required_acks: int
    ) -> LogAppendInfo:
        with self._lock:
            self._require_leader()
            min_isr = self.log.config.min_insync_replicas
            if required_acks == -1 and len(self.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"partition {self.topic_partition}: {len(self.isr)} in-sync replica(s)"
                    f" {list(self.isr)}, fewer than min.insync.replicas={min_isr}"
                )
            epoch = self.leader_epoch
        info = self.log.append_as_leader(records, leader_epoch=epoch)
        with self._lock:
            advanced = self._maybe_increment_high_watermark()
        if advanced:
            self._on_hw_advanced(self.topic_partition)
        return info

    def _maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (the leader's own LEO included); it never goes back."""
        candidates = [self.log.log_end_offset]
        for broker_id in self.isr:
            if broker_id == self.local_broker_id:
                continue
            follower = self._followers.get(broker_id)
            candidates.append(follower.log_end_offset if follower else -1)
        new_hw = min(candidates)
        return self.log.maybe_increment_high_watermark(new_hw)

    # ------------------------------------------------------------------ reads
    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        current_leader_epoch: int = NO_EPOCH_CHECK,
        fetch_only_from_leader: bool = True,
        isolation_high_watermark: bool = True,
        min_one_message: bool = True,
    ) -> LogReadResult:
        with self._lock:
            if fetch_only_from_leader:
                self._require_leader(current_leader_epoch)
            else:
                self._check_epoch(current_leader_epoch)
        log = self.log
        # Offsets are sampled before the read so the response never reports a HW below the data.
        high_watermark = log.high_watermark
        max_offset = high_watermark if isolation_high_watermark else None
        info = log.read(
            fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
        )
        return LogReadResult(
            info=info,
            high_watermark=high_watermark,
            last_stable_offset=high_watermark,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
        )

    def fetch_offset_for_timestamp(
        self, timestamp: int, *, current_leader_epoch: int = NO_EPOCH_CHECK
    ) -> TimestampAndOffset | None:
        """ListOffsets for consumers: offsets at or above the high watermark are not visible."""
        with self._lock:
            self._require_leader(current_leader_epoch)
        found = self.log.offset_for_timestamp(timestamp)
        high_watermark = self.log.high_watermark
        if timestamp == -1:  # LATEST: the high watermark, not the LEO (read_committed aside)
            epoch = self.log.leader_epoch_cache.epoch_for_offset(max(high_watermark - 1, 0))
            return TimestampAndOffset(-1, high_watermark, epoch)
        if timestamp in (-2, -4):  # EARLIEST / EARLIEST_LOCAL: the log start, even when empty
            return found
        if found is not None and found.offset >= high_watermark:
            return None  # a timestamp lookup never points above what consumers may read
        return found

    def last_offset_for_leader_epoch(
        self, leader_epoch: int, *, current_leader_epoch: int = NO_EPOCH_CHECK
    ) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetForLeaderEpoch (``lastOffsetForLeaderEpoch``)."""
        with self._lock:
            self._require_leader(current_leader_epoch)
        if leader_epoch < 0:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic_partition}, leader={self.leader_id},"
            f" leader_epoch={self.leader_epoch}, isr={list(self.isr)})"
        )
