"""One broker's replica of a partition as its files say: where its local log starts (the base
offset of its oldest segment) and its ``leader-epoch-checkpoint``. The demo reads it to show
a replica rebuilt from the remote tier (its local log starts above 0, its epochs are the
leader's) rather than copied from offset 0."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from storage_core.log.leader_epoch_cache import LeaderEpochCheckpointFile

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalReplica:
    broker_id: int
    directory: Path
    local_log_start: int | None  # None: no segment yet
    epochs: tuple[tuple[int, int], ...]  # (leader epoch, start offset), oldest first

    def line(self) -> str:
        start = "no segment" if self.local_log_start is None else f"{self.local_log_start}"
        epochs = ", ".join(f"{e}@{o}" for e, o in self.epochs) or "none"
        return f"broker {self.broker_id}: local log start {start}, leader epochs {epochs}"


def partition_directory(log_dir: Path, topic: str, partition: int) -> Path:
    return log_dir / f"{topic}-{partition}"


def read_local_replica(broker_id: int, log_dir: Path, topic: str, partition: int) -> LocalReplica:
    directory = partition_directory(log_dir, topic, partition)
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    entries = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT).read()
    return LocalReplica(
        broker_id=broker_id,
        directory=directory,
        local_log_start=bases[0] if bases else None,
        epochs=tuple((e.epoch, e.start_offset) for e in entries),
    )


def remove_local_replica(log_dir: Path, topic: str, partition: int) -> Path:
    """Delete the partition's directory of a *stopped* broker, as a replaced disk would lose
    it; returns the directory removed."""
    directory = partition_directory(log_dir, topic, partition)
    if not directory.is_dir():
        raise FileNotFoundError(f"no replica of {topic}-{partition} in {log_dir}")
    shutil.rmtree(directory)
    return directory
