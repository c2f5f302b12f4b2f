"""``spark_session``: the one way jobs get a SparkSession.

Local-mode settings that matter on small machines (see ENVIRONMENT.md): the UI off, few
shuffle partitions, a JVM that starts fast (``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``),
quiet logs (the driver's log4j configuration ``log4j2.properties``; in local mode bound to
127.0.0.1). An already running session (a test's shared one, or spark-submit's) is used as
it is and left running; a session started here is stopped on exit.

Executors import ``jobs`` and ``storage_core``: in local mode the project root is put on
the Python workers' ``PYTHONPATH``; on a cluster ship them with ``--py-files`` (or install
the package on the workers). Workers run the driver's interpreter unless
``PYSPARK_PYTHON`` says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The driver's log4j configuration (see the file): Spark's defaults, quieter at start. An
# installation without the file (a wheel built without package data) keeps Spark's defaults.
LOG4J2_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
DRIVER_JVM_OPTIONS = (
    f"{JVM_OPTIONS} -Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"
    if LOG4J2_CONFIG.is_file()
    else JVM_OPTIONS
)
SHUFFLE_PARTITIONS = 4
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _put_project_on_pythonpath() -> None:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PROJECT_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *paths])


def build_spark_session(app_name: str, master: str) -> SparkSession:
    """A new (or the running) session with the settings above."""
    _put_project_on_pythonpath()
    # Python workers run this interpreter (the venv's), not the first python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        # everything runs in this machine's one JVM: bound to loopback, Spark does not warn
        # that the host name resolves to a loopback address and pick another interface
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
        .config("spark.driver.extraJavaOptions", DRIVER_JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.python.worker.reuse", "true")
        # one task per work unit, never retried by Spark: the job's own rules decide
        .config("spark.task.maxFailures", "1")
    )
    if master.startswith("local"):
        # One JVM runs every task, so no host is nearer than another. And local mode offers
        # its cores again only when a task ends, never on a timer: a task held back for a
        # preferred host (spark.locality.wait) while a task of a host that has the executor
        # ran and ended was never offered a core again, and the job hung.
        builder = builder.config("spark.locality.wait", "0s")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def spark_session(app_name: str, master: str) -> Iterator[SparkSession]:
    """The running session if there is one (left running), else a new one (stopped after)."""
    existing = SparkSession.getActiveSession()
    if existing is not None:
        yield existing
        return
    spark = build_spark_session(app_name, master)
    try:
        yield spark
    finally:
        spark.stop()
