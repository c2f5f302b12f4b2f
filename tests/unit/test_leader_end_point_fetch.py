"""RemoteLeaderEndPoint.fetch over a real socket to a peer that answers with chosen bytes:
what the follower makes of a good answer, and the clear error (and a new connection) it gets
from one that is not a Fetch v12 response."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kio.schema.errors import ErrorCode

from storage_core.client.errors import ProtocolMismatchError
from storage_core.client.replica_fetch_codec import API_KEY, VERSION
from storage_core.common import TopicPartition
from storage_core.replication.leader_end_point import FetchPartitionRequest, RemoteLeaderEndPoint
from storage_core.replication.offset_truncation import EpochEndOffset
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from tests.unit.test_replica_fetch_codec import _broker_response

TP = TopicPartition("events", 2)
REQUEST = {
    TP: FetchPartitionRequest(
        fetch_offset=40, log_start_offset=0, current_leader_epoch=3, last_fetched_epoch=None
    )
}


@contextmanager
def peer(*bodies: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """A listener that answers each request frame with the next body (after a response header
    v1 with the request's correlation id), one connection per body; yields its port and the
    request frames it got."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        for body in bodies:
            connection, _ = server.accept()
            with connection:
                (size,) = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))
                frame = connection.recv(size, socket.MSG_WAITALL)
                received.append(frame)
                correlation_id = frame[4:8]
                answer = correlation_id + b"\x00" + body
                connection.sendall(struct.pack(">i", len(answer)) + answer)
                connection.recv(1)  # until the follower closes or sends again

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        server.close()
        thread.join(5)


def endpoint(port: int) -> RemoteLeaderEndPoint:
    return RemoteLeaderEndPoint(
        source_broker_id=1,
        local_broker_id=2,
        endpoint_of=lambda _broker: ("127.0.0.1", port),
        config=ReplicaFetcherConfig(socket_timeout_ms=5000),
        client_id="broker-2-fetcher-0",
    )


def test_a_fetch_carries_the_replica_and_gets_the_leaders_batches() -> None:
    with peer(_broker_response((3, 17), b"batches")) as (port, received):
        leader = endpoint(port)
        try:
            answer = leader.fetch(REQUEST)
        finally:
            leader.close()
    assert answer[TP].error == ErrorCode.none
    assert (answer[TP].high_watermark, answer[TP].log_start_offset) == (40, 5)
    assert answer[TP].records == b"batches"
    assert answer[TP].diverging_epoch == EpochEndOffset(epoch=3, end_offset=17)
    (frame,) = received
    api_key, version = struct.unpack_from(">hh", frame)
    assert (api_key, version) == (API_KEY, VERSION)
    replica_id, max_wait_ms = struct.unpack_from(
        ">ii", frame, frame.index(b"broker-2-fetcher-0") + 19
    )
    assert (replica_id, max_wait_ms) == (2, 500)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_broker_response(None, b"batches") + b"\x00", "1 trailing bytes"),
        (_broker_response(None, b"batches")[:-9], "cannot decode a Fetch v12 response"),
        (b"\x00\x00\x00\x00\x7f\xff" + _broker_response(None, b"")[6:], "unknown error code 32767"),
    ],
)
def test_an_answer_that_is_no_fetch_response_is_refused_and_the_connection_dropped(
    body: bytes, message: str
) -> None:
    good = _broker_response(None, b"after")
    with peer(body, good) as (port, received):
        leader = endpoint(port)
        try:
            with pytest.raises(ProtocolMismatchError, match=message):
                leader.fetch(REQUEST)
            # The next request goes out on a new connection and is answered.
            assert leader.fetch(REQUEST)[TP].records == b"after"
        finally:
            leader.close()
    assert len(received) == 2
