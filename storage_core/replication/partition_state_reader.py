"""Reading many partitions' state znodes at once, each with its watch set again.

A broker learns leaders and ISRs from ``/brokers/topics/<t>/partitions/<p>/state``. Read one by
one, a burst of 1,000 changed partitions costs 1,000 round trips to ZooKeeper in a row; the
reads are sent pipelined instead (``pipelined_requests``): about one round trip for the
burst. A ``get`` sets a data watch on a znode that exists; missing ones (partitions whose
state the controller has not written yet, as when a new topic is read between its assignment
and its states, or a deleted topic's) are watched with ``exists``, pipelined as well, so that
their creation is reported.
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
    wanted = list(partitions)
    states: dict[TopicPartition, zk_data.LeaderAndIsr] = {}
    missing = _read_into(states, wanted, _send(client, "get", wanted, watch_of))
    # a missing state is watched for its creation; one created since the get is read now,
    # as its exists-watch will never fire
    found = _send(client, "exists", missing, watch_of)
    created = [tp for tp, stat in zip(missing, found, strict=True) if stat is not None]
    _read_into(states, created, _send(client, "get", created, watch_of))
    return states


def _send(
    client: Any, call: str, partitions: list[TopicPartition], watch_of: StateWatch
) -> list[Any]:
    """``get_async`` or ``exists_async`` of each partition's state, with its watch, pipelined;
    a ``NoNodeError`` in place of a missing znode's data."""

    def request(tp: TopicPartition) -> Callable[[], Any]:
        path = zk_data.partition_state_path(tp)
        send = client.get_async if call == "get" else client.exists_async
        return lambda: send(path, watch=watch_of(tp))

    return send_pipelined(
        client, [request(tp) for tp in partitions], expected_errors=(NoNodeError,)
    )


def _read_into(
    states: dict[TopicPartition, zk_data.LeaderAndIsr],
    partitions: list[TopicPartition],
    answers: list[Any],
) -> list[TopicPartition]:
    """Decode the answers of gets into ``states``; returns the partitions found missing."""
    missing = []
    for tp, answer in zip(partitions, answers, strict=True):
        if isinstance(answer, NoNodeError):
            missing.append(tp)
        else:
            data, stat = answer
            states[tp] = zk_data.decode_leader_and_isr(tp, data, zk_version=stat.version)
    return missing
