"""The cluster section of the status page from a ``jobs.cluster_status`` snapshot (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def snapshot(*partitions: dict[str, Any], controller: int = 1) -> dict[str, Any]:
    from jobs.planning.cluster_view import PARTITIONS_MAX

    rows = [
        {
            "preferred_leader": p["replicas"][0],
            "offline_replicas": [],
            "leader_epoch": 0,
            **p,
        }
        for p in partitions
    ]
    for row in rows:
        row["offline"] = row["leader"] is None
        row["under_replicated"] = not row["offline"] and len(row["isr"]) < len(row["replicas"])
    return {
        "job": "cluster_status",
        "details": {
            "cluster": {
                "controller_id": controller,
                "brokers": [{"id": 1, "address": "a:1"}, {"id": 2, "address": "b:2"}],
                "partitions": rows[:PARTITIONS_MAX],
                "under_replicated_partitions": [
                    r["partition"] for r in rows if r["under_replicated"]
                ],
                "offline_partitions": [r["partition"] for r in rows if r["offline"]],
                "partitions_total": len(rows),
            }
        },
    }


def test_a_healthy_cluster_says_so() -> None:
    from tiered_storage_plugin.cluster_page import cluster_state, health_line

    state = cluster_state(
        snapshot({"partition": "t-0", "leader": 1, "replicas": [1, 2], "isr": [1, 2]})
    )
    assert state is not None
    assert health_line(state) == (
        "ok",
        "2 brokers, controller: broker 1. All 1 partitions fully replicated and led by their"
        " preferred replica.",
    )


def test_a_leader_off_its_preferred_replica_is_a_warning_with_what_to_do() -> None:
    from tiered_storage_plugin.cluster_page import cluster_state, health_line

    state = cluster_state(
        snapshot({"partition": "t-0", "leader": 2, "replicas": [1, 2], "isr": [1, 2]})
    )
    assert state is not None
    css, sentence = health_line(state)
    assert css == "warn"
    assert "1 led by another replica than the preferred one" in sentence
    assert "preferred_leader_election" in sentence
    (row,) = state.partitions
    assert row.state() == "led by 2, not the preferred replica 1"


def test_no_controller_and_offline_partitions_are_problems() -> None:
    from tiered_storage_plugin.cluster_page import cluster_section, cluster_state, health_line

    state = cluster_state(
        snapshot({"partition": "t-0", "leader": None, "replicas": [3], "isr": [3]}, controller=-1)
    )
    assert state is not None and state.controller_id is None
    css, sentence = health_line(state)
    assert css == "bad"
    assert sentence == (
        "2 brokers, no controller. Partitions 1 offline (no leader): t-0; no broker is the"
        " controller."
    )
    assert state.partitions[0].under_replicated is False  # offline, not under-replicated
    assert 'class="health bad"' in cluster_section(state)


def test_an_older_snapshot_without_the_cluster_shows_a_hint() -> None:
    from tiered_storage_plugin.cluster_page import cluster_section, cluster_state

    assert cluster_state({"job": "tiering_status", "partitions": []}) is None
    assert "No cluster snapshot yet" in cluster_section(None)


def test_a_stale_snapshot_says_when_its_health_was_seen_and_is_not_green(tmp_path: Path) -> None:
    """A healthy cluster seen by a status task 1 h 18 min ago, tiering every 5 minutes: the
    health line says it is of then and stale, in grey; fresh, it is the usual green line."""
    from tiered_storage_plugin import status

    data = snapshot({"partition": "t-0", "leader": 1, "replicas": [1, 2], "isr": [1, 2]})
    data.update(finished="2026-01-01T04:20:00Z", dag_id="tiering", run_id="r", task_id="status")
    path = tmp_path / "runs" / "tiering" / "r" / "status" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    summaries = status.read_summaries(tmp_path)

    late = datetime(2026, 1, 1, 5, 38, tzinfo=UTC)
    page = status.status_page(summaries, docs_href=None, now=late, tiering_interval_s=300)
    assert 'class="health ok"' not in page
    assert (
        '<p class="health stale" role="status"><strong>As of 2026-01-01 04:20:00 UTC'
        " (1 h 18 min ago), stale: the cluster may have changed since. 2 brokers, controller:"
        " broker 1. All 1 partitions fully replicated and led by their preferred replica."
        "</strong></p>"
    ) in page

    fresh = datetime(2026, 1, 1, 4, 22, tzinfo=UTC)
    page = status.status_page(summaries, docs_href=None, now=fresh, tiering_interval_s=300)
    assert '<p class="health ok" role="status"><strong>2 brokers, controller: broker 1.' in page
    assert "stale" not in page.split('id="cluster"')[1]


def test_a_stale_snapshot_of_a_broken_cluster_stays_red() -> None:
    from tiered_storage_plugin.cluster_page import cluster_section, cluster_state

    state = cluster_state(
        snapshot({"partition": "t-0", "leader": None, "replicas": [3], "isr": []})
    )
    assert state is not None
    section = cluster_section(state, stale_as_of="2026-01-01 04:20:00 UTC (3 h ago)")
    assert '<p class="health bad" role="status"><strong>As of 2026-01-01 04:20:00 UTC' in section
