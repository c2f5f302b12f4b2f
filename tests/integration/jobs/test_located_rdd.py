"""``located_rdd`` on a real local Spark: each partition holds one item and the scheduler sees
that item's hosts as the partition's preferred locations (the hosts are made up: a local
Spark has one executor host, and a preference for a host without executors costs no wait),
and a job whose items prefer the executor's host and others finishes.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from pyspark import RDD
from pyspark.sql import SparkSession

from jobs.common.located_rdd import LOCATED_ITEMS_MAX, located_rdd
from jobs.planning.work_units import WorkUnit, plan_work_units
from tests.planned_segments import on


def scheduler_hosts(rdd: RDD[Any]) -> list[list[str]]:
    """Per partition, the hosts Spark's DAG scheduler gives its task (what placement uses)."""
    sc = rdd.context
    jvm: Any = sc._jvm
    as_java = jvm.scala.jdk.javaapi.CollectionConverters.asJava
    java_rdd = rdd._jrdd.rdd()
    scheduler = sc._jsc.sc().dagScheduler()
    return [
        [location.host() for location in as_java(scheduler.getPreferredLocs(java_rdd, i))]
        for i in range(java_rdd.getNumPartitions())
    ]


def describe_units(units: Any) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """What an executor received (runs in the Python worker)."""
    return [
        (u.index, u.partitions, tuple(sorted({s.leader_host for s in u.segments}))) for u in units
    ]


def test_each_work_unit_runs_as_its_own_task_preferring_its_leader_host(
    spark: SparkSession,
) -> None:
    segments = [
        on("a.example", "t-0", 300),
        on("a.example", "t-1", 100),
        on("b.example", "t-2", 200),
        on("c.example", "t-3", 50),
    ]
    units = plan_work_units(segments, 4)
    hosts = [list(u.preferred_hosts) for u in units]
    assert hosts == [["a.example"], ["a.example"], ["b.example"], ["c.example"]]
    rdd = located_rdd(spark.sparkContext, units, hosts)

    assert rdd.getNumPartitions() == len(units)
    assert scheduler_hosts(rdd) == hosts
    received = rdd.mapPartitions(describe_units).collect()
    print(f"units on executors: {received}")
    assert received == [
        (0, ("t-0",), ("a.example",)),
        (1, ("t-1",), ("a.example",)),
        (2, ("t-2",), ("b.example",)),
        (3, ("t-3",), ("c.example",)),
    ]
    # each task got its own unit, whole (the items are pickled with their partition)
    assert rdd.glom().collect() == [[u] for u in units]


def test_several_hosts_for_one_item_and_an_item_without_hosts(spark: SparkSession) -> None:
    items = ["first", "second", "third"]
    hosts = [["h1", "h2"], [], ["h3"]]
    rdd = located_rdd(spark.sparkContext, items, hosts)
    assert scheduler_hosts(rdd) == hosts
    assert rdd.glom().collect() == [["first"], ["second"], ["third"]]


def test_without_any_host_it_is_parallelize_one_item_per_partition(spark: SparkSession) -> None:
    unit = WorkUnit(
        index=0,
        segments=(on("127.0.0.1", "t-0", 10),),
        size_bytes=10,
        bytes_per_second=None,
    )
    units = [unit, dataclasses.replace(unit, index=1)]
    rdd = located_rdd(spark.sparkContext, units, [[], []])
    assert scheduler_hosts(rdd) == [[], []]
    assert rdd.glom().collect() == [[units[0]], [units[1]]]
    assert located_rdd(spark.sparkContext, [], []).collect() == []


def test_bad_arguments_are_refused(spark: SparkSession) -> None:
    sc = spark.sparkContext
    with pytest.raises(ValueError, match="one per item"):
        located_rdd(sc, [1, 2], [["h"]])
    with pytest.raises(ValueError, match="make fewer"):
        located_rdd(sc, [0] * (LOCATED_ITEMS_MAX + 1), [["h"]] * (LOCATED_ITEMS_MAX + 1))


def test_items_preferring_the_executors_host_and_other_hosts_all_run(spark: SparkSession) -> None:
    # Local mode offers its cores again only when a task ends: with a locality wait, the items
    # of the other hosts, held back while the executor host's item ran, were never offered a
    # core again and the job hung (the copy job of brokers at localhost and 127.0.0.1 did)
    sc = spark.sparkContext
    (executor_host,) = {e.host() for e in sc._jsc.sc().statusTracker().getExecutorInfos()}
    hosts = [[executor_host], ["elsewhere.example"], ["elsewhere.example"]]
    rdd = located_rdd(sc, [1, 2, 3], hosts)
    assert scheduler_hosts(rdd) == hosts
    results: list[int] = []
    job = threading.Thread(target=lambda: results.extend(rdd.map(lambda x: x * 2).collect()))
    job.start()
    job.join(60)
    if job.is_alive():
        sc.cancelAllJobs()
        job.join(30)
        pytest.fail(f"the job did not finish within 60 s (items preferring {hosts})")
    assert results == [2, 4, 6]
