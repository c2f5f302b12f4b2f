"""Production scale (issue 30): what partitions and remote segments cost as they grow.

Two parts, each on real broker processes on loopback (see their modules):

  partitions  (benchmarks/scale_partitions.py) three brokers, replication factor 3, a real
              ZooKeeper, a fresh cluster per size P: create P partitions (against the same
              ZooKeeper writes by kazoo in the same run), idle CPU and descriptors per broker,
              SIGTERM of a broker (leaderships moved, session expiry), its restart until it is
              back in every ISR
  segments    (benchmarks/scale_segments.py) one tiered broker holding S remote segments,
              built by publishing metadata events (said in the output): the copy of more
              segments, the quality job's pure part, metadata bytes, a restart until a tiered
              offset is served (with and without the RLMM snapshots), descriptors as
              closed local segments grow, and __remote_log_metadata per live segment while
              history comes and goes (benchmarks/scale_churn.py)

Every figure is also given per partition or per segment, with its ratio to the smallest
size; the summary prints each aim of the issue with the measured figure and met / NOT met.
The table goes to stdout, everything to ``--json``. ``--short`` is the suite's variant
(tests/integration/test_scale_short.py): small sizes, and ``growth_failures`` lists the
per-unit costs that grew more than 2x between two sizes.

    .venv/bin/python benchmarks/scale.py [--partitions 300,1000,3000]
        [--segments 1000,10000,100000]
        [--only create,idle,fds,shutdown,restart,copy,quality,bytes,churn]
        [--churn-cycles 12] [--short] [--json PATH] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import scale_partitions, scale_segments
from benchmarks.scale_aims import aims, print_aims
from benchmarks.scale_support import machine
from embedded.zookeeper import ZooKeeperEnsemble

FULL = {"partitions": "300,1000,3000", "segments": "1000,10000,100000", "local": "300,3000"}
SHORT = {"partitions": "60,180", "segments": "300,3000", "local": "30,90"}
GROWTH_LIMIT = 2.0

# (key, label, per-unit, checked for growth): rows of the table, in order. The suite checks
# counts, CPU time (which a loaded machine stretches far less than the wall time) and the
# fastest of several copies; the wall times per unit are printed, not checked.
PARTITION_ROWS = (
    ("create_s", "create, until every broker sees the leaders (s)", False, False),
    ("create_ms_per_partition", "  per partition (ms)", True, False),
    ("create_cpu_ms_per_partition", "  the brokers' CPU per partition (ms)", True, True),
    ("zookeeper_writes_s", "  the same ZooKeeper writes by kazoo (s)", False, False),
    ("create_vs_zookeeper_writes", "  create / ZooKeeper writes", False, False),
    ("create_request_timed_out", "  CreateTopics answered REQUEST_TIMED_OUT", False, False),
    ("restart_isr_s", "one broker restarted: start until back in every ISR (s)", False, False),
    ("restart_ms_per_partition", "  per partition (ms)", True, False),
    ("restart_cpu_ms_per_partition", "  the brokers' CPU per partition (ms)", True, True),
    ("shutdown_s", "SIGTERM until the broker exits (s)", False, False),
    ("shutdown_ms_per_partition", "  per partition (ms)", True, False),
    ("shutdown_cpu_ms_per_partition", "  the brokers' CPU per partition (ms)", True, True),
    ("leaderships_held", "  leaderships it held", False, False),
    ("leaderships_not_moved", "  not moved before it left (by zxid)", False, False),
    ("leaderships_led_at_last_look", "  still led at the last look (once a second)", False, False),
    ("session_expired", "  its ZooKeeper session expired", False, False),
    ("idle_cpu_percent_max", "idle CPU per broker, most of the three (% of a core)", False, False),
    ("idle_cpu_percent_per_1000_partitions", "  per 1,000 partitions (%)", True, False),
    ("idle_empty_cpu_percent_max", "  the same brokers before the topic (%)", False, False),
    ("idle_vs_empty", "  idle / before the topic", False, False),
    ("descriptors_max", "open descriptors per broker, most of the three", False, False),
    ("descriptors_per_partition", "  per partition", True, True),
)
SEGMENT_ROWS = (
    ("copy_ms_per_segment", "copy one more segment, median (ms per segment)", True, False),
    ("copy_ms_min", "  the fastest copy (ms)", True, True),
    ("rlmm_catch_up_s", "copy job's RLMM start, caught up (s)", False, False),
    ("rlmm_catch_up_us_per_segment", "  per remote segment (us)", True, False),
    ("rlmm_catch_up_cpu_us_per_segment", "  CPU per remote segment (us)", True, True),
    ("plan_s", "copy planning, candidate_segments (s)", False, False),
    ("quality_read_s", "quality job: metadata read (s)", False, False),
    ("quality_build_s", "quality job: tables built (s)", False, False),
    ("quality_us_per_segment", "  per remote segment (us)", True, False),
    ("quality_cpu_us_per_segment", "  CPU per remote segment (us)", True, True),
    ("metadata_bytes_per_segment", "__remote_log_metadata bytes per segment", True, True),
    ("restart_serving_s", "restart until a tiered offset is served (s)", False, False),
    ("restart_serving_ms_per_1000_segments", "  per 1,000 remote segments (ms)", True, False),
    ("restart_cpu_ms_per_1000_segments", "  its CPU per 1,000 remote segments (ms)", True, True),
    ("restart_no_snapshot_serving_s", "  the same without RLMM snapshots (s)", False, False),
)


def sizes_of(text: str) -> list[int]:
    return sorted(int(x.replace("_", "")) for x in text.split(",") if x.strip())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", help=f"sizes, '' for none (default {FULL['partitions']})")
    parser.add_argument("--segments", help=f"sizes, '' for none (default {FULL['segments']})")
    parser.add_argument("--local-segments", help=f"closed local segments (default {FULL['local']})")
    parser.add_argument(
        "--only",
        default="",
        help="steps, comma-separated: "
        + ",".join(dict.fromkeys(scale_partitions.STEPS + scale_segments.STEPS)),
    )
    parser.add_argument("--short", action="store_true", help="the suite's small sizes")
    parser.add_argument("--copies", type=int, default=None, help="segments copied per size")
    parser.add_argument(
        "--churn-cycles",
        type=int,
        default=None,
        help="cycles of history on the first segment size (default 12; --short: 0, the suite"
        " checks it in tests/integration/test_remote_log_metadata_growth.py)",
    )
    parser.add_argument("--idle-window-s", type=float, default=None)
    parser.add_argument("--json", type=Path, help="write every figure there")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    defaults = SHORT if args.short else FULL
    args.partition_sizes = sizes_of(
        defaults["partitions"] if args.partitions is None else args.partitions
    )
    args.segment_sizes = sizes_of(defaults["segments"] if args.segments is None else args.segments)
    args.local_sizes = sizes_of(args.local_segments or defaults["local"])
    steps = set(scale_partitions.STEPS) | set(scale_segments.STEPS)
    args.steps = {s.strip() for s in args.only.split(",") if s.strip()} or steps
    unknown = args.steps - steps
    if unknown:
        parser.error(f"--only: unknown steps {sorted(unknown)}; known: {sorted(steps)}")
    args.copies = args.copies or (7 if args.short else 15)  # a median of 15 copies
    if args.churn_cycles is None:
        args.churn_cycles = 0 if args.short else 12
    args.idle_window_s = args.idle_window_s or (3.0 if args.short else 10.0)
    return args


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """Every size of both parts; a size that fails is recorded in ``errors`` (with what it
    measured before failing) and the run goes on with the next."""
    result: dict[str, Any] = {"machine": machine(), "partitions": {}, "segments": {}}
    errors: list[str] = []
    if args.partition_sizes:
        with ZooKeeperEnsemble(base / "zk", size=1) as zookeeper:
            for size in args.partition_sizes:
                try:
                    row = scale_partitions.measure_size(
                        zookeeper, base, size, only=args.steps, idle_window_s=args.idle_window_s
                    )
                except Exception as error:  # report it, measure the other sizes
                    errors.append(f"partitions {size}: {type(error).__name__}: {error}")
                    continue
                result["partitions"][str(size)] = row
                print(f"partitions {size}: {json.dumps(row)}", file=sys.stderr, flush=True)
    segment_steps = args.steps & set(scale_segments.STEPS)
    if args.segment_sizes and segment_steps:
        result["segment_notes"] = {"built_by": scale_segments.BUILT_BY_EVENTS}
        for index, size in enumerate(args.segment_sizes):
            try:
                row, notes = scale_segments.measure_size(
                    base / f"segments-{size}",
                    size,
                    only=segment_steps,
                    copies=args.copies,
                    local_segments=args.local_sizes if index == 0 else (),
                    churn_cycles=args.churn_cycles if index == 0 else 0,
                )
            except Exception as error:  # report it, measure the other sizes
                errors.append(f"segments {size}: {type(error).__name__}: {error}")
                continue
            result["segments"][str(size)] = row
            result["segment_notes"].update(notes)
            print(f"segments {size}: {json.dumps(row)}", file=sys.stderr, flush=True)
    result["errors"] = errors
    result["growth"] = growth_table(result)
    result["growth_failures"] = growth_failures(result)
    result["aims"] = aims(result)
    return result


def _rows(part: str) -> tuple[tuple[str, str, bool, bool], ...]:
    return PARTITION_ROWS if part == "partitions" else SEGMENT_ROWS


def growth_table(result: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """part -> per-unit key -> size -> value / value at the smallest size."""
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for part in ("partitions", "segments"):
        rows = result[part]
        if not rows:
            continue
        sizes = sorted(rows, key=int)
        table[part] = {}
        for key, _label, per_unit, _checked in _rows(part):
            base = rows[sizes[0]].get(key)
            if not per_unit or base is None:
                continue
            table[part][key] = {
                s: (None if rows[s].get(key) is None or not base else round(rows[s][key] / base, 2))
                for s in sizes
            }
    return table


def growth_failures(result: dict[str, Any], limit: float = GROWTH_LIMIT) -> list[str]:
    """The checked per-unit costs that grew more than ``limit`` times between two sizes."""
    failures = []
    for part in ("partitions", "segments"):
        rows = result[part]
        sizes = sorted(rows, key=int)
        for key, label, _per_unit, checked in _rows(part):
            if not checked:
                continue
            for i, small in enumerate(sizes):
                for large in sizes[i + 1 :]:
                    a, b = rows[small].get(key), rows[large].get(key)
                    if a and b is not None and b > limit * a:
                        failures.append(
                            f"{part} {key} ({label.strip()}): {a} at {small} -> {b} at {large}"
                            f" ({b / a:.2f}x > {limit}x)"
                        )
    return failures


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_table(result: dict[str, Any]) -> str:
    lines = []
    for part, unit in (
        ("partitions", "partitions in the cluster"),
        ("segments", "remote segments"),
    ):
        rows = result[part]
        if not rows:
            continue
        sizes = sorted(rows, key=int)
        head = f"| {unit} | " + " | ".join(f"{int(s):,}" for s in sizes)
        head += " | per unit vs smallest |"
        lines += ["", head, "|" + " --- |" * (len(sizes) + 2)]
        growth = result["growth"].get(part, {})
        for key, label, _per_unit, checked in _rows(part):
            if all(rows[s].get(key) is None for s in sizes):
                continue
            ratios = growth.get(key)
            ratio = (
                " / ".join(_cell(ratios[s]) for s in sizes[1:]) + (" (checked)" if checked else "")
                if ratios and len(sizes) > 1
                else ""
            )
            cells = " | ".join(_cell(rows[s].get(key)) for s in sizes)
            lines.append(f"| {label} | {cells} | {ratio} |")
    notes = result.get("segment_notes", {})
    if notes.get("descriptors_by_local_segments"):
        seen = ", ".join(
            f"{int(k):,} closed: {v:,}" for k, v in notes["descriptors_by_local_segments"].items()
        )
        lines += [
            "",
            f"descriptors of the tiered broker by closed local segments: {seen};"
            f" {_cell(notes['descriptors_per_closed_segment'])} per closed segment",
        ]
    if notes.get("churn_bytes_per_live_segment"):
        lines += [
            "",
            f"__remote_log_metadata beside {notes['churn_live_segments']:,} live segments while"
            f" {notes['churn_segments_per_cycle']:,} segments are copied and expired per cycle"
            f" ({notes['churn_history_records']:,} records of history in"
            f" {notes['churn_cycles']} cycles), per live segment after each cycle:",
            "  bytes:   " + ", ".join(_cell(v) for v in notes["churn_bytes_per_live_segment"]),
            "  records: " + ", ".join(_cell(v) for v in notes["churn_records_per_live_segment"]),
            f"  (records written per live segment by the last cycle, what it would hold uncut:"
            f" {_cell(notes['churn_records_written_per_live_segment'])})",
        ]
    if result["segments"]:
        lines += ["", f"note: {notes.get('built_by', scale_segments.BUILT_BY_EVENTS)}"]
    return "\n".join(lines).lstrip("\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        result = run(args, Path(tempfile.mkdtemp(prefix="scale-", dir=args.dir)))
    else:
        with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
            result = run(args, Path(tmp))
    m = result["machine"]
    print(
        f"scale benchmark, {m['date_utc']} UTC, {m['cpus']} CPUs, {m['memory_gib']} GiB,"
        f" load average at start {m['load_average_at_start']}"
    )
    print(format_table(result))
    print()
    print_aims(result["aims"])
    if result["errors"]:
        print("\nsizes that failed (their figures are missing above):")
        for error in result["errors"]:
            print(f"  {error}")
    if result["growth_failures"]:
        print("\nper-unit costs that grew more than 2x between two sizes:")
        for failure in result["growth_failures"]:
            print(f"  {failure}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
