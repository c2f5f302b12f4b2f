"""The status snapshot is the output of ``jobs.cluster_status`` (the ``status`` task of the
tiering, retention and quality DAGs runs it through ``TieringJobOperator``); the status page
reads the latest one. This module runs the job once more, outside a DAG's status task, when
a task needs fresh figures for one topic (the dry-run plan of ``partition_deletion``).

Nothing is computed here: the job reads the cluster, this reads its run summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tiered_storage_plugin import paths
from tiered_storage_plugin.hooks import ClusterSettings

JOB = "cluster_status"
SNAPSHOT_TIMEOUT_S = 600.0
OUTPUT_CHARS_MAX = 4000


class StatusSnapshotError(RuntimeError):
    """The status job wrote no readable snapshot; the message carries its output."""


def topic_snapshot(
    settings: ClusterSettings, topic: str, summary_path: Path, env: dict[str, str]
) -> list[dict[str, Any]]:
    """The per-partition entries of a ``jobs.cluster_status`` run for ``topic`` (written to
    ``summary_path``). Partitions the job could not read are entries with an ``error``."""
    cmd = [
        sys.executable,
        "-m",
        f"jobs.{JOB}",
        *settings.job_arguments(),
        "--topic",
        topic,
        "--summary-path",
        str(summary_path),
    ]
    summary_path.unlink(missing_ok=True)
    done = subprocess.run(  # noqa: S603 - a fixed interpreter and module
        cmd,
        cwd=paths.project_dir(),
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=SNAPSHOT_TIMEOUT_S,
        check=False,
    )
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        output = (done.stdout + done.stderr)[-OUTPUT_CHARS_MAX:]
        raise StatusSnapshotError(
            f"jobs.{JOB} exited with code {done.returncode} and wrote no snapshot: {output}"
        ) from None
    partitions = summary.get("partitions") if isinstance(summary, dict) else None
    return [p for p in partitions or [] if isinstance(p, dict)]
