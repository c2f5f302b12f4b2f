"""A real broker process with a short ``connections.max.idle.ms`` against idle, busy, slow and
too many connections, over raw sockets.

- a connection that sends nothing is closed once the idle time has passed;
- one that keeps sending requests stays open far beyond it;
- one whose request the broker is still serving (a Fetch long-poll longer than the idle
  time) is not idle, and gets its response;
- one that trickles a frame a byte at a time is active, yet closed once the frame is older
  than the idle time, with a line naming it;
- one that asks for a large Fetch and never reads the response is cut off once nothing
  more could be sent to it for the idle time, and its descriptor is given back;
- ``max.connections.per.ip`` refuses the connection over the cap, and only that one.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.raw_wire import api_versions, call, connect, is_closed_by_peer

pytestmark = pytest.mark.timeout(120)

IDLE_MS = 1_500
MAX_CONNECTIONS_PER_IP = 6
TOPIC = "quiet"
BIG_TOPIC = "big"
BIG_VALUE_BYTES = 200_000
BIG_VALUES = 80  # 16 MB: far more than the socket buffers of both ends hold
FETCH_V = 12


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("idle")
    with BrokerProcess(
        directory,
        overrides={
            "connections.max.idle.ms": str(IDLE_MS),
            "max.connections.per.ip": str(MAX_CONNECTIONS_PER_IP),
        },
    ) as process:
        raw_wire.create_topic(process.port, TOPIC)
        producer = KafkaProducer(bootstrap_servers=process.bootstrap, linger_ms=0)
        for future in [
            producer.send(BIG_TOPIC, value=bytes([i]) * BIG_VALUE_BYTES) for i in range(BIG_VALUES)
        ]:
            future.get(timeout=30)
        producer.close()
        yield process


def seconds_until_closed(sock: socket.socket, *, timeout_s: float) -> float:
    start = time.monotonic()
    assert is_closed_by_peer(sock, timeout_s=timeout_s), f"still open after {timeout_s}s"
    return time.monotonic() - start


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(
    broker: BrokerProcess,
) -> None:
    with connect(broker.port) as sock:
        assert api_versions(sock).error_code == ErrorCode.none
        started = time.monotonic()
        assert not is_closed_by_peer(sock, timeout_s=IDLE_MS / 1000 * 0.5), "closed too early"
        assert is_closed_by_peer(sock, timeout_s=IDLE_MS / 1000 * 4)
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9


def test_a_connection_with_requests_more_often_than_the_idle_time_stays_open(
    broker: BrokerProcess,
) -> None:
    with connect(broker.port) as sock:
        deadline = time.monotonic() + IDLE_MS / 1000 * 3
        while time.monotonic() < deadline:
            assert api_versions(sock).error_code == ErrorCode.none
            time.sleep(IDLE_MS / 1000 / 3)


def fetch_fields(topic: str, *, wait_ms: int, max_bytes: int) -> dict[str, object]:
    module = raw_wire.request_classes(1, FETCH_V)
    partition = raw_wire.build(
        module.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    return {
        "max_wait": datetime.timedelta(milliseconds=wait_ms),
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": (module.FetchTopic(topic=topic, partitions=(partition,)),),
        "forgotten_topics_data": (),
        "rack_id": "",
    }


def test_a_request_being_served_longer_than_the_idle_time_is_not_idle(
    broker: BrokerProcess,
) -> None:
    wait_ms = IDLE_MS * 2
    with connect(broker.port) as sock:
        started = time.monotonic()
        # The topic is empty: the broker holds the fetch for max_wait.
        body = call(sock, 1, FETCH_V, **fetch_fields(TOPIC, wait_ms=wait_ms, max_bytes=1 << 20))
        assert time.monotonic() - started >= wait_ms / 1000 * 0.9
        assert body.responses[0].partitions[0].error_code == ErrorCode.none
        assert api_versions(sock).error_code == ErrorCode.none, "closed after its response"


def test_a_frame_trickled_a_byte_at_a_time_is_closed_at_its_deadline(
    broker: BrokerProcess,
) -> None:
    frame = raw_wire.request_bytes(18, 3, client_software_name="x", client_software_version="1")
    with connect(broker.port) as sock:
        port = sock.getsockname()[1]
        started = time.monotonic()
        sent = 0
        try:
            for byte in frame:  # a byte every tenth of the idle time: never idle
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(IDLE_MS / 1000 / 10)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < len(frame), "the whole frame went through: no deadline"
        assert is_closed_by_peer(sock, timeout_s=IDLE_MS / 1000 * 2)
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9
    deadline = time.monotonic() + 5
    wanted = f"client=127.0.0.1:{port} reason=a request of {len(frame) - 4} bytes was not received"
    while wanted not in broker.output_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no line {wanted!r}"
        time.sleep(0.1)


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_client_that_never_reads_its_response_is_cut_off(broker: BrokerProcess) -> None:
    assert broker.process is not None
    descriptors_before = open_descriptors(broker.process.pid)
    total_bytes = BIG_VALUE_BYTES * BIG_VALUES
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    with sock:
        sock.connect(("127.0.0.1", broker.port))
        fields = fetch_fields(BIG_TOPIC, wait_ms=0, max_bytes=50 * 1024 * 1024)
        sock.sendall(raw_wire.request_bytes(1, FETCH_V, **fields))
        time.sleep(IDLE_MS / 1000 * 3)  # reads nothing
        received_bytes = 0
        sock.settimeout(10)
        closed = True
        try:
            while chunk := sock.recv(1 << 20):
                received_bytes += len(chunk)
        except ConnectionResetError:
            pass
        except TimeoutError:
            closed = False
    assert closed, "the broker kept the connection open"
    assert received_bytes < total_bytes, "the whole response waited for the client"
    deadline = time.monotonic() + 5
    while open_descriptors(broker.process.pid) > descriptors_before:
        assert time.monotonic() < deadline, "the connection's descriptor was kept"
        time.sleep(0.1)


def test_max_connections_per_ip_refuses_only_the_connection_over_the_cap(
    broker: BrokerProcess,
) -> None:
    time.sleep(0.3)  # connections of earlier tests are gone
    socks = [connect(broker.port) for _ in range(MAX_CONNECTIONS_PER_IP)]
    try:
        for sock in socks:
            assert api_versions(sock).error_code == ErrorCode.none
        with connect(broker.port) as over:
            over.sendall(  # a valid request: it is not answered, the connection is refused
                raw_wire.request_bytes(18, 3, client_software_name="x", client_software_version="1")
            )
            assert is_closed_by_peer(over)
        for sock in socks:
            assert api_versions(sock).error_code == ErrorCode.none
        socks.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the broker notices the close, then has a slot again
            with connect(broker.port) as again:
                try:
                    assert api_versions(again).error_code == ErrorCode.none
                    break
                except ConnectionError:
                    assert time.monotonic() < deadline, "the freed slot never came back"
                    time.sleep(0.1)
    finally:
        for sock in socks:
            sock.close()
    assert "address already has the configured maximum of 6 connections" in (
        broker.output_path.read_text(errors="replace")
    )
