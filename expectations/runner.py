"""Run the suites of ``expectations.definitions`` over the quality tables with a file-mode
Great Expectations context, and turn the results into readable failure reasons.

Layout under ``root_dir`` (GE's own)::

    <root_dir>/gx/                                    context, suites, checkpoints (generated)
    <root_dir>/gx/uncommitted/data_docs/local_site/index.html    the Data Docs

One ``QualityContext`` per process (or per test module): building it registers a dataframe
data source (pandas or Spark), one asset + whole-dataframe batch definition per table, one
suite + validation definition per suite (``SUITE_TABLES``: the ``replicas`` table has two,
``replicas`` and the WARNING ``replica_warnings``), each with two checkpoints: a first pass
that counts unexpected rows (GE's BASIC format) and a detailed one that also lists them
(COMPLETE, with the rows' ids). ``validate`` runs the first pass on a DataFrame under a run
name (the DAG run), and the detailed one only when an expectation failed (on Spark, listing
rows costs a few jobs per expectation even when there are none); it names the validated
data (the table and the cluster) in the stored result, then rebuilds the Data Docs so that
both show there.
Failures come back as ``FailedExpectation`` values whose ``reason`` names the expectation,
its rule and the offending rows (identified by the columns of ``ROW_ID_COLUMNS`` plus the
checked column).

Thread-safety: none; one context is used by one thread.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import great_expectations as gx
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import ProgressBarsConfig

from expectations.definitions import (
    DELETE_PENDING_MAX_MS_DEFAULT,
    DESCRIPTIONS,
    PARTITION_OFFSETS_SUITE,
    REMOTE_SEGMENTS_SUITE,
    REPLICA_WARNINGS_SUITE,
    REPLICAS_SUITE,
    STARTED_STATE_MAX_MS_DEFAULT,
    SUITE_TABLES,
    WARNING_SUITES,
    partition_offsets_suite,
    remote_segments_suite,
    replica_warnings_suite,
    replicas_suite,
)
from expectations.offline_docs import make_offline
from jobs.tables.schemas import PARTITION_OFFSETS_ROW_ID, REMOTE_SEGMENTS_ROW_ID, REPLICAS_ROW_ID

_PATH_UNSAFE = re.compile(r"[\\/\s]+")

Engine = Literal["pandas", "spark"]

DATA_SOURCE_NAME = "quality_tables"
BATCH_DEFINITION_NAME = "whole_table"
ROWS_IN_REASON_MAX = 10  # offending rows quoted in a reason
ROWS_KEPT_MAX = 100  # offending rows kept in a FailedExpectation
RUN_NAME_MAX = 200  # characters of a run name (it becomes a directory name of the Data Docs)

# by table
ROW_ID_COLUMNS: Mapping[str, Sequence[str]] = {
    "remote_segments": REMOTE_SEGMENTS_ROW_ID,
    "partition_offsets": PARTITION_OFFSETS_ROW_ID,
    "replicas": REPLICAS_ROW_ID,
}


def data_docs_index(root_dir: Path) -> Path:
    """Where a file context rooted at ``root_dir`` writes its Data Docs index."""
    return Path(root_dir) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedExpectation:
    """One failed expectation: its type, rule, counts, offending rows or the error."""

    expectation: str
    rule: str
    unexpected_count: int | None
    element_count: int | None
    rows: tuple[dict[str, Any], ...]
    error: str | None = None

    @property
    def reason(self) -> str:
        head = f"{self.expectation}: {self.rule}"
        if self.error is not None:
            return f"{head}: raised {self.error}"
        quoted = "; ".join(_row_text(row) for row in self.rows[:ROWS_IN_REASON_MAX])
        more = len(self.rows) - ROWS_IN_REASON_MAX
        if more > 0:
            quoted += f"; and {more} more"
        return f"{head}: {self.unexpected_count} of {self.element_count} rows unexpected: {quoted}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation,
            "rule": self.rule,
            "unexpected_count": self.unexpected_count,
            "element_count": self.element_count,
            "rows": list(self.rows),
            "error": self.error,
            "reason": self.reason,
        }


def _is_missing(value: Any) -> bool:
    return value is None or value in ("None", "nan", "NaN") or value != value  # noqa: PLR0124 - NaN


def _row_text(row: Mapping[str, Any]) -> str:
    """``{k=v, ...}`` without the missing values; whole floats shown as ints (pandas turns
    nullable offset columns into floats)."""
    parts = []
    for key, value in row.items():
        if _is_missing(value):
            continue
        shown = int(value) if isinstance(value, float) and value.is_integer() else value
        parts.append(f"{key}={shown}")
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteOutcome:
    """The result of one suite on one table; a ``warning`` suite's failure does not fail
    the run (``fails_run``)."""

    suite: str
    success: bool
    evaluated: int
    failed: tuple[FailedExpectation, ...] = field(default=())
    warning: bool = False

    @property
    def fails_run(self) -> bool:
        return not self.success and not self.warning

    def failed_expectations(self) -> list[str]:
        return [f.expectation for f in self.failed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "success": self.success,
            "severity": "warning" if self.warning else "critical",
            "evaluated_expectations": self.evaluated,
            "failed_expectations": [f.to_dict() for f in self.failed],
        }


def outcome_from_validation(
    suite: str, validation: Any, row_ids: Sequence[str] = ()
) -> SuiteOutcome:
    """A ``SuiteOutcome`` from GE's ``ExpectationSuiteValidationResult``; each failing row
    names its ``row_ids`` columns first, in that order, as on either engine."""
    failed = []
    for result in validation.results:
        if result.success:
            continue
        expectation = str(result.expectation_config.type)
        info = result.exception_info or {}
        raised = bool(info.get("raised_exception")) if isinstance(info, dict) else False
        details = result.result or {}
        error = str(info.get("exception_message")) if raised else None
        if not raised and "unexpected_count" not in details and "observed_value" not in details:
            error = "no result (the expectation could not run on this table)"
        rows = tuple(
            _ordered_row(row, row_ids) if isinstance(row, dict) else {"row": row}
            for row in (details.get("unexpected_index_list") or [])[:ROWS_KEPT_MAX]
        )
        failed.append(
            FailedExpectation(
                expectation=expectation,
                rule=DESCRIPTIONS.get(expectation, expectation),
                unexpected_count=details.get("unexpected_count"),
                element_count=details.get("element_count"),
                rows=rows,
                error=error,
            )
        )
    return SuiteOutcome(
        suite=suite,
        success=bool(validation.success),
        evaluated=len(validation.results),
        failed=tuple(failed),
        warning=suite in WARNING_SUITES,
    )


def _ordered_row(row: Mapping[Any, Any], row_ids: Sequence[str]) -> dict[str, Any]:
    named = {str(k): _plain(v) for k, v in row.items()}
    first = {k: named.pop(k) for k in row_ids if k in named}
    return {**first, **named}


def _plain(value: Any) -> Any:
    """A row's value as the table holds it: pandas reports a null as NaN and numbers as numpy
    scalars."""
    if isinstance(value, float) and math.isnan(value):
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


class SuiteContext:
    """A file-mode GE context under ``root_dir`` with ``suites`` ready to run: one data asset
    per table (``suite_tables``), one validation definition and two checkpoints per suite (a
    cheap first pass, and a complete one naming the rows by ``row_ids`` when it failed).
    The quality job's suites (``QualityContext``) and the restore drill's use it."""

    def __init__(
        self,
        root_dir: Path,
        *,
        suites: Mapping[str, gx.ExpectationSuite],
        suite_tables: Mapping[str, str],
        row_ids: Mapping[str, Sequence[str]],
        checkpoint_prefix: str,
        engine: Engine = "pandas",
        data_docs: bool = True,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.data_docs = data_docs
        self.suite_tables = dict(suite_tables)
        self.row_ids = {table: tuple(ids) for table, ids in row_ids.items()}
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.context = gx.get_context(mode="file", project_root_dir=str(self.root_dir))
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        self.context.variables.save()
        source: Any
        if engine == "pandas":
            source = self.context.data_sources.add_or_update_pandas(DATA_SOURCE_NAME)
        else:
            source = self.context.data_sources.add_or_update_spark(DATA_SOURCE_NAME)
        batches = {}
        for table in sorted(set(suite_tables.values())):
            asset = source.add_dataframe_asset(name=table)
            batches[table] = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION_NAME)
        self.checkpoints: dict[str, Any] = {}
        self.first_pass_checkpoints: dict[str, Any] = {}
        for name, suite in suites.items():
            table = suite_tables[name]
            saved = self.context.suites.add_or_update(suite)
            validation = self.context.validation_definitions.add_or_update(
                gx.ValidationDefinition(name=name, data=batches[table], suite=saved)
            )
            self.checkpoints[name] = self.context.checkpoints.add_or_update(
                gx.Checkpoint(
                    name=f"{checkpoint_prefix}_{name}",
                    validation_definitions=[validation],
                    # Data Docs are built by ``validate`` once the result names its data
                    actions=[],
                    result_format={
                        "result_format": "COMPLETE",
                        "unexpected_index_column_names": list(row_ids[table]),
                        "partial_unexpected_count": ROWS_IN_REASON_MAX,
                    },
                )
            )
            self.first_pass_checkpoints[name] = self.context.checkpoints.add_or_update(
                gx.Checkpoint(
                    name=f"{checkpoint_prefix}_{name}_first_pass",
                    validation_definitions=[validation],
                    actions=[],
                    result_format={"result_format": "BASIC"},
                )
            )

    @property
    def data_docs_index(self) -> Path:
        return data_docs_index(self.root_dir)

    def validate(
        self, suite: str, dataframe: Any, *, run_name: str | None = None, source: str | None = None
    ) -> SuiteOutcome:
        """Run ``suite``'s checkpoint on ``dataframe``, a frame of its table (pandas or
        Spark, as the engine).

        ``run_name`` (the DAG run) is the result's run name; ``source`` (the cluster, the
        drilled topics) is shown with the table as its data asset."""
        if suite not in self.checkpoints:
            raise ValueError(f"unknown suite {suite!r}; known: {sorted(self.checkpoints)}")
        table = self.suite_tables[suite]
        # One run id for both passes: the detailed result is stored under the first's key.
        run_id = RunIdentifier(
            run_name=_run_name(run_name) if run_name else None,
            run_time=datetime.datetime.now(datetime.UTC),
        )
        batch = {"dataframe": dataframe}
        result = self.first_pass_checkpoints[suite].run(batch_parameters=batch, run_id=run_id)
        if not result.success:
            result = self.checkpoints[suite].run(batch_parameters=batch, run_id=run_id)
        if len(result.run_results) != 1:
            raise RuntimeError(
                f"checkpoint of {suite} returned {len(result.run_results)} validations"
            )
        ((key, validation),) = result.run_results.items()
        asset = table if source is None else f"{table} of {source}"
        validation.meta.setdefault("batch_spec", {})["data_asset_name"] = asset
        self.context.validation_results_store.set(key, validation)
        if self.data_docs:
            self.context.build_data_docs()
            make_offline(self.data_docs_index.parent)
        return outcome_from_validation(suite, validation, self.row_ids.get(table, ()))


class QualityContext(SuiteContext):
    """The quality job's suites (``SUITE_TABLES``) in a ``SuiteContext``."""

    def __init__(
        self,
        root_dir: Path,
        *,
        engine: Engine = "pandas",
        started_state_max_ms: int = STARTED_STATE_MAX_MS_DEFAULT,
        delete_pending_max_ms: int = DELETE_PENDING_MAX_MS_DEFAULT,
        data_docs: bool = True,
    ) -> None:
        super().__init__(
            root_dir,
            suites={
                REMOTE_SEGMENTS_SUITE: remote_segments_suite(
                    started_state_max_ms=started_state_max_ms
                ),
                PARTITION_OFFSETS_SUITE: partition_offsets_suite(
                    delete_pending_max_ms=delete_pending_max_ms
                ),
                REPLICAS_SUITE: replicas_suite(),
                REPLICA_WARNINGS_SUITE: replica_warnings_suite(),
            },
            suite_tables=SUITE_TABLES,
            row_ids=ROW_ID_COLUMNS,
            checkpoint_prefix="quality",
            engine=engine,
            data_docs=data_docs,
        )


def _run_name(name: str) -> str:
    """``name`` as GE can use it in a path: no separators or blanks, at most RUN_NAME_MAX."""
    return _PATH_UNSAFE.sub("_", name)[:RUN_NAME_MAX]


def pandas_frame(table: str, rows: Sequence[Mapping[str, Any]]) -> Any:
    """A pandas DataFrame of ``rows`` with the table's columns in schema order."""
    import pandas as pd  # noqa: PLC0415 - only the pandas engine needs it

    from jobs.tables.schemas import column_names  # noqa: PLC0415

    columns = column_names(table)
    # object dtype: ints stay ints and nulls None (not floats and NaN), so that the rows a
    # failed expectation names read as on Spark
    return pd.DataFrame([[row.get(c) for c in columns] for row in rows], columns=columns).astype(
        object
    )
