"""A partition's chain of remote segments as ``__remote_log_metadata`` holds it (the finished
copies, by start offset), whether it runs without a gap, and who copied what: each segment
names the broker that published it and the leader epochs it spans."""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.client.connection import ConnectionConfig
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.discovery import metadata_client


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainSegment:
    start_offset: int
    end_offset: int  # inclusive
    broker_id: int
    leader_epochs: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteChain:
    topic: str
    partition: int
    segments: tuple[ChainSegment, ...]

    def gaps(self) -> list[tuple[int, int]]:
        """The offset ranges (inclusive) that no segment holds, between the first and the
        last segment."""
        found = []
        covered = self.segments[0].start_offset - 1 if self.segments else -1
        for segment in self.segments:
            if segment.start_offset > covered + 1:
                found.append((covered + 1, segment.start_offset - 1))
            covered = max(covered, segment.end_offset)
        return found

    def end_offset(self) -> int:
        """The last offset the chain holds, -1 when empty."""
        return max((s.end_offset for s in self.segments), default=-1)

    def copied_by(self) -> dict[int, tuple[int, ...]]:
        """broker id -> the leader epochs of the segments it published."""
        epochs: dict[int, set[int]] = {}
        for segment in self.segments:
            epochs.setdefault(segment.broker_id, set()).update(segment.leader_epochs)
        return {broker: tuple(sorted(e)) for broker, e in sorted(epochs.items())}

    def line(self) -> str:
        if not self.segments:
            return f"{self.topic}-{self.partition}: no remote segment"
        first, last = self.segments[0].start_offset, self.end_offset()
        gaps = self.gaps()
        holes = "without gap" if not gaps else f"GAPS {gaps}"
        by = "; ".join(f"broker {b} in epochs {list(e)}" for b, e in self.copied_by().items())
        return (
            f"{self.topic}-{self.partition}: {len(self.segments)} remote segments, offsets"
            f" {first}-{last} {holes}; copied by {by}"
        )


def remote_chain(
    bootstrap_servers: str,
    topic: str,
    topic_id: Uuid,
    partition: int,
    *,
    connection_config: ConnectionConfig | None = None,
) -> RemoteChain:
    tip = TopicIdPartition(topic_id, TopicPartition(topic, partition))
    with metadata_client(bootstrap_servers, connection_config=connection_config) as rlmm:
        finished = [
            s
            for s in rlmm.list_remote_log_segments(tip)
            if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    return RemoteChain(
        topic=topic,
        partition=partition,
        segments=tuple(
            ChainSegment(
                start_offset=s.start_offset,
                end_offset=s.end_offset,
                broker_id=s.broker_id,
                leader_epochs=tuple(sorted(s.segment_leader_epochs)),
            )
            for s in sorted(finished, key=lambda s: (s.start_offset, s.end_offset))
        ),
    )
