"""Random copy / expire / unclean-election / local-retention sequences on a real log: the
remote segments of the current leader-epoch lineage stay contiguous, and there is no hole
between the remote tier and the local log."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.clock import ManualClock
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import (
    candidate_segments,
    copy_segment,
    delete_expired_segments,
    expired_segments,
    highest_remote_offset,
)
from storage_core.tiered.operations.expiry import local_only_size_bytes
from storage_core.tiered.operations.lineage import (
    LineageCheck,
    check_remote_segment_lineage,
    filtered_leader_epoch_map,
)
from tests.conftest import BASE_TIMESTAMP_MS
from tests.tiering_support import (
    TOPIC_ID_PARTITION,
    append,
    fence_at,
    open_partition_log,
    tiered_config,
    view_of,
)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 9), st.booleans()),
        st.tuples(st.just("copy"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("expire"), st.integers(-1, 4000), st.integers(-1, 30)),
        st.tuples(st.just("unclean"), st.integers(1, 6), st.booleans()),
        st.tuples(st.just("local_retention"), st.integers(0, 3), st.booleans()),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(operations)
def test_remote_lineage_stays_contiguous(ops: list[tuple[str, int, object]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), ops)


def run(tmp: Path, ops: list[tuple[str, int, object]]) -> None:
    clock = ManualClock(BASE_TIMESTAMP_MS)
    config = tiered_config(local_retention_bytes=0, retention_bytes=-1)
    log = open_partition_log(tmp / "logs", clock, config)
    rsm = LocalTieredStorage(tmp / "remote", fsync=False)
    rlmm = InMemoryRemoteLogMetadataManager()
    epoch = 0
    try:
        for op, amount, flag in ops:
            if op == "append":
                if flag:
                    epoch += 1
                append(log, amount, epoch=epoch)
                log.update_high_watermark(log.log_end_offset)
            elif op == "copy":
                view = view_of(log)
                for segment in candidate_segments(view, rlmm, config=config)[: amount + 1]:
                    copy_segment(
                        view,
                        segment,
                        rsm=rsm,
                        rlmm=rlmm,
                        fence=fence_at(epoch),
                        broker_id=0,
                        clock=clock,
                    )
            elif op == "expire":
                clock.sleep(5)
                view = view_of(log)
                remote = list(rlmm.list_remote_log_segments(TOPIC_ID_PARTITION))
                highest = highest_remote_offset(view, rlmm).offset
                plan = expired_segments(
                    remote,
                    leader_epochs=view.epoch_entries,
                    log_start_offset=view.log_start_offset,
                    log_end_offset=view.log_end_offset,
                    local_only_size_bytes=local_only_size_bytes(view.segments, highest),
                    retention_ms=flag if isinstance(flag, int) else -1,
                    retention_bytes=amount,
                    now_ms=clock.milliseconds(),
                )
                delete_expired_segments(
                    plan, rsm=rsm, rlmm=rlmm, fence=fence_at(epoch), broker_id=0, clock=clock
                )
                # The broker moves the log start offset past deleted segments.
                if plan.log_start_offset is not None:
                    log.maybe_increment_log_start_offset(
                        min(plan.log_start_offset, log.high_watermark), "remote retention"
                    )
            elif op == "unclean":
                # A replica that lacked the last records becomes leader in a new epoch.
                target = max(log.log_end_offset - amount, log.local_log_start_offset)
                log.truncate_to(target)
                epoch += 1
                log.update_high_watermark(log.log_end_offset)
            elif op == "local_retention":
                view = view_of(log)
                copied = highest_remote_offset(view, rlmm).offset
                log.set_segment_deletion_guard(
                    lambda s, copied=copied: (
                        s.next_base_offset is not None and s.next_base_offset - 1 <= copied
                    )
                )
                log.delete_old_segments()
            check_invariants(log, rlmm)
    finally:
        log.close()


def check_invariants(log, rlmm) -> None:  # type: ignore[no-untyped-def]
    lineage = filtered_leader_epoch_map(
        {e.epoch: e.start_offset for e in log.leader_epoch_cache.epoch_entries()}
    )
    on_lineage = [
        m
        for m in rlmm.list_remote_log_segments(TOPIC_ID_PARTITION)
        if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        and check_remote_segment_lineage(
            m.segment_leader_epochs,
            m.end_offset,
            leader_epochs=lineage,
            log_end_offset=log.log_end_offset,
        )
        is LineageCheck.ON_LINEAGE
        and m.end_offset >= log.log_start_offset
    ]
    on_lineage.sort(key=lambda m: m.start_offset)
    for previous, current in itertools.pairwise(on_lineage):
        assert current.start_offset == previous.end_offset + 1, (previous, current)
    # No hole: offsets between the log start offset and the local log start are remote.
    if log.local_log_start_offset > log.log_start_offset:
        assert on_lineage, "local segments were deleted without a remote copy"
        assert on_lineage[0].start_offset <= log.log_start_offset
        assert on_lineage[-1].end_offset + 1 >= log.local_log_start_offset
