"""The environment every Airflow command of the embedded default runs with.

Airflow reads its configuration once, from ``AIRFLOW__SECTION__KEY`` variables, so the demo and
the UI command build it here and pass it to each ``airflow`` subprocess: ``AIRFLOW_HOME`` in
the working directory (SQLite, task logs), this repository's ``dags/`` and ``plugins/``, no
examples, low parallelism (the default of 32 would start 32 worker processes), the api-server
on 127.0.0.1, and the cluster as the ``tiered_storage_default`` connection (an environment
variable: nothing is written to the metadata database, no credential is involved).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from embedded.cluster import EmbeddedCluster
from embedded.ports import free_port

REPO = Path(__file__).resolve().parents[1]
DAGS_FOLDER = REPO / "dags"
PLUGINS_FOLDER = REPO / "plugins"
PARALLELISM = 4
CONNECTION_ENV = "AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"


def airflow_home(directory: Path) -> Path:
    return directory.resolve() / "airflow"


def reports_dir(directory: Path) -> Path:
    return directory.resolve() / "reports"


def airflow_environment(
    directory: Path,
    cluster: EmbeddedCluster,
    *,
    api_port: int = 8080,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``base`` (the current environment by default) plus the embedded default's settings."""
    home = airflow_home(directory)
    home.mkdir(parents=True, exist_ok=True)
    api_url = f"http://127.0.0.1:{api_port}"
    env = dict(os.environ if base is None else base)
    # ``airflow standalone`` starts its components as ``airflow ...`` found on PATH
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(PARALLELISM),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": api_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
            # the scheduler's and triggerer's log servers default to 8793 and 8794: take free
            # ports so two instances (or another Airflow) never collide
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "TIERED_STORAGE_REPORTS_DIR": str(reports_dir(directory)),
            "TIERED_STORAGE_PROJECT_DIR": str(REPO),
            "STORAGE_CORE_JOBS_LOCK_DIR": str(directory.resolve() / "locks"),
            CONNECTION_ENV: cluster.connection_uri_json(),
            # Spark in local mode on every core of this machine
            "SPARK_MASTER": "local[*]",
        }
    )
    return env
