"""The aims of issue 30, each judged on a scale benchmark's result (``benchmarks/scale.py``).

An aim names the size it is judged at (1,000 or 3,000 partitions, 10^3 and 10^5 remote
segments). When the run did not reach that size the aim is "not measured" and shows the
figure at the nearest size the run measured, for orientation only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MET, NOT_MET, NOT_MEASURED = "met", "NOT met", "not measured"
DESCRIPTORS_PER_CLOSED_SEGMENT_MAX = 0.1


def _at(result: dict[str, Any], part: str, size: int) -> tuple[dict[str, Any] | None, int | None]:
    """The row at ``size`` (exact), else (None, the nearest measured size)."""
    rows = result.get(part) or {}
    if str(size) in rows:
        return rows[str(size)], size
    if not rows:
        return None, None
    nearest = min((int(s) for s in rows), key=lambda s: abs(s - size))
    return None, nearest


def _judge(
    result: dict[str, Any],
    part: str,
    size: int,
    figure: Callable[[dict[str, Any]], tuple[str, bool] | None],
) -> tuple[str, str]:
    row, nearest = _at(result, part, size)
    if row is not None:
        judged = figure(row)
        if judged is None:
            return NOT_MEASURED, "step not run"
        text, ok = judged
        return (MET if ok else NOT_MET), text
    if nearest is None:
        return NOT_MEASURED, "part not run"
    judged = figure(result[part][str(nearest)])
    text = "step not run" if judged is None else judged[0]
    return NOT_MEASURED, f"(at {nearest:,} instead: {text})"


def _ratio(
    result: dict[str, Any], part: str, key: str, small: int, large: int, limit: float
) -> tuple[str, str]:
    rows = result.get(part) or {}
    if str(small) in rows and str(large) in rows:
        a, b = rows[str(small)].get(key), rows[str(large)].get(key)
        if a is None or b is None or not a:
            return NOT_MEASURED, "step not run"
        return (MET if b / a <= limit else NOT_MET), f"{a:g} -> {b:g} ({b / a:.2f}x)"
    sizes = sorted(int(s) for s in rows)
    if len(sizes) < 2:
        return NOT_MEASURED, "fewer than two sizes run"
    a, b = rows[str(sizes[0])].get(key), rows[str(sizes[-1])].get(key)
    if a is None or b is None or not a:
        return NOT_MEASURED, "step not run"
    return NOT_MEASURED, f"(between {sizes[0]:,} and {sizes[-1]:,} instead: {b / a:.2f}x)"


Judged = tuple[str, bool] | None


def _creation(r: dict[str, Any]) -> Judged:
    ratio = r["create_vs_zookeeper_writes"]
    return f"{ratio}x ({r['create_s']} s vs {r['zookeeper_writes_s']} s)", ratio <= 10


def _rejoin(r: dict[str, Any]) -> Judged:
    if r.get("restart_isr_s") is None:
        return None
    return f"{r['restart_isr_s']} s", r["restart_isr_s"] <= 30


def _controlled_shutdown(r: dict[str, Any]) -> Judged:
    if r.get("shutdown_s") is None:
        return None
    session = "expired" if r["session_expired"] else "closed"
    text = (
        f"{r['leaderships_not_moved']} of {r['leaderships_held']} not moved,"
        f" session {session}, exit after {r['shutdown_s']} s"
    )
    return text, r["leaderships_not_moved"] == 0 and not r["session_expired"]


def _idle_cpu(r: dict[str, Any]) -> Judged:
    if r.get("idle_cpu_percent_max") is None:
        return None
    empty = r.get("idle_empty_cpu_percent_max")
    before = "" if empty is None else f"; {empty}% before the topic"
    return (
        f"{r['idle_cpu_percent_max']}% (most of the three{before})",
        r["idle_cpu_percent_max"] < 2,
    )


def _serving(r: dict[str, Any]) -> Judged:
    if r.get("restart_serving_s") is None:
        return None
    text = (
        f"{r['restart_serving_s']} s with its RLMM snapshots,"
        f" {r['restart_no_snapshot_serving_s']} s without"
    )
    return text, r["restart_serving_s"] <= 10


def _descriptors(result: dict[str, Any]) -> tuple[str, str]:
    notes = result.get("segment_notes") or {}
    slope = notes.get("descriptors_per_closed_segment")
    if slope is None:
        return NOT_MEASURED, "step not run"
    seen = ", ".join(
        f"{int(k):,} closed: {v:,}"
        for k, v in (notes.get("descriptors_by_local_segments") or {}).items()
    )
    status = MET if slope < DESCRIPTORS_PER_CLOSED_SEGMENT_MAX else NOT_MET
    return status, f"{slope} per closed segment ({seen})"


def _churn(result: dict[str, Any]) -> tuple[str, str]:
    notes = result.get("segment_notes") or {}
    series = notes.get("churn_bytes_per_live_segment")
    if not series:
        return NOT_MEASURED, "step not run"
    text = (
        f"{', '.join(f'{v:g}' for v in series)} bytes per live segment after each cycle"
        f" ({notes['churn_history_records']:,} records of history written)"
    )
    return (MET if notes["churn_flat"] else NOT_MET), text


PER_SEGMENT_COSTS = (
    ("copy_ms_per_segment", "copy"),
    ("rlmm_catch_up_us_per_segment", "copy job's RLMM catch-up"),
    ("quality_us_per_segment", "quality job"),
    ("metadata_bytes_per_segment", "__remote_log_metadata bytes"),
)


def aims(result: dict[str, Any]) -> list[dict[str, str]]:
    """Each aim of the issue with its figure and status."""
    out: list[tuple[str, tuple[str, str]]] = [
        (
            "creating 1,000 partitions within 10x of the same ZooKeeper writes",
            _judge(result, "partitions", 1000, _creation),
        ),
        (
            "per-partition creation cost at 3,000 within 1.5x of that at 300 (ms per partition)",
            _ratio(result, "partitions", "create_ms_per_partition", 300, 3000, 1.5),
        ),
        (
            "a restarted broker back in every ISR within 30 s at 3,000 partitions",
            _judge(result, "partitions", 3000, _rejoin),
        ),
        (
            "controlled shutdown moving every leadership at 3,000 partitions",
            _judge(result, "partitions", 3000, _controlled_shutdown),
        ),
        (
            "idle CPU per broker under 2% at 3,000 partitions",
            _judge(result, "partitions", 3000, _idle_cpu),
        ),
        (
            "descriptors per broker independent of the number of closed segments"
            f" (under {DESCRIPTORS_PER_CLOSED_SEGMENT_MAX} added per closed segment)",
            _descriptors(result),
        ),
    ]
    out += [
        (
            f"per-segment cost at 10^5 within 1.5x of that at 10^3: {label}",
            _ratio(result, "segments", key, 1000, 100_000, 1.5),
        )
        for key, label in PER_SEGMENT_COSTS
    ]
    out.append(
        (
            "a broker with 10^5 remote segments serving within 10 s of start",
            _judge(result, "segments", 100_000, _serving),
        )
    )
    out.append(
        (
            "__remote_log_metadata bytes per live segment flat while history comes and goes"
            " (the last third of the cycles within 1.25x of the second)",
            _churn(result),
        )
    )
    return [{"aim": aim, "status": status, "figure": figure} for aim, (status, figure) in out]


def print_aims(judged: list[dict[str, str]]) -> None:
    print("aims (issue 30):")
    for aim in judged:
        print(f"  [{aim['status']}] {aim['aim']}: {aim['figure']}")
