"""What every mode of ``storage-core tier`` uses: the settings, the partitions to work on,
the ``TierContext`` (cluster, RSM, RLMM, output streams) and the output helpers (the progress
bar on stderr, the ``summary`` line). The command and its modes are described in
``storage_core.tools.tier``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.errors import InvalidConfigError
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.operations import (
    PartitionTarget,
    SkipReason,
    discover_targets,
    metadata_client,
)
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.topic_based_rlmm import (
    TopicBasedRemoteLogMetadataManager,
)
from storage_core.tools.key_values import format_fields

PROGRESS_INTERVAL_S = 0.2


# ---------------------------------------------------------------------------- settings
def log_dirs_of(log_dir: Path | None, broker_config: KafkaConfig | None) -> list[Path]:
    """``--log-dir``, else the broker config's ``log.dirs``."""
    if log_dir is not None:
        return [log_dir]
    if broker_config is not None:
        return broker_config.log_dirs()
    raise InvalidConfigError("pass --log-dir (or --broker-config to use its log.dirs)")


# ---------------------------------------------------------------------------- output
class TierProgress:
    """A ``\\r``-rewritten bar on stderr (at most every 0.2 s) over segments and bytes."""

    def __init__(self, stream: TextIO, *, action: str, total: int, enabled: bool) -> None:
        self.stream = stream
        self.action = action
        self.total = total
        self.enabled = enabled and total > 0
        self._shown_at = 0.0
        self._drawn = False

    def update(self, done: int, size_bytes: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown_at < PROGRESS_INTERVAL_S:
            return
        self._shown_at = now
        width = 30
        filled = width * done // self.total
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.action} [{bar}] {done}/{self.total} segments {size_bytes:,} bytes"
        )
        self.stream.flush()
        self._drawn = True

    def finish(self, done: int, size_bytes: int) -> None:
        if self.enabled:
            self.update(done, size_bytes, force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(slots=True)
class Summary:
    """Totals of one mode, printed as the ``summary`` line."""

    action: str
    partitions: int = 0
    segments: int = 0
    size_bytes: int = 0
    errors: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        return "summary " + format_fields(
            {
                "action": self.action,
                "partitions": self.partitions,
                "segments": self.segments,
                "bytes": self.size_bytes,
                "errors": self.errors,
                "seconds": f"{time.monotonic() - self.started:.3f}",
            }
        )


# ---------------------------------------------------------------------------- targets
def find_targets(
    cluster: KafkaCluster,
    log_dirs: Sequence[Path],
    *,
    topic: str | None,
    broker_id: int,
    out: TextIO,
    action: str,
) -> list[PartitionTarget]:
    """The partitions ``broker_id`` leads among ``log_dirs``; prints a ``status=skipped``
    line for each one left out."""
    found = discover_targets(cluster, {broker_id: tuple(log_dirs)}, topic=topic)
    for skipped in found.skipped:
        if skipped.why is SkipReason.NOT_REMOTE_ENABLED:
            continue  # the command leaves topics without remote storage alone, silently
        line = {
            "partition": skipped.topic_partition,
            "action": action,
            "status": "skipped",
            "reason": skipped.reason,
        }
        print(format_fields(line), file=out)
    return list(found.targets)


# ---------------------------------------------------------------------------- context
@dataclass(slots=True)
class TierContext:
    """What every mode uses; the RSM and the RLMM are built on first use, closed at the end."""

    cluster: KafkaCluster
    bootstrap_server: str
    broker_id: int
    rsm_class_name: str
    rsm_config: dict[str, str]
    out: TextIO
    err: TextIO
    dry_run: bool
    progress: bool
    clock: Clock = SYSTEM_CLOCK
    _rsm: RemoteStorageManager | None = None
    _rlmm: TopicBasedRemoteLogMetadataManager | None = None

    @property
    def rsm(self) -> RemoteStorageManager:
        if self._rsm is None:
            self._rsm = load_remote_storage_manager(self.rsm_class_name, self.rsm_config)
        return self._rsm

    @property
    def rlmm(self) -> RemoteLogMetadataManager:
        if self._rlmm is None:
            self._rlmm = metadata_client(
                self.bootstrap_server, connection_config=self.cluster.config
            )
        return self._rlmm

    def close(self) -> None:
        if self._rlmm is not None:
            self._rlmm.close()
        if self._rsm is not None:
            self._rsm.close()

    def print(self, fields: Mapping[str, object]) -> None:
        print(format_fields(fields), file=self.out, flush=True)

    def error(self, tp: object, action: str, exc: Exception) -> None:
        self.print({"partition": tp, "action": action, "status": "error", "error": exc})
