"""LeaderEpochFileCache against a small model of Kafka's rules, over random operation runs."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.common import TopicPartition
from storage_core.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TP = TopicPartition("topic", 0)

epochs = st.integers(min_value=0, max_value=12)
offsets = st.integers(min_value=0, max_value=120)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), epochs, offsets),
        st.tuples(st.just("assign"), epochs, offsets),  # twice as likely as truncations
        st.tuples(st.just("truncate_from_end"), st.integers(min_value=-1, max_value=130)),
        st.tuples(st.just("truncate_from_start"), st.integers(min_value=-1, max_value=130)),
    ),
    max_size=40,
)


class ModelCache:
    """Kafka's rules over a dict keyed by epoch (a TreeMap stand-in), with linear scans."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}

    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(epoch, self.epochs[epoch]) for epoch in sorted(self.epochs)]

    def assign(self, epoch: int, start: int) -> None:
        current = self.entries()
        latest = current[-1] if current else None
        if latest is not None and epoch == latest.epoch and start >= latest.start_offset:
            return
        for entry in reversed(current):
            if entry.epoch >= epoch or entry.start_offset >= start:
                del self.epochs[entry.epoch]
            else:
                break
        self.epochs[epoch] = start

    def truncate_from_end(self, end_offset: int) -> None:
        current = self.entries()
        if end_offset < 0 or not current or current[-1].start_offset < end_offset:
            return
        for entry in reversed(current):
            if entry.start_offset < end_offset:
                break
            del self.epochs[entry.epoch]

    def truncate_from_start(self, start_offset: int) -> None:
        removed = [e for e in self.entries() if e.start_offset <= start_offset]
        for entry in removed:
            del self.epochs[entry.epoch]
        if removed:
            self.epochs[removed[-1].epoch] = start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        # Kafka's epochForOffset, as written there.
        previous = None
        for entry in self.entries():
            if entry.start_offset == offset:
                return entry.epoch
            if entry.start_offset > offset:
                return previous
            previous = entry.epoch
        return previous

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """The end of an epoch is where the next known epoch starts."""
        current = self.entries()
        if requested == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if current and current[-1].epoch == requested:
            return requested, log_end_offset
        later = [e for e in current if e.epoch > requested]
        if not later:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        earlier = [e for e in current if e.epoch <= requested]
        answer_epoch = earlier[-1].epoch if earlier else requested
        return answer_epoch, later[0].start_offset


def apply(target: LeaderEpochFileCache | ModelCache, operation: tuple[object, ...]) -> None:
    name, *args = operation
    getattr(target, str(name))(*args)


def assert_strictly_increasing(entries: list[EpochEntry]) -> None:
    for before, after in itertools.pairwise(entries):
        assert before.epoch < after.epoch, entries
        assert before.start_offset < after.start_offset, entries


@SETTINGS
@given(
    ops=operations,
    probes=st.lists(st.tuples(st.integers(-1, 14), st.integers(0, 140)), min_size=1, max_size=10),
)
def test_cache_follows_the_model_and_survives_reload(
    ops: list[tuple[object, ...]], probes: list[tuple[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "leader-epoch-checkpoint"
        cache = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
        model = ModelCache()
        for operation in ops:
            apply(cache, operation)
            apply(model, operation)
            got = cache.epoch_entries()
            assert got == model.entries(), operation
            assert_strictly_increasing(got)
            if path.exists():
                assert LeaderEpochCheckpointFile(path).read() == got

        reloaded = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
        assert reloaded.epoch_entries() == cache.epoch_entries()

        log_end_offset = 1 + max((e.start_offset for e in cache.epoch_entries()), default=0)
        for epoch, offset in probes:
            assert cache.end_offset_for(epoch, log_end_offset) == model.end_offset_for(
                epoch, log_end_offset
            )
            assert cache.epoch_for_offset(offset) == model.epoch_for_offset(offset)
            assert cache.snapshot_up_to(offset) == [
                e for e in model.entries() if e.start_offset < offset
            ]


@SETTINGS
@given(raw=st.lists(st.tuples(epochs, offsets), max_size=20))
def test_any_valid_checkpoint_loads_into_a_monotonic_cache(raw: list[tuple[int, int]]) -> None:
    """Loading goes through the assign rules, so even a non-monotonic file is repaired."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "leader-epoch-checkpoint"
        lines = "".join(f"{epoch} {start}\n" for epoch, start in raw)
        path.write_text(f"0\n{len(raw)}\n{lines}")
        cache = LeaderEpochFileCache(TP, LeaderEpochCheckpointFile(path))
        model = ModelCache()
        for epoch, start in raw:
            model.assign(epoch, start)
        assert cache.epoch_entries() == model.entries()
        assert_strictly_increasing(cache.epoch_entries())
