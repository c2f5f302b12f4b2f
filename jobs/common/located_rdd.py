"""``located_rdd``: one Spark partition per item, each with the hosts it should run on.

Why: PySpark's ``SparkContext.parallelize`` takes no preferred locations, so Spark would
place a copy task anywhere while the segments it reads sit in one leader's log dirs. Scala's
``SparkContext.makeRDD[T](seq: Seq[(T, Seq[String])])`` does take them: one partition per
element, each with its own preferred hosts (``RDD.preferredLocations``). It is built here
through py4j, as PySpark builds its own RDDs:

    item i  ->  Tuple2(base64(pickle(item i)), Seq(host, ...))      (PythonUtils.toSeq)
    makeRDD(Seq(tuples...), ClassTag[String])  ->  RDD[String] of len(items) partitions
    pyspark.RDD(rdd.toJavaRDD(), sc, UTF8Deserializer())   (as ``sc.textFile`` wraps one)
    .map(unpickle)                                          ->  RDD of the items

Each item travels inside its own partition's string, so a task receives its own item and
no other. Items must pickle by reference to importable code (plain dataclasses do).

Spark takes the hosts as hints: a task waits up to ``spark.locality.wait`` (3 s by default)
for a free slot on an executor of one of its hosts before it runs anywhere; hosts with no
executor cost nothing when no host of the job has one. A host must be spelled as the
executors register theirs (the same name or address). In local mode the wait is 0
(``spark.build_spark_session``): one JVM has no nearer host, and local mode never offers a
held-back task a core again until another task ends. When no item has a host this is
``parallelize(items, len(items))``: nothing to place.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Sequence
from typing import Any, TypeVar

from pyspark import RDD, SparkContext
from pyspark.serializers import UTF8Deserializer

T = TypeVar("T")

# One Spark partition (task) per item: never more than this in one RDD.
LOCATED_ITEMS_MAX = 10_000


def located_rdd(sc: SparkContext, items: Sequence[T], hosts: Sequence[Sequence[str]]) -> RDD[T]:
    """An RDD whose partition ``i`` holds ``items[i]`` alone and prefers ``hosts[i]``."""
    if len(items) != len(hosts):
        raise ValueError(f"{len(items)} items and {len(hosts)} host lists: give one per item")
    if len(items) > LOCATED_ITEMS_MAX:
        raise ValueError(
            f"{len(items)} items is above {LOCATED_ITEMS_MAX} (one task each): make fewer"
        )
    if not items or not any(hosts):
        return sc.parallelize(list(items), max(len(items), 1))
    jvm: Any = sc._jvm
    to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
    pairs = [
        jvm.scala.Tuple2(_encode(item), to_seq([str(h) for h in item_hosts]))
        for item, item_hosts in zip(items, hosts, strict=True)
    ]
    string_tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    jrdd = sc._jsc.sc().makeRDD(to_seq(pairs), string_tag)
    deserializer = UTF8Deserializer()  # type: ignore[no-untyped-call]  # untyped in PySpark
    strings: RDD[str] = RDD(jrdd.toJavaRDD(), sc, deserializer)
    return strings.map(_decode)


def _encode(item: object) -> str:
    return base64.b64encode(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def _decode(text: str) -> Any:
    # the driver's own pickle of the item (PySpark ships every task's data pickled too)
    return pickle.loads(base64.b64decode(text))  # noqa: S301
