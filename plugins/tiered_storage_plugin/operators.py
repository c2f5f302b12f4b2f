"""``TieringJobOperator``: run one ``jobs.<name>`` entry point as a subprocess.

The command is ``python -m jobs.<job>`` with the hook's cluster arguments, a ``--summary-path``
in the run's directory (keyed by the data interval, see ``paths``), ``--bytes-per-second`` for
the copy job when the connection sets ``copy_max_bytes_per_second``, ``--report-dir`` and
``--run-name`` for the quality and restore drill jobs (``REPORT_JOBS``; and
``--copied-segments``, the record of the same run's copy task ``copied_segments_of``, when
given), ``--dry-run`` when asked, then ``extra_args``. Every
output line of the job goes to the task log as it comes, at the level it carries
(``line_level``): a Spark (log4j) line at its log4j level, a JVM's or Python's warning as a
warning, the notices Spark and the JVM print at every start whatever the job does
(``START_NOTICES``) at debug, the job's own lines at info.
The JSON run summary is the task's return value (XCom). A non-zero exit fails the task with
the job's error lines (and, for the quality job, the failing expectations and where the Data
Docs are). Failing suites fail the task without retries (the data will not change by
retrying); any other failure is retried. With ``changes=<Asset>``, the asset is one of the
task's outlets, so Airflow lists the task as the asset's producer; a run that changed the
remote tier (its summary counts copies, deletions or repairs) emits an event for it (with the
job and run key as extra), an idle run emits none: Airflow emits an event for every outlet of
a task that succeeds, so the operator leaves the asset out of this execution's outlets
(``withhold_outlet``) when nothing changed.

A ``skip_reason`` that renders non-empty skips the task with that reason.

A retry of the same run reuses the same directory: the previous summary is removed first, so a
failed retry never pushes an older run's summary. Jobs are idempotent, so rerunning is safe.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from tiered_storage_plugin import paths
from tiered_storage_plugin.client_security import client_config_environment
from tiered_storage_plugin.hooks import DEFAULT_CONN_ID, TieredStorageHook

JOBS = (
    "copy_segments",
    "expire_remote",
    "delete_partitions",
    "reconcile",
    "quality",
    "cluster_status",
    "preferred_leader_election",
    "topic_manifests",
    "backup_consumer_offsets",
    "restore_topic",
    "restore_drill",
)
# Jobs that run Great Expectations suites and write Data Docs under --report-dir; a run whose
# suites failed is a verdict on the data (``is_quality_verdict``).
REPORT_JOBS = frozenset({"quality", "restore_drill"})
# Jobs whose summary names the DAG run and task that wrote it (--dag-id, --run-id, --task-id).
PROVENANCE_JOBS = frozenset({"cluster_status"})
ERROR_LINES_MAX = 40
DEFAULT_BASE_URL = "http://localhost:8080"  # the api-server's default when [api] base_url is unset
STOP_GRACE_S = 30.0
DEFAULT_EXECUTION_TIMEOUT = timedelta(hours=2)
# Summary counts (and bytes) that say a run changed what is stored remotely.
CHANGE_COUNTS = (
    "segments_copied",
    "segments_deleted",
    "partitions_finished",
    "copies_rolled_back",
    "deletes_retried",
    "orphan_objects_deleted",
    "uploads_aborted",
    "segments_restored",
)
CHANGE_BYTES = ("copied", "deleted", "restored")
# ``yy/MM/dd HH:mm:ss LEVEL Logger: message``: Spark's log4j layout (jobs/common/log4j2.properties)
_LOG4J_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (?P<level>[A-Z]+) ")
LOG4J_LEVELS = {
    "TRACE": "debug",
    "DEBUG": "debug",
    "INFO": "info",
    "WARN": "warning",
    "ERROR": "error",
    "FATAL": "critical",
}
# ``path.py:12: DeprecationWarning: ...`` (Python's warnings module) and ``WARNING: ...`` (the JVM)
_WARNING_LINE = re.compile(r"^(WARNING: |\S+:\d+: [A-Za-z]*Warning: )")
# Printed at every start of a Spark driver whatever the job does: Spark 4 loads the JDK's vector
# API module on purpose, and the JVM says so; the rest is Spark's advice to interactive users
# when its default log4j profile is in use.
START_NOTICES = (
    "WARNING: Using incubator modules: jdk.incubator.vector",
    "Using Spark's default log4j profile: ",
    'Setting default log level to "',
    "To adjust logging level use sc.setLogLevel(newLevel).",
)
_ERROR_LINE = re.compile(
    r"(\berror\b|\berrors=[1-9]|status=failed|traceback|exception|\bfailed\b)", re.IGNORECASE
)


class JobArgumentsRefusedError(AirflowFailException):
    """The job refused its arguments (a topic or partition the cluster does not have): the
    task fails at once, as retrying the same arguments cannot succeed."""


class TieringJobError(AirflowException):
    """A tiering job exited non-zero; the message carries its error lines. Retried."""


class DataQualityFailedError(AirflowFailException):
    """The quality job ran and its suites failed: a verdict on the data, not a transient
    fault, so the task fails at once (no retry) with the failing expectations."""


class TieringJobOperator(BaseOperator):
    """Runs ``python -m jobs.<job>`` against the cluster of a tiered-storage connection."""

    template_fields: Sequence[str] = ("extra_args", "dry_run", "skip_reason")
    ui_color = "#d7ecff"

    def __init__(
        self,
        *,
        job: str,
        extra_args: Sequence[str] | str = (),
        dry_run: bool | str = False,
        tiered_storage_conn_id: str = DEFAULT_CONN_ID,
        python: str | None = None,
        changes: Asset | None = None,
        skip_reason: str = "",
        copied_segments_of: str | None = None,
        **kwargs: Any,
    ) -> None:
        if job not in JOBS:
            raise ValueError(f"unknown tiering job {job!r}: expected one of {', '.join(JOBS)}")
        kwargs.setdefault("execution_timeout", DEFAULT_EXECUTION_TIMEOUT)
        if changes is not None:
            kwargs["outlets"] = [*(kwargs.get("outlets") or []), changes]
        super().__init__(**kwargs)
        self.job = job
        self.extra_args = extra_args
        self.dry_run = dry_run
        self.tiered_storage_conn_id = tiered_storage_conn_id
        self.python = python or sys.executable
        self.changes = changes
        self.skip_reason = skip_reason
        self.copied_segments_of = copied_segments_of
        self._process: subprocess.Popen[str] | None = None

    # ------------------------------------------------------------------ command
    def task_dir(self, context: Mapping[str, Any]) -> Path:
        return paths.run_dir(context) / paths.safe_name(self.task_id)

    def command(
        self, hook: TieredStorageHook, task_dir: Path, run_name: str | None = None
    ) -> list[str]:
        settings = hook.settings()
        cmd = [self.python, "-m", f"jobs.{self.job}", *settings.job_arguments()]
        if self.job == "copy_segments" and settings.copy_max_bytes_per_second is not None:
            cmd += ["--bytes-per-second", repr(settings.copy_max_bytes_per_second)]
        cmd += ["--summary-path", str(task_dir / paths.SUMMARY_FILE)]
        if self.job in REPORT_JOBS:
            cmd += ["--report-dir", str(task_dir / "report")]
            if run_name:
                cmd += ["--run-name", run_name]
            if self.copied_segments_of:
                copy_dir = task_dir.parent / paths.safe_name(self.copied_segments_of)
                cmd += ["--copied-segments", str(copy_dir / paths.COPIED_SEGMENTS_FILE)]
        if _truthy(self.dry_run):
            cmd.append("--dry-run")
        cmd += _argument_list(self.extra_args)
        return cmd

    # ------------------------------------------------------------------ execute
    def execute(self, context: Any) -> dict[str, Any]:
        if str(self.skip_reason or "").strip():
            raise AirflowSkipException(f"job {self.job} not run: {self.skip_reason.strip()}")
        hook = TieredStorageHook(self.tiered_storage_conn_id)
        task_dir = self.task_dir(context)
        task_dir.mkdir(parents=True, exist_ok=True)
        summary_path = task_dir / paths.SUMMARY_FILE
        summary_path.unlink(missing_ok=True)
        cmd = self.command(hook, task_dir, run_name=dag_run_name(context))
        if self.job in PROVENANCE_JOBS:
            cmd += provenance_arguments(context, self.task_id)
        self.log.info("job=%s command=%s", self.job, " ".join(cmd))
        with client_config_environment(hook.settings().security) as client_env:
            env = job_environment({**hook.job_environment(), **client_env})
            code, error_lines = self._run(cmd, env)
        summary = _read_summary(summary_path)
        report = task_dir / "report" / paths.DATA_DOCS_INDEX
        if report.is_file():
            self.log.info("job=%s data_docs=%s", self.job, report)
            self.log.info("job=%s report_url=%s", self.job, report_url(task_dir))
        if code != 0:
            message = failure_message(self.job, code, error_lines, summary, report)
            if is_quality_verdict(summary):
                raise DataQualityFailedError(message)
            if refused_arguments(summary):
                raise JobArgumentsRefusedError(message)
            raise TieringJobError(message)
        if summary is None:
            raise TieringJobError(
                f"job {self.job} exited 0 but wrote no run summary at {summary_path}"
            )
        if self.changes is not None:
            if changed_remote_tier(summary):
                context["outlet_events"][self.changes].extra = {
                    "job": self.job,
                    "run_key": task_dir.parent.name,
                }
                self.log.info(
                    "job=%s remote tier changed: asset event for %s", self.job, self.changes
                )
            else:
                self.withhold_outlet(self.changes)
                self.log.info("job=%s remote tier unchanged: no asset event", self.job)
        summary.setdefault("summary_path", str(summary_path))
        if report.is_file():
            summary.setdefault("report_path", str(report))
        return summary

    def withhold_outlet(self, asset: Asset) -> None:
        """No event for ``asset`` from this execution: the task runner emits one for every
        outlet of the executing task when it succeeds. The executing task is a copy of the
        DAG's (``prepare_for_execution``) sharing its outlets list: a new list is assigned."""
        self.outlets = [o for o in self.outlets if o != asset]

    def _run(self, cmd: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
        errors: deque[str] = deque(maxlen=ERROR_LINES_MAX)
        tail: deque[str] = deque(maxlen=ERROR_LINES_MAX)
        self._process = subprocess.Popen(  # noqa: S603 - a fixed interpreter and module
            cmd,
            cwd=paths.project_dir(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        if self._process.stdout is None:
            raise TieringJobError(f"job {self.job}: no output pipe from the subprocess")
        for raw in self._process.stdout:
            line = raw.rstrip("\n")
            getattr(self.log, line_level(line))("%s", line)
            tail.append(line)
            if _ERROR_LINE.search(line):
                errors.append(line)
        code = self._process.wait()
        self._process = None
        return code, list(errors) or list(tail)

    def on_kill(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def line_level(line: str) -> str:
    """The level (a logger method name) at which a line of a job's output is logged."""
    if line.startswith(START_NOTICES):
        return "debug"
    log4j = _LOG4J_LINE.match(line)
    if log4j is not None:
        return LOG4J_LEVELS.get(log4j["level"], "info")
    if _WARNING_LINE.match(line):
        return "warning"
    return "info"


def provenance_arguments(context: Mapping[str, Any], task_id: str) -> list[str]:
    """``--dag-id``, ``--run-id`` and ``--task-id`` of the task's run."""
    dag = context.get("dag")
    args = ["--task-id", task_id]
    if dag is not None:
        args += ["--dag-id", dag.dag_id]
    if context.get("run_id"):
        args += ["--run-id", str(context["run_id"])]
    return args


def dag_run_name(context: Mapping[str, Any]) -> str | None:
    """``<dag_id> <run_id>``: the run a report belongs to, as the Data Docs name it."""
    run_id = context.get("run_id")
    dag = context.get("dag")
    if not run_id or dag is None:
        return None
    return f"{dag.dag_id} {run_id}"


def failure_message(
    job: str,
    code: int,
    error_lines: Sequence[str],
    summary: Mapping[str, Any] | None,
    report: Path | None = None,
) -> str:
    parts = [f"job {job} exited with code {code}"]
    failures = summary_failures(summary) if summary else []
    if failures:
        parts.append("failing checks:\n  " + "\n  ".join(failures))
    if error_lines:
        parts.append("job output (error lines):\n  " + "\n  ".join(error_lines))
    if report is not None and report.is_file():
        parts.append(f"report: {report_url(report.parents[5])} (file {report})")
    return "\n".join(parts)


def changed_remote_tier(summary: Mapping[str, Any]) -> bool:
    """Whether a (not dry) run copied, deleted or repaired anything remote."""
    if summary.get("dry_run"):
        return False
    counts = summary.get("counts") or {}
    sizes = summary.get("bytes") or {}
    return any(_positive(counts.get(name)) for name in CHANGE_COUNTS) or any(
        _positive(sizes.get(name)) for name in CHANGE_BYTES
    )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_quality_verdict(summary: Mapping[str, Any] | None) -> bool:
    """The summary of a quality (or restore drill) run whose suites ran and failed."""
    if not summary or summary.get("job") not in REPORT_JOBS:
        return False
    details = summary.get("details")
    return isinstance(details, Mapping) and details.get("success") is False


def refused_arguments(summary: Mapping[str, Any] | None) -> bool:
    """The summary of a run that stopped because the job refused an option
    (``JobArgumentError``, as ``run_job`` records it)."""
    if not summary or summary.get("status") != "failed":
        return False
    errors = summary.get("errors")
    return isinstance(errors, list) and any(
        isinstance(e, Mapping) and str(e.get("error", "")).startswith("JobArgumentError:")
        for e in errors
    )


def summary_failures(summary: Mapping[str, Any]) -> list[str]:
    """Readable lines for what failed, from the summary's error and expectation fields."""
    lines: list[str] = []
    details = summary.get("details")
    sources = [summary, details] if isinstance(details, Mapping) else [summary]
    for source, key in (
        (source, key) for source in sources for key in ("failed_expectations", "failures", "errors")
    ):
        value = source.get(key)
        if isinstance(value, list):
            lines.extend(_describe(item) for item in value)
        elif isinstance(value, str) and value:
            lines.append(value)
    suites = summary.get("suites")
    if suites is None and isinstance(details, Mapping):
        suites = details.get("suites")
    if isinstance(suites, list | dict) and not lines:
        items = suites.items() if isinstance(suites, dict) else [("suite", s) for s in suites]
        for key, suite in items:
            if isinstance(suite, Mapping) and suite.get("success") is False:
                name = suite.get("name") or suite.get("suite") or key
                for failed in suite.get("failed_expectations") or suite.get("failures") or []:
                    lines.append(f"{name}: {_describe(failed)}")
    return list(dict.fromkeys(lines))[:ERROR_LINES_MAX]


def report_url(task_dir: Path) -> str:
    """The Data Docs a quality task wrote in ``task_dir``, as the plugin's web app serves them
    (``file://`` when the directory is outside the reports root)."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback=None) or DEFAULT_BASE_URL).rstrip("/")
    try:
        relative = task_dir.resolve().relative_to(paths.reports_root().resolve())
    except ValueError:
        return (task_dir / "report" / paths.DATA_DOCS_INDEX).as_uri()
    return f"{base}{paths.URL_PREFIX}/docs/{relative.as_posix()}/index.html"


def _describe(item: Any) -> str:
    if isinstance(item, Mapping) and isinstance(item.get("error"), str):
        where = item.get("partition")
        return f"{where}: {item['error']}"[:500] if where else item["error"][:500]
    if isinstance(item, Mapping):
        return json.dumps(item, sort_keys=True, default=str)[:500]
    return str(item)[:500]


def _read_summary(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TieringJobError(f"run summary {path} is not readable JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TieringJobError(f"run summary {path} is not a JSON object")
    return value


def job_environment(extra: Mapping[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
    project = str(paths.project_dir())
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{project}{os.pathsep}{existing}" if existing else project
    return env


def _argument_list(value: Sequence[str] | str) -> list[str]:
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value]


def _truthy(value: bool | str) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
