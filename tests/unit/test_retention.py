"""Pure retention planning: which prefix of segments goes, and why."""

from __future__ import annotations

from storage_core.log.retention import (
    RetentionReason,
    SegmentSummary,
    candidate_segments,
    plan_retention,
)

NOW = 1_000_000


def segments(*sizes: int, timestamps: list[int] | None = None) -> list[SegmentSummary]:
    out = []
    for i, size in enumerate(sizes):
        out.append(
            SegmentSummary(
                base_offset=i * 10,
                next_base_offset=(i + 1) * 10 if i + 1 < len(sizes) else None,
                size_bytes=size,
                largest_timestamp_ms=(timestamps or [NOW] * len(sizes))[i],
            )
        )
    return out


def plan(segs: list[SegmentSummary], **kw: int) -> tuple[int, RetentionReason | None]:
    args = dict(
        now_ms=NOW, retention_ms=-1, retention_bytes=-1, log_start_offset=0, high_watermark=10_000
    )
    args.update(kw)
    decision = plan_retention(segs, **args)  # type: ignore[arg-type]
    return decision.segment_count, decision.reason


def test_active_segment_and_segments_above_hw_are_never_candidates() -> None:
    segs = segments(10, 10, 10, 10)
    assert [s.base_offset for s in candidate_segments(segs, high_watermark=10_000)] == [0, 10, 20]
    assert [s.base_offset for s in candidate_segments(segs, high_watermark=25)] == [0, 10]
    assert plan(segs, retention_bytes=0) == (3, RetentionReason.RETENTION_BYTES)


def test_retention_bytes_keeps_the_log_at_or_above_the_limit() -> None:
    segs = segments(100, 100, 100, 100, 50)
    assert plan(segs, retention_bytes=260) == (1, RetentionReason.RETENTION_BYTES)
    assert plan(segs, retention_bytes=250) == (2, RetentionReason.RETENTION_BYTES)
    assert plan(segs, retention_bytes=451) == (0, None)


def test_retention_ms_deletes_a_prefix_only() -> None:
    segs = segments(1, 1, 1, 1, timestamps=[0, NOW, 0, 0])
    assert plan(segs, retention_ms=100) == (1, RetentionReason.RETENTION_MS)
    assert plan(segs, retention_ms=-1) == (0, None)


def test_log_start_offset_breach_needs_the_whole_segment_below() -> None:
    segs = segments(1, 1, 1)
    assert plan(segs, log_start_offset=15) == (1, RetentionReason.LOG_START_OFFSET)
    assert plan(segs, log_start_offset=20) == (2, RetentionReason.LOG_START_OFFSET)
    assert plan(segs, log_start_offset=9) == (0, None)


def test_guard_stops_the_prefix_at_the_first_refusal() -> None:
    segs = segments(1, 1, 1, 1)
    decision = plan_retention(
        segs,
        now_ms=NOW,
        retention_ms=-1,
        retention_bytes=0,
        log_start_offset=0,
        high_watermark=10_000,
        may_delete=lambda s: s.base_offset != 10,
    )
    assert decision.segment_count == 1


def test_compacted_topics_only_use_the_log_start_offset_rule() -> None:
    segs = segments(100, 100, 100, timestamps=[0, 0, 0])
    decision = plan_retention(
        segs,
        now_ms=NOW,
        retention_ms=1,
        retention_bytes=0,
        log_start_offset=0,
        high_watermark=10_000,
        delete_by_time_and_size=False,
    )
    assert decision.segment_count == 0
