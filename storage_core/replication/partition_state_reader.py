"""Reading many partitions' state znodes at once, each with its watch set again.

A broker learns leaders and ISRs from ``/brokers/topics/<t>/partitions/<p>/state``. Read one by
one, a burst of 1,000 changed partitions costs 1,000 round trips to ZooKeeper in a row; the
reads are sent pipelined instead (``pipelined_requests``): about one round trip for the
burst. A ``get`` sets a data watch on a znode that exists; a missing one (a partition whose
state the controller has not written yet, or a deleted topic's) is watched with ``exists`` so
that its creation is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import NoNodeError

from storage_core.common import TopicPartition
from storage_core.zk import zk_data
from storage_core.zk.pipelined_requests import send_pipelined

StateWatch = Callable[[TopicPartition], Callable[[Any], None]]


def read_partition_states(
    client: Any, partitions: Iterable[TopicPartition], watch_of: StateWatch
) -> dict[TopicPartition, zk_data.LeaderAndIsr]:
    """The states of ``partitions`` that exist (with their znode versions); every partition
    read is watched again through ``watch_of(tp)``, created or not."""
    todo = list(partitions)

    def start(tp: TopicPartition) -> Callable[[], Any]:
        return lambda: client.get_async(zk_data.partition_state_path(tp), watch=watch_of(tp))

    answers = send_pipelined(client, [start(tp) for tp in todo], expected_errors=(NoNodeError,))
    states: dict[TopicPartition, zk_data.LeaderAndIsr] = {}
    for tp, answer in zip(todo, answers, strict=True):
        read = _read_missing(client, tp, watch_of) if isinstance(answer, NoNodeError) else answer
        if read is not None:
            data, stat = read
            states[tp] = zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)
    return states


def _read_missing(client: Any, tp: TopicPartition, watch_of: StateWatch) -> Any:
    """A state znode that did not exist when read: watched for its creation, and read if it
    was created since (the exists-watch would never fire then)."""
    path = zk_data.partition_state_path(tp)
    if client.exists(path, watch=watch_of(tp)) is None:
        return None
    try:
        return client.get(path, watch=watch_of(tp))
    except NoNodeError:
        return None  # and gone again: the watch set by exists reports it
