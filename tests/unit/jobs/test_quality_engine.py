"""Where the quality suites run: pandas for tables the driver holds easily, Spark beyond."""

from __future__ import annotations

import pytest

from jobs.quality import PANDAS_ROWS_MAX, validation_engine


def tables(largest: int) -> dict[str, list[dict[str, object]]]:
    return {"remote_segments": [{}] * largest, "partition_offsets": [{}], "replicas": []}


def test_auto_takes_pandas_up_to_the_bound_and_spark_beyond() -> None:
    assert validation_engine("auto", tables(0)) == "pandas"
    assert validation_engine("auto", tables(PANDAS_ROWS_MAX)) == "pandas"
    assert validation_engine("auto", tables(PANDAS_ROWS_MAX + 1)) == "spark"


def test_an_engine_asked_for_is_taken_whatever_the_size() -> None:
    assert validation_engine("spark", tables(1)) == "spark"
    assert validation_engine("pandas", tables(PANDAS_ROWS_MAX + 1)) == "pandas"


def test_an_unknown_engine_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="validation engine 'dask'"):
        validation_engine("dask", tables(1))
