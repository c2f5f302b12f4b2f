"""Reading many partitions' state znodes at once, each with its watch set again.

A broker learns leaders and ISRs from ``/brokers/topics/<t>/partitions/<p>/state``. Read one by
one, a burst of 1,000 changed partitions costs 1,000 round trips to ZooKeeper in a row; a
ZooKeeper session serves requests in order, so the reads are sent together (kazoo's
``get_async``) and their answers collected afterwards: one round trip's latency for the whole
burst. A ``get`` sets a data watch on a znode that exists; a missing one (a partition whose
state the controller has not written yet, or a deleted topic's) is watched with ``exists`` so
that its creation is reported. Clients without an asynchronous API (the single-node store,
which answers in process) are read in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import NoNodeError

from storage_core.common import TopicPartition
from storage_core.zk import zk_data

READS_IN_FLIGHT_MAX = 1000
"""Reads sent before their answers are collected: bounds the requests queued in the session."""

StateWatch = Callable[[TopicPartition], Callable[[Any], None]]


def read_partition_states(
    client: Any, partitions: Iterable[TopicPartition], watch_of: StateWatch
) -> dict[TopicPartition, zk_data.LeaderAndIsr]:
    """The states of ``partitions`` that exist (with their znode versions); every partition
    read is watched again through ``watch_of(tp)``, created or not."""
    todo = list(partitions)
    states: dict[TopicPartition, zk_data.LeaderAndIsr] = {}
    missing: list[TopicPartition] = []
    if not hasattr(client, "get_async"):
        for tp in todo:
            _read_one(client, tp, watch_of, states, missing)
    else:
        for start in range(0, len(todo), READS_IN_FLIGHT_MAX):
            chunk = todo[start : start + READS_IN_FLIGHT_MAX]
            sent = [
                (tp, client.get_async(zk_data.partition_state_path(tp), watch=watch_of(tp)))
                for tp in chunk
            ]
            for tp, result in sent:
                try:
                    data, stat = result.get()
                except NoNodeError:
                    missing.append(tp)
                    continue
                states[tp] = zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)
    for tp in missing:
        # created since the get failed: the exists-watch would never fire, so read it now
        if client.exists(zk_data.partition_state_path(tp), watch=watch_of(tp)) is not None:
            _read_one(client, tp, watch_of, states, [])
    return states


def _read_one(
    client: Any,
    tp: TopicPartition,
    watch_of: StateWatch,
    states: dict[TopicPartition, zk_data.LeaderAndIsr],
    missing: list[TopicPartition],
) -> None:
    try:
        data, stat = client.get(zk_data.partition_state_path(tp), watch=watch_of(tp))
    except NoNodeError:
        missing.append(tp)
        return
    states[tp] = zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)
