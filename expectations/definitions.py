"""The data-quality expectations of the remote tier, as named Great Expectations classes.

Each class subclasses a built-in expectation and fixes its arguments as defaults, so a
suite reads as a list of rules and a failure names the rule (``expect_no_gap_before_...``).
They check the tables of ``jobs.tables.schemas``: most check a column that the pure
builders derive (a violation flag expected false, a problem text expected null); the offset
orders of KIP-405 compare two columns directly. ``DESCRIPTIONS`` gives each rule's sentence
for reports (GE keeps a subclass's default description out of its validation results).

remote_segments::

    expect_segment_start_offset_at_most_end_offset       start_offset <= end_offset
    expect_no_gap_before_finished_segment                 lineage contiguous: no gap
    expect_no_overlap_with_previous_finished_segment      lineage contiguous: no overlap
    expect_segment_epochs_strictly_increasing             segment_leader_epochs well formed
    expect_segment_epochs_agree_with_leader_epoch_chain   FINISHED segments on the lineage
    expect_only_valid_segment_state_transitions           RemoteLogSegmentState machine
    expect_no_segment_stuck_in_started_state              STARTED states end in time
    expect_finished_segment_objects_complete              objects present, .log size
                                                          (chunked: manifest, stored size)
    expect_no_objects_without_live_metadata               no orphaned objects
    expect_no_segment_older_than_twice_retention_ms       retention.ms + one period
    expect_remote_segment_epochs_on_leader_lineage        the current leader's lineage
    expect_copied_segment_end_below_last_stable_offset    end_offset < Ly at copy

partition_offsets::

    expect_log_end_offset_at_least_last_stable_offset     Lz >= Ly
    expect_last_stable_offset_at_least_local_log_start    Ly >= Lx
    expect_last_stable_offset_at_least_remote_log_end     Ly >= Ry
    expect_remote_log_end_at_least_remote_log_start       Ry >= Rx
    expect_no_hole_between_remote_and_local_log           Ry + 1 >= Lx (above log start)
    expect_leader_epoch_chain_strictly_increasing         the chain itself
    expect_remote_bytes_within_retention_bytes            retention.bytes + one segment
    expect_only_valid_partition_delete_transitions        RemotePartitionDeleteState machine
    expect_no_partition_deletion_stuck                    MARKED/STARTED end in time

replicas::

    expect_follower_epochs_agree_with_leader              leader-epoch entries below its LEO
    expect_isr_log_end_at_least_high_watermark            every ISR member holds the HW
    expect_no_partition_offline                           every partition has a leader

replica_warnings (severity WARNING: reported, never fails the job)::

    expect_no_under_replicated_partition                  every replica in the ISR
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import great_expectations as gx
from great_expectations.expectations.core.expect_column_pair_values_a_to_be_greater_than_b import (
    ExpectColumnPairValuesAToBeGreaterThanB,
)
from great_expectations.expectations.core.expect_column_values_to_be_between import (
    ExpectColumnValuesToBeBetween,
)
from great_expectations.expectations.core.expect_column_values_to_be_in_set import (
    ExpectColumnValuesToBeInSet,
)
from great_expectations.expectations.core.expect_column_values_to_be_null import (
    ExpectColumnValuesToBeNull,
)
from great_expectations.expectations.metadata_types import FailureSeverity

from expectations.rendering import NamedExpectation

STARTED_STATE_MAX_MS_DEFAULT = 30 * 60 * 1000  # a copy or delete left STARTED for 30 min
DELETE_PENDING_MAX_MS_DEFAULT = 24 * 60 * 60 * 1000  # a marked partition waits for a sweep

REMOTE_SEGMENTS_SUITE = "remote_segments"
PARTITION_OFFSETS_SUITE = "partition_offsets"
REPLICAS_SUITE = "replicas"
REPLICA_WARNINGS_SUITE = "replica_warnings"

# suite -> the table it checks
SUITE_TABLES: dict[str, str] = {
    REMOTE_SEGMENTS_SUITE: "remote_segments",
    PARTITION_OFFSETS_SUITE: "partition_offsets",
    REPLICAS_SUITE: "replicas",
    REPLICA_WARNINGS_SUITE: "replicas",
}
# suites whose failures are reported but do not fail the job
WARNING_SUITES = frozenset({REPLICA_WARNINGS_SUITE})

DESCRIPTIONS: dict[str, str] = {}


def _described(cls: type[Any]) -> type[Any]:
    """Register ``cls``'s description under its expectation type (snake case of its name)."""
    DESCRIPTIONS[cls.expectation_type] = cls.rule
    return cls


_MISSING: Literal["either_value_is_missing"] = "either_value_is_missing"


class _RemoteSegmentRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("remote segment", "remote segments")


class _PartitionRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("partition", "partitions")


class _ReplicaRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("replica", "replicas")


# ---------------------------------------------------------------------------- remote_segments


@_described
class ExpectSegmentStartOffsetAtMostEndOffset(
    _RemoteSegmentRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = "a remote segment's start_offset <= end_offset (both inclusive)"
    column_A: str = "end_offset"  # noqa: N815 - GE\'s field name
    column_B: str = "start_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = True
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectNoGapBeforeFinishedSegment(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "COPY_SEGMENT_FINISHED segments of a partition's leader-epoch lineage are contiguous:"
        " none starts after previous_end_offset + 1"
    )
    column: str = "gap_before"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectNoOverlapWithPreviousFinishedSegment(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "COPY_SEGMENT_FINISHED segments of a partition's leader-epoch lineage do not overlap:"
        " none starts at or below previous_end_offset"
    )
    column: str = "overlaps_previous"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectSegmentEpochsStrictlyIncreasing(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "a segment's leader-epoch entries are strictly increasing in epoch, non-decreasing in"
        " start offset and inside [start_offset, end_offset]"
    )
    column: str = "epochs_not_increasing"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectSegmentEpochsAgreeWithLeaderEpochChain(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "a COPY_SEGMENT_FINISHED segment's leader-epoch entries agree with the partition's"
        " leader-epoch chain (not OFF_LINEAGE; an unclean election leaves such segments until"
        " expire_remote deletes them)"
    )
    column: str = "epochs_conflict_with_chain"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectOnlyValidSegmentStateTransitions(_RemoteSegmentRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "every segment event follows COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED ->"
        " DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED (or STARTED -> DELETE_SEGMENT_"
        "STARTED)"
    )
    column: str = "invalid_transition"


@_described
class ExpectNoSegmentStuckInStartedState(_RemoteSegmentRule, ExpectColumnValuesToBeBetween):
    rule: ClassVar[str] = (
        "no segment stays in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED longer than"
        " max_value ms"
    )
    unchecked: ClassVar[str] = "not in a STARTED state"
    column: str = "started_age_ms"
    min_value: Any = 0
    max_value: Any = STARTED_STATE_MAX_MS_DEFAULT


@_described
class ExpectFinishedSegmentObjectsComplete(_RemoteSegmentRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "every COPY_SEGMENT_FINISHED segment has its .log, .index, .timeindex and"
        " .leader-epoch-checkpoint objects (and .txnindex when it has one), the .log of the"
        " recorded segment_size_bytes; a chunked copy its .rsm-manifest, its objects adding"
        " up to the stored size its copy recorded"
    )
    column: str = "objects_problem"


@_described
class ExpectNoObjectsWithoutLiveMetadata(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "no object in the store belongs to a segment without metadata or in DELETE_SEGMENT_FINISHED"
    )
    column: str = "objects_without_live_metadata"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectNoSegmentOlderThanTwiceRetentionMs(_RemoteSegmentRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "no COPY_SEGMENT_FINISHED segment is older than retention.ms plus one retention period"
    )
    column: str = "older_than_retention"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectRemoteSegmentEpochsOnLeaderLineage(_RemoteSegmentRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "the leader epochs of every remote segment not yet DELETE_SEGMENT_FINISHED lie on the"
        " current leader replica's leader-epoch lineage (a segment off it, left by an unclean"
        " election, is reported until expire_remote has deleted it)"
    )
    column: str = "off_leader_lineage"


@_described
class ExpectCopiedSegmentEndBelowLastStableOffset(
    _RemoteSegmentRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = (
        "end < Ly at copy: a copied segment's end_offset (inclusive) < last_stable_offset_at_copy,"
        " the LSO (exclusive) its copy was planned with (copies stop below the LSO: no"
        " undecided transaction is tiered)"
    )
    unchecked: ClassVar[str] = "not copied by the run whose copied-segments record was given"
    column_A: str = "last_stable_offset_at_copy"  # noqa: N815 - GE\'s field name
    column_B: str = "end_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = False
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


# ---------------------------------------------------------------------------- partition_offsets


@_described
class ExpectLogEndOffsetAtLeastLastStableOffset(
    _PartitionRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = "Lz >= Ly: log_end_offset >= last_stable_offset"
    column_A: str = "log_end_offset"  # noqa: N815 - GE\'s field name
    column_B: str = "last_stable_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = True
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectLastStableOffsetAtLeastLocalLogStart(
    _PartitionRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = "Ly >= Lx: last_stable_offset >= local_log_start_offset"
    column_A: str = "last_stable_offset"  # noqa: N815 - GE\'s field name
    column_B: str = "local_log_start_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = True
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectLastStableOffsetAtLeastRemoteLogEnd(
    _PartitionRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = (
        "Ly >= Ry: last_stable_offset >= remote_log_end_offset (only offsets below the LSO"
        " are tiered)"
    )
    column_A: str = "last_stable_offset"  # noqa: N815 - GE\'s field name
    column_B: str = "remote_log_end_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = True
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectRemoteLogEndAtLeastRemoteLogStart(
    _PartitionRule, ExpectColumnPairValuesAToBeGreaterThanB
):
    rule: ClassVar[str] = "Ry >= Rx: remote_log_end_offset >= remote_log_start_offset"
    column_A: str = "remote_log_end_offset"  # noqa: N815 - GE\'s field name
    column_B: str = "remote_log_start_offset"  # noqa: N815 - GE\'s field name
    or_equal: bool = True
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectNoHoleBetweenRemoteAndLocalLog(_PartitionRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "no hole: once anything is tiered, the remote log ends at or after the local log start"
        " - 1 (Ry + 1 >= Lx), for the offsets above the log start offset"
    )
    column: str = "hole_before_local_log"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectLeaderEpochChainStrictlyIncreasing(_PartitionRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "the partition's leader-epoch chain is strictly increasing in epoch and start offset"
    )
    column: str = "chain_not_increasing"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectRemoteBytesWithinRetentionBytes(_PartitionRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "remote_bytes of COPY_SEGMENT_FINISHED segments <= retention.bytes plus one segment"
    )
    column: str = "remote_bytes_over_retention"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectOnlyValidPartitionDeleteTransitions(_PartitionRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "every partition deletion event follows DELETE_PARTITION_MARKED ->"
        " DELETE_PARTITION_STARTED -> DELETE_PARTITION_FINISHED"
    )
    column: str = "invalid_delete_transition"


@_described
class ExpectNoPartitionDeletionStuck(_PartitionRule, ExpectColumnValuesToBeBetween):
    rule: ClassVar[str] = (
        "no partition stays in DELETE_PARTITION_MARKED or DELETE_PARTITION_STARTED longer than"
        " max_value ms"
    )
    unchecked: ClassVar[str] = "not pending deletion"
    column: str = "delete_started_age_ms"
    min_value: Any = 0
    max_value: Any = DELETE_PENDING_MAX_MS_DEFAULT


# ---------------------------------------------------------------------------- replicas


@_described
class ExpectFollowerEpochsAgreeWithLeader(_ReplicaRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "a follower's leader-epoch-checkpoint entries agree with the leader's over the offsets"
        " both hold locally, up to the follower's log end offset"
    )
    column: str = "epochs_diverge_from_leader"


@_described
class ExpectIsrLogEndAtLeastHighWatermark(_ReplicaRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "every in-sync replica's log_end_offset >= the partition's high watermark (the leader's)"
    )
    column: str = "isr_log_end_below_high_watermark"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectNoPartitionOffline(_ReplicaRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = "every partition has a leader (none is offline)"
    column: str = "partition_offline"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectNoUnderReplicatedPartition(_ReplicaRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "every replica of a partition with a leader is in its ISR (a warning: a broker down"
        " or behind)"
    )
    column: str = "under_replicated"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


# ---------------------------------------------------------------------------- suites


def remote_segments_suite(
    *, started_state_max_ms: int = STARTED_STATE_MAX_MS_DEFAULT
) -> gx.ExpectationSuite:
    """The ``remote_segments`` suite; ``started_state_max_ms`` bounds a STARTED state."""
    return gx.ExpectationSuite(
        name=REMOTE_SEGMENTS_SUITE,
        expectations=[
            ExpectSegmentStartOffsetAtMostEndOffset(),
            ExpectNoGapBeforeFinishedSegment(),
            ExpectNoOverlapWithPreviousFinishedSegment(),
            ExpectSegmentEpochsStrictlyIncreasing(),
            ExpectSegmentEpochsAgreeWithLeaderEpochChain(),
            ExpectOnlyValidSegmentStateTransitions(),
            ExpectNoSegmentStuckInStartedState(max_value=started_state_max_ms),
            ExpectFinishedSegmentObjectsComplete(),
            ExpectNoObjectsWithoutLiveMetadata(),
            ExpectNoSegmentOlderThanTwiceRetentionMs(),
            ExpectRemoteSegmentEpochsOnLeaderLineage(),
            ExpectCopiedSegmentEndBelowLastStableOffset(),
        ],
    )


def partition_offsets_suite(
    *, delete_pending_max_ms: int = DELETE_PENDING_MAX_MS_DEFAULT
) -> gx.ExpectationSuite:
    """The ``partition_offsets`` suite; ``delete_pending_max_ms`` bounds a pending deletion."""
    return gx.ExpectationSuite(
        name=PARTITION_OFFSETS_SUITE,
        expectations=[
            ExpectLogEndOffsetAtLeastLastStableOffset(),
            ExpectLastStableOffsetAtLeastLocalLogStart(),
            ExpectLastStableOffsetAtLeastRemoteLogEnd(),
            ExpectRemoteLogEndAtLeastRemoteLogStart(),
            ExpectNoHoleBetweenRemoteAndLocalLog(),
            ExpectLeaderEpochChainStrictlyIncreasing(),
            ExpectRemoteBytesWithinRetentionBytes(),
            ExpectOnlyValidPartitionDeleteTransitions(),
            ExpectNoPartitionDeletionStuck(max_value=delete_pending_max_ms),
        ],
    )


def replicas_suite() -> gx.ExpectationSuite:
    """The ``replicas`` suite: the replicas of a partition agree with its leader."""
    return gx.ExpectationSuite(
        name=REPLICAS_SUITE,
        expectations=[
            ExpectFollowerEpochsAgreeWithLeader(),
            ExpectIsrLogEndAtLeastHighWatermark(),
            ExpectNoPartitionOffline(),
        ],
    )


def replica_warnings_suite() -> gx.ExpectationSuite:
    """The ``replica_warnings`` suite over the ``replicas`` table, severity WARNING."""
    return gx.ExpectationSuite(
        name=REPLICA_WARNINGS_SUITE,
        expectations=[ExpectNoUnderReplicatedPartition(severity=FailureSeverity.WARNING)],
    )


QUALITY_EXPECTATIONS: frozenset[str] = frozenset(DESCRIPTIONS)
"""The quality suites' named expectations (``DESCRIPTIONS`` also gains the restore drill's
once ``expectations.restore_drill`` is imported)."""
