"""Airflow configured for the DAG runs (see ``tests.unit.airflow.airflow_env``): a temp
``AIRFLOW_HOME`` with a fresh SQLite database, migrated once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.airflow import airflow_env


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = airflow_env.configure(tmp_path_factory.mktemp("airflow"))
    from airflow.utils import db

    db.resetdb()
    return home
