"""The tiering status, read from the jobs' JSON run summaries (pure; no Airflow, no network).

A run summary (written by every ``jobs.<name>``) has ``job``, ``started``/``finished`` and a
list (or an object keyed by partition) of per-partition entries. The status page shows the
latest entries that carry offsets and sizes, and a chart of the total remote bytes and copy lag
over the recent runs. Field names are read with a few aliases so that a job may say
``remote_bytes`` or ``remote_size_bytes``; a missing field shows as "-".
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered_storage_plugin import paths

RUNS_MAX = 50
SUMMARY_BYTES_MAX = 16 * 1024 * 1024
_ALIASES: dict[str, tuple[str, ...]] = {
    "local_bytes": ("local_bytes", "local_size_bytes", "local_log_bytes"),
    "remote_bytes": ("remote_bytes", "remote_size_bytes", "remote_log_size_bytes"),
    "log_start_offset": ("log_start_offset", "remote_log_start_offset"),
    "local_log_start_offset": ("local_log_start_offset", "local_start_offset"),
    "high_watermark": ("high_watermark", "hw"),
    "highest_tiered_offset": (
        "highest_tiered_offset",
        "highest_remote_offset",
        "remote_log_end_offset",
        "remote_end_offset",
    ),
    "copy_lag_bytes": ("copy_lag_bytes", "lag_bytes", "remote_copy_lag_bytes"),
    "copy_lag_segments": ("copy_lag_segments", "lag_segments", "remote_copy_lag_segments"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    partition: str
    local_bytes: int | None = None
    remote_bytes: int | None = None
    log_start_offset: int | None = None
    local_log_start_offset: int | None = None
    high_watermark: int | None = None
    highest_tiered_offset: int | None = None
    copy_lag_bytes: int | None = None
    copy_lag_segments: int | None = None

    @property
    def copy_lag_offsets(self) -> int | None:
        """Offsets below the high watermark (exclusive) not yet tiered."""
        if self.high_watermark is None:
            return None
        tiered_end = -1 if self.highest_tiered_offset is None else self.highest_tiered_offset
        return max(0, self.high_watermark - 1 - tiered_end)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPoint:
    """One run of the chart: when it finished and its totals."""

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


def read_summaries(root: Path, limit: int = RUNS_MAX) -> list[RunSummary]:
    """The ``limit`` most recent readable run summaries under ``root``, oldest first."""
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
    return found[-limit:]


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


def chart_points(summaries: list[RunSummary]) -> list[RunPoint]:
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
    return points


def chart_svg(points: list[RunPoint], *, width: int = 640, height: int = 200) -> str:
    """Remote bytes (blue) and copy lag bytes (orange) per run, one shared scale."""
    if not points:
        return '<p class="empty">No run summaries with remote sizes yet.</p>'
    pad = 40
    top = max(max(p.remote_bytes, p.copy_lag_bytes) for p in points) or 1
    step = (width - 2 * pad) / max(1, len(points) - 1)

    def polyline(values: list[int], color: str, name: str) -> str:
        coords = " ".join(
            f"{pad + i * step:.1f},{height - pad - v / top * (height - 2 * pad):.1f}"
            for i, v in enumerate(values)
        )
        return (
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}">'
            f"<title>{name}</title></polyline>"
        )

    first, last = html.escape(points[0].label), html.escape(points[-1].label)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' role="img" aria-label="remote bytes and copy lag over the recent runs">'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}"'
        ' stroke="#888"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>'
        f'<text x="{pad}" y="{pad - 8}" font-size="11">{_human_bytes(top)}</text>'
        f'<text x="{pad}" y="{height - pad + 16}" font-size="11">{first}</text>'
        f'<text x="{width - pad}" y="{height - pad + 16}" font-size="11"'
        f' text-anchor="end">{last}</text>'
        + polyline([p.remote_bytes for p in points], "#1f77b4", "remote bytes")
        + polyline([p.copy_lag_bytes for p in points], "#ff7f0e", "copy lag bytes")
        + f'<text x="{width - pad}" y="{pad - 8}" font-size="11" text-anchor="end">'
        '<tspan fill="#1f77b4">remote bytes</tspan> '
        '<tspan fill="#ff7f0e">copy lag bytes</tspan></text></svg>'
    )


def status_page(summaries: list[RunSummary], *, docs_href: str | None) -> str:
    latest, statuses = latest_statuses(summaries)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(_cell(v))}</td>"
            for v in (
                s.partition,
                s.local_bytes,
                s.remote_bytes,
                s.log_start_offset,
                s.local_log_start_offset,
                s.high_watermark,
                s.highest_tiered_offset,
                s.copy_lag_offsets,
                s.copy_lag_bytes,
                s.copy_lag_segments,
            )
        )
        + "</tr>"
        for s in statuses
    )
    source = (
        f"from the {html.escape(latest.job)} run finished {html.escape(latest.finished or '?')}"
        if latest
        else "no run summary with partitions yet"
    )
    docs = f'<p><a href="{html.escape(docs_href)}">Latest Data Docs</a></p>' if docs_href else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Tiered storage status</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child{{text-align:left}}
</style></head><body>
<h1>Tiered storage status</h1>
<p>Per partition, {source}.</p>{docs}
<table><thead><tr><th>partition</th><th>local bytes</th><th>remote bytes</th>
<th>log start</th><th>local start</th><th>high watermark</th><th>highest tiered offset</th>
<th>copy lag (offsets)</th><th>copy lag (bytes)</th><th>copy lag (segments)</th></tr></thead>
<tbody>{rows}</tbody></table>
<h2>Remote bytes and copy lag, last {len(summaries)} runs</h2>
{chart_svg(chart_points(summaries))}
</body></html>"""


def latest_data_docs(root: Path) -> Path | None:
    """The local site directory of the most recently written Data Docs under ``root``."""
    runs = root / "runs"
    if not runs.is_dir():
        return None
    candidates = [p for p in runs.glob(f"*/*/*/report/{paths.DATA_DOCS_INDEX}") if p.is_file()]
    if not candidates:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime).parent


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


def _human_bytes(value: int) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
