"""A real broker process against connections that each declare a 100 MiB request and send
most of it, then stop: the broker's resident memory stays within ``queued.max.request.bytes``
plus a margin, a kafka-python producer and consumer are served meanwhile, and the memory is
returned once the half-sent frames are abandoned. Memory is read from /proc/<pid>/status."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(180)

MiB = 1024 * 1024
DECLARED_BYTES = 100 * MiB  # socket.request.max.bytes, Kafka's default
SENT_BYTES = 90 * MiB
GREEDY_CONNECTIONS = 6
QUEUED_MAX_REQUEST_BYTES = DECLARED_BYTES + 10 * MiB
RSS_MARGIN_BYTES = 64 * MiB
RETURNED_MARGIN_BYTES = 40 * MiB
TOPIC = "served"
MESSAGES = 50
TIMEOUT_S = 30


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/<pid>/status")


class GreedySender:
    """Declares a frame of DECLARED_BYTES, sends SENT_BYTES of it, then waits."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.sock.settimeout(None)  # blocks while the broker does not read
        self.sent_bytes = 0
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        chunk = b"\x00" * MiB
        with contextlib.suppress(OSError):
            self.sock.sendall(struct.pack(">i", DECLARED_BYTES))
            while self.sent_bytes < SENT_BYTES:
                self.sock.sendall(chunk)
                self.sent_bytes += len(chunk)

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(TIMEOUT_S)
        self.sock.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path, overrides={"queued.max.request.bytes": str(QUEUED_MAX_REQUEST_BYTES)}
    ) as process:
        raw_wire.create_topic(process.port, TOPIC)
        yield process


def produce_and_consume(broker: BrokerProcess, first: int) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for future in [
            producer.send(TOPIC, value=b"m%d" % i) for i in range(first, first + MESSAGES)
        ]:
            future.get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, first)
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < MESSAGES and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        assert values == [b"m%d" % i for i in range(first, first + MESSAGES)]
    finally:
        consumer.close()


def test_half_sent_100_mib_frames_stay_within_the_bound_and_are_given_back(
    broker: BrokerProcess,
) -> None:
    assert broker.process is not None
    pid = broker.process.pid
    produce_and_consume(broker, 0)  # the clients' own footprint is in the baseline
    baseline_bytes = rss_bytes(pid)
    senders = [GreedySender(broker.port) for _ in range(GREEDY_CONNECTIONS)]
    try:
        # Until the broker stops taking bytes: one frame has its reservation and all of its
        # bytes in, the others wait for room (their bytes sit in kernel buffers).
        deadline = time.monotonic() + 60
        while sum(s.sent_bytes for s in senders) < SENT_BYTES and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        peak_bytes = rss_bytes(pid)
        produce_and_consume(broker, MESSAGES)  # served while the pool holds a 100 MiB frame
        peak_bytes = max(peak_bytes, rss_bytes(pid))
        growth_mib = (peak_bytes - baseline_bytes) / MiB
        sent_mib = sum(s.sent_bytes for s in senders) / MiB
        print(
            f"baseline {baseline_bytes / MiB:.0f} MiB, growth {growth_mib:.0f} MiB,"
            f" sent {sent_mib:.0f} MiB"
        )
        assert sum(s.sent_bytes for s in senders) >= SENT_BYTES, "the broker read too little"
        assert peak_bytes - baseline_bytes <= QUEUED_MAX_REQUEST_BYTES + RSS_MARGIN_BYTES, (
            f"RSS grew by {(peak_bytes - baseline_bytes) / MiB:.0f} MiB with"
            f" queued.max.request.bytes={QUEUED_MAX_REQUEST_BYTES / MiB:.0f} MiB"
        )
    finally:
        for sender in senders:
            sender.abandon()
    deadline = time.monotonic() + 20
    while rss_bytes(pid) - baseline_bytes > RETURNED_MARGIN_BYTES:
        assert time.monotonic() < deadline, (
            f"RSS still {(rss_bytes(pid) - baseline_bytes) / MiB:.0f} MiB above the baseline"
            " after the frames were abandoned"
        )
        time.sleep(0.2)
    print(f"after abandon {(rss_bytes(pid) - baseline_bytes) / MiB:.0f} MiB above the baseline")
    produce_and_consume(broker, 2 * MESSAGES)
