"""The demo's background producer (``embedded.workload.BackgroundProducer``, kafka-python) says
why it stopped: a producer that cannot even reach its bootstrap server stops with the client's
own error and its last warnings, so a demo that fails while a leader is killed names what the
client saw, not only a count of acknowledged records."""

from __future__ import annotations

import socket

import pytest

from embedded.workload import BackgroundProducer, ProduceStalledError


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_producer_that_cannot_connect_stops_with_the_clients_error_and_warnings() -> None:
    producer = BackgroundProducer(
        f"127.0.0.1:{closed_port()}",
        "events",
        partitions=1,
        first_index=0,
        records_per_partition=10,
        bootstrap_timeout_ms=3000,
    ).start()
    try:
        with pytest.raises(ProduceStalledError) as stalled:
            producer.join(60)
    finally:
        producer.stop()
    message = str(stalled.value)
    assert "producing stopped after 0 records per partition" in message
    assert "Unable to bootstrap" in message  # the client's error
    assert "the client's last warnings" in message
    assert "ECONNREFUSED" in message
