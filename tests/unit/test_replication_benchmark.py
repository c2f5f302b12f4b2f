"""The pure parts of benchmarks/replication.py: reading MaxLag from the broker's /metrics text
as the broker renders it, a follower's bytes behind the leader, and the summary of repeated
ratio measurements."""

from __future__ import annotations

from benchmarks.replication import AIM, bytes_behind, parse_max_lag, repeat_summary
from storage_core.metrics.prometheus import render
from storage_core.metrics.registry import KafkaMetricsRegistry, MetricName


def fetcher_metric(name: str) -> MetricName:
    return MetricName(
        group="kafka.server",
        type="ReplicaFetcherManager",
        name=name,
        tags=(("clientId", "Replica"),),
    )


def test_max_lag_is_read_from_the_rendered_registry() -> None:
    registry = KafkaMetricsRegistry()
    registry.gauge(fetcher_metric("MinFetchRate"), lambda: 3.5)
    registry.gauge(fetcher_metric("MaxLag"), lambda: 1234)
    registry.gauge(
        MetricName(group="kafka.server", type="ReplicaManager", name="LeaderCount"), lambda: 7
    )

    assert parse_max_lag(render(registry)) == 1234


def test_no_max_lag_where_the_broker_has_no_fetcher_gauge() -> None:
    registry = KafkaMetricsRegistry()
    registry.gauge(
        MetricName(group="kafka.server", type="ReplicaManager", name="LeaderCount"), lambda: 7
    )

    assert parse_max_lag(render(registry)) is None


def test_bytes_behind_compares_with_the_leader_when_the_follower_was_read() -> None:
    assert bytes_behind(1000, 900, 1200) == 200
    assert bytes_behind(1000, 1000, 1000) == 0
    # the follower read after it caught up with a leader read earlier: not negative
    assert bytes_behind(1000, 1100, 1000) == 0


def test_repeated_ratios_are_summarized_by_median_range_and_runs_meeting_the_aim() -> None:
    summary = repeat_summary([0.52, 0.47, 0.61, 0.5, 0.55])

    assert summary["median"] == 0.52
    assert (summary["min"], summary["max"]) == (0.47, 0.61)
    assert summary["met"] == 4  # 0.5 meets an aim of 0.5; 0.47 does not
    assert summary["repeats"] == 5
    assert summary["ratios"] == [0.52, 0.47, 0.61, 0.5, 0.55]
    assert summary["runs_mib_s"] == []
    assert AIM == 0.5


def test_each_repeats_throughputs_are_kept_beside_its_ratio() -> None:
    summary = repeat_summary([0.5, 0.45], [(200.0, 100.0), (240.0, 108.0)])

    assert summary["runs_mib_s"] == [[200.0, 100.0], [240.0, 108.0]]
    assert summary["met"] == 1
