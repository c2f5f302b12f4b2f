"""The tiering status, read from the jobs' JSON run summaries (pure; no Airflow, no network).

A run summary (written by every ``jobs.<name>``, and by the ``status`` task of the tiering,
retention and quality DAGs as ``job: tiering_status``) has ``job``, ``started``/``finished``
and a list (or an object keyed by partition) of per-partition entries. The status page shows
the newest entries that carry offsets and sizes:

- where they come from: the DAG run and task that wrote them, when, and how old they are
  now, with a warning when they are older than one tiering interval (tiering paused or
  failing: the page is showing the past);
- per partition: leader and leader epoch, log start / local log start / highest tiered
  offset / high watermark, local and remote bytes (binary units) and segments, and the copy
  lag split into what the active segment holds (copied only once it rolls) and what closed
  segments hold (waiting for the next tiering run); the last stable offset where it differs
  from the high watermark and the open transactions (``transactions_cell``);
- a chart of the total remote and copy-lag bytes over the recent status snapshots, with its
  axes labelled.

Field names are read with a few aliases so that a job may say ``remote_bytes`` or
``remote_size_bytes``; a missing field shows as "-".
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tiered_storage_plugin import paths
from tiered_storage_plugin.cluster_page import (
    CLUSTER_CSS,
    ClusterState,
    cluster_section,
    cluster_state,
)
from tiered_storage_plugin.durations import human_duration
from tiered_storage_plugin.recovery_page import (
    RECOVERY_CSS,
    manifest_states,
    recovery_section,
)
from tiered_storage_plugin.transactions_cell import transactions_cell

RUNS_MAX = 50
CHART_POINTS_MAX = 24
CHART_FONT_PX = 11
SUMMARY_BYTES_MAX = 16 * 1024 * 1024
STALE_GRACE_S = 60  # a tiering run's own duration, on top of its interval
STATUS_JOB = "tiering_status"
# the page's icon, inline (a browser asks the host's /favicon.ico otherwise, which 404s)
ICON_HREF = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect x='1' y='2' width='14' height='3' fill='%231f77b4'/%3E"
    "%3Crect x='1' y='7' width='14' height='3' fill='%231f77b4'/%3E"
    "%3Crect x='1' y='12' width='14' height='3' fill='%23ff7f0e'/%3E%3C/svg%3E"
)
_ALIASES: dict[str, tuple[str, ...]] = {
    "leader": ("leader", "leader_id"),
    "leader_epoch": ("leader_epoch",),
    "local_bytes": ("local_bytes", "local_size_bytes", "local_log_bytes"),
    "local_segments": ("local_segments",),
    "remote_bytes": ("remote_bytes", "remote_size_bytes", "remote_log_size_bytes"),
    "remote_segments": ("remote_segments",),
    "log_start_offset": ("log_start_offset", "remote_log_start_offset"),
    "local_log_start_offset": ("local_log_start_offset", "local_start_offset"),
    "high_watermark": ("high_watermark", "hw"),
    "highest_tiered_offset": (
        "highest_tiered_offset",
        "highest_remote_offset",
        "remote_log_end_offset",
        "remote_end_offset",
    ),
    "active_segment_base_offset": ("active_segment_base_offset",),
    "copy_lag_bytes": ("copy_lag_bytes", "lag_bytes", "remote_copy_lag_bytes"),
    "copy_lag_segments": ("copy_lag_segments", "lag_segments", "remote_copy_lag_segments"),
    "last_stable_offset": ("last_stable_offset",),
    "open_transactions": ("open_transactions",),
    "oldest_txn_start_offset": ("oldest_open_transaction_start_offset",),
    "oldest_txn_age_ms": ("oldest_open_transaction_age_ms",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    partition: str
    leader: int | None = None
    leader_epoch: int | None = None
    local_bytes: int | None = None
    local_segments: int | None = None
    remote_bytes: int | None = None
    remote_segments: int | None = None
    log_start_offset: int | None = None
    local_log_start_offset: int | None = None
    high_watermark: int | None = None
    highest_tiered_offset: int | None = None
    active_segment_base_offset: int | None = None
    copy_lag_bytes: int | None = None
    copy_lag_segments: int | None = None
    last_stable_offset: int | None = None
    open_transactions: int | None = None
    oldest_txn_start_offset: int | None = None
    oldest_txn_age_ms: int | None = None

    @property
    def copy_lag_offsets(self) -> int | None:
        """Offsets below the high watermark (exclusive) not yet tiered."""
        if self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self._first_untiered)

    @property
    def active_lag_offsets(self) -> int | None:
        """Of the copy lag, the offsets in the active segment (copied once it rolls)."""
        if self.high_watermark is None or self.active_segment_base_offset is None:
            return None
        start = max(self.active_segment_base_offset, self._first_untiered)
        return max(0, self.high_watermark - start)

    @property
    def _first_untiered(self) -> int:
        tiered_end = -1 if self.highest_tiered_offset is None else self.highest_tiered_offset
        return max(tiered_end + 1, self.log_start_offset or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPoint:
    """One snapshot of the chart: when it finished and its totals."""

    label: str
    remote_bytes: int
    copy_lag_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    path: Path
    job: str
    finished: str
    data: Mapping[str, Any]

    def partitions(self) -> list[PartitionStatus]:
        return partition_statuses(self.data)

    @property
    def dag_id(self) -> str:
        return str(self._provenance("dag_id") or self.path.parents[2].name)

    @property
    def run_id(self) -> str:
        return str(self._provenance("run_id") or self.path.parents[1].name)

    @property
    def task_id(self) -> str:
        return str(self._provenance("task_id") or self.path.parent.name)

    def _provenance(self, name: str) -> object:
        details = self.data.get("details")
        inner = details.get(name) if isinstance(details, Mapping) else None
        return self.data.get(name) or inner

    def finished_at(self) -> datetime | None:
        return parse_time(self.finished)


def run_label(summary: RunSummary) -> str:
    """``DAG <dag_id>, run <run_id>, task <task_id>``: who wrote the summary."""
    return f"DAG {summary.dag_id}, run {summary.run_id}, task {summary.task_id}"


def read_summaries(root: Path, limit: int | None = RUNS_MAX) -> list[RunSummary]:
    """The ``limit`` (None: all) most recent readable run summaries under ``root``, oldest
    first."""
    found: list[RunSummary] = []
    runs = root / "runs"
    if not runs.is_dir():
        return []
    for path in runs.glob(f"*/*/*/{paths.SUMMARY_FILE}"):
        try:
            if path.stat().st_size > SUMMARY_BYTES_MAX:
                continue
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        finished = str(data.get("finished") or data.get("finished_at") or "")
        found.append(
            RunSummary(path=path, job=str(data.get("job", "?")), finished=finished, data=data)
        )
    found.sort(key=lambda s: (s.finished, s.path.stat().st_mtime))
    return found if limit is None else found[-limit:]


def partition_statuses(summary: Mapping[str, Any]) -> list[PartitionStatus]:
    entries = summary.get("partitions")
    if entries is None:
        entries = summary.get("per_partition")
    items: Iterable[tuple[str | None, Any]]
    if isinstance(entries, Mapping):
        items = entries.items()
    elif isinstance(entries, list):
        items = ((None, e) for e in entries)
    else:
        return []
    statuses = []
    for key, entry in items:
        if not isinstance(entry, Mapping):
            continue
        name = key or _partition_name(entry)
        if name is None:
            continue
        fields = {field: _first_int(entry, aliases) for field, aliases in _ALIASES.items()}
        statuses.append(PartitionStatus(partition=name, **fields))
    statuses.sort(key=lambda s: s.partition)
    return statuses


def latest_statuses(summaries: list[RunSummary]) -> tuple[RunSummary | None, list[PartitionStatus]]:
    """The newest summary whose partitions carry offsets or sizes, and those partitions."""
    for summary in reversed(summaries):
        statuses = summary.partitions()
        if any(s.high_watermark is not None or s.remote_bytes is not None for s in statuses):
            return summary, statuses
    return None, []


def latest_cluster(summaries: list[RunSummary]) -> tuple[RunSummary | None, ClusterState | None]:
    """The newest summary with a cluster (``jobs.cluster_status``), and that cluster."""
    for summary in reversed(summaries):
        state = cluster_state(summary.data)
        if state is not None:
            return summary, state
    return None, None


def chart_points(summaries: list[RunSummary], limit: int = CHART_POINTS_MAX) -> list[RunPoint]:
    """The totals of the last ``limit`` summaries that carry remote sizes, oldest first."""
    points = []
    for summary in summaries:
        statuses = summary.partitions()
        if not any(s.remote_bytes is not None for s in statuses):
            continue
        points.append(
            RunPoint(
                label=summary.finished or summary.path.parent.parent.name,
                remote_bytes=sum(s.remote_bytes or 0 for s in statuses),
                copy_lag_bytes=sum(s.copy_lag_bytes or 0 for s in statuses),
            )
        )
    return points[-limit:]


def chart_svg(points: list[RunPoint], *, width: int = 720, height: int = 260) -> str:
    """Remote bytes (blue) and copy-lag bytes (orange) per snapshot on one labelled scale:
    y ticks in binary units, x labels with each snapshot's UTC finish time (``time_labels``:
    distinct, as precise as needed, spaced so that none overlaps and none is cut at the
    edges), a dot per value."""
    if not points:
        return '<p class="empty">No status snapshot with remote sizes yet.</p>'
    labels, day = time_labels([p.label for p in points])
    label_w = max(_text_width(label) for label in labels)
    # the first and last labels are centred on the first and last points: leave half a label
    left, right, top_pad, bottom = max(80, label_w // 2 + 8), max(20, label_w // 2 + 8), 30, 60
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    top = _nice_top(max(max(p.remote_bytes, p.copy_lag_bytes) for p in points))
    step = plot_w / max(1, len(points) - 1)

    def x(i: int) -> float:
        return left + (i * step if len(points) > 1 else plot_w / 2)

    def y(value: int) -> float:
        return top_pad + plot_h - value / top * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img"'
        ' aria-label="remote bytes and copy-lag bytes per status snapshot"'
        f' font-family="sans-serif" font-size="{CHART_FONT_PX}">'
    ]
    for tick in range(5):
        value = top * tick // 4
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{width - right}" y2="{y(value):.1f}"'
            f' stroke="{"#888" if tick == 0 else "#e5e5e5"}"/>'
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
            f"{human_bytes(value)}</text>"
        )
    parts.extend(
        f'<text class="x-label" x="{x(i):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
        f"{html.escape(labels[i])}</text>"
        for i in labelled_indexes(len(points), step, label_w + 12)
    )
    for values, color, name in (
        ([p.remote_bytes for p in points], "#1f77b4", "remote"),
        ([p.copy_lag_bytes for p in points], "#ff7f0e", "copy lag"),
    ):
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        parts.extend(
            f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
            f"<title>{name}: {human_bytes(v)} at {html.escape(points[i].label)}</title>"
            "</circle>"
            for i, v in enumerate(values)
        )
    on_day = f", {day}" if day else ""
    parts.append(
        f'<text x="{left}" y="16">bytes (binary units)</text>'
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 12}" text-anchor="middle">'
        f"status snapshot finished (UTC{on_day})</text>"
        f'<text x="{width - right}" y="16" text-anchor="end">'
        '<tspan fill="#1f77b4">&#9632; remote</tspan>  '
        '<tspan fill="#ff7f0e">&#9632; copy lag (closed segments)</tspan></text></svg>'
    )
    return "".join(parts)


def time_labels(texts: list[str]) -> tuple[list[str], str | None]:
    """The x labels of the chart and the day they share (or None): each finish time to the
    minute, or to the second or millisecond where that is needed to tell two apart; the
    date is left out of the labels when every snapshot finished on the same day (UTC)."""
    times = [parse_time(t) for t in texts]
    if any(t is None for t in times):
        return [t[:16] for t in texts], None
    parsed = [t.astimezone(UTC) for t in times if t is not None]
    days = {f"{t:%Y-%m-%d}" for t in parsed}
    day = days.pop() if len(days) == 1 else None
    head = "" if day else "%m-%d "
    labels: list[str] = []
    for precision in ("%H:%M", "%H:%M:%S", "%H:%M:%S.%f"):
        labels = [f"{t:{head}{precision}}" for t in parsed]
        if precision.endswith("%f"):
            labels = [label[:-3] for label in labels]  # milliseconds
        if len(set(labels)) == len(labels):
            break
    return labels, day


def labelled_indexes(count: int, step_px: float, label_px: int) -> list[int]:
    """The points that get an x label: the first, the last, and evenly spaced ones between,
    no two closer than ``label_px`` (a label's width and a gap), so that none overlaps."""
    if count <= 1:
        return list(range(count))
    every = max(1, math.ceil(label_px / step_px)) if step_px > 0 else count
    chosen = list(range(0, count, every))
    if chosen[-1] != count - 1:
        if (count - 1 - chosen[-1]) * step_px < label_px and len(chosen) > 1:
            chosen.pop()
        chosen.append(count - 1)
    return chosen


def _text_width(text: str) -> int:
    """A generous width in px of ``text`` in the chart's font (digits and colons)."""
    return math.ceil(len(text) * CHART_FONT_PX * 0.62)


def snapshot_topics(summary: RunSummary | None) -> list[str]:
    """The remote-enabled topics of a ``cluster_status`` snapshot: its ``details.topics``,
    else (an older job's) the topics of its partitions."""
    if summary is None:
        return []
    manifests = manifest_states(summary.data)
    if manifests is not None:
        return sorted(manifests)
    return sorted({s.partition.rpartition("-")[0] for s in summary.partitions()} - {""})


def status_page(
    summaries: list[RunSummary],
    *,
    docs_href: str | None,
    now: datetime | None = None,
    tiering_interval_s: float | None = None,
    drills: Sequence[RunSummary] = (),
) -> str:
    """The page; ``drills`` are the ``restore_drill`` run summaries, oldest first (all of
    them: the nightly drill's fall out of the last ``RUNS_MAX`` summaries within hours)."""
    now = now or datetime.now(UTC)
    latest, statuses = latest_statuses(summaries)
    cluster_source, cluster = latest_cluster(summaries)
    source = "" if cluster_source is None else _source(cluster_source)
    cluster_stale = (
        None if cluster_source is None else stale_as_of(cluster_source, now, tiering_interval_s)
    )
    recovery = recovery_section(
        snapshot_topics(cluster_source),
        None if cluster_source is None else manifest_states(cluster_source.data),
        [(d, run_label(d)) for d in drills],
        now=now,
        interval_s=tiering_interval_s,
    )
    rows = "".join(_row(s) for s in statuses)
    points = chart_points(summaries)
    docs = f'<p><a href="{html.escape(docs_href)}">Latest Data Docs</a></p>' if docs_href else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Tiered storage status</title>
<link rel="icon" href="{ICON_HREF}">
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child{{text-align:left}}
th{{background:#f4f4f4}}.stale{{background:#fff3cd;border:1px solid #e0b100;padding:.6em}}
.fresh{{color:#2b6e2b}}.note{{color:#555;font-size:.9em}}.lag,.txn{{text-align:left}}
.txn-open{{text-align:left;background:#fff3cd}}
{CLUSTER_CSS}{RECOVERY_CSS}</style></head><body>
<h1>Tiered storage status</h1>
{_provenance(latest, now, tiering_interval_s)}{docs}
{cluster_section(cluster, source, stale_as_of=cluster_stale)}
{recovery}
<h2>Tiering per partition</h2>
<table id="tiering"><thead>
<tr><th rowspan="2">partition</th><th colspan="2">leader</th><th colspan="4">offsets</th>
<th colspan="2">local log</th><th colspan="2">remote log</th><th rowspan="2">copy lag</th>
<th rowspan="2">transactions</th></tr>
<tr><th>broker</th><th>epoch</th><th>log start</th><th>local start</th>
<th>highest tiered</th><th>high watermark</th><th>size</th><th>segments</th><th>size</th>
<th>segments</th></tr></thead>
<tbody>{rows}</tbody></table>
<p class="note">Offsets are inclusive except the high watermark (the next offset to be
written). Local log start &gt; log start means the oldest data is served from the remote
tier. The active segment is copied only after it rolls; closed segments above the highest
tiered offset wait for the next tiering run. An open transaction holds the last stable offset
(LSO) at its first offset: read_committed consumers and copies stop there until it ends.</p>
<h2>Remote and copy-lag bytes, last {len(points)} status snapshots</h2>
{chart_svg(points)}
</body></html>"""


def _source(summary: RunSummary) -> str:
    finished = summary.finished_at()
    when = f", finished {finished:%Y-%m-%d %H:%M:%S} UTC" if finished is not None else ""
    return run_label(summary) + when


def is_stale(age_s: float, interval_s: float | None) -> bool:
    """Older than one tiering interval and a run's own duration (``STALE_GRACE_S``)."""
    return interval_s is not None and age_s > interval_s + STALE_GRACE_S


def stale_as_of(summary: RunSummary, now: datetime, interval_s: float | None) -> str | None:
    """``<finish time> UTC (<age> ago)`` when ``summary`` is stale (or its finish time is
    unknown while a schedule is known), else None."""
    if interval_s is None:
        return None
    finished = summary.finished_at()
    if finished is None:
        return "an unknown time"
    age_s = max(0.0, (now - finished).total_seconds())
    if not is_stale(age_s, interval_s):
        return None
    return f"{finished:%Y-%m-%d %H:%M:%S} UTC ({human_duration(age_s)} ago)"


def _provenance(latest: RunSummary | None, now: datetime, interval_s: float | None) -> str:
    if latest is None:
        return "<p>No status snapshot yet: the tiering DAG writes one after each run.</p>"
    finished = latest.finished_at()
    where = html.escape(run_label(latest))
    if finished is None:
        return f"<p>Per partition, from {where} (finish time unknown).</p>"
    age_s = max(0.0, (now - finished).total_seconds())
    when = f"{finished:%Y-%m-%d %H:%M:%S} UTC"
    head = (
        f"<p>Per partition, from {where}, finished {when}: "
        f'<strong class="age">{human_duration(age_s)} old</strong> at {now:%H:%M:%S} UTC.</p>'
    )
    if is_stale(age_s, interval_s):
        return head + (
            f'<p class="stale" role="alert"><strong>Stale:</strong> these figures are'
            f" {human_duration(age_s)} old, older than the tiering schedule (every"
            f" {human_duration(interval_s)}). Tiering may be paused or failing: check the"
            " tiering DAG. What is shown is the past, not the cluster now.</p>"
        )
    return head.replace("<p>", '<p class="fresh">', 1)


def _row(s: PartitionStatus) -> str:
    cells = (
        s.partition,
        _cell(s.leader),
        _cell(s.leader_epoch),
        _cell(s.log_start_offset),
        _cell(s.local_log_start_offset),
        "none" if s.highest_tiered_offset == -1 else _cell(s.highest_tiered_offset),
        _cell(s.high_watermark),
        _size(s.local_bytes),
        _cell(s.local_segments),
        _size(s.remote_bytes),
        _cell(s.remote_segments),
    )
    return (
        "<tr>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        + f'<td class="lag">{html.escape(copy_lag_text(s))}</td>'
        + transactions_cell(s)
        + "</tr>"
    )


def copy_lag_text(s: PartitionStatus) -> str:
    """The copy lag in words: how many offsets, and where they sit."""
    lag = s.copy_lag_offsets
    if lag is None:
        return "-"
    if lag == 0:
        return "none: everything below the high watermark is tiered"
    active = s.active_lag_offsets
    closed = lag - active if active is not None else None
    parts = []
    if active:
        parts.append(f"{active} in the active segment (copied once it rolls)")
    if closed:
        segments = f", {s.copy_lag_segments} segments" if s.copy_lag_segments else ""
        size = f", {human_bytes(s.copy_lag_bytes)}" if s.copy_lag_bytes else ""
        parts.append(f"{closed} in closed segments{segments}{size} (next tiering run)")
    return f"{lag} offsets: " + "; ".join(parts) if parts else f"{lag} offsets"


def latest_data_docs(root: Path) -> Path | None:
    """The local site directory of the most recently written Data Docs under ``root``."""
    runs = root / "runs"
    if not runs.is_dir():
        return None
    candidates = [p for p in runs.glob(f"*/*/*/report/{paths.DATA_DOCS_INDEX}") if p.is_file()]
    if not candidates:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime).parent


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 time (``Z`` or an offset; naive means UTC), or None."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def human_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _nice_top(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of 1024 or 10 at or above ``value`` (>= 1)."""
    if value <= 0:
        return 1024
    unit = 1
    while value > unit * 1024:
        unit *= 1024
    for step in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        if value <= unit * step:
            return unit * step
    return unit * 1024


def _partition_name(entry: Mapping[str, Any]) -> str | None:
    partition = entry.get("partition", entry.get("topic_partition"))
    topic = entry.get("topic")
    if isinstance(partition, str):
        return partition
    if topic is not None and isinstance(partition, int):
        return f"{topic}-{partition}"
    return None


def _first_int(entry: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = entry.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _size(value: int | None) -> str:
    return human_bytes(value)
