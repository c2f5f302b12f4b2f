"""One local Spark session for every job test of the run (a cold start costs ~15 s)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.common.spark import build_spark_session
from tests.s3_server import AWS_TEST_ENV


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """``local[2]``, UI off, few shuffle partitions, its own temp dir; jobs run inside a test
    use it (``spark_session`` takes the active session and leaves it running)."""
    local_dir: Path = tmp_path_factory.mktemp("spark-local")
    previous = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = str(local_dir)
    # Python workers run this interpreter (the venv's), not the first python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Executors read S3 credentials from their environment, fixed when the workers start:
    # moto's test credentials (through the standard AWS chain, as in production).
    for name, value in AWS_TEST_ENV.items():
        os.environ.setdefault(name, value)
    session = build_spark_session("jobs-tests", "local[2]")
    yield session
    session.stop()
    # py4j logs from __del__ at interpreter exit, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if previous is None:
        os.environ.pop("SPARK_LOCAL_DIRS", None)
    else:
        os.environ["SPARK_LOCAL_DIRS"] = previous
