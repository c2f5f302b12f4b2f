"""Airflow's test configuration for this directory (see ``airflow_env``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.airflow import airflow_env


@pytest.fixture(scope="session", autouse=True)
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return airflow_env.configure(tmp_path_factory.mktemp("airflow"))
