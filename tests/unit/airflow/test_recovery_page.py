"""The disaster-recovery section of the status page (pure): which drill counts as a topic's last
successful one, that a failure since is shown beside it, and what is stale.

Drill summaries are written as ``jobs.restore_drill`` writes them (``RunSummary`` with its
report under ``details``, each failed expectation as an error) and read back as the page reads
them (``status.read_summaries``); the failed expectations are Great Expectations' own outcome
of the drill's suite (``DrillContext``, pandas), so the rows the page attributes are the rows
the drill records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TIERING_S = 300.0


def drilled(topic: str, partition: int, **problems: str) -> dict[str, Any]:
    """A ``drill_partitions`` row as the drill records it."""
    return {
        "topic": topic,
        "partition": partition,
        "scratch_topic": f"restore-drill-20261129-{topic}",
        "source_log_start_offset": 0,
        "source_highest_tiered_offset": 19,
        "restored_log_start_offset": 0,
        "restored_next_offset": 20,
        "batches": 2,
        "restore_problem": problems.get("restore_problem"),
        "read_problem": None,
        "range_problem": None,
    }


def write_drill(
    reports: Path,
    run_id: str,
    finished: datetime,
    rows: Sequence[Mapping[str, Any]],
    suites: Mapping[str, Mapping[str, Any]] = {},
) -> None:
    """A ``restore_drill`` task's summary, as ``jobs.restore_drill.validate`` fills it."""
    from jobs.common.summary import RunSummary

    summary = RunSummary(job="restore_drill")
    success = all(s["success"] for s in suites.values())
    summary.details.update(
        success=success,
        night=f"{finished:%Y-%m-%d}",
        drilled=list(rows),
        groups_not_restored=[],
        data_docs="gx/uncommitted/data_docs/local_site/index.html",
        suites=dict(suites),
    )
    for suite in suites.values():
        for failed in suite["failed_expectations"]:
            summary.error(f"{suite['suite']}: {failed['reason']}")
    summary.finish()
    summary.finished = finished.isoformat()
    summary.write(reports / "runs" / "restore_drill" / run_id / "restore_drill" / "summary.json")


def epoch_mismatch_suite(tmp_path: Path) -> dict[str, Any]:
    """The drill_batches suite's outcome, run by Great Expectations, when events-1's second
    batch was restored with another leader epoch and orders-0 came back identical."""
    from expectations.restore_drill import DrillContext
    from jobs.planning.restore_drill import BatchHeader, batch_rows

    def batch(base: int, last: int, epoch: int = 0) -> BatchHeader:
        return BatchHeader(
            base_offset=base, last_offset=last, leader_epoch=epoch, crc=7, crc_valid=True
        )

    source = [batch(0, 9), batch(10, 19)]
    ranges = {
        "restored_log_start_offset": 0,
        "restored_next_offset": 20,
        "source_log_start_offset": 0,
        "source_tiered_next_offset": 20,
    }
    rows = batch_rows("orders", 0, source=source, restored=source, **ranges)
    damaged = [batch(0, 9), batch(10, 19, epoch=3)]
    rows += batch_rows("events", 1, source=source, restored=damaged, **ranges)
    outcome = DrillContext(tmp_path / "gx", data_docs=False).validate("drill_batches", rows)
    return {"drill_batches": outcome.to_dict()}


def sections(reports: Path) -> tuple[Any, list[Any]]:
    from tiered_storage_plugin import recovery_page, status

    every = status.read_summaries(reports, limit=None)
    drills = recovery_page.drill_summaries(every)
    verdicts = [v for d in drills for v in recovery_page.topic_drills(d, status.run_label(d))]
    return recovery_page.drill_history(verdicts), drills


def test_a_failed_drill_shows_beside_the_last_successful_one_of_its_topic(tmp_path: Path) -> None:
    from tiered_storage_plugin import recovery_page

    reports = tmp_path / "reports"
    first, second = NOW - timedelta(days=1, hours=9), NOW - timedelta(hours=9)
    write_drill(reports, "scheduled__1", first, [drilled("orders", 2), drilled("events", 0)])
    write_drill(
        reports,
        "scheduled__2",
        second,
        [drilled("orders", 0), drilled("events", 1)],
        epoch_mismatch_suite(tmp_path),
    )
    history, _ = sections(reports)

    # orders passed both nights: its last success is the second, with its partition
    orders = history["orders"]
    assert orders.latest == orders.last_success
    assert (orders.last_success.finished, orders.last_success.partitions) == (second, (0,))
    assert recovery_page.latest_cell(orders, NOW) == ("ok", "passed (the last successful drill)")

    # events failed the second night, on its own rows: shown, the older success kept beside it
    events = history["events"]
    assert events.last_success is not None and events.last_success.finished == first
    assert events.latest is not None and not events.latest.passed
    css, text = recovery_page.latest_cell(events, NOW)
    assert css == "bad"
    assert text.startswith(
        f"FAILED {second:%Y-%m-%d %H:%M:%S} UTC (9 h ago), partitions 1"
        " (DAG restore_drill, run scheduled__2, task restore_drill): "
        "expect_restored_leader_epoch_equals_source:"
    ), text
    assert "topic=events" in text
    assert recovery_page.success_cell(events, NOW) == (
        "ok",
        f"{first:%Y-%m-%d %H:%M:%S} UTC (33 h ago), partitions 0"
        " (DAG restore_drill, run scheduled__1, task restore_drill)",
    )


def test_a_failure_that_names_no_row_fails_every_drilled_topic(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    no_rows = {
        "suite": "drill_group_offsets",
        "success": False,
        "failed_expectations": [
            {"expectation": "x", "unexpected_count": None, "rows": [], "reason": "x: no result"}
        ],
    }
    write_drill(
        reports,
        "scheduled__1",
        NOW - timedelta(hours=1),
        [drilled("orders", 0), drilled("events", 0, restore_problem="RestoreGapError: gap")],
        {"drill_group_offsets": no_rows},
    )
    history, _ = sections(reports)
    assert history["orders"].latest is not None
    assert history["orders"].latest.problems == ("x: no result",)
    assert history["events"].latest is not None
    assert history["events"].latest.problems == ("events-0: RestoreGapError: gap", "x: no result")
    assert history["orders"].last_success is None


def test_what_is_stale_and_what_is_missing_reads_in_words(tmp_path: Path) -> None:
    from tiered_storage_plugin import recovery_page
    from tiered_storage_plugin.recovery_page import (
        DrillHistory,
        ManifestState,
        TopicDrill,
        is_drill_stale,
        is_manifest_stale,
        manifest_cell,
        success_cell,
    )

    # a manifest is stale past two tiering intervals and a run's duration, a drill past 2 days
    assert not is_manifest_stale(2 * TIERING_S + 60, TIERING_S)
    assert is_manifest_stale(2 * TIERING_S + 61, TIERING_S)
    assert not is_drill_stale(2 * 86400) and is_drill_stale(2 * 86400 + 1)

    fresh = ManifestState(written_at=NOW - timedelta(minutes=4), error=None)
    old = ManifestState(written_at=NOW - timedelta(minutes=30), error=None)
    none = ManifestState(written_at=None, error=None)
    assert manifest_cell(fresh, NOW, TIERING_S) == ("ok", "2026-11-29 11:56:00 UTC (4 min ago)")
    assert manifest_cell(old, NOW, TIERING_S) == (
        "bad",
        "2026-11-29 11:30:00 UTC (30 min ago); stale: older than 2 tiering intervals (10 min),"
        " the topic_manifests task is not keeping it current",
    )
    assert manifest_cell(none, NOW, TIERING_S)[1].startswith("no manifest yet")

    def passed(days: float) -> DrillHistory:
        drill = TopicDrill(
            topic="t", finished=NOW - timedelta(days=days), run="r", partitions=(0,), problems=()
        )
        return DrillHistory(latest=drill, last_success=drill)

    assert success_cell(None, NOW) == ("bad", "never drilled")
    assert success_cell(passed(1), NOW)[0] == "ok"
    assert success_cell(passed(3), NOW)[1].endswith("; stale: older than 2 days")

    # the section's first line names every topic not proven, and why
    section = recovery_page.recovery_section(
        ["a", "b", "c"],
        {"a": fresh, "b": old, "c": none},
        [],
        now=NOW,
        interval_s=TIERING_S,
    )
    assert (
        "Restore from the bucket not proven for 3 of 3 topics: a (never drilled);"
        " b (stale manifest, never drilled); c (no manifest, never drilled)."
    ) in section


def test_a_drill_run_that_failed_before_drilling_is_shown(tmp_path: Path) -> None:
    from tiered_storage_plugin import recovery_page, status
    from tiered_storage_plugin.recovery_page import ManifestState

    from jobs.common.summary import RunSummary

    reports = tmp_path / "reports"
    write_drill(reports, "scheduled__1", NOW - timedelta(days=1), [drilled("orders", 0)])
    summary = RunSummary(job="restore_drill")
    summary.error("KafkaConnectionError: no broker at 127.0.0.1:9092 answered")
    summary.finish("failed")
    summary.finished = (NOW - timedelta(hours=2)).isoformat()
    summary.write(reports / "runs/restore_drill/scheduled__2/restore_drill/summary.json")

    _, drills = sections(reports)
    section = recovery_page.recovery_section(
        ["orders"],
        {"orders": ManifestState(written_at=NOW - timedelta(minutes=1), error=None)},
        [(d, status.run_label(d)) for d in drills],
        now=NOW,
        interval_s=TIERING_S,
    )
    assert (
        "The latest restore drill (DAG restore_drill, run scheduled__2, task restore_drill,"
        " finished 2026-11-29 10:00:00 UTC) failed before drilling any partition:"
        " KafkaConnectionError: no broker at 127.0.0.1:9092 answered"
    ) in section
