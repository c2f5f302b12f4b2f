"""The ZooKeeper the cluster is coordinated through: a real server from the jars pyspark ships,
standalone and as a 3-node ensemble on loopback, driven with kazoo as the brokers will be."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from embedded.processes import group_alive
from embedded.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperUnavailableError,
    four_letter_word,
    java_executable,
)

try:
    java_executable()
except ZooKeeperUnavailableError as missing:
    pytest.skip(str(missing), allow_module_level=True)


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15.0)
    return client


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path, size=3) as zk:
        yield zk


def test_standalone_server_serves_and_stops_without_leftovers(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble(tmp_path, size=1).start()
    server = zk.servers[0]
    try:
        assert server.mode() == "standalone"
        assert four_letter_word(server.client_port, "ruok") == "imok"
        root = _client(zk.connect_string)
        root.ensure_path("/storage-core")
        client = _client(f"{zk.connect_string}/storage-core")
        try:
            client.ensure_path("/brokers/ids")
            client.create("/brokers/ids/0", b"{}", ephemeral=True)
            assert client.get_children("/brokers/ids") == ["0"]
        finally:
            client.stop()
        # the chroot is a real path in the tree; the ephemeral node left with its session
        try:
            assert root.get_children("/storage-core/brokers/ids") == []
        finally:
            root.stop()
    finally:
        zk.stop()
    assert server.process is not None
    assert not group_alive(server.process.pid)


def test_ensemble_keeps_serving_when_a_server_dies(ensemble: ZooKeeperEnsemble) -> None:
    modes = sorted(s.mode() or "none" for s in ensemble.servers)
    assert modes == ["follower", "follower", "leader"]
    client = _client(ensemble.connect_string)
    try:
        client.create("/before", b"1")
        leader = ensemble.leader()
        assert leader is not None
        leader.kill()

        # the two left elect a new leader and the client's session moves to one of them
        deadline = time.monotonic() + 30.0
        while True:
            try:
                client.create("/after", b"2")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        survivors = [s for s in ensemble.servers if s is not leader]
        assert sorted(s.mode() or "none" for s in survivors) == ["follower", "leader"]
        assert client.get("/before")[0] == b"1"

        # the dead server comes back as a follower and has everything written without it
        leader.start()
        ensemble.wait_until_serving(30.0)
        assert leader.mode() == "follower"
        own = _client(f"127.0.0.1:{leader.client_port}")
        try:
            own.sync("/after")
            assert own.get("/after")[0] == b"2"
        finally:
            own.stop()
    finally:
        client.stop()


def test_missing_java_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ZooKeeperUnavailableError, match="java"):
        java_executable()
