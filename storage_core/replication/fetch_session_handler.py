"""A fetcher's side of an incremental fetch session with one leader broker (KIP-227; Kafka's
``FetchSessionHandler``).

``build`` turns the partitions a fetcher wants this round into the request to send:

- without a session (``next_metadata`` full: epoch 0, "create one"), every partition;
- in a session, only the partitions added or whose fetch parameters changed (``to_send``)
  and those dropped (``to_forget``); the leader keeps the rest as they were. An idle follower
  sends no partition at all.

``handle_response`` reads the answer's session id and top-level error and moves to the next
request's metadata, as Kafka's client does::

    full request answered, session id s > 0    -> incremental (s, 1) next
    full request answered, session id 0        -> full (0, 0) again (the leader declined)
    incremental (s, n) answered, session id s  -> (s, n + 1)
    incremental answered, session id 0         -> full (0, 0) (the leader closed it)
    FETCH_SESSION_ID_NOT_FOUND                 -> full (0, 0): the session is gone (leader
                                                  restarted, session evicted)
    any other error, a response with partitions that are not in the session, or a failed
    request                                    -> full (s, 0): close s, open a new one

After ``False`` from ``handle_response`` the answer carries nothing to apply and the next
request is a full one. Partition data are compared by identity first, so that the
fetcher's unchanged partitions cost a pointer comparison per round; the very mapping given to
the last ``build`` (which the caller must not have changed) is the session unchanged.

Thread-safety: none; one fetcher thread owns its handler.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.fetch_metadata import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchMetadata,
    next_epoch,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestData(Generic[T]):
    """One request: what to send, what to forget, the whole session it stands for (whose
    answers the response carries) and its metadata."""

    to_send: dict[TopicPartition, T]
    to_forget: list[TopicPartition]
    session_partitions: Mapping[TopicPartition, T]
    metadata: FetchMetadata


class FetchSessionHandler(Generic[T]):
    """The session of one fetcher with broker ``node``; ``T`` is a partition's fetch data,
    compared with ``==`` (equal data is not sent again)."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.next_metadata = INITIAL
        self.session_partitions: dict[TopicPartition, T] = {}
        self._last_wanted: Mapping[TopicPartition, T] | None = None

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def build(self, wanted: Mapping[TopicPartition, T]) -> FetchRequestData[T]:
        """The request for this round's ``wanted`` partitions (Kafka's ``Builder.build``)."""
        metadata = self.next_metadata
        if metadata.is_full:
            self._last_wanted = wanted
            self.session_partitions = dict(wanted)
            return FetchRequestData(
                dict(self.session_partitions), [], self.session_partitions, metadata
            )
        session = self.session_partitions
        if wanted is self._last_wanted:
            # The very mapping built into the session last time, unchanged by contract.
            return FetchRequestData({}, [], session, metadata)
        self._last_wanted = wanted
        to_send: dict[TopicPartition, T] = {}
        removed: list[TopicPartition] = []
        for tp, previous in list(session.items()):
            data = wanted.get(tp)
            if data is None:
                del session[tp]
                removed.append(tp)
            elif data is not previous and data != previous:
                session[tp] = data
                to_send[tp] = data
        if len(session) != len(wanted):
            for tp, data in wanted.items():
                if tp not in session:
                    session[tp] = data
                    to_send[tp] = data
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "built incremental fetch session_id=%d epoch=%d node=%d to_send=%d"
                " to_forget=%d session_partitions=%d",
                metadata.session_id,
                metadata.epoch,
                self.node,
                len(to_send),
                len(removed),
                len(session),
            )
        return FetchRequestData(to_send, removed, session, metadata)

    def handle_response(
        self, error_code: int, session_id: int, partitions: Iterable[TopicPartition]
    ) -> bool:
        """Whether the answer may be applied; moves to the next request's metadata."""
        metadata = self.next_metadata
        if error_code != ErrorCode.none:
            logger.info(
                "fetch session refused node=%d session_id=%d epoch=%d error=%s",
                self.node,
                metadata.session_id,
                metadata.epoch,
                _error_name(error_code),
            )
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = metadata.next_close_existing_attempt_new()
            return False
        answered = set(partitions)
        extra = answered.difference(self.session_partitions)
        if metadata.is_full:
            omitted = set(self.session_partitions).difference(answered)
            if extra or omitted:
                logger.info(
                    "invalid full fetch response node=%d omitted=%s extra=%s",
                    self.node,
                    sorted(map(str, omitted))[:10],
                    sorted(map(str, extra))[:10],
                )
                self.next_metadata = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = INITIAL
            else:
                logger.debug(
                    "fetch session created node=%d session_id=%d partitions=%d",
                    self.node,
                    session_id,
                    len(self.session_partitions),
                )
                self.next_metadata = FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))
            return True
        if extra:
            logger.info(
                "invalid incremental fetch response node=%d session_id=%d extra=%s",
                self.node,
                metadata.session_id,
                sorted(map(str, extra))[:10],
            )
            self.next_metadata = metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            self.next_metadata = INITIAL  # the leader closed the session
        else:
            self.next_metadata = metadata.next_incremental()
        return True

    def handle_error(self) -> None:
        """The request failed (connection, timeout): the next one is full, in a new session."""
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()


def _error_name(error_code: int) -> str:
    try:
        return ErrorCode(error_code).name
    except ValueError:
        return str(error_code)
