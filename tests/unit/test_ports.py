"""free_port: a port a server can bind later, out of the way of outgoing connections."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from embedded import ports


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_free_port_lies_below_the_ephemeral_range_and_binds() -> None:
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST_PORT <= port < ephemeral_low()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_a_port_something_listens_on_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a registry of its own: the machine's may hold 20,000, handed out in the last minutes
    monkeypatch.setattr(ports, "REGISTRY", tmp_path / "registry")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        picks = iter([taken_port, taken_port, 20_000])
        monkeypatch.setattr(random.SystemRandom, "randint", lambda self, a, b: next(picks))
        assert ports.free_port() == 20_000


def test_without_the_kernels_range_linuxs_default_bounds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", tmp_path / "missing")
    assert ports.LOWEST_PORT <= ports.free_port() < ports.DEFAULT_EPHEMERAL_LOW


def test_a_port_handed_out_is_not_handed_out_again_until_its_reservation_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two processes picking the same free port at once both found it free: the registry
    file they share keeps the second from taking it."""
    monkeypatch.setattr(ports, "REGISTRY", tmp_path / "registry")
    picks = iter([20_000, 20_000, 20_001])
    monkeypatch.setattr(random.SystemRandom, "randint", lambda self, a, b: next(picks))
    assert ports.free_port() == 20_000
    assert ports.free_port() == 20_001  # 20,000 still binds, but is reserved
    assert sorted(
        int(line.split()[0]) for line in (tmp_path / "registry").read_text().splitlines()
    ) == [20_000, 20_001]

    later = ports.time.time() + ports.RESERVED_S + 1
    monkeypatch.setattr(ports.time, "time", lambda: later)
    picks = iter([20_000])
    assert ports.free_port() == 20_000  # its reservation ended
    assert (tmp_path / "registry").read_text().split()[0] == "20000"

    monkeypatch.setattr(ports, "REGISTRY", tmp_path / "missing-dir" / "registry")
    picks = iter([20_002, 20_002, 20_003])
    assert ports.free_port() == 20_002  # without the file, the process remembers alone
    assert ports.free_port() == 20_003
