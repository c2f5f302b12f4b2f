"""Many ZooKeeper requests in flight on one session, waited for together (Kafka's
``KafkaZkClient.retryRequestsUntilConnected`` on a ``Seq`` of requests, which
``ZooKeeperClient.handleRequests`` sends without waiting for each answer).

ZooKeeper answers a session's requests in the order they were sent, and its server syncs the
writes that arrive together to its transaction log at once: N writes in flight cost about one
round trip and one log sync for the batch, where N writes one after the other cost N of each
(creating 1,000 partitions' states one at a time took 35-58x the same writes pipelined).
Each request stays its own request: one failing (BADVERSION, NODEEXISTS) leaves the others as
they are, exactly as when they were sent one after the other; a controller write is still
its own transaction with the ``/controller_epoch`` check (see ``controller_zk``).

At most ``MAX_IN_FLIGHT_REQUESTS`` are outstanding: a bigger batch is sent in windows of that
many, each waited for before the next (Kafka bounds them by
``zookeeper.max.in.flight.requests``; its Java client is not the cost here, kazoo's Python
per request is, so the window is wider).

The single-node store answers each request at once; a batch there is applied under one
``batch()`` of its session, which writes the store's file once for the whole batch instead of
once per request (see ``local_znode_tree``).

Thread-safety: as the session's (kazoo's client is thread-safe); the calls block the calling
thread until every answer is in, never kazoo's own threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

# requests outstanding at once on a session (1,000 partition states of ~150 bytes each)
MAX_IN_FLIGHT_REQUESTS = 1_000

AsyncRequest = Callable[[], Any]  # starts a request, returns kazoo's IAsyncResult


def send_pipelined(
    session: Any,
    requests: Sequence[AsyncRequest],
    *,
    expected_errors: tuple[type[Exception], ...] = (),
) -> list[Any]:
    """Start every request (at most ``MAX_IN_FLIGHT_REQUESTS`` outstanding) and return each
    one's result in order, or the exception it failed with when that is one of
    ``expected_errors`` (``NoNodeError`` for a read of a znode that may be gone). Any other
    failure (the connection or the session lost) raises once every request sent is answered,
    so no answer arrives for a request its caller has given up on."""
    results: list[Any] = []
    batch = getattr(session, "batch", None)
    with batch() if batch is not None else contextlib.nullcontext():
        for start in range(0, len(requests), MAX_IN_FLIGHT_REQUESTS):
            window = [request() for request in requests[start : start + MAX_IN_FLIGHT_REQUESTS]]
            failure: Exception | None = None
            for pending in window:
                try:
                    results.append(pending.get())
                except expected_errors as expected:
                    results.append(expected)
                except Exception as unexpected:
                    failure = failure or unexpected
                    results.append(unexpected)
            if failure is not None:
                raise failure
    return results


class Answered:
    """kazoo's ``IAsyncResult`` of a request answered at once (the single-node store's)."""

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self._value = value
        self._error = error

    @classmethod
    def of(cls, call: Callable[[], Any]) -> Answered:
        """``call()``'s value, or the exception it raised, as an answer."""
        try:
            return cls(value=call())
        except Exception as error:
            return cls(error=error)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._value
