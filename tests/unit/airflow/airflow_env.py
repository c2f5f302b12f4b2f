"""Airflow configured for tests: set the environment before anything imports ``airflow``.

``configure(tmp)`` points ``AIRFLOW_HOME`` (SQLite database, logs) and the tiered-storage
reports root at a temp dir, the dags and plugins folders at the repository's, and turns the
examples off. Idempotent within a process: a second call returns the first home (Airflow reads
its configuration once, at import).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DAGS = REPO / "dags"
PLUGINS = REPO / "plugins"
_MARK = "TIERED_STORAGE_TEST_AIRFLOW_HOME"


def configure(tmp: Path) -> Path:
    existing = os.environ.get(_MARK)
    if existing:
        return Path(existing)
    if "airflow" in sys.modules:
        raise RuntimeError(
            "airflow was imported before the test configuration was set: the tests would"
            " use the user's AIRFLOW_HOME"
        )
    home = tmp / "airflow-home"
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            _MARK: str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__CORE__PARALLELISM": "4",
            "TIERED_STORAGE_REPORTS_DIR": str(tmp / "reports"),
            "TIERED_STORAGE_PROJECT_DIR": str(REPO),
        }
    )
    for folder in (str(PLUGINS), str(DAGS)):
        if folder not in sys.path:
            sys.path.append(folder)
    return home


def reports_dir() -> Path:
    return Path(os.environ["TIERED_STORAGE_REPORTS_DIR"])
