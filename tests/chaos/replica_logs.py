"""Are the replicas of a partition the same log below the high watermark? Each replica's copy
is read with ``storage-core dump-log --json`` (the tool a user would run), then compared.

Below the HW every replica must hold the same batches: same base offset, last offset,
partition leader epoch and CRC (the CRC covers attributes, producer state, timestamps and
records, so equal CRCs mean equal content); and the same ``leader-epoch-checkpoint`` entries
for epochs that start below the HW. A batch is "below the HW" when its base offset is.
A replica whose log ends before the HW, a batch failing its CRC, a batch one replica has and
another lacks, each is one ``Difference`` naming the brokers, offsets and values.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from storage_core.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILENAME

DUMP_TIMEOUT_S = 60.0
MAX_DIFFERENCES = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchId:
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    crc: int
    crc_valid: bool

    def describe(self) -> str:
        return (
            f"[{self.base_offset}..{self.last_offset}] epoch {self.partition_leader_epoch}"
            f" crc {self.crc:#010x}{'' if self.crc_valid else ' (CRC INVALID)'}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLog:
    """One replica's copy of a partition as dump-log reads it."""

    broker_id: int
    batches: tuple[BatchId, ...]
    epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), oldest first
    errors: tuple[str, ...] = ()  # dump-log's error rows (a torn or corrupt file)


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    partition: str
    broker_id: int
    reference_id: int
    detail: str

    def __str__(self) -> str:
        return f"{self.partition}: broker {self.broker_id} vs {self.reference_id}: {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    partition: str
    high_watermark: int
    batches_compared: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def dump_replica(broker_id: int, partition_dir: Path) -> ReplicaLog:
    """Run ``storage-core dump-log --json`` on the partition's segments and epoch checkpoint."""
    paths = sorted(partition_dir.glob("*.log"))
    checkpoint = partition_dir / LEADER_EPOCH_CHECKPOINT_FILENAME
    if checkpoint.exists():
        paths.append(checkpoint)
    if not paths:
        return ReplicaLog(broker_id=broker_id, batches=(), epochs=(), errors=("no log files",))
    done = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "dump-log", "--json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=DUMP_TIMEOUT_S,
        check=False,
    )
    if done.returncode not in (0, 3):  # 3: it printed error rows, read below
        raise RuntimeError(f"dump-log {partition_dir} exited {done.returncode}: {done.stderr}")
    batches: list[BatchId] = []
    epochs: list[tuple[int, int]] = []
    errors: list[str] = []
    for line in done.stdout.splitlines():
        row = json.loads(line)
        if row["type"] == "batch":
            batches.append(
                BatchId(
                    base_offset=row["base_offset"],
                    last_offset=row["last_offset"],
                    partition_leader_epoch=row["partition_leader_epoch"],
                    crc=row["crc"],
                    crc_valid=row["crc_valid"],
                )
            )
        elif row["type"] == "epoch_entry":
            epochs.append((row["epoch"], row["start_offset"]))
        elif row["type"] == "error":
            errors.append(f"{row.get('file')}: {row['error']}")
    return ReplicaLog(
        broker_id=broker_id, batches=tuple(batches), epochs=tuple(epochs), errors=tuple(errors)
    )


def compare_replicas(
    partition: str, replicas: Mapping[int, ReplicaLog], high_watermark: int
) -> Comparison:
    """Every replica against the lowest broker id's copy, below ``high_watermark`` (exclusive)."""
    reference_id = min(replicas)
    reference = replicas[reference_id]
    differences: list[Difference] = []

    def differ(broker_id: int, detail: str) -> None:
        differences.append(
            Difference(
                partition=partition, broker_id=broker_id, reference_id=reference_id, detail=detail
            )
        )

    for broker_id, replica in sorted(replicas.items()):
        below = [b for b in replica.batches if b.base_offset < high_watermark]
        for error in replica.errors:
            differ(broker_id, f"dump-log error: {error}")
        for batch in below:
            if not batch.crc_valid:
                differ(broker_id, f"corrupt batch {batch.describe()}")
        end = below[-1].last_offset + 1 if below else 0
        if end < high_watermark:
            differ(broker_id, f"log ends at offset {end}, below the HW {high_watermark}")
        if broker_id == reference_id:
            continue
        mine = {b.base_offset: b for b in below}
        theirs = {b.base_offset: b for b in reference.batches if b.base_offset < high_watermark}
        for base in sorted(mine.keys() | theirs.keys()):
            if base not in theirs:
                differ(broker_id, f"extra batch {mine[base].describe()}")
            elif base not in mine:
                differ(broker_id, f"missing batch {theirs[base].describe()}")
            elif mine[base] != theirs[base]:
                differ(broker_id, f"batch {mine[base].describe()} != {theirs[base].describe()}")
        my_epochs = [e for e in replica.epochs if e[1] < high_watermark]
        their_epochs = [e for e in reference.epochs if e[1] < high_watermark]
        if my_epochs != their_epochs:
            differ(
                broker_id,
                f"leader-epoch-checkpoint below the HW {_epochs(my_epochs)}"
                f" != {_epochs(their_epochs)}",
            )
    return Comparison(
        partition=partition,
        high_watermark=high_watermark,
        batches_compared=sum(
            1 for r in replicas.values() for b in r.batches if b.base_offset < high_watermark
        ),
        differences=differences[:MAX_DIFFERENCES],
    )


def _epochs(entries: list[tuple[int, int]]) -> str:
    return "[" + ", ".join(f"epoch {e} at {s}" for e, s in entries) + "]"


def compare_partition(
    partition: str, log_dirs: Mapping[int, Path], high_watermark: int
) -> Comparison:
    """Dump ``<log dir>/<partition>`` of every broker and compare below the HW."""
    replicas = {b: dump_replica(b, log_dir / partition) for b, log_dir in log_dirs.items()}
    return compare_replicas(partition, replicas, high_watermark)
