"""The single-node store: the subset of ZooKeeper's data model that ``KafkaZkClient`` uses,
in one process, so that a broker started without ``zookeeper.connect`` runs the very same
controller and metadata code as a cluster (one code path), over a store that needs no server.

It is not a replacement for ZooKeeper: one process, one writer, no replication. What it keeps
of ZooKeeper's semantics is what the controller relies on:

- a tree of znodes with data, a version per znode (bumped by every set), a global zxid that
  orders changes and becomes each znode's czxid (a broker's epoch) and mzxid;
- ephemeral znodes owned by a session, removed when that session closes;
- multi-operation transactions (create, set_data, delete, check) applied all or nothing, with
  the failing operation's error and ``RolledBackError`` for the others, as kazoo returns them;
- one-shot data and children watches, fired after the change that triggers them;
- sequential znodes (``create(sequence=True)``), numbered by the parent's cversion as
  ZooKeeper numbers them (``config_change_0000000007``): the change notifications.

Persistent znodes survive restarts in ``<dir>/metadata-store.json`` (rewritten atomically
after every change: temp file, fsync, rename, fsync dir), together with the last zxid so that
czxids keep growing across restarts:

    {"version": 1, "zxid": 42, "nodes": {"/brokers/topics/t": {"data": "<base64>",
        "version": 0, "czxid": 7, "mzxid": 7}, ...}}

Errors are kazoo's (``NoNodeError``, ``NodeExistsError``, ``BadVersionError``, ...), so code
written against a kazoo client runs unchanged; the ``*_async`` calls answer at once. Thread-safety:
one lock around every operation; watches run on the caller's thread after the lock is released.

A session's ``batch()`` (what ``pipelined_requests`` sends a batch under) defers the file's
rewrite to the end of the batch: the changes the calling thread makes inside are written in
one rewrite when it ends, and only then do their watches fire, so nothing learns of a change
before it is on disk. Other threads' changes meanwhile are written (and fire) as always.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from storage_core.errors import CorruptCheckpointError
from storage_core.log.checkpoints import write_atomically
from storage_core.zk.pipelined_requests import Answered

STORE_FILE = "metadata-store.json"
FORMAT_VERSION = 1
MAX_ZNODES = 1_000_000  # a limit on everything: about 10 znodes per partition
MAX_DATA_BYTES = 1024 * 1024  # ZooKeeper's jute.maxbuffer default

Watch = Callable[[WatchedEvent], None]


@dataclass(slots=True, kw_only=True)
class _ZNode:
    data: bytes
    version: int
    czxid: int
    mzxid: int
    ctime_ms: int
    ephemeral_owner: int = 0
    cversion: int = 0


@dataclass(slots=True)
class _DeferredBatch:
    """One thread's batch: whether it changed anything, and the watches its changes fired."""

    dirty: bool = False
    fired: list[tuple[Watch, WatchedEvent]] = field(default_factory=list)


@dataclass(slots=True)
class _Watches:
    data: dict[str, list[Watch]] = field(default_factory=dict)
    children: dict[str, list[Watch]] = field(default_factory=dict)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _add_watch(watches: dict[str, list[Watch]], path: str, watch: Watch) -> None:
    """A set of watchers per znode, as ZooKeeper clients keep: the same one is added once."""
    registered = watches.setdefault(path, [])
    if watch not in registered:
        registered.append(watch)


def _validate(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise BadArgumentsError(f"invalid znode path {path!r}")


class LocalZNodeTree:
    """The store: one tree, shared by the sessions opened on it."""

    def __init__(self, directory: Path | None) -> None:
        self._file = directory / STORE_FILE if directory is not None else None
        self._lock = threading.Lock()
        self._nodes: dict[str, _ZNode] = {
            "/": _ZNode(data=b"", version=0, czxid=0, mzxid=0, ctime_ms=0)
        }
        # parent path -> names of its children: a znode's stat and listing cost its own
        # children, not a scan of the whole store
        self._child_names: dict[str, set[str]] = {}
        self._zxid = 0
        self._watches = _Watches()
        self._session_ids = itertools.count(1)
        self._batches: dict[int, _DeferredBatch] = {}  # thread ident -> its open batch
        if self._file is not None and self._file.exists():
            self._load(self._file)

    @property
    def location(self) -> str:
        return str(self._file) if self._file is not None else "in memory"

    def session(self) -> LocalSession:
        """A new session (its own ephemeral znodes), speaking kazoo's client API."""
        return LocalSession(self, next(self._session_ids))

    # --- persistence ------------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('version')!r}")
            self._zxid = int(document["zxid"])
            for znode_path, node in document["nodes"].items():
                _validate(znode_path)
                self._child_names.setdefault(_parent(znode_path), set()).add(
                    znode_path.rsplit("/", 1)[1]
                )
                self._nodes[znode_path] = _ZNode(
                    data=base64.b64decode(node["data"]),
                    version=int(node["version"]),
                    czxid=int(node["czxid"]),
                    mzxid=int(node["mzxid"]),
                    ctime_ms=int(node.get("ctime_ms", 0)),
                    cversion=int(node.get("cversion", 0)),
                )
        except (OSError, ValueError, KeyError, TypeError, BadArgumentsError) as exc:
            raise CorruptCheckpointError(
                f"cannot read the single-node metadata store {path}: {exc} (restore it from a "
                "backup, or move it away to start an empty cluster)"
            ) from exc

    def _persist(self) -> None:
        if self._file is None:
            return
        nodes = {
            p: {
                "data": base64.b64encode(n.data).decode("ascii"),
                "version": n.version,
                "czxid": n.czxid,
                "mzxid": n.mzxid,
                "ctime_ms": n.ctime_ms,
                "cversion": n.cversion,
            }
            for p, n in sorted(self._nodes.items())
            if p != "/" and n.ephemeral_owner == 0
        }
        document = {"version": FORMAT_VERSION, "zxid": self._zxid, "nodes": nodes}
        write_atomically(self._file, json.dumps(document, separators=(",", ":")))

    # --- operations (called with the lock held) ----------------------------------------------

    def _stat(self, path: str) -> ZnodeStat:
        node = self._nodes[path]
        children = self._children(path)
        return ZnodeStat(
            czxid=node.czxid,
            mzxid=node.mzxid,
            ctime=node.ctime_ms,
            mtime=node.ctime_ms,
            version=node.version,
            cversion=node.cversion,
            aversion=0,
            ephemeralOwner=node.ephemeral_owner,
            dataLength=len(node.data),
            numChildren=len(children),
            pzxid=node.mzxid,
        )

    def _children(self, path: str) -> list[str]:
        return sorted(self._child_names.get(path, ()))

    def _check_create(self, path: str, data: bytes, staged: dict[str, _ZNode | None]) -> None:
        _validate(path)
        if len(data) > MAX_DATA_BYTES:
            raise BadArgumentsError(f"{path}: {len(data)} bytes exceed {MAX_DATA_BYTES}")
        if self._get_staged(path, staged) is not None:
            raise NodeExistsError(path)
        parent = self._get_staged(_parent(path), staged)
        if parent is None:
            raise NoNodeError(_parent(path))
        if parent.ephemeral_owner:
            raise BadArgumentsError(f"{_parent(path)} is ephemeral and cannot have children")
        if len(self._nodes) >= MAX_ZNODES:
            raise BadArgumentsError(f"the store holds its limit of {MAX_ZNODES} znodes")

    def _get_staged(self, path: str, staged: dict[str, _ZNode | None]) -> _ZNode | None:
        if path in staged:
            return staged[path]
        return self._nodes.get(path)

    def apply(self, session_id: int, ops: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Apply ``ops`` all or nothing; returns kazoo's per-op results (exceptions where an op
        failed, ``RolledBackError`` for the others when one failed)."""
        fired: list[tuple[Watch, WatchedEvent]] = []
        with self._lock:
            staged: dict[str, _ZNode | None] = {}
            results: list[Any] = []
            failed = False
            zxid = self._zxid + 1
            now_ms = int(time.time() * 1000)
            for name, args in ops:
                try:
                    results.append(
                        self._stage(session_id, name, args, staged=staged, zxid=zxid, now_ms=now_ms)
                    )
                except (
                    NoNodeError,
                    NodeExistsError,
                    BadVersionError,
                    NotEmptyError,
                    BadArgumentsError,
                ) as exc:
                    results.append(exc)
                    failed = True
            if failed:
                return [r if isinstance(r, Exception) else RolledBackError() for r in results]
            if staged:
                self._zxid = zxid
                for path, node in staged.items():
                    fired.extend(self._commit(path, node))
                batch = self._batches.get(threading.get_ident())
                if batch is None:
                    self._persist()
                else:  # written and fired when the batch ends
                    batch.dirty = True
                    batch.fired.extend(fired)
                    fired = []
                results = [
                    self._stat(r[1]) if isinstance(r, tuple) and r[0] == "stat" else r
                    for r in results
                ]
        for watch, event in fired:
            watch(event)
        return results

    def _stage(
        self,
        session_id: int,
        name: str,
        args: tuple[Any, ...],
        *,
        staged: dict[str, _ZNode | None],
        zxid: int,
        now_ms: int,
    ) -> Any:
        if name == "create":
            path, data, ephemeral, *rest = args
            if rest and rest[0]:  # sequential: the parent's cversion, as ZooKeeper numbers it
                parent = self._get_staged(_parent(path), staged)
                if parent is None:
                    raise NoNodeError(_parent(path))
                path = f"{path}{parent.cversion:010d}"
            self._check_create(path, data, staged)
            staged[path] = _ZNode(
                data=data,
                version=0,
                czxid=zxid,
                mzxid=zxid,
                ctime_ms=now_ms,
                ephemeral_owner=session_id if ephemeral else 0,
            )
            return path
        if name == "set_data":
            path, data, version = args
            node = self._get_staged(path, staged)
            if node is None:
                raise NoNodeError(path)
            if version not in (-1, node.version):
                raise BadVersionError(path)
            staged[path] = _ZNode(
                data=data,
                version=node.version + 1,
                czxid=node.czxid,
                mzxid=zxid,
                ctime_ms=node.ctime_ms,
                ephemeral_owner=node.ephemeral_owner,
                cversion=node.cversion,
            )
            return ("stat", path)
        if name == "delete":
            path, version = args
            node = self._get_staged(path, staged)
            if node is None:
                raise NoNodeError(path)
            if version not in (-1, node.version):
                raise BadVersionError(path)
            if any(
                self._get_staged(f"{path}/{c}", staged) is not None for c in self._children(path)
            ) or any(p.startswith(path + "/") and n is not None for p, n in staged.items()):
                raise NotEmptyError(path)
            staged[path] = None
            return True
        if name == "check":
            path, version = args
            node = self._get_staged(path, staged)
            if node is None:
                raise NoNodeError(path)
            if version != node.version:
                raise BadVersionError(path)
            return True
        raise BadArgumentsError(f"unknown operation {name!r}")

    def _commit(self, path: str, node: _ZNode | None) -> list[tuple[Watch, WatchedEvent]]:
        existed = path in self._nodes
        parent = _parent(path)
        name = path.rsplit("/", 1)[1]
        if node is None:
            self._nodes.pop(path, None)
            siblings = self._child_names.get(parent)
            if siblings is not None:
                siblings.discard(name)
                if not siblings:
                    del self._child_names[parent]
        else:
            self._nodes[path] = node
            self._child_names.setdefault(parent, set()).add(name)
        fired = []
        if node is None or existed:
            kind = "DELETED" if node is None else "CHANGED"
            fired += [
                (w, WatchedEvent(kind, "CONNECTED", path)) for w in self._watches.data.pop(path, [])
            ]
        else:
            fired += [
                (w, WatchedEvent("CREATED", "CONNECTED", path))
                for w in self._watches.data.pop(path, [])
            ]
        if node is None or not existed:
            if parent in self._nodes:
                self._nodes[parent].cversion += 1
            fired += [
                (w, WatchedEvent("CHILD", "CONNECTED", parent))
                for w in self._watches.children.pop(parent, [])
            ]
        return fired

    def read(self, path: str, watch: Watch | None) -> tuple[bytes, ZnodeStat]:
        with self._lock:
            if watch is not None:
                _add_watch(self._watches.data, path, watch)
            if path not in self._nodes:
                raise NoNodeError(path)
            return self._nodes[path].data, self._stat(path)

    def exists(self, path: str, watch: Watch | None) -> ZnodeStat | None:
        with self._lock:
            if watch is not None:
                _add_watch(self._watches.data, path, watch)
            return self._stat(path) if path in self._nodes else None

    def children(self, path: str, watch: Watch | None) -> list[str]:
        with self._lock:
            if path not in self._nodes:
                raise NoNodeError(path)
            if watch is not None:
                _add_watch(self._watches.children, path, watch)
            return self._children(path)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The calling thread's changes inside are written to the file once, at the end, and
        their watches fire after that write (nested batches join the outer one)."""
        ident = threading.get_ident()
        if ident in self._batches:
            yield
            return
        batch = self._batches[ident] = _DeferredBatch()
        try:
            yield
        finally:
            with self._lock:
                del self._batches[ident]
                if batch.dirty:
                    self._persist()
            for watch, event in batch.fired:
                watch(event)

    def close_session(self, session_id: int) -> None:
        with self._lock:
            owned = [p for p, n in self._nodes.items() if n.ephemeral_owner == session_id]
        if owned:
            self.apply(session_id, [("delete", (p, -1)) for p in sorted(owned, reverse=True)])


class LocalTransaction:
    """kazoo's ``TransactionRequest`` over the local tree."""

    def __init__(self, session: LocalSession) -> None:
        self._session = session
        self._ops: list[tuple[str, tuple[Any, ...]]] = []

    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False
    ) -> None:
        self._ops.append(("create", (path, value, ephemeral)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(("set_data", (path, value, version)))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(("delete", (path, version)))

    def check(self, path: str, version: int) -> None:
        self._ops.append(("check", (path, version)))

    def commit(self) -> list[Any]:
        return self._session.tree.apply(self._session.session_id, self._ops)

    def commit_async(self) -> Answered:
        return Answered.of(self.commit)


class LocalSession:
    """One session on a ``LocalZNodeTree``, with the calls of kazoo's ``KazooClient`` that
    ``KafkaZkClient`` makes."""

    def __init__(self, tree: LocalZNodeTree, session_id: int) -> None:
        self.tree = tree
        self.session_id = session_id
        self.connected = False

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (self.session_id, b"") if self.connected else None

    def start(self, timeout: float = 0.0) -> None:
        self.connected = True

    def stop(self) -> None:
        if self.connected:
            self.tree.close_session(self.session_id)
        self.connected = False

    def close(self) -> None:
        """Nothing to release beyond ``stop``."""

    def _single(self, name: str, args: tuple[Any, ...]) -> Any:
        result = self.tree.apply(self.session_id, [(name, args)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> Any:
        if makepath:
            self.ensure_path(_parent(path))
        created = self._single("create", (path, value, ephemeral, sequence))
        if include_data:
            return created, self.tree.read(created, None)[1]
        return created

    def ensure_path(self, path: str, acl: Any = None) -> bool:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            try:
                self._single("create", (prefix, b"", False))
            except NodeExistsError:
                continue
        return True

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        return self.tree.read(path, watch)

    def get_async(self, path: str, watch: Watch | None = None) -> Answered:
        return Answered.of(lambda: self.tree.read(path, watch))

    def exists_async(self, path: str, watch: Watch | None = None) -> Answered:
        return Answered.of(lambda: self.tree.exists(path, watch))

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Requests sent together: the store's file is written once for all of them."""
        return self.tree.batch()

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return self.tree.exists(path, watch)

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return self.tree.children(path, watch)

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self._single("set_data", (path, value, version))

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        if recursive:
            for child in self.get_children(path):
                self.delete(f"{path}/{child}", recursive=True)
        self._single("delete", (path, version))
        return True

    def transaction(self) -> LocalTransaction:
        return LocalTransaction(self)
