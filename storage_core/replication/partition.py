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
from dataclasses import dataclass, replace

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import (
    FencedLeaderEpochError,
    LogEndOffsetMovedError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    StorageError,
    UnknownLeaderEpochError,
)
from storage_core.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from storage_core.log.log import Log, TimestampAndOffset
from storage_core.log.log_validator import LogAppendInfo
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.verification_guard import VerificationGuard
from storage_core.replication.fetch_isolation import FetchIsolation
from storage_core.replication.log_read import LogReadResult, read_log
from storage_core.replication.replica import QuietFetches, ReplicaState

logger = logging.getLogger(__name__)

NO_EPOCH_CHECK = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class IsrUpdate:
    """An ISR change the leader proposes (Kafka's AlterPartition item): written to the
    partition state at ``partition_epoch`` (the znode version the leader knows), so that it
    fails if the controller or another leader changed the state since."""

    topic_partition: TopicPartition
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int


IsrUpdateSubmitter = Callable[["Partition", IsrUpdate], None]


class Partition:
    """Role, epoch, ISR and high watermark of one partition hosted by this broker.

    ISR changes are proposed by the leader and committed elsewhere (``submit_isr_update``);
    while one is in flight the leader counts the larger of the two sets (Kafka's "maximal
    ISR", KIP-497) and proposes nothing else.
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        topic_id: Uuid,
        log: Log,
        *,
        local_broker_id: int,
        on_high_watermark_advanced: Callable[[TopicPartition], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        replica_lag_time_max_ms: int = 30_000,
        submit_isr_update: IsrUpdateSubmitter | None = None,
        is_broker_alive: Callable[[int], bool] | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self._on_hw_advanced = on_high_watermark_advanced or (lambda _tp: None)
        self._clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._submit_isr_update = submit_isr_update
        self._is_broker_alive = is_broker_alive or (lambda _b: True)
        self._lock = threading.RLock()
        self.leader_id: int = -1
        self.leader_epoch: int = -1
        self.leader_epoch_start_offset: int = -1
        self.partition_epoch: int = -1
        self.controller_epoch: int = 0
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self._pending_isr: IsrUpdate | None = None
        self._followers: dict[int, ReplicaState] = {}

    # ------------------------------------------------------------------ roles
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR, joined by the members of an in-flight change."""
        pending = self._pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(b for b in pending.isr if b not in self.isr)

    @property
    def isr_update_in_flight(self) -> bool:
        return self._pending_isr is not None

    def make_leader(
        self,
        *,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        partition_epoch: int = -1,
        controller_epoch: int = 0,
    ) -> bool:
        """Lead at ``leader_epoch`` (Kafka's ``makeLeader``). A new epoch starts at the log end
        offset and resets the followers' states; the same epoch again (an ISR or assignment
        change) only updates them. A state older than the one known is ignored. True if this
        broker was not the leader before."""
        with self._lock:
            if 0 <= partition_epoch < self.partition_epoch and leader_epoch <= self.leader_epoch:
                logger.info(
                    "ignored stale leader state partition=%s partition_epoch=%d known=%d",
                    self.topic_partition,
                    partition_epoch,
                    self.partition_epoch,
                )
                return False
            is_new_leader = not self.is_leader
            is_new_epoch = leader_epoch > self.leader_epoch
            now = self._clock.milliseconds()
            self.controller_epoch = controller_epoch
            self.replicas = replicas
            self.isr = isr
            self._pending_isr = None
            self.partition_epoch = partition_epoch
            followers = {b for b in replicas if b != self.local_broker_id}
            if is_new_epoch or is_new_leader:
                start = self.log.log_end_offset
                self.log.leader_epoch_cache.assign(leader_epoch, start)
                previous = {} if is_new_leader else self._followers
                self._followers = {}
                for b in sorted(followers):
                    in_sync = b in isr
                    state = previous.get(b) or ReplicaState(broker_id=b)
                    if is_new_leader:
                        state = ReplicaState(broker_id=b)
                    state.last_fetch_leader_log_end_offset = start
                    state.last_fetch_time_ms = now if in_sync else 0
                    state.last_caught_up_time_ms = now if in_sync else 0
                    state.quiet_fetches = None  # fetched in the previous epoch
                    self._followers[b] = state
                self.leader_epoch = leader_epoch
                self.leader_epoch_start_offset = start
                logger.info(
                    "became leader partition=%s leader_epoch=%d log_end_offset=%d"
                    " high_watermark=%d replicas=%s isr=%s",
                    self.topic_partition,
                    leader_epoch,
                    start,
                    self.log.high_watermark,
                    list(replicas),
                    list(isr),
                )
            else:
                self._followers = {
                    b: self._followers.get(b) or ReplicaState(broker_id=b) for b in followers
                }
            self.leader_id = self.local_broker_id
            advanced = self._maybe_increment_high_watermark(now)
        if advanced:
            self._on_hw_advanced(self.topic_partition)
        return is_new_leader

    def make_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        partition_epoch: int = -1,
        controller_epoch: int = 0,
    ) -> bool:
        """Follow ``leader_id`` (-1: the partition has no leader) at ``leader_epoch``: this
        broker stops serving produce and consumer fetches for it (NOT_LEADER_OR_FOLLOWER sends
        clients to the leader); its fetcher brings the log in line with the leader's. True if
        the leader or its epoch changed (the fetcher must start again)."""
        with self._lock:
            if 0 <= partition_epoch < self.partition_epoch and leader_epoch <= self.leader_epoch:
                return False
            changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
            self.replicas = replicas
            self.isr = isr
            self._pending_isr = None
            self.partition_epoch = partition_epoch
            self.controller_epoch = controller_epoch
            self._followers = {}
        if changed:
            logger.info(
                "became follower partition=%s leader=%d leader_epoch=%d log_end_offset=%d",
                self.topic_partition,
                leader_id,
                leader_epoch,
                self.log.log_end_offset,
            )
        return changed

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
    def effective_min_isr(self) -> int:
        """``min.insync.replicas``, capped at the replication factor (as Kafka)."""
        return max(1, min(self.log.config.min_insync_replicas, len(self.replicas) or 1))

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr()

    @property
    def is_under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def is_at_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) == self.effective_min_isr()

    def append_records_to_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        required_acks: int,
        disk_wait_allowed: bool = True,
        expected_log_end_offset: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Append with the leader epoch; acks=all is refused before the append when the ISR
        is below ``min.insync.replicas``. The lock is held through the append so that the
        batch carries the epoch of a leadership that is still current. Without
        ``disk_wait_allowed`` (the event loop), ``AppendWouldWaitError`` is raised instead of
        an append that would roll, fsync or checkpoint an epoch. ``expected_log_end_offset``:
        append only if the log ends there, else ``LogEndOffsetMovedError``.
        ``verification_guard``: transaction verification (``Log.append_as_leader``)."""
        with self._lock:
            self._require_leader()
            if expected_log_end_offset not in (None, end := self.log.log_end_offset):
                raise LogEndOffsetMovedError(
                    f"{self.topic_partition} ends at {end}, not {expected_log_end_offset}"
                )
            min_isr = self.effective_min_isr()
            if required_acks == -1 and len(self.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"partition {self.topic_partition}: {len(self.isr)} in-sync replica(s)"
                    f" {list(self.isr)}, fewer than min.insync.replicas={min_isr}"
                )
            # Followers idle at the log end: their last quiet fetch, taken before it moves.
            quiet = [
                (follower, fetched_ms)
                for follower in self._followers.values()
                if (fetched_ms := follower.last_quiet_fetch_ms()) is not None
            ]
            info = self.log.append_as_leader(
                records,
                leader_epoch=self.leader_epoch,
                disk_wait_allowed=disk_wait_allowed,
                origin=origin,
                verification_guard=verification_guard,
            )
            for follower, fetched_ms in quiet:
                follower.record_quiet_fetches(fetched_ms)
            advanced = self._maybe_increment_high_watermark(self._clock.milliseconds())
        if advanced:
            self._on_hw_advanced(self.topic_partition)
        return info

    def check_enough_replicas_reach_offset(
        self, required_offset: int
    ) -> tuple[bool, StorageError | None]:
        """Kafka's ``checkEnoughReplicasReachOffset`` for a waiting acks=all produce: done once
        the HW reaches ``required_offset``; with an error if the ISR shrank below
        ``min.insync.replicas`` meanwhile, or if this broker no longer leads.

        Read without the lock first: an append holds it for its whole write, and the event
        loop, which calls this, must not wait for one (in Kafka both take a shared read
        lock). Each field is replaced whole, and the leadership is read before and after the
        others: unchanged, they are that leader's (a follower's HW moves only after its
        ``leader_id`` has changed). Otherwise, or when this broker does not lead, the check
        runs under the lock."""
        leadership = (self.leader_epoch, self.leader_id)
        high_watermark = self.log.high_watermark
        isr_size = len(self.maximal_isr)
        min_isr = self.effective_min_isr()
        if leadership[1] != self.local_broker_id or leadership != (
            self.leader_epoch,
            self.leader_id,
        ):
            with self._lock:
                if not self.is_leader:
                    return True, NotLeaderOrFollowerError(
                        f"broker {self.local_broker_id} is no longer the leader of"
                        f" {self.topic_partition} (leader {self.leader_id})"
                    )
                high_watermark = self.log.high_watermark
                isr_size = len(self.maximal_isr)
                min_isr = self.effective_min_isr()
        if high_watermark < required_offset:
            return False, None
        if isr_size < min_isr:
            return True, NotEnoughReplicasAfterAppendError(
                f"partition {self.topic_partition}: the records were appended, but the ISR"
                f" {list(self.maximal_isr)} shrank below min.insync.replicas={min_isr}"
            )
        return True, None

    def _maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """Kafka's ``maybeIncrementLeaderHW`` (call with the lock held): HW = the smallest
        LEO among the leader, the maximal ISR and the followers caught up enough to join it
        soon; it never goes back and does not move while the ISR is below
        ``min.insync.replicas``."""
        if not self.is_leader or len(self.isr) < self.effective_min_isr():
            return False
        leader_end = self.log.log_end_offset
        new_hw = leader_end
        maximal = self.maximal_isr
        for broker_id, follower in self._followers.items():
            if follower.log_end_offset >= new_hw:
                continue
            if broker_id in maximal or (
                follower.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms)
                and self._is_broker_alive(broker_id)
            ):
                new_hw = max(follower.log_end_offset, 0)
        return self.log.maybe_increment_high_watermark(new_hw)

    # ------------------------------------------------------------------ followers (leader side)
    def update_follower_fetch_state(
        self,
        follower_id: int,
        *,
        fetch_offset: int,
        follower_log_start_offset: int,
        leader_end_offset: int,
        fetch_time_ms: int,
    ) -> bool:
        """Record a follower's fetch (its LEO is the fetch offset), maybe add it to the ISR and
        move the HW. ``leader_end_offset`` is the leader's LEO when the fetch was read. True if
        the HW advanced."""
        with self._lock:
            follower = self._followers.get(follower_id)
            if follower is None or not self.is_leader:
                raise NotLeaderOrFollowerError(
                    f"broker {follower_id} is not a replica of {self.topic_partition}"
                    f" (replicas {list(self.replicas)}) on its leader {self.local_broker_id}"
                )
            previous_end = follower.log_end_offset
            follower.update_fetch_state(
                fetch_offset, follower_log_start_offset, fetch_time_ms, leader_end_offset
            )
            update = self._maybe_prepare_isr_expand(follower)
            advanced = False
            if previous_end != follower.log_end_offset:
                advanced = self._maybe_increment_high_watermark(fetch_time_ms)
        if update is not None:
            self._submit(update)
        if advanced:
            self._on_hw_advanced(self.topic_partition)
        return advanced

    def note_quiet_follower(
        self, follower_id: int, fetches: QuietFetches, *, fetch_offset: int
    ) -> bool:
        """A follower's session found this partition quiet, the follower fetching at
        ``fetch_offset``: if that is the log end and the follower is in the ISR, its session's
        next fetches count as fetches at the log end (``replica``'s module docstring). False
        when it cannot be taken now, and the fetch is to be read and recorded as any other:
        the lock is busy (an append: the event loop does not wait for it), the follower is
        not in the ISR (recording its fetches may add it, as at every fetch in Kafka), or
        the log end or the leadership moved."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            follower = self._followers.get(follower_id)
            if (
                follower is None
                or not self.is_leader
                or follower_id not in self.isr
                or follower.log_end_offset != fetch_offset
                or self.log.log_end_offset != fetch_offset
            ):
                return False
            follower.quiet_fetches = fetches
            return True
        finally:
            self._lock.release()

    def low_watermark_if_leader(self) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the lowest log start offset of this log and of
        the followers on live brokers (-1 for one that has not fetched yet). DeleteRecords
        answers once it reached the requested offset."""
        with self._lock:
            self._require_leader()
            low = self.log.log_start_offset
            for broker_id, state in self._followers.items():
                if self._is_broker_alive(broker_id):
                    low = min(low, state.log_start_offset)
            return low

    def follower_states(self) -> dict[int, ReplicaState]:
        """A copy of the followers' states (leader only; empty on a follower)."""
        with self._lock:
            return {b: replace(s) for b, s in self._followers.items()}

    def _maybe_prepare_isr_expand(self, follower: ReplicaState) -> IsrUpdate | None:
        """Kafka's ``maybeExpandIsr``: a follower joins once its LEO reached the HW and the
        start of the current leader epoch (otherwise it could lead before it has the data the
        HW already covers)."""
        if self._pending_isr is not None or follower.broker_id in self.isr:
            return None
        if not self._is_broker_alive(follower.broker_id):
            return None
        end = follower.log_end_offset
        if end < self.log.high_watermark or end < self.leader_epoch_start_offset:
            return None
        isr = tuple(b for b in self.replicas if b in self.isr or b == follower.broker_id)
        logger.info(
            "expanding ISR partition=%s from=%s to=%s follower_end_offset=%d high_watermark=%d",
            self.topic_partition,
            list(self.isr),
            list(isr),
            end,
            self.log.high_watermark,
        )
        return self._prepare(isr)

    def maybe_shrink_isr(self) -> bool:
        """Kafka's ``maybeShrinkIsr``: followers that have not caught up to the leader's LEO for
        ``replica.lag.time.max.ms`` leave the ISR. True if a change was proposed."""
        with self._lock:
            if not self.is_leader or self._pending_isr is not None:
                return False
            now = self._clock.milliseconds()
            leader_end = self.log.log_end_offset
            out_of_sync = [
                b
                for b in self.isr
                if b != self.local_broker_id
                and not (
                    (f := self._followers.get(b)) is not None
                    and f.is_caught_up(leader_end, now, self.replica_lag_time_max_ms)
                )
            ]
            if not out_of_sync:
                return False
            isr = tuple(b for b in self.isr if b not in out_of_sync)
            logger.info(
                "shrinking ISR partition=%s from=%s to=%s high_watermark=%d log_end_offset=%d"
                " out_of_sync=%s",
                self.topic_partition,
                list(self.isr),
                list(isr),
                self.log.high_watermark,
                leader_end,
                [
                    (b, f.log_end_offset, f.last_caught_up_time_ms)
                    for b in out_of_sync
                    if (f := self._followers.get(b)) is not None
                ],
            )
            update = self._prepare(isr)
        self._submit(update)
        return True

    def _prepare(self, isr: tuple[int, ...]) -> IsrUpdate:
        update = IsrUpdate(
            topic_partition=self.topic_partition,
            leader=self.local_broker_id,
            leader_epoch=self.leader_epoch,
            isr=isr,
            controller_epoch=self.controller_epoch,
            partition_epoch=self.partition_epoch,
        )
        self._pending_isr = update
        return update

    def _submit(self, update: IsrUpdate) -> None:
        if self._submit_isr_update is None:  # nothing commits it: apply at once (tests)
            self.complete_isr_update(update, new_partition_epoch=update.partition_epoch + 1)
            return
        self._submit_isr_update(self, update)

    def complete_isr_update(self, update: IsrUpdate, *, new_partition_epoch: int | None) -> None:
        """The outcome of a proposed ISR change: committed at ``new_partition_epoch``, or
        refused (None: the state changed meanwhile; the controller's newer state arrives
        through the metadata and replaces this one)."""
        with self._lock:
            if self._pending_isr is not update:
                return
            self._pending_isr = None
            if new_partition_epoch is None:
                logger.info(
                    "ISR change refused partition=%s proposed=%s at partition_epoch=%d",
                    self.topic_partition,
                    list(update.isr),
                    update.partition_epoch,
                )
                return
            self.isr = update.isr
            self.partition_epoch = max(self.partition_epoch, new_partition_epoch)
            advanced = self._maybe_increment_high_watermark(self._clock.milliseconds())
        logger.info(
            "ISR updated partition=%s isr=%s partition_epoch=%d",
            self.topic_partition,
            list(update.isr),
            new_partition_epoch,
        )
        if advanced:
            self._on_hw_advanced(self.topic_partition)

    def try_hold(self) -> bool:
        """Take this partition's lock and its log's if no other thread holds either (never
        waits): True if both are now held, until ``release_hold``. While they are, the
        role, the ISR and the log stay as they are: no append, truncation, roll or flush."""
        if not self._lock.acquire(blocking=False):
            return False
        if not self.log.try_hold():
            self._lock.release()
            return False
        return True

    def release_hold(self) -> None:
        """Release what a successful ``try_hold`` took."""
        self.log.release_hold()
        self._lock.release()

    # ------------------------------------------------------------------ reads
    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        current_leader_epoch: int = NO_EPOCH_CHECK,
        fetch_only_from_leader: bool = True,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        min_one_message: bool = True,
    ) -> LogReadResult:
        with self._lock:
            if fetch_only_from_leader:
                self._require_leader(current_leader_epoch)
            else:
                self._check_epoch(current_leader_epoch)
        return read_log(
            self.log,
            fetch_offset,
            max_bytes,
            isolation=isolation,
            min_one_message=min_one_message,
        )

    def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        *,
        current_leader_epoch: int = NO_EPOCH_CHECK,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
    ) -> TimestampAndOffset | None:
        """ListOffsets for consumers: offsets at or above the high watermark (read_committed:
        the LSO) are not visible."""
        with self._lock:
            self._require_leader(current_leader_epoch)
        found = self.log.offset_for_timestamp(timestamp)
        log = self.log
        visible_end = (
            log.last_stable_offset
            if isolation is FetchIsolation.TXN_COMMITTED
            else log.high_watermark
        )
        if timestamp == -1:  # LATEST: the end of what the consumer may read, not the LEO
            epoch = self.log.leader_epoch_cache.epoch_for_offset(max(visible_end - 1, 0))
            return TimestampAndOffset(-1, visible_end, epoch)
        if timestamp in (-2, -4):  # EARLIEST / EARLIEST_LOCAL: the log start, even when empty
            return found
        if found is not None and found.offset >= visible_end:
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
