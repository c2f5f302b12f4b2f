"""The listing-only check of chunked copies (``jobs.planning.chunked_objects``) as the
reconcile plan and the quality table's ``objects_problem`` apply it."""

from __future__ import annotations

import dataclasses

from jobs.planning.reconcile_plan import ReconcileActionKind, plan_reconcile
from jobs.tables.remote_segments import objects_problem
from storage_core.tiered.chunked.custom_metadata import encode_custom_metadata
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteObjectInfo, RemoteSegmentRef
from tests.unit.jobs.test_reconcile_plan import DEADLINE_MS, NOW_MS, PREFIX, TIP, segment

SIZES = {
    RemoteObjectSuffix.LOG: 700,
    RemoteObjectSuffix.OFFSET_INDEX: 40,
    RemoteObjectSuffix.TIME_INDEX: 60,
    RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT: 20,
    RemoteObjectSuffix.SEGMENT_MANIFEST: 300,
}
STORED = sum(SIZES.values())


def chunked(age_ms: int = 2 * DEADLINE_MS) -> RemoteLogSegmentMetadata:
    plain = segment(0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, age_ms=age_ms)
    custom = encode_custom_metadata(remote_size=STORED, format_version=1)
    return dataclasses.replace(plain, custom_metadata=custom)


def listing(metadata: RemoteLogSegmentMetadata, **changed: int | None) -> list[RemoteObjectInfo]:
    ref = RemoteSegmentRef.of(metadata)
    out = []
    for suffix, listed_size in SIZES.items():
        size = changed.get(suffix.name, listed_size)
        if size is not None:
            out.append(
                RemoteObjectInfo(
                    key=segment_key(PREFIX, ref, suffix),
                    size_bytes=size,
                    last_modified_ms=NOW_MS - 2 * DEADLINE_MS,
                )
            )
    return out


def damaged(metadata: RemoteLogSegmentMetadata, objects: list[RemoteObjectInfo]) -> list[str]:
    plan = plan_reconcile(
        {TIP: [metadata]},
        objects,
        now_ms=NOW_MS,
        copy_deadline_ms=DEADLINE_MS,
        key_prefix=PREFIX,
    )
    assert all(a.kind is ReconcileActionKind.DAMAGED_SEGMENT for a in plan.damaged)
    assert not plan.actions and not plan.lost
    return [a.reason for a in plan.damaged]


def test_a_chunked_copy_whose_objects_add_up_is_not_reported() -> None:
    metadata = chunked()
    assert damaged(metadata, listing(metadata)) == []


def test_an_object_cut_short_or_grown_is_a_damaged_segment() -> None:
    metadata = chunked()
    (reason,) = damaged(metadata, listing(metadata, LOG=699))
    assert f"objects hold {STORED - 1} bytes, its copy stored {STORED}" in reason
    (reason,) = damaged(metadata, listing(metadata, OFFSET_INDEX=41))
    assert f"objects hold {STORED + 1} bytes" in reason


def test_a_missing_manifest_is_a_damaged_segment() -> None:
    metadata = chunked()
    (reason,) = damaged(metadata, listing(metadata, SEGMENT_MANIFEST=None))
    assert ".rsm-manifest object is missing" in reason


def test_a_copy_finished_within_the_grace_and_a_plain_copy_are_not_checked() -> None:
    young = chunked(age_ms=DEADLINE_MS // 2)
    assert damaged(young, listing(young, LOG=1)) == []
    plain = dataclasses.replace(chunked(), custom_metadata=None)
    assert damaged(plain, listing(plain, LOG=1, SEGMENT_MANIFEST=None)) == []


def test_the_quality_table_names_the_same_problem() -> None:
    row = {"segment_size_bytes": 900, "chunked_stored_size_bytes": STORED}
    sizes = {suffix.value: size for suffix, size in SIZES.items()}
    assert objects_problem(row, [], 700, chunked=True, sizes=sizes) is None
    cut = {**sizes, "log": 600}
    problem = objects_problem(row, [], 600, chunked=True, sizes=cut)
    assert problem is not None and f"its copy stored {STORED}" in problem
    without_manifest = {k: v for k, v in sizes.items() if k != "rsm-manifest"}
    problem = objects_problem(row, [], 700, chunked=False, sizes=without_manifest)
    assert problem == (
        "copied chunked and its .rsm-manifest object is missing: its bytes are not served"
    )
