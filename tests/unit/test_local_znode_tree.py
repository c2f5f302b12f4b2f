"""The single-node store keeps the ZooKeeper semantics the controller relies on: versions,
all-or-nothing transactions with kazoo's per-operation results, ephemerals owned by a session,
one-shot watches fired after the change."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import WatchedEvent

from storage_core.zk.local_znode_tree import LocalZNodeTree


def test_versions_and_zxids() -> None:
    zk = LocalZNodeTree(None).session()
    zk.start()
    zk.ensure_path("/a")
    _, first = zk.get("/a")
    assert first.version == 0
    changed = zk.set("/a", b"x")
    assert (changed.version, changed.czxid) == (1, first.czxid)
    assert changed.mzxid > first.mzxid
    with pytest.raises(BadVersionError):
        zk.set("/a", b"y", version=0)
    assert zk.get("/a")[0] == b"x"


def test_a_transaction_is_all_or_nothing() -> None:
    zk = LocalZNodeTree(None).session()
    zk.ensure_path("/epoch")
    tx = zk.transaction()
    tx.check("/epoch", 0)
    tx.create("/new", b"1")
    tx.set_data("/epoch", b"2", version=5)
    results = tx.commit()
    assert isinstance(results[0], RolledBackError)
    assert isinstance(results[1], RolledBackError)
    assert isinstance(results[2], BadVersionError)
    assert zk.exists("/new") is None
    tx = zk.transaction()
    tx.check("/epoch", 0)
    tx.create("/new", b"1")
    assert tx.commit()[:2] == [True, "/new"]


def test_ephemerals_belong_to_their_session() -> None:
    tree = LocalZNodeTree(None)
    owner, other = tree.session(), tree.session()
    owner.start()
    other.start()
    owner.ensure_path("/ids")
    owner.create("/ids/1", b"", ephemeral=True)
    assert other.exists("/ids/1").ephemeralOwner == owner.session_id
    with pytest.raises(BadArgumentsError, match="ephemeral"):
        owner.create("/ids/1/child")
    with pytest.raises(NodeExistsError):
        other.create("/ids/1", b"", ephemeral=True)
    owner.stop()
    assert other.get_children("/ids") == []


def test_watches_fire_once_after_the_change() -> None:
    zk = LocalZNodeTree(None).session()
    zk.ensure_path("/brokers/ids")
    events: list[WatchedEvent] = []
    assert zk.get_children("/brokers/ids", watch=events.append) == []
    zk.create("/brokers/ids/1", b"")
    zk.create("/brokers/ids/2", b"")  # the watch was one-shot: no second event
    assert [(e.type, e.path) for e in events] == [("CHILD", "/brokers/ids")]
    events.clear()
    zk.get("/brokers/ids/1", watch=events.append)
    zk.set("/brokers/ids/1", b"x")
    zk.exists("/later", watch=events.append)
    zk.create("/later")
    assert [(e.type, e.path) for e in events] == [
        ("CHANGED", "/brokers/ids/1"),
        ("CREATED", "/later"),
    ]


def test_deletes_need_an_empty_znode() -> None:
    zk = LocalZNodeTree(None).session()
    zk.ensure_path("/t/partitions/0")
    with pytest.raises(NotEmptyError):
        zk.delete("/t")
    with pytest.raises(NoNodeError):
        zk.delete("/missing")
    zk.delete("/t", recursive=True)
    assert zk.exists("/t") is None


def test_persistent_znodes_are_on_disk_after_each_change(tmp_path: Path) -> None:
    zk = LocalZNodeTree(tmp_path).session()
    zk.ensure_path("/config/topics")
    zk.create("/config/topics/t", b'{"version":1}')
    zk.create("/gone", b"", ephemeral=True)
    reopened = LocalZNodeTree(tmp_path).session()
    assert reopened.get("/config/topics/t")[0] == b'{"version":1}'
    assert reopened.exists("/gone") is None


def test_sequential_znodes_are_numbered_by_the_parent_cversion_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    zk = LocalZNodeTree(tmp_path).session()
    zk.start()
    zk.ensure_path("/config/changes")
    first = zk.create("/config/changes/config_change_", b"a", sequence=True)
    second = zk.create("/config/changes/config_change_", b"b", sequence=True)
    assert (first, second) == (
        "/config/changes/config_change_0000000000",
        "/config/changes/config_change_0000000001",
    )
    zk.delete(first)
    zk.delete(second)
    # numbers never come back, not even after the children are gone or the store restarts
    again = LocalZNodeTree(tmp_path).session()
    again.start()
    third = again.create("/config/changes/config_change_", b"c", sequence=True)
    assert third == "/config/changes/config_change_0000000004"
    assert again.get(third)[0] == b"c"


def test_a_batch_writes_the_file_once_and_fires_its_watches_after_that(tmp_path: Path) -> None:
    tree = LocalZNodeTree(tmp_path)
    writer, watcher = tree.session(), tree.session()
    writer.ensure_path("/states")
    for name in ("a", "b"):
        writer.create(f"/states/{name}", b"0")
    seen_on_disk: list[tuple[str, str | None]] = []

    def on_change(event: WatchedEvent) -> None:  # what a fresh store on the file would hold
        fresh = LocalZNodeTree(tmp_path).session()
        seen_on_disk.append((event.path, fresh.get(event.path)[0].decode()))

    for name in ("a", "b"):
        watcher.get(f"/states/{name}", watch=on_change)
    with writer.batch():
        writer.transaction().commit_async()  # an empty transaction changes nothing
        for name in ("a", "b"):
            tx = writer.transaction()
            tx.set_data(f"/states/{name}", b"1", 0)
            assert tx.commit_async().get()[0].version == 1
        assert seen_on_disk == []  # not before the batch is on disk
        assert LocalZNodeTree(tmp_path).session().get("/states/a")[0] == b"0"
        # another session's read sees the batch's changes at once
        assert watcher.get("/states/b")[0] == b"1"
    assert seen_on_disk == [("/states/a", "1"), ("/states/b", "1")]
    with pytest.raises(NoNodeError):
        writer.get_async("/states/missing").get()
