"""DescribeTransactions v0 answers, read by hand: kio's reader refuses the int64 -1 that
Kafka (and the broker) send as ``transaction_start_time_ms`` when no transaction is open."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from kio.serial.readers import read_unsigned_varint

from tests.integration.raw_wire import call, recv_exactly, request_bytes

DESCRIBE_TRANSACTIONS_KEY = 65


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: dict[str, list[int]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value, used = read_unsigned_varint(self.data, self.offset)
        self.offset += used
        return int(value)

    def string(self) -> str:
        size = self.uvarint() - 1
        text = self.data[self.offset : self.offset + size].decode()
        self.offset += size
        return text

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.offset += self.uvarint()


def describe_transactions(
    sock: socket.socket, transactional_ids: tuple[str, ...]
) -> list[DescribedTransaction]:
    sock.sendall(
        request_bytes(DESCRIBE_TRANSACTIONS_KEY, 0, 5, transactional_ids=transactional_ids)
    )
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    reader = _Reader(recv_exactly(sock, size))
    assert reader.take(">i") == 5
    reader.skip_tags()  # response header v1
    reader.take(">i")  # throttle time
    described = []
    for _ in range(reader.uvarint() - 1):
        error_code = reader.take(">h")
        txn_id = reader.string()
        state = reader.string()
        timeout_ms = reader.take(">i")
        start_ms = reader.take(">q")
        producer_id = reader.take(">q")
        producer_epoch = reader.take(">h")
        topics: dict[str, list[int]] = {}
        for _ in range(reader.uvarint() - 1):
            topic = reader.string()
            topics[topic] = [reader.take(">i") for _ in range(reader.uvarint() - 1)]
            reader.skip_tags()
        reader.skip_tags()
        described.append(
            DescribedTransaction(
                error_code, txn_id, state, timeout_ms, start_ms, producer_id, producer_epoch, topics
            )
        )
    reader.skip_tags()
    assert reader.offset == len(reader.data), "trailing bytes in DescribeTransactions"
    return described


def await_coordinator(sock: socket.socket, transactional_id: str, timeout_s: float = 30.0) -> int:
    """FindCoordinator (key type 1) until it names a broker, as a client starts: the first one
    creates ``__transaction_state``; returns the coordinator's broker id."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call(sock, 10, 3, key=transactional_id, key_type=1)
        if answer.error_code == 0:
            return int(answer.node_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"no coordinator for {transactional_id!r}: {answer}")
        time.sleep(0.1)
