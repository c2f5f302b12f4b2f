"""The ``meta.properties`` file of a log dir (Kafka's ``BrokerMetadataCheckpoint``, ZooKeeper
mode): which broker and which cluster the directory belongs to.

File format (Java ``.properties``, as Kafka's ``Properties.store`` writes it; version 0 is the
ZooKeeper-mode layout)::

    #
    #<date>
    cluster.id=<cluster id, 22 characters of URL-safe base64>
    version=0
    broker.id=<broker id>

Reading accepts what Kafka's loader accepts: ``#``/``!`` comments, ``=`` or ``:`` separators,
keys in any order, and the version 1 (KRaft) layout whose ``node.id`` stands for the broker.

At start a broker writes the file into each of its log dirs that lacks one (temp file,
fsync, rename, fsync the directory) and refuses to start when a log dir's file names
another cluster (``InconsistentClusterIdError``) or another broker
(``InconsistentBrokerIdError``), with Kafka's messages plus the directory: the directory
then belongs to another broker, and nothing in it is touched. Readers of log dirs (the
jobs) use ``read_meta_properties`` to check that a directory is the broker's they think.

Not thread-safe: the broker checks its log dirs once, before anything else uses them.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.errors import InvalidConfigError, KafkaStorageError
from storage_core.java_properties import escape_property, parse_properties
from storage_core.log.checkpoints import write_atomically

META_PROPERTIES_FILE = "meta.properties"
VERSION_KEY = "version"
BROKER_ID_KEY = "broker.id"
NODE_ID_KEY = "node.id"
CLUSTER_ID_KEY = "cluster.id"
ZK_VERSION = 0
KRAFT_VERSION = 1
# Kafka's file is a few lines; anything larger is not a meta.properties.
META_PROPERTIES_BYTES_MAX = 64 * 1024


class InconsistentClusterIdError(InvalidConfigError):
    """A log dir's ``meta.properties`` names another cluster than the one this broker joined
    (Kafka's ``InconsistentClusterIdException``)."""


class InconsistentBrokerIdError(InvalidConfigError):
    """A log dir's ``meta.properties`` names another broker id than this broker's
    ``broker.id`` (Kafka's ``InconsistentBrokerIdException``)."""


class CorruptMetaPropertiesError(KafkaStorageError):
    """A ``meta.properties`` that cannot be read or lacks a field the layout requires."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ZkMetaProperties:
    """The broker and cluster a log dir belongs to (``cluster_id`` may be unknown in files
    written before the cluster had an id)."""

    broker_id: int
    cluster_id: str | None

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError(f"broker_id must be >= 0, got {self.broker_id}")

    def encode(self, *, now: datetime.datetime | None = None) -> str:
        """The file content, in the order and with the header Kafka writes."""
        stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%a %b %d %H:%M:%S %Z %Y")
        lines = ["#", f"#{stamp}"]
        if self.cluster_id is not None:
            lines.append(f"{CLUSTER_ID_KEY}={escape_property(self.cluster_id)}")
        lines += [f"{VERSION_KEY}={ZK_VERSION}", f"{BROKER_ID_KEY}={self.broker_id}"]
        return "\n".join(lines) + "\n"


def meta_properties_path(log_dir: Path) -> Path:
    return Path(log_dir) / META_PROPERTIES_FILE


def read_meta_properties(log_dir: Path) -> ZkMetaProperties | None:
    """The log dir's ``meta.properties``, or ``None`` when it has none (a new directory, or
    one of a broker that predates the file). ``CorruptMetaPropertiesError`` naming the file
    when it cannot be read or parsed."""
    path = meta_properties_path(log_dir)
    try:
        with path.open("rb") as file:
            data = file.read(META_PROPERTIES_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptMetaPropertiesError(f"cannot read {path}: {exc}") from exc
    if len(data) > META_PROPERTIES_BYTES_MAX:
        raise CorruptMetaPropertiesError(
            f"{path} is larger than {META_PROPERTIES_BYTES_MAX} bytes: not a meta.properties"
        )
    return parse_meta_properties(data.decode("latin-1"), path=path)


def parse_meta_properties(text: str, *, path: Path) -> ZkMetaProperties:
    """The values of a ``meta.properties`` text (``path`` names it in errors)."""
    props = parse_properties(text)
    version_text = props.get(VERSION_KEY)
    id_key = {str(ZK_VERSION): BROKER_ID_KEY, str(KRAFT_VERSION): NODE_ID_KEY}.get(
        version_text or ""
    )
    if id_key is None:
        raise CorruptMetaPropertiesError(
            f"{path}: expected version {ZK_VERSION} or {KRAFT_VERSION}, but got version"
            f" {version_text}; fix or remove the file"
        )
    id_text = props.get(id_key, "")
    if not id_text.isdigit():
        raise CorruptMetaPropertiesError(
            f"{path}: {id_key} is {id_text or 'missing'}, expected a broker id; fix or remove"
            " the file"
        )
    return ZkMetaProperties(broker_id=int(id_text), cluster_id=props.get(CLUSTER_ID_KEY) or None)


def write_meta_properties(log_dir: Path, meta: ZkMetaProperties) -> None:
    """Write the file atomically (``CheckpointWriteError`` naming it on an I/O failure)."""
    write_atomically(meta_properties_path(log_dir), meta.encode())


def check_meta_properties(
    log_dir: Path, found: ZkMetaProperties, *, broker_id: int, cluster_id: str
) -> None:
    """Kafka's start-up checks of one log dir's file: its cluster first, then its broker."""
    if found.cluster_id is not None and found.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {found.cluster_id} in"
            f" meta.properties. The broker is trying to join the wrong cluster. Configured"
            f" zookeeper.connect may be wrong. (log dir {log_dir}: it belongs to another"
            " cluster; point log.dirs or zookeeper.connect at this broker's own)"
        )
    if found.broker_id != broker_id:
        raise InconsistentBrokerIdError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id"
            f" {found.broker_id} in meta.properties. If you moved your data, make sure your"
            " configured broker.id matches. If you intend to create a new broker, you should"
            f" remove all data in your data directories (log.dirs). (log dir {log_dir})"
        )


def ensure_meta_properties(log_dirs: Sequence[Path], *, broker_id: int, cluster_id: str) -> None:
    """Every log dir checked (``check_meta_properties``) before any is written: a refused
    start leaves every directory as it was. Then the file is written where it is absent or
    lacks the cluster id."""
    wanted = ZkMetaProperties(broker_id=broker_id, cluster_id=cluster_id)
    to_write: list[Path] = []
    for log_dir in log_dirs:
        found = read_meta_properties(log_dir)
        if found is None:
            to_write.append(log_dir)
            continue
        check_meta_properties(log_dir, found, broker_id=broker_id, cluster_id=cluster_id)
        if found != wanted:
            to_write.append(log_dir)
    for log_dir in to_write:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        write_meta_properties(log_dir, wanted)
