"""ZooKeeper's multiRead, which kazoo lacks, spoken by ``zk.multi_read`` against a real server:
many znodes' data and stats in a few requests, equal to what kazoo's own single reads return
(the oracle), a missing znode as NONODE in its slot, under a chroot, on the single-node store
too (by single reads)."""

from __future__ import annotations

import uuid

from kazoo.exceptions import NoNodeError

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.zk import multi_read
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests import cluster_support
from tests.zk_round_trips import RoundTrips

cluster_support.require_java()


def paths_and_oracle(zk: KafkaZkClient, count: int) -> tuple[list[str], list[object]]:
    zk.zk.ensure_path("/many")
    for i in range(count):
        zk.zk.create(f"/many/{i}", f"value-{i}".encode() * (i % 7))
    zk.zk.set("/many/3", b"changed")  # a version other than 0
    paths = [f"/many/{i}" for i in range(count)] + ["/many/missing", "/nowhere/at/all"]
    oracle: list[object] = []
    for path in paths:
        try:
            oracle.append(zk.zk.get(path))
        except NoNodeError:
            oracle.append(NoNodeError)
    return paths, oracle


def as_comparable(results: list[object]) -> list[object]:
    return [NoNodeError if isinstance(r, NoNodeError) else r for r in results]


def test_multi_read_answers_as_single_reads_do(zookeeper: ZooKeeperEnsemble) -> None:
    zk = KafkaZkClient(f"{zookeeper.connect_string}/mr-{uuid.uuid4().hex[:8]}").start()
    try:
        count = multi_read.MAX_PATHS_PER_REQUEST * 2 + 17  # three requests
        paths, oracle = paths_and_oracle(zk, count)
        counter = RoundTrips.install(zk, thread_prefix="MainThread")
        read = zk.get_data_many(paths)
        assert as_comparable(read) == oracle
        assert counter.requests == 3, counter.requests
        assert counter.round_trips == 1, counter.round_trips
    finally:
        zk.close()


def test_the_single_node_store_reads_the_same_by_single_reads() -> None:
    zk = KafkaZkClient.single_node(LocalZNodeTree(None)).start()
    try:
        paths, oracle = paths_and_oracle(zk, 40)
        assert as_comparable(zk.get_data_many(paths)) == oracle
    finally:
        zk.close()
