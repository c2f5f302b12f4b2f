"""What every tiering DAG shares: start date, tags, retries, the remote-tier Asset, and the
run report task body. Light to import (DAG files import it at parse time)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset
from airflow.timetables.trigger import CronTriggerTimetable
from croniter import croniter

from tiered_storage_plugin import paths

if TYPE_CHECKING:
    from dateutil.relativedelta import relativedelta
    from pendulum import FixedTimezone, Timezone

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
TAGS = ["tiered-storage"]
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "tiered-storage",
    "retries": 2,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=5),
}

TIERING_SCHEDULE_DEFAULT = "*/5 * * * *"

# Each scheduled DAG's schedule can be replaced by a cron expression (or a preset such as
# "@hourly") in this environment variable of the scheduler and dag-processor.
SCHEDULE_ENV = "TIERED_STORAGE_{dag_id}_SCHEDULE"


def schedule_for(dag_id: str, default: str) -> str:
    """``$TIERED_STORAGE_<DAG_ID>_SCHEDULE`` if set, else ``default``. A value that is neither
    a cron expression nor a preset fails the DAG's import with a message naming the variable."""
    name = SCHEDULE_ENV.format(dag_id=dag_id.upper())
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if value not in SCHEDULE_PRESETS and not croniter.is_valid(value):
        raise ValueError(
            f"{name}={value!r} is not a cron expression (5 fields, e.g. '*/15 * * * *')"
            f" nor one of {', '.join(sorted(SCHEDULE_PRESETS))}"
        )
    return value


def schedule_interval_s(schedule: str | timedelta) -> float:
    """Seconds between two runs of ``schedule`` (the longest gap of its next few runs)."""
    if isinstance(schedule, timedelta):
        return schedule.total_seconds()
    fires = croniter(schedule, datetime.now(UTC))
    times = [fires.get_next(datetime) for _ in range(4)]
    return max((b - a).total_seconds() for a, b in itertools.pairwise(times))


SCHEDULE_PRESETS = frozenset({"@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly"})


class ReadableCronTimetable(CronTriggerTimetable):
    """Airflow's ``CronTriggerTimetable`` (a run at each time of the cron expression, in UTC)
    that the DAG list shows in words. The list shows a timetable's ``summary`` (the bare
    expression for Airflow's own) with its ``description`` on hover: here the summary is the
    expression in words ("Every 5 minutes", "At 02:00 UTC") and the description the
    expression. Registered by the plugin (``timetables``), which the scheduler, the
    dag-processor and the api-server load to read a serialized DAG back."""

    def __init__(
        self,
        cron: str,
        *,
        timezone: str | Timezone | FixedTimezone = "UTC",
        interval: timedelta | relativedelta = timedelta(),
        run_immediately: bool | timedelta = False,
    ) -> None:
        super().__init__(
            cron, timezone=timezone, interval=interval, run_immediately=run_immediately
        )
        words = self.description or self._expression
        hours = self._expression.split()[1] if len(self._expression.split()) >= 2 else "*"
        zone = "" if hours == "*" or hours.startswith("*/") else f" {self._timezone.name}"
        self._summary = f"{words}{zone}"
        self.description = f"cron {self._expression} ({self._timezone.name})"

    @property
    def summary(self) -> str:
        return self._summary


def cron_schedule(expression: str) -> ReadableCronTimetable:
    """A DAG's ``schedule`` for a cron expression or preset, shown in words in the DAG list."""
    return ReadableCronTimetable(expression)


# The outlet of every task that changes what is stored remotely (``TieringJobOperator``'s
# ``changes``), so the asset view lists them as its producers; only their runs that changed
# something emit an event for it. data_quality runs after each event.
REMOTE_TIER = Asset(name="tiered_storage_remote_tier", uri="tiered-storage://cluster/remote-tier")


def tiering_status() -> Any:
    """The ``status`` task: ``jobs.cluster_status`` writes the snapshot of the cluster and of
    every remote-enabled partition as its run summary, which the status page reads."""
    from tiered_storage_plugin.operators import TieringJobOperator

    return TieringJobOperator(task_id="status", job="cluster_status")


class TieringRunFailedError(RuntimeError):
    """A job of the run failed; the run report says which."""


def write_run_report(
    context: Mapping[str, Any], task_ids: Sequence[str], *, name: str = "report"
) -> dict[str, Any]:
    """Gather the run's job summaries into ``<run dir>/<name>.json`` (written atomically) and
    return it. A job whose task pushed no summary (it failed or did not run) is listed under
    ``failed``; then ``TieringRunFailedError`` is raised after the report is written, so the
    run fails while its report stays readable."""
    ti = context["ti"]
    run_dir = paths.run_dir(context)
    jobs: dict[str, Any] = {}
    failed: list[str] = []
    for task_id in task_ids:
        pushed = ti.xcom_pull(task_ids=task_id)
        summary_path = run_dir / paths.safe_name(task_id) / paths.SUMMARY_FILE
        if pushed is None:
            failed.append(task_id)
            jobs[task_id] = {"status": "failed", "summary": _read_json(summary_path)}
        else:
            jobs[task_id] = {"status": "ok", "summary": pushed}
    report = {
        "dag_id": context["dag"].dag_id,
        "run_id": context["run_id"],
        "run_key": paths.run_key(context),
        "jobs": jobs,
        "failed": failed,
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / f"{paths.safe_name(name)}.json"
    from storage_core.atomic_file import write_file_atomically

    write_file_atomically(
        target, json.dumps(report, indent=2, sort_keys=True, default=str).encode()
    )
    if failed:
        raise TieringRunFailedError(
            f"{', '.join(failed)} failed (see each task's log); report written to {target}"
        )
    return {"report_path": str(target), "failed": failed}


def _read_json(path: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
