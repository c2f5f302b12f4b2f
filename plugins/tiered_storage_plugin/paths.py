"""Where run summaries and reports live, and the run key that names a run's directory.

Layout under the reports root (``$TIERED_STORAGE_REPORTS_DIR``, else
``$AIRFLOW_HOME/tiered_storage``)::

    runs/<dag_id>/<run key>/<task_id>/summary.json     one job's JSON run summary
    runs/<dag_id>/<run key>/copy_segments/copied-segments.json   what a copy task copied
    runs/<dag_id>/<run key>/<task_id>/report/gx/uncommitted/data_docs/local_site/index.html
    runs/<dag_id>/<run key>/report.json                 a DAG-level report (retention)

The run key comes from the data interval (``20260101T020000--20260102T020000``), so a retry of
the same run writes to the same place; runs without a data interval (manual runs) use their
run id. Never ``now()``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

REPORTS_DIR_ENV = "TIERED_STORAGE_REPORTS_DIR"
PROJECT_DIR_ENV = "TIERED_STORAGE_PROJECT_DIR"
SUMMARY_FILE = "summary.json"
COPIED_SEGMENTS_FILE = (
    "copied-segments.json"  # beside a copy's summary (jobs.common.copied_segments)
)
URL_PREFIX = "/tiered-storage"
DATA_DOCS_INDEX = Path("gx/uncommitted/data_docs/local_site/index.html")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def reports_root() -> Path:
    explicit = os.environ.get(REPORTS_DIR_ENV)
    if explicit:
        return Path(explicit)
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return Path(home) / "tiered_storage"


def project_dir() -> Path:
    """The directory holding the ``jobs`` package (the repository root by default)."""
    explicit = os.environ.get(PROJECT_DIR_ENV)
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parents[2]


def safe_name(value: str) -> str:
    cleaned = _UNSAFE.sub("_", value).strip("._")
    if not cleaned:
        raise ValueError(f"cannot build a directory name from {value!r}")
    return cleaned[:200]


def run_key(context: Mapping[str, Any]) -> str:
    """The data interval as a directory name, else the run id."""
    start = context.get("data_interval_start")
    end = context.get("data_interval_end")
    if isinstance(start, datetime) and isinstance(end, datetime):
        return f"{start:%Y%m%dT%H%M%S}--{end:%Y%m%dT%H%M%S}"
    run_id = context.get("run_id")
    if not run_id:
        raise ValueError("the task context has neither a data interval nor a run id")
    return safe_name(str(run_id))


def run_dir(context: Mapping[str, Any], root: Path | None = None) -> Path:
    dag_id = context["dag"].dag_id if context.get("dag") is not None else context["dag_id"]
    return (root or reports_root()) / "runs" / safe_name(dag_id) / run_key(context)
