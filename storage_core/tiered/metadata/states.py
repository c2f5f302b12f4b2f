"""The two KIP-405 state machines: a remote segment's and a remote partition deletion's.

Ids are the bytes Kafka writes in the ``RemoteLogSegmentState`` and
``RemotePartitionDeleteState`` int8 fields of ``__remote_log_metadata`` records. The tables
are Kafka's ``RemoteLogSegmentState.isValidTransition`` and
``RemotePartitionDeleteState.isValidTransition`` (storage/api, org.apache.kafka.server.log.
remote.storage): ``None`` stands for "no state yet"; repeating the current state is valid
(retries and fail-over publish the same event again).
"""

from __future__ import annotations

import enum


class RemoteLogSegmentState(enum.IntEnum):
    """State of one remote log segment (one copy attempt, one ``RemoteLogSegmentId``).

    ::

        (none) --> COPY_SEGMENT_STARTED --------> COPY_SEGMENT_FINISHED
                            |                              |
                            | (failed copy)                |
                            v                              v
                         DELETE_SEGMENT_STARTED <----------+
                            |
                            v
                         DELETE_SEGMENT_FINISHED   (terminal)

    Every state may also "move" to itself.
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def for_id(state_id: int) -> RemoteLogSegmentState | None:
        """Kafka's ``forId``: the state with this id, or ``None`` for an unknown id."""
        try:
            return RemoteLogSegmentState(state_id)
        except ValueError:
            return None

    @staticmethod
    def is_valid_transition(
        source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
    ) -> bool:
        """Whether a segment in ``source`` (``None``: not known yet) may move to ``target``."""
        if source is None:
            return target is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        if source is target:
            return True
        return target in _SEGMENT_NEXT_STATES[source]


_SEGMENT_NEXT_STATES: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    """State of the deletion of all remote data of one topic partition.

    ::

        (none) --> DELETE_PARTITION_MARKED --> DELETE_PARTITION_STARTED
                                                        |
                                                        v
                                               DELETE_PARTITION_FINISHED   (terminal)

    Every state may also "move" to itself. MARKED is published by the controller when the
    topic is deleted; STARTED and FINISHED by the remote partition remover.
    """

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @staticmethod
    def for_id(state_id: int) -> RemotePartitionDeleteState | None:
        """Kafka's ``forId``: the state with this id, or ``None`` for an unknown id."""
        try:
            return RemotePartitionDeleteState(state_id)
        except ValueError:
            return None

    @staticmethod
    def is_valid_transition(
        source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
    ) -> bool:
        """Whether a partition in ``source`` (``None``: not marked yet) may move to ``target``."""
        if source is None:
            return target is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        if source is target:
            return True
        return target in _PARTITION_DELETE_NEXT_STATES[source]


_PARTITION_DELETE_NEXT_STATES: dict[
    RemotePartitionDeleteState, frozenset[RemotePartitionDeleteState]
] = {
    RemotePartitionDeleteState.DELETE_PARTITION_MARKED: frozenset(
        {RemotePartitionDeleteState.DELETE_PARTITION_STARTED}
    ),
    RemotePartitionDeleteState.DELETE_PARTITION_STARTED: frozenset(
        {RemotePartitionDeleteState.DELETE_PARTITION_FINISHED}
    ),
    RemotePartitionDeleteState.DELETE_PARTITION_FINISHED: frozenset(),
}
