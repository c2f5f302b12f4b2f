"""``DestinationSender``: the thread of the transaction marker channel that sends the markers
queued for one destination broker (the part of Kafka's ``InterBrokerSendThread`` that talks
to one node), on one blocking connection over the inter-broker listener that it keeps open
between requests and opens again after a failure.

Each round takes what is queued for its broker (``take_batch``: one WriteTxnMarkers v1
request, at most ``MARKERS_PER_REQUEST_MAX`` markers), sends it, and hands the answer, or
the failure (no endpoint, refused or lost connection, timeout, an answer that does not fit
the request), back to its host, which decides what each partition's answer means.

Thread-safety: the sender's thread alone uses the connection; ``initiate_close`` may be
called from another thread to unblock a request in flight (shutdown).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

from storage_core.client.connection import ConnectionConfig, KafkaConnection
from storage_core.client.errors import ClientError
from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_marker_entries import (
    MarkerResponseMismatchError,
    TxnMarkerEntry,
    partition_errors,
    write_txn_markers_request,
)
from storage_core.security.client_transport import TlsHandshakeError, open_socket

_JOIN_TIMEOUT_S = 30.0


class QueuedMarker(Protocol):
    @property
    def entry(self) -> TxnMarkerEntry: ...


Q = TypeVar("Q", bound=QueuedMarker)


class MarkerSenderHost(Protocol[Q]):
    """What a sender needs of the channel manager."""

    @property
    def broker_id(self) -> int: ...

    @property
    def connection_config(self) -> ConnectionConfig: ...

    def take_batch(self, broker: int) -> list[Q] | None:
        """The markers queued for ``broker`` (waits for some); None once stopping."""
        ...

    def endpoint(self, broker: int) -> tuple[str, int] | None: ...

    def is_stopping(self) -> bool: ...

    def handle_failure(self, broker: int, batch: list[Q], reason: str) -> None: ...

    def handle_response(
        self, broker: int, batch: list[Q], answers: list[dict[TopicPartition, ErrorCode]]
    ) -> None: ...


class DestinationSender(Generic[Q]):
    """The thread that sends the markers queued for ``broker``."""

    def __init__(self, host: MarkerSenderHost[Q], broker: int) -> None:
        self._host = host
        self.broker = broker
        self._connection: KafkaConnection | None = None
        self._socket: socket.socket | None = None
        self._socket_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run,
            name=f"TxnMarkerSender-{host.broker_id}-to-{broker}",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def initiate_close(self) -> None:
        """From another thread: unblock the request in flight."""
        with self._socket_lock:
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the sender
                sock.shutdown(socket.SHUT_RDWR)

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join(_JOIN_TIMEOUT_S)
        self._disconnect()

    def _run(self) -> None:
        host = self._host
        while True:
            batch = host.take_batch(self.broker)
            if batch is None:
                self._disconnect()
                return
            try:
                answers = self._send([queued.entry for queued in batch])
            except (ClientError, OSError, MarkerResponseMismatchError) as error:
                self._disconnect()
                host.handle_failure(self.broker, batch, str(error))
                continue
            host.handle_response(self.broker, batch, answers)

    def _send(self, entries: Sequence[TxnMarkerEntry]) -> list[dict[TopicPartition, ErrorCode]]:
        connection = self._connect()
        response = connection.send(write_txn_markers_request(entries), WriteTxnMarkersResponse)
        return partition_errors(entries, response)

    def _connect(self) -> KafkaConnection:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        address = self._host.endpoint(self.broker)
        if address is None:
            raise ConnectionError(
                f"broker {self.broker} has no endpoint of the inter-broker listener in the"
                " metadata; waiting for it to register"
            )
        host, port = address
        config = self._host.connection_config
        try:
            sock = open_socket(
                host, port, config.security, timeout_s=config.connect_timeout_ms / 1000
            )
        except TlsHandshakeError as error:
            raise ConnectionError(str(error)) from None
        connection = KafkaConnection(sock, host=host, port=port, config=config)
        with self._socket_lock:
            self._connection, self._socket = connection, sock
        if self._host.is_stopping():  # shut down while connecting: do not send
            self._disconnect()
            raise ConnectionError("the transaction marker channel is shutting down")
        return connection

    def _disconnect(self) -> None:
        with self._socket_lock:
            connection, self._connection, self._socket = self._connection, None, None
        if connection is not None:
            connection.close()
