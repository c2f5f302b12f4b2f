"""``jobs.reconcile``' pure parts: options, and the executor work of a plan."""

from __future__ import annotations

import pytest

from jobs.common import parse_job_args
from jobs.planning.reconcile_plan import plan_reconcile
from jobs.reconcile import COPY_DEADLINE_S_DEFAULT, ReconcileOptions, build_parser, items_of, main
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo, RemoteSegmentRef

TIP = TopicIdPartition(Uuid(5, 6), TopicPartition("t", 0))


def options(*argv: str) -> ReconcileOptions:
    return ReconcileOptions.of(parse_job_args(build_parser(), list(argv), job="reconcile"))


def test_defaults_keep_the_copy_deadline_above_the_copy_timeout() -> None:
    parsed = options()
    assert parsed.copy_deadline_ms == int(COPY_DEADLINE_S_DEFAULT * 1000)
    assert parsed.orphan_grace_ms == parsed.copy_deadline_ms
    assert parsed.delete_retry_grace_ms == 60_000
    given = options("--copy-deadline-s", "2", "--orphan-grace-s", "0.5")
    assert (given.copy_deadline_ms, given.orphan_grace_ms) == (2000, 500)


@pytest.mark.parametrize(
    "argv",
    [["--copy-deadline-s", "0"], ["--orphan-grace-s", "-1"], ["--delete-retry-grace-s", "1e9"]],
)
def test_bad_bounds_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_each_action_becomes_an_item_that_only_acts_in_the_planned_state() -> None:
    def segment(state: RemoteLogSegmentState) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid.random()),
            start_offset=0,
            end_offset=9,
            max_timestamp_ms=0,
            broker_id=0,
            event_timestamp_ms=0,
            segment_size_in_bytes=10,
            segment_leader_epochs={0: 0},
            state=state,
        )

    stale = segment(RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    stuck = segment(RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    orphan = RemoteSegmentRef(
        topic="t", topic_id=TIP.topic_id, partition=0, segment_id=Uuid.random(), start_offset=0
    )
    key = segment_key("p", orphan, RemoteObjectSuffix.LOG)
    plan = plan_reconcile(
        {TIP: [stale, stuck]},
        [RemoteObjectInfo(key=key, size_bytes=1, last_modified_ms=0)],
        now_ms=10_000,
        copy_deadline_ms=1,
        key_prefix="p",
        delete_retry_grace_ms=0,
    )
    rollback, retry, orphans = items_of(plan, "p")
    assert (
        rollback.metadata_bytes is not None and serde.deserialize(rollback.metadata_bytes) == stale
    )
    assert rollback.allowed_states == (RemoteLogSegmentState.COPY_SEGMENT_STARTED,)
    assert retry.allowed_states == (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,)
    assert (orphans.metadata_bytes, orphans.keys, orphans.key_prefix) == (None, (key,), "p")
