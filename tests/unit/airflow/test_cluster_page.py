"""The cluster section of the status page from a ``jobs.cluster_status`` snapshot (pure)."""

from __future__ import annotations

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
