"""Counting a thread's ZooKeeper round trips: the times it waited for ZooKeeper's answer.

A synchronous call (``get``, ``create``, ``transaction().commit()``, ...) is one round trip. A
request started asynchronously (``get_async``, ``commit_async``) is answered while others are
in flight: waiting for any number of them, started since the thread last waited, is one round
trip. So writing N partition states one after the other costs N round trips; pipelined, one
per window of requests in flight. A request kazoo has no call for (multiRead, sent with
``_call`` on an ``async_result()`` of the client's handler) counts as an asynchronous one.

    counter = RoundTrips.install(node.zk, thread_prefix="controller-event-thread")
    ...
    counter.round_trips, counter.requests
"""

from __future__ import annotations

import threading
from typing import Any

_SYNC_CALLS = ("get", "create", "set", "delete", "exists", "get_children", "ensure_path")
_ASYNC_CALLS = (
    "get_async",
    "create_async",
    "set_async",
    "delete_async",
    "exists_async",
    "get_children_async",
)


class RoundTrips:
    """A proxy of a kazoo client (or the single-node store's session) that counts the round
    trips and requests of the threads whose name starts with ``thread_prefix``."""

    def __init__(self, session: Any, thread_prefix: str) -> None:
        self._session = session
        self._prefix = thread_prefix
        self._lock = threading.Lock()
        self._started_since_wait = False
        self.round_trips = 0
        self.requests = 0

    @classmethod
    def install(cls, zk_client: Any, *, thread_prefix: str) -> RoundTrips:
        """Put a counter between ``zk_client`` (a ``ZooKeeperClient``) and its session."""
        counter = cls(zk_client.zk, thread_prefix)
        zk_client.zk = counter
        return counter

    def reset(self) -> None:
        with self._lock:
            self.round_trips = self.requests = 0
            self._started_since_wait = False

    def _counted(self) -> bool:
        return threading.current_thread().name.startswith(self._prefix)

    def _sync(self, name: str) -> Any:
        call = getattr(self._session, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if self._counted():
                with self._lock:
                    self.round_trips += 1
                    self.requests += 1
            return call(*args, **kwargs)

        return counted

    def _started(self, result: Any) -> Any:
        if not self._counted():
            return result
        with self._lock:
            self.requests += 1
            self._started_since_wait = True
        return _Waited(result, self)

    def _waited(self) -> None:
        with self._lock:
            if self._started_since_wait:
                self.round_trips += 1
                self._started_since_wait = False

    def transaction(self) -> Any:
        return _Transaction(self._session.transaction(), self)

    @property
    def handler(self) -> Any:
        return _Handler(self._session.handler, self)

    def _forward_call(self, request: Any, async_object: Any) -> Any:
        real = async_object._result if isinstance(async_object, _Waited) else async_object
        return self._session._call(request, real)

    def __getattr__(self, name: str) -> Any:
        if name == "_call":  # kazoo's raw request path, only where the session has one
            getattr(self._session, "_call")  # noqa: B009 (raises AttributeError otherwise)
            return self._forward_call
        if name in _SYNC_CALLS:
            return self._sync(name)
        if name in _ASYNC_CALLS:
            call = getattr(self._session, name)
            return lambda *args, **kwargs: self._started(call(*args, **kwargs))
        return getattr(self._session, name)


class _Waited:
    def __init__(self, result: Any, counter: RoundTrips) -> None:
        self._result = result
        self._counter = counter

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if self._counter._counted():
            self._counter._waited()
        return self._result.get(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


class _Handler:
    def __init__(self, handler: Any, counter: RoundTrips) -> None:
        self._handler = handler
        self._counter = counter

    def async_result(self) -> Any:
        return self._counter._started(self._handler.async_result())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)


class _Transaction:
    def __init__(self, transaction: Any, counter: RoundTrips) -> None:
        self._transaction = transaction
        self._counter = counter

    def commit(self) -> Any:
        if self._counter._counted():
            with self._counter._lock:
                self._counter.round_trips += 1
                self._counter.requests += 1
        return self._transaction.commit()

    def commit_async(self) -> Any:
        return self._counter._started(self._transaction.commit_async())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transaction, name)
