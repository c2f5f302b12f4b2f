"""The restore drill's expectations and suites, and the file-mode context that runs them.

The tables are ``jobs.planning.restore_drill``'s (built by ``jobs.restore_drill``). As in
``definitions``, each rule is a named subclass of a built-in expectation with its arguments as
defaults, so a failure names the rule; their sentences join ``DESCRIPTIONS``.

drill_partitions::

    expect_sampled_partition_restored                  the restore ran through (restore_problem)
    expect_drilled_partition_read_back                 both sides fetched (read_problem)
    expect_restored_range_covers_source_remote_log     log start <= source's, next > tiered

drill_batches::

    expect_every_source_batch_restored                 no source batch missing in the restored
    expect_no_restored_batch_absent_from_source        no batch the source does not have
    expect_restored_last_offset_equals_source          last offset
    expect_restored_leader_epoch_equals_source         partition leader epoch
    expect_restored_crc_equals_source                  the CRC field
    expect_restored_batch_matches_its_crc              the restored bytes match their CRC
    expect_restored_offsets_contiguous                 log start .. next offset, no gap

drill_group_offsets::

    expect_restored_group_offset_within_restored_range log start <= offset <= next offset

``DrillContext`` is a ``runner.SuiteContext`` (as the quality job's) for these suites on the pandas
engine (a drill's tables are a few hundred rows: a Spark session would cost more than the
checks): a file-mode context under the report dir, one dataframe asset per table, a first pass
(BASIC) and, when it fails, a detailed pass (COMPLETE, with the rows' ids), the result named by
run and by the drilled topics, and the Data Docs rebuilt under
``<root>/gx/uncommitted/data_docs/local_site/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import great_expectations as gx
from great_expectations.expectations.core.expect_column_pair_values_to_be_equal import (
    ExpectColumnPairValuesToBeEqual,
)
from great_expectations.expectations.core.expect_column_values_to_be_in_set import (
    ExpectColumnValuesToBeInSet,
)
from great_expectations.expectations.core.expect_column_values_to_be_null import (
    ExpectColumnValuesToBeNull,
)

from expectations.definitions import _described
from expectations.rendering import NamedExpectation
from expectations.runner import SuiteContext, SuiteOutcome
from jobs.planning.restore_drill import TABLE_COLUMNS, TABLE_ROW_IDS

DRILL_PARTITIONS_SUITE = "drill_partitions"
DRILL_BATCHES_SUITE = "drill_batches"
DRILL_GROUP_OFFSETS_SUITE = "drill_group_offsets"
DRILL_SUITE_TABLES: dict[str, str] = {
    DRILL_PARTITIONS_SUITE: "drill_partitions",
    DRILL_BATCHES_SUITE: "drill_batches",
    DRILL_GROUP_OFFSETS_SUITE: "drill_group_offsets",
}
DATA_SOURCE_NAME = "restore_drill_tables"
BATCH_DEFINITION_NAME = "whole_table"

_MISSING: Literal["either_value_is_missing"] = "either_value_is_missing"


class _DrilledPartitionRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("drilled partition", "drilled partitions")


class _BatchRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("record batch", "record batches")


class _GroupOffsetRule(NamedExpectation):
    rows: ClassVar[tuple[str, str]] = ("group offset", "group offsets")


# ---------------------------------------------------------------------------- drill_partitions


@_described
class ExpectSampledPartitionRestored(_DrilledPartitionRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "restore_topic restored the drilled partition into its scratch topic (with"
        " --verify-checksums: every object of the bucket read and its CRC32C checked) and"
        " the scratch partition served its restored offsets"
    )
    column: str = "restore_problem"


@_described
class ExpectDrilledPartitionReadBack(_DrilledPartitionRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "the restored partition and the same offsets of the source were read back with raw"
        " Fetches (a broker that cannot serve a remote segment answers an error)"
    )
    column: str = "read_problem"


@_described
class ExpectRestoredRangeCoversSourceRemoteLog(_DrilledPartitionRule, ExpectColumnValuesToBeNull):
    rule: ClassVar[str] = (
        "the restored partition starts at or below the source's log start offset and its next"
        " offset is past the source's highest tiered offset, as the drill found them"
    )
    column: str = "range_problem"


# ---------------------------------------------------------------------------- drill_batches


@_described
class ExpectEverySourceBatchRestored(_BatchRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "every record batch of the source in the restored range is in the restored partition"
        " at the same base offset"
    )
    column: str = "missing_in_restored"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectNoRestoredBatchAbsentFromSource(_BatchRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "every restored record batch (at or above the source's log start) is a batch of the"
        " source at the same base offset"
    )
    unchecked: ClassVar[str] = "below the source's log start"
    column: str = "missing_in_source"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectRestoredLastOffsetEqualsSource(_BatchRule, ExpectColumnPairValuesToBeEqual):
    rule: ClassVar[str] = "a restored batch's last offset equals the source batch's"
    unchecked: ClassVar[str] = "on one side only"
    column_A: str = "source_last_offset"  # noqa: N815 - GE's field name
    column_B: str = "restored_last_offset"  # noqa: N815 - GE's field name
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectRestoredLeaderEpochEqualsSource(_BatchRule, ExpectColumnPairValuesToBeEqual):
    rule: ClassVar[str] = "a restored batch's partition leader epoch equals the source batch's"
    unchecked: ClassVar[str] = "on one side only"
    column_A: str = "source_leader_epoch"  # noqa: N815 - GE's field name
    column_B: str = "restored_leader_epoch"  # noqa: N815 - GE's field name
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectRestoredCrcEqualsSource(_BatchRule, ExpectColumnPairValuesToBeEqual):
    rule: ClassVar[str] = "a restored batch's CRC equals the source batch's"
    unchecked: ClassVar[str] = "on one side only"
    column_A: str = "source_crc"  # noqa: N815 - GE's field name
    column_B: str = "restored_crc"  # noqa: N815 - GE's field name
    ignore_row_if: Literal["either_value_is_missing"] = _MISSING


@_described
class ExpectRestoredBatchMatchesItsCrc(_BatchRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "a restored batch's bytes (attributes to the end) match its CRC-32C, as a consumer"
        " checks them"
    )
    unchecked: ClassVar[str] = "not in the restored partition"
    column: str = "restored_crc_invalid"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


@_described
class ExpectRestoredOffsetsContiguous(_BatchRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "the restored batches are contiguous from the restored log start to the next offset:"
        " each starts right after the previous one ends"
    )
    unchecked: ClassVar[str] = "not in the restored partition"
    column: str = "gap_before"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


# ---------------------------------------------------------------------------- group offsets


@_described
class ExpectRestoredGroupOffsetWithinRestoredRange(_GroupOffsetRule, ExpectColumnValuesToBeInSet):
    rule: ClassVar[str] = (
        "each group offset the restore committed under a scratch topic lies in [restored log"
        " start, restored next offset] (both inclusive)"
    )
    column: str = "out_of_range"
    value_set: Any = [False]  # noqa: RUF012 - a pydantic field default, copied per instance


# ---------------------------------------------------------------------------- suites


def drill_suites() -> dict[str, gx.ExpectationSuite]:
    """The drill's three suites, by name."""
    return {
        DRILL_PARTITIONS_SUITE: gx.ExpectationSuite(
            name=DRILL_PARTITIONS_SUITE,
            expectations=[
                ExpectSampledPartitionRestored(),
                ExpectDrilledPartitionReadBack(),
                ExpectRestoredRangeCoversSourceRemoteLog(),
            ],
        ),
        DRILL_BATCHES_SUITE: gx.ExpectationSuite(
            name=DRILL_BATCHES_SUITE,
            expectations=[
                ExpectEverySourceBatchRestored(),
                ExpectNoRestoredBatchAbsentFromSource(),
                ExpectRestoredLastOffsetEqualsSource(),
                ExpectRestoredLeaderEpochEqualsSource(),
                ExpectRestoredCrcEqualsSource(),
                ExpectRestoredBatchMatchesItsCrc(),
                ExpectRestoredOffsetsContiguous(),
            ],
        ),
        DRILL_GROUP_OFFSETS_SUITE: gx.ExpectationSuite(
            name=DRILL_GROUP_OFFSETS_SUITE,
            expectations=[ExpectRestoredGroupOffsetWithinRestoredRange()],
        ),
    }


def drill_frame(table: str, rows: Sequence[Mapping[str, Any]]) -> Any:
    """A pandas DataFrame of ``rows`` with the table's columns, in order (object dtype: the
    nullable flags and offsets stay as they are)."""
    import pandas as pd  # noqa: PLC0415 - GE brings it; only the drill needs it here

    columns = list(TABLE_COLUMNS[table])
    return pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=columns).astype(
        object
    )


class DrillContext(SuiteContext):
    """The drill's suites (``DRILL_SUITE_TABLES``, pandas) in a ``runner.SuiteContext``;
    ``validate`` takes the table's rows.

    Thread-safety: none; one context is used by one thread."""

    def __init__(self, root_dir: Path, *, data_docs: bool = True) -> None:
        super().__init__(
            root_dir,
            suites=drill_suites(),
            suite_tables=DRILL_SUITE_TABLES,
            row_ids=TABLE_ROW_IDS,
            checkpoint_prefix="restore_drill",
            data_docs=data_docs,
        )

    def validate(
        self,
        suite: str,
        dataframe: Any,
        *,
        run_name: str | None = None,
        source: str | None = None,
    ) -> SuiteOutcome:
        """Run ``suite`` on the rows of its table (``dataframe``: a sequence of mappings);
        ``source`` (the drilled topics) is shown with the table as its data asset."""
        if suite not in self.suite_tables:
            raise ValueError(f"unknown suite {suite!r}; known: {sorted(self.suite_tables)}")
        frame = drill_frame(self.suite_tables[suite], dataframe)
        return super().validate(suite, frame, run_name=run_name, source=source)
