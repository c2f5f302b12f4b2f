"""The picture of a partition's replicas that the replication stories assert, step by step.

    zk: leader=3 leader_epoch=3 isr=[3]
    broker 2 (down): hw=2 epochs=[0@0 1@1]
      0: 0
      1: 1
    broker 3 (up): hw=2 epochs=[0@0 3@1]
      0: 0
      1: 3
    remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED

- ``zk``: the partition state the controller wrote (``/brokers/topics/<t>/partitions/<p>/state``);
- one block per replica, in broker id order: whether its process runs (``up``, ``paused``
  for SIGSTOP, ``down``), its high watermark as checkpointed in the log dir's
  ``replication-offset-checkpoint`` (what it would restart with; ``-`` when none), its
  ``leader-epoch-checkpoint`` as ``epoch@start offset``, then ``offset: epoch`` for every record
  of its log (the batches' partition leader epoch). A run of more than ``MAX_LISTED_RUN``
  offsets with one epoch is one line ``first-last: epoch`` (both inclusive), so long logs
  stay short;
- with tiered storage, a ``remote`` line per segment the remote log metadata holds (not
  DELETE_SEGMENT_FINISHED), by start offset: its offsets (both inclusive), its leader epochs
  as ``epoch@start offset`` and its state, as a client-mode metadata manager reads them from
  ``__remote_log_metadata``.

Built from what ``storage-core dump-log --json`` read (``tests.chaos.replica_logs``) and the
log dir's checkpoint; ``render`` and ``remote_lines`` are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.zk.zk_data import LeaderAndIsr
from tests.chaos.replica_logs import BatchId, dump_replica

MAX_LISTED_RUN = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaView:
    """One replica's partition directory as read from disk."""

    status: str  # up, paused, down
    high_watermark: int | None  # None: not in the checkpoint file
    batches: tuple[BatchId, ...]
    epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), oldest first
    errors: tuple[str, ...] = ()


def replica_view(broker_id: int, log_dir: Path, topic: str, *, status: str) -> ReplicaView:
    """Partition 0 of ``topic`` in ``log_dir`` and the high watermark checkpointed there."""
    partition_dir = log_dir / f"{topic}-0"
    hw_file = log_dir / REPLICATION_OFFSET_CHECKPOINT
    hws = OffsetCheckpointFile(hw_file).read() if hw_file.exists() else {}
    if not partition_dir.is_dir():
        return ReplicaView(status=status, high_watermark=None, batches=(), epochs=())
    dumped = dump_replica(broker_id, partition_dir)
    return ReplicaView(
        status=status,
        high_watermark=hws.get(TopicPartition(topic, 0)),
        batches=dumped.batches,
        epochs=dumped.epochs,
        errors=tuple(e for e in dumped.errors if e != "no log files"),
    )


def offset_epoch_lines(batches: Sequence[BatchId]) -> list[str]:
    """``offset: epoch`` per record; a longer run of one epoch as ``first-last: epoch``."""
    runs: list[tuple[int, int, int]] = []  # first, last (inclusive), epoch
    for batch in batches:
        epoch = batch.partition_leader_epoch
        if runs and runs[-1][2] == epoch and runs[-1][1] + 1 == batch.base_offset:
            runs[-1] = (runs[-1][0], batch.last_offset, epoch)
        else:
            runs.append((batch.base_offset, batch.last_offset, epoch))
    lines: list[str] = []
    for first, last, epoch in runs:
        if last - first + 1 > MAX_LISTED_RUN:
            lines.append(f"{first}-{last}: {epoch}")
        else:
            lines.extend(f"{offset}: {epoch}" for offset in range(first, last + 1))
    return lines


def render(state: LeaderAndIsr | None, replicas: Mapping[int, ReplicaView]) -> str:
    if state is None:
        lines = ["zk: no state"]
    else:
        isr = ",".join(str(b) for b in state.isr)
        lines = [f"zk: leader={state.leader} leader_epoch={state.leader_epoch} isr=[{isr}]"]
    for broker_id, replica in sorted(replicas.items()):
        hw = "-" if replica.high_watermark is None else str(replica.high_watermark)
        epochs = " ".join(f"{epoch}@{start}" for epoch, start in replica.epochs)
        lines.append(f"broker {broker_id} ({replica.status}): hw={hw} epochs=[{epochs}]")
        lines.extend(f"  {line}" for line in offset_epoch_lines(replica.batches))
        lines.extend(f"  ERROR {error}" for error in replica.errors)
        if any(not batch.crc_valid for batch in replica.batches):
            lines.append("  ERROR a batch fails its CRC")
    return "\n".join(lines)


def remote_lines(segments: list[RemoteLogSegmentMetadata]) -> list[str]:
    lines = []
    for segment in sorted(segments, key=lambda s: (s.start_offset, s.end_offset)):
        epochs = " ".join(
            f"{epoch}@{start}" for epoch, start in sorted(segment.segment_leader_epochs.items())
        )
        lines.append(
            f"remote {segment.start_offset}-{segment.end_offset}: epochs=[{epochs}]"
            f" {segment.state.name}"
        )
    return lines


def picture(text: str) -> str:
    """An expected picture written as an indented block in a test: dedented, stripped."""
    lines = [line for line in text.splitlines() if line.strip()]
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    return "\n".join(line[indent:].rstrip() for line in lines)
