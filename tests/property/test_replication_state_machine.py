"""Replication of one partition over three real logs, against a model of KIP-101/KIP-279.

Three replicas, each a real ``Log`` in its own directory (small segments, a real
leader-epoch-checkpoint). The test plays the controller: it picks leaders (clean elections
from the live ISR; unclean ones from any live replica when allowed), bumps the leader epoch,
shrinks the ISR, crashes and restarts replicas. The leader side is Kafka's: appends stamped
with the leader epoch, ``DivergingEpoch`` and OffsetForLeaderEpoch answered from the leader's
epoch cache, HW = min LEO over the ISR as reported by the followers' fetch offsets (unknown
until each fetches under a new leader). The follower side is the product's own code path
(``follower_log``: the functions the fetcher thread calls).

The model is one list per replica: ``model[r][offset] = (leader epoch, payload)``. Records are
unique and a (offset, epoch) pair is written by one leader only, so the right truncation point
is the longest common prefix of the follower's and the leader's lists.

Checked after every step or where they apply:

(a) every committed record (below some leader's HW since the last unclean election) sits at
    its offset, with its epoch and payload, in the leader and every live ISR member;
(b) a fetch that finds no divergence sees a follower log equal to the leader's prefix, and
    after catching up the follower's log is the leader's, offsets, epochs and content;
(c) each log's leader-epoch cache is the one its batches imply (plus at most a latest,
    still empty epoch at the LEO), so identical logs have identical caches;
(d) with unclean elections allowed, (b) and (c) still hold; (a) only for records committed
    after the last unclean election.
Also: a truncation never cuts into the common prefix, and a restarted log keeps at least
what was flushed and is a prefix of what it held.

What it catches, shrunk: a follower truncating to its HW instead of the epoch end (append,
catch up, OffsetForLeaderEpoch: cut below a shared record; with that check off, (a) fails);
one truncation round where KIP-279 needs several (append, two elections, catch up); and
``Log.truncate_to`` keeping an empty epoch at the LEO (append, elect 1, elect 0, catch up 1:
the follower never catches up).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import SimpleRecord, build_batch, iter_batches
from storage_core.replication.follower_log import (
    plan_truncation,
    process_partition_data,
    truncate,
)
from storage_core.replication.leader_end_point import FetchPartitionData
from storage_core.replication.offset_truncation import EpochEndOffset

REPLICAS = (0, 1, 2)
CONFIG = LogConfig(segment_bytes=700)  # a few records per segment: rolls and multi-segment cuts
MAX_TRUNCATION_ROUNDS = 20  # KIP-279: one round per epoch the logs disagree on
MAX_CATCH_UP_ROUNDS = 40

Rec = tuple[int, bytes]  # (leader epoch, payload); the offset is the index in the list


def read_log(log: Log) -> list[Rec]:
    """Every record of the log as (epoch, payload), checking offsets are contiguous from 0."""
    out: list[Rec] = []
    for batch in log.read_batches(log.log_start_offset):
        for record in batch.records():
            if record.offset != len(out):
                raise AssertionError(f"{log.dir}: offset {record.offset} where {len(out)} was due")
            out.append((batch.partition_leader_epoch, record.value or b""))
    return out


def implied_epochs(records: list[Rec]) -> list[EpochEntry]:
    """The epoch cache a log's content implies: where each run of one epoch starts."""
    entries: list[EpochEntry] = []
    for offset, (epoch, _payload) in enumerate(records):
        if not entries or entries[-1].epoch != epoch:
            entries.append(EpochEntry(epoch, offset))
    return entries


def common_prefix(a: list[Rec], b: list[Rec]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n][0] == b[n][0]:
        n += 1
    return n


def lose_unflushed_tail(directory: Path, recovery_point: int, keep_fraction: float) -> None:
    """A power failure: bytes past the flushed ``recovery_point`` (exclusive) may be gone.
    The segment holding it is cut somewhere after the flushed bytes (maybe mid-batch); later
    segments vanish."""
    logs = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
    holding = max((p for p in logs if int(p.stem) <= recovery_point), key=lambda p: int(p.stem))
    data = holding.read_bytes()
    flushed = len(data)
    for position, batch in iter_batches(data):
        if batch.base_offset >= recovery_point:
            flushed = position
            break
    cut = flushed + int(keep_fraction * (len(data) - flushed))
    with holding.open("r+b") as f:
        f.truncate(cut)
    for later in (p for p in logs if int(p.stem) > int(holding.stem)):
        for suffix in (".log", ".index", ".timeindex", ".snapshot"):
            later.with_suffix(suffix).unlink(missing_ok=True)


class ReplicationMachine(RuleBasedStateMachine):
    unclean_leader_election_enable = False

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="replication-model-"))
        self.logs: dict[int, Log | None] = {r: self._open(r) for r in REPLICAS}
        self.model: dict[int, list[Rec]] = {r: [] for r in REPLICAS}
        self.recovery_points: dict[int, int] = {}  # of crashed replicas, as checkpointed
        # The controller's view (ZooKeeper's partition state).
        self.leader: int | None = None
        self.leader_epoch = -1
        self.isr: set[int] = set(REPLICAS)
        # The leader's view of its followers' LEOs (their last fetch offsets); None: unknown.
        self.follower_leo: dict[int, int | None] = {}
        self.leader_hw = 0
        self.committed: dict[int, Rec] = {}
        # acks=1 records acknowledged on the leader's append alone, not yet committed.
        self.acked_by_leader_only: dict[int, Rec] = {}
        self.next_payload = 0
        self._become_leader(0)

    # ------------------------------------------------------------------ plumbing
    def _open(self, r: int, *, recovery_point: int = 0, clean: bool = True) -> Log:
        return Log(
            self.root / f"broker-{r}" / "topic-0",
            CONFIG,
            recovery_point=recovery_point,
            had_clean_shutdown=clean,
        )

    def live_log(self, r: int) -> Log:
        log = self.logs[r]
        if log is None:
            raise AssertionError(f"replica {r} is down")
        return log

    def alive(self, r: int) -> bool:
        return self.logs[r] is not None

    def live(self) -> list[int]:
        return [r for r in REPLICAS if self.alive(r)]

    def dead(self) -> list[int]:
        return [r for r in REPLICAS if not self.alive(r)]

    def live_followers(self) -> list[int]:
        if self.leader is None:
            return []
        return [r for r in self.live() if r != self.leader]

    def isr_followers(self) -> list[int]:
        if self.leader is None:
            return []
        return sorted(self.isr - {self.leader})

    def live_isr_followers(self) -> list[int]:
        return [r for r in self.isr_followers() if self.alive(r)]

    def teardown(self) -> None:
        for log in self.logs.values():
            if log is not None:
                log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ controller
    def _become_leader(self, r: int) -> None:
        """Kafka's election + ``makeLeader``: epoch + 1, starting at the new leader's LEO;
        the followers' LEOs are unknown until they fetch; the HW is the leader's own."""
        self.leader_epoch += 1
        self.leader = r
        log = self.live_log(r)
        log.leader_epoch_cache.assign(self.leader_epoch, log.log_end_offset)
        self.follower_leo = {f: None for f in REPLICAS if f != r}
        self.leader_hw = log.high_watermark
        self._commit()

    def _elect_after_leader_loss(self) -> None:
        """Kafka's OfflinePartitionLeaderElectionStrategy: the first live ISR member, else
        (``unclean.leader.election.enable``) the first live replica, else offline."""
        self.leader = None
        candidates = [r for r in self.live() if r in self.isr]
        if candidates:
            self._become_leader(candidates[0])
        elif self.unclean_leader_election_enable and self.live():
            self._unclean_election(self.live()[0])

    def _unclean_election(self, r: int) -> None:
        records = self.model[r]
        if any(o >= len(records) or records[o] != rec for o, rec in self.committed.items()):
            event("unclean election lost committed records")
        self.isr = {r}
        self.committed = {}  # what was committed before may be gone; what follows may not
        self._become_leader(r)
        event("unclean election")

    def _maybe_advance_hw(self) -> None:
        """Kafka's ``maybeIncrementLeaderHW``: min LEO over the ISR, never backwards."""
        assert self.leader is not None
        ends = [self.live_log(self.leader).log_end_offset]
        for f in self.isr - {self.leader}:
            known = self.follower_leo[f]
            if known is None:
                return
            ends.append(known)
        if min(ends) > self.leader_hw:
            self.leader_hw = min(ends)
            self.live_log(self.leader).maybe_increment_high_watermark(self.leader_hw)
            self._commit()

    def _commit(self) -> None:
        """Records below the leader's HW are committed; a committed offset never changes."""
        assert self.leader is not None
        records = self.model[self.leader]
        for offset in range(self.leader_hw):
            known = self.committed.setdefault(offset, records[offset])
            assert known == records[offset], (
                f"(a) leader {self.leader} commits {records[offset]} at offset {offset},"
                f" where {known} was committed"
            )

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: self.leader is not None)
    @rule(count=st.integers(1, 4), acks=st.sampled_from([1, -1]))
    def append(self, count: int, acks: int) -> None:
        """A producer's batch on the leader (acks=1: acknowledged now; acks=all: once the HW
        passes it, which the HW rules decide; either way only the HW makes it committed)."""
        assert self.leader is not None
        first = len(self.model[self.leader])
        records = [
            SimpleRecord(key=None, value=f"p{self.next_payload + i}".encode(), timestamp=i)
            for i in range(count)
        ]
        self.next_payload += count
        log = self.live_log(self.leader)
        log.append_as_leader(build_batch(records), leader_epoch=self.leader_epoch)
        self.model[self.leader] += [(self.leader_epoch, r.value or b"") for r in records]
        if acks == 1:
            for i, record in enumerate(records):
                self.acked_by_leader_only[first + i] = (self.leader_epoch, record.value or b"")
        event(f"append acks={acks}")
        self._maybe_advance_hw()

    @precondition(lambda self: self.live_followers())
    @rule(data=st.data(), max_bytes=st.sampled_from([1, 200, 10_000]), ofle=st.booleans())
    def replicate(self, data: st.DataObject, max_bytes: int, ofle: bool) -> None:
        """One round of the follower's fetcher: OffsetForLeaderEpoch first when ``ofle`` (a
        partition in Truncating), then one Fetch (KIP-320: DivergingEpoch in the answer)."""
        follower = data.draw(st.sampled_from(self.live_followers()), label="follower")
        if ofle:
            self._truncate_by_offset_for_leader_epoch(follower)
        self._fetch(follower, max_bytes)

    @precondition(lambda self: self.live_followers())
    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        """Fetch until the follower has the leader's whole log: it must get there, and then
        (b) its log is the leader's, record for record, and (c) so is its epoch cache."""
        assert self.leader is not None
        follower = data.draw(st.sampled_from(self.live_followers()), label="follower")
        leader_log, log = self.live_log(self.leader), self.live_log(follower)
        for _ in range(MAX_CATCH_UP_ROUNDS):
            if self._fetch(follower, 10_000) and log.log_end_offset == leader_log.log_end_offset:
                break
        else:
            raise AssertionError(
                f"(b) follower {follower} did not catch up with leader {self.leader} in"
                f" {MAX_CATCH_UP_ROUNDS} fetches: follower epochs"
                f" {log.leader_epoch_cache.epoch_entries()} LEO {log.log_end_offset}, leader"
                f" epochs {leader_log.leader_epoch_cache.epoch_entries()} LEO"
                f" {leader_log.log_end_offset}"
            )
        assert read_log(log) == read_log(leader_log), "(b) caught-up log differs from the leader"
        leader_entries = leader_log.leader_epoch_cache.snapshot_up_to(leader_log.log_end_offset)
        assert log.leader_epoch_cache.snapshot_up_to(log.log_end_offset) == leader_entries, (
            "(c) identical logs, different leader-epoch caches"
        )

    def _truncate_by_offset_for_leader_epoch(self, follower: int) -> None:
        assert self.leader is not None
        log, leader_log = self.live_log(follower), self.live_log(self.leader)
        for _ in range(MAX_TRUNCATION_ROUNDS):
            latest = log.latest_epoch
            if latest is None:
                return
            epoch, end = leader_log.leader_epoch_cache.end_offset_for(
                latest, leader_log.log_end_offset
            )
            plan = self._truncate(follower, EpochEndOffset(epoch=epoch, end_offset=end))
            if plan:
                return
        raise AssertionError(f"truncation of {follower} needed over {MAX_TRUNCATION_ROUNDS} rounds")

    def _truncate(self, follower: int, answer: EpochEndOffset) -> bool:
        """The fetcher's truncation on the leader's answer; True if the plan was complete."""
        assert self.leader is not None
        log = self.live_log(follower)
        keep = common_prefix(self.model[follower], self.model[self.leader])
        plan = plan_truncation(log, answer)
        truncate(log, plan)
        end = log.log_end_offset
        assert end >= keep, (
            f"follower {follower} truncated to {end} on {answer}, below the {keep} records it"
            f" shares with leader {self.leader}"
        )
        del self.model[follower][end:]
        if plan.truncation_completed:
            assert end <= keep, (
                f"follower {follower} completed truncation at {end} on {answer}, but it"
                f" shares only {keep} records with leader {self.leader}"
            )
        event("truncated" if plan.truncation_completed else "truncated, another round")
        return plan.truncation_completed

    def _fetch(self, follower: int, max_bytes: int) -> bool:
        """One Fetch; True if it found no divergence (the follower appended what came)."""
        assert self.leader is not None
        log, leader_log = self.live_log(follower), self.live_log(self.leader)
        fetch_offset, last_fetched_epoch = log.log_end_offset, log.latest_epoch
        # The leader (Kafka's Partition.fetchRecords): the follower's last fetched epoch must
        # end at or after the fetch offset in the leader's log, else DivergingEpoch.
        if last_fetched_epoch is not None:
            epoch, end = leader_log.leader_epoch_cache.end_offset_for(
                last_fetched_epoch, leader_log.log_end_offset
            )
            if epoch < last_fetched_epoch or end < fetch_offset:
                answer = EpochEndOffset(epoch=epoch, end_offset=end)
                assert not answer.is_undefined, f"leader {self.leader} knows no epoch {answer}"
                self._truncate(follower, answer)
                return False
        # The follower's log must now be the leader's prefix (KIP-101/KIP-279 done).
        assert self.model[follower] == self.model[self.leader][:fetch_offset], (
            f"(b) follower {follower} passed the divergence check at offset {fetch_offset}"
            f" (last epoch {last_fetched_epoch}) with a log that is not the leader's prefix"
        )
        high_watermark = self.leader_hw  # sampled before the read, as the leader does
        records = leader_log.read(fetch_offset, max_bytes).read_bytes()
        self.follower_leo[follower] = fetch_offset
        if (
            follower not in self.isr
            and fetch_offset >= self.leader_hw
            and fetch_offset >= leader_log.leader_epoch_cache.epoch_entries()[-1].start_offset
        ):
            self.isr.add(follower)  # Kafka's maybeExpandIsr
            event("ISR expanded")
        self._maybe_advance_hw()
        process_partition_data(
            log,
            fetch_offset,
            FetchPartitionData(
                error=ErrorCode.none,
                high_watermark=high_watermark,
                log_start_offset=leader_log.log_start_offset,
                records=records,
                diverging_epoch=None,
            ),
        )
        self.model[follower] = self.model[self.leader][: log.log_end_offset]
        return True

    @precondition(lambda self: self.isr_followers())
    @rule(data=st.data())
    def shrink_isr(self, data: st.DataObject) -> None:
        """The leader drops a follower from the ISR (it lagged replica.lag.time.max.ms)."""
        self.isr.discard(data.draw(st.sampled_from(self.isr_followers()), label="follower"))
        self._maybe_advance_hw()

    @precondition(lambda self: self.live_isr_followers())
    @rule(data=st.data())
    def elect(self, data: st.DataObject) -> None:
        """A clean election without a failure (preferred leader, controlled shutdown)."""
        self._become_leader(data.draw(st.sampled_from(self.live_isr_followers()), label="leader"))

    @precondition(lambda self: self.live())
    @rule(data=st.data(), lose_tail=st.booleans(), keep_fraction=st.floats(0, 1))
    def crash(self, data: st.DataObject, lose_tail: bool, keep_fraction: float) -> None:
        """The broker dies; with ``lose_tail`` the machine too (unflushed bytes may be lost,
        but not from the last ISR member: that loses committed data in Kafka as well)."""
        r = data.draw(st.sampled_from(self.live()), label="replica")
        log = self.live_log(r)
        lose_tail = lose_tail and self.isr != {r}
        self.recovery_points[r] = log.recovery_point
        log.close()
        self.logs[r] = None
        if lose_tail:
            lose_unflushed_tail(log.dir, log.recovery_point, keep_fraction)
        if len(self.isr) > 1:
            self.isr.discard(r)  # the controller's OfflineReplica; the last member stays
        if r == self.leader:
            self._elect_after_leader_loss()
        event("crash, tail lost" if lose_tail else "crash")

    @precondition(lambda self: self.dead())
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """Reopen the log from disk (recovery from the recovery point)."""
        r = data.draw(st.sampled_from(self.dead()), label="replica")
        recovery_point = self.recovery_points.pop(r)
        log = self._open(r, recovery_point=recovery_point, clean=False)
        self.logs[r] = log
        records = read_log(log)
        assert len(records) >= recovery_point, (
            f"replica {r} lost flushed records: {len(records)} < {recovery_point}"
        )
        assert records == self.model[r][: len(records)], f"replica {r} came back with other data"
        del self.model[r][len(records) :]
        if self.leader is None:
            self._elect_after_leader_loss()  # the controller sees a live replica again

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        self.live_log(data.draw(st.sampled_from(self.live()), label="replica")).flush()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def logs_match_model(self) -> None:
        for r in REPLICAS:
            log = self.logs[r]
            if log is None:
                continue
            records = read_log(log)
            assert records == self.model[r], f"replica {r}: log and model differ"
            assert log.log_end_offset == len(records)
            # (c) the epoch cache is the one the batches imply; the leader (or a replica that
            # led and has not fetched since) may add its latest epoch, still empty, at the LEO.
            entries = log.leader_epoch_cache.epoch_entries()
            implied = implied_epochs(records)
            extra = entries[len(implied) :]
            assert entries[: len(implied)] == implied, (
                f"(c) replica {r}: epoch cache {entries}, its batches imply {implied}"
            )
            assert len(extra) <= 1 and all(e.start_offset == len(records) for e in extra), (
                f"(c) replica {r}: epoch cache {entries} beyond its batches {implied}"
            )

    @invariant()
    def acks_one_records_may_be_lost(self) -> None:
        """An acks=1 record is safe once committed; before that a clean election may drop
        it (Kafka's documented trade-off). Counted, not asserted: the runs do reach it."""
        if self.leader is None:
            return
        leader_records = self.model[self.leader]
        for offset, record in list(self.acked_by_leader_only.items()):
            if self.committed.get(offset) == record:
                del self.acked_by_leader_only[offset]
            elif offset >= len(leader_records) or leader_records[offset] != record:
                del self.acked_by_leader_only[offset]
                event("acks=1 record lost")

    @invariant()
    def committed_records_are_in_the_isr(self) -> None:
        """(a), over the records committed since the last unclean election."""
        holders = self.isr | ({self.leader} if self.leader is not None else set())
        for r in holders:
            if not self.alive(r):
                continue
            records = self.model[r]
            for offset, record in self.committed.items():
                assert offset < len(records) and records[offset] == record, (
                    f"(a) committed {record} at offset {offset} is missing from replica {r}"
                    f" (ISR {sorted(self.isr)}, leader {self.leader})"
                )


# Fixed examples in the suite (a failure reproduces run after run); set
# REPLICATION_MODEL_EXAMPLES for a longer, random exploration.
_EXAMPLES = int(os.environ.get("REPLICATION_MODEL_EXAMPLES", "0"))
SETTINGS = settings(
    max_examples=_EXAMPLES or 100,
    stateful_step_count=50,
    derandomize=not _EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class UncleanReplicationMachine(ReplicationMachine):
    unclean_leader_election_enable = True


TestCleanElections = ReplicationMachine.TestCase
TestCleanElections.settings = SETTINGS
TestUncleanElections = UncleanReplicationMachine.TestCase
TestUncleanElections.settings = SETTINGS
