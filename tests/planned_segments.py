"""Planned segment copies for the work-unit tests: only what packing reads varies."""

from __future__ import annotations

import dataclasses

from jobs.planning.work_units import PlannedSegment


def seg(partition: str, base: int, size: int, count: int = 10) -> PlannedSegment:
    """Segment ``[base, base + count)`` of ``partition`` ("<topic>-<n>"), ``size`` bytes."""
    return PlannedSegment(
        partition=partition,
        topic=partition.rsplit("-", 1)[0],
        partition_index=int(partition.rsplit("-", 1)[1]),
        topic_id="fQZ8ZtKuRjqUmbdf4t1OyQ",
        directory=f"/logs/{partition}",
        base_offset=base,
        next_base_offset=base + count,
        size_bytes=size,
        leader_epoch=0,
        log_start_offset=0,
        high_watermark=1000,
        leader_id=1,
    )


def on(host: str | None, partition: str, size: int, base: int = 0) -> PlannedSegment:
    """``seg`` of a partition whose leader is on ``host`` (None: unknown)."""
    return dataclasses.replace(seg(partition, base, size), leader_host=host)
