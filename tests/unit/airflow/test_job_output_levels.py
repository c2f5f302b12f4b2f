"""The level at which ``TieringJobOperator`` logs each line of a job's output: the lines below
are what a Spark 4 driver printed at its start with Spark's default log4j profile."""

from __future__ import annotations

import pytest

SPARK_DEFAULT_START = [
    ("WARNING: Using incubator modules: jdk.incubator.vector", "debug"),
    ("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties", "debug"),
    (
        "26/11/29 03:12:41 WARN Utils: Your hostname, vm, resolves to a loopback address:"
        " 127.0.0.1; using 192.0.2.2 instead (on interface eth0)",
        "warning",
    ),
    ('Setting default log level to "WARN".', "debug"),
    (
        "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use"
        " setLogLevel(newLevel).",
        "debug",
    ),
    (
        "26/11/29 03:12:42 WARN NativeCodeLoader: Unable to load native-hadoop library for your"
        " platform... using builtin-java classes where applicable",
        "warning",
    ),
]
OTHERS = [
    ("26/11/29 03:12:42 ERROR Executor: Exception in task 0.0 in stage 0.0 (TID 0)", "error"),
    ("26/11/29 03:12:42 INFO SparkContext: Running Spark version 4.0.0", "info"),
    ("WARNING: An illegal reflective access operation has occurred", "warning"),
    ("/x/y.py:12: DeprecationWarning: datetime.utcnow() is deprecated", "warning"),
    ("partition=orders-0 job=copy_segments event=copied status=ok segments=3", "info"),
    ("progress job=copy_segments done=3 total=3 bytes=2345364 percent=100 elapsed_s=4.4", "info"),
    ("job finished status=error errors=1", "info"),
]


@pytest.mark.parametrize(("line", "level"), SPARK_DEFAULT_START + OTHERS)
def test_each_line_is_logged_at_the_level_it_carries(line: str, level: str) -> None:
    from tiered_storage_plugin.operators import line_level

    assert line_level(line) == level
