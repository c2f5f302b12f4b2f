"""Metrics registry, BrokerTopicStats and the Prometheus text format, with a manual clock."""

from __future__ import annotations

import logging
import math
import threading

import pytest

from storage_core.clock import ManualClock
from storage_core.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from storage_core.log.log_validator import LogAppendInfo
from storage_core.metrics.broker_topic_stats import (
    BYTES_IN_PER_SEC,
    BYTES_OUT_PER_SEC,
    FAILED_FETCH_REQUESTS_PER_SEC,
    FAILED_PRODUCE_REQUESTS_PER_SEC,
    MESSAGES_IN_PER_SEC,
    REMOTE_COPY_BYTES_PER_SEC,
    REMOTE_COPY_LAG_BYTES,
    REPLICATION_BYTES_OUT_PER_SEC,
    TOTAL_FETCH_REQUESTS_PER_SEC,
    TOTAL_PRODUCE_REQUESTS_PER_SEC,
    BrokerTopicStats,
    UnknownMetricError,
    broker_topic_metric_name,
)
from storage_core.metrics.prometheus import render
from storage_core.metrics.registry import (
    InvalidMetricNameError,
    KafkaMetricsRegistry,
    Meter,
    MetricName,
    MetricTypeMismatchError,
)
from storage_core.server.kafka_config import KafkaConfig
from tests.prometheus_text import parse_exposition


def _topic(topic: str | None = None) -> frozenset[tuple[str, str]]:
    return frozenset() if topic is None else frozenset({("topic", topic)})


def _appended(records: int, size_bytes: int, *, duplicate: bool = False) -> LogAppendInfo:
    return LogAppendInfo(
        first_offset=0,
        last_offset=records - 1,
        max_timestamp=0,
        offset_of_max_timestamp=0,
        records_count=records,
        valid_bytes=size_bytes,
        batches=(),
        is_duplicate=duplicate,
    )


# ---------------------------------------------------------------- meter rates
def test_meter_rates_match_yammers_ewma_after_one_tick_and_one_minute() -> None:
    # Yammer's EWMATest: update(3), tick -> 0.6/s; one idle minute later 0.22072766 (1m),
    # 0.49123845 (5m), 0.56130419 (15m).
    clock = ManualClock()
    meter = Meter(clock)
    meter.mark(3)
    assert meter.one_minute_rate() == 0.0  # no tick yet
    clock.sleep(5_000)
    assert meter.one_minute_rate() == pytest.approx(0.6)
    assert meter.five_minute_rate() == pytest.approx(0.6)
    assert meter.fifteen_minute_rate() == pytest.approx(0.6)
    clock.sleep(60_000)
    assert meter.one_minute_rate() == pytest.approx(0.22072766, abs=1e-8)
    assert meter.five_minute_rate() == pytest.approx(0.49123845, abs=1e-8)
    assert meter.fifteen_minute_rate() == pytest.approx(0.56130419, abs=1e-8)
    assert meter.count == 3


def test_meter_converges_to_a_steady_rate_and_reports_the_mean() -> None:
    clock = ManualClock()
    meter = Meter(clock)
    for _ in range(600):  # 10 minutes at 20 events per second
        meter.mark(20)
        clock.sleep(1_000)
    assert meter.one_minute_rate() == pytest.approx(20.0, rel=1e-3)
    assert meter.five_minute_rate() == pytest.approx(20.0, rel=0.15)
    assert meter.mean_rate() == pytest.approx(20.0)
    assert meter.count == 12_000


def test_a_long_idle_gap_decays_the_rate_in_closed_form() -> None:
    clock = ManualClock()
    meter = Meter(clock)
    meter.mark(50)
    clock.sleep(5_000)
    assert meter.one_minute_rate() == pytest.approx(10.0)
    clock.sleep(3_600_000)  # one hour: 720 ticks, e^-60 of the rate remains
    assert meter.one_minute_rate() == pytest.approx(10.0 * math.exp(-60), rel=1e-6)
    meter.mark(5)  # marking after the gap starts a new tick interval
    clock.sleep(5_000)
    assert meter.one_minute_rate() == pytest.approx(1.0 * (1 - math.exp(-5 / 60)), rel=1e-6)


def test_marks_from_many_threads_are_all_counted() -> None:
    clock = ManualClock()
    meter = Meter(clock)

    def mark_many() -> None:
        for _ in range(20_000):
            meter.mark(2)

    threads = [threading.Thread(target=mark_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert meter.count == 160_000
    clock.sleep(5_000)
    assert meter.one_minute_rate() == pytest.approx(160_000 / 5)


# ---------------------------------------------------------------- exposition
def test_exposition_names_and_values_as_the_jmx_exporter_and_parses_back() -> None:
    clock = ManualClock()
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=clock))
    stats.mark_produce("orders", _appended(12, 900), None)
    stats.mark_produce("clicks", _appended(3, 100), None)
    stats.mark_fetch("orders", 900, None)
    clock.sleep(5_000)
    types, samples = parse_exposition(render(stats.registry))

    prefix = "kafka_server_brokertopicmetrics_"
    assert types[prefix + "messagesinpersec_count"] == "counter"
    assert types[prefix + "messagesinpersec_oneminuterate"] == "gauge"
    assert samples[(prefix + "messagesinpersec_count", _topic("orders"))] == 12
    assert samples[(prefix + "messagesinpersec_count", _topic("clicks"))] == 3
    assert samples[(prefix + "messagesinpersec_count", _topic())] == 15
    assert samples[(prefix + "bytesinpersec_count", _topic())] == 1000
    assert samples[(prefix + "bytesoutpersec_count", _topic("orders"))] == 900
    assert samples[(prefix + "totalproducerequestspersec_count", _topic())] == 2
    assert samples[(prefix + "totalfetchrequestspersec_count", _topic("orders"))] == 1
    assert samples[(prefix + "messagesinpersec_oneminuterate", _topic())] == pytest.approx(3.0)
    for attribute in ("meanrate", "fiveminuterate", "fifteenminuterate"):
        assert (prefix + f"messagesinpersec_{attribute}", _topic("orders")) in samples
    # Broker-wide meters exist before any traffic, at zero.
    assert samples[(prefix + "failedfetchrequestspersec_count", _topic())] == 0


def test_label_values_are_escaped_and_a_failing_gauge_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = KafkaMetricsRegistry(clock=ManualClock())
    odd = 'a"b\\c\nd'
    registry.meter(MetricName(group="kafka.server", type="T", name="N", tags=(("k", odd),))).mark()
    registry.gauge(MetricName(group="kafka.log", type="Log", name="Size"), lambda: 42)
    registry.gauge(MetricName(group="kafka.log", type="Log", name="Broken"), lambda: 1 / 0)
    with caplog.at_level(logging.WARNING):
        types, samples = parse_exposition(render(registry))
    assert samples[("kafka_server_t_n_count", frozenset({("k", odd)}))] == 1
    assert samples[("kafka_log_log_size_value", frozenset())] == 42
    assert "kafka_log_log_broken_value" not in types
    assert [r.message for r in caplog.records if "gauge failed" in r.message] == [
        "gauge failed metric=kafka.log:type=Log,name=Broken"
        " error=ZeroDivisionError('division by zero')"
    ]


def test_an_empty_registry_renders_nothing() -> None:
    assert render(KafkaMetricsRegistry()) == ""


# ---------------------------------------------------------------- bounds
def test_series_beyond_the_limit_are_dropped_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = KafkaMetricsRegistry(max_series=3, clock=ManualClock())
    names = [MetricName(group="g", type="t", name=f"m{i}") for i in range(6)]
    with caplog.at_level(logging.WARNING):
        meters = [registry.meter(name) for name in names]
    for meter in meters:
        meter.mark()  # a detached meter still works for its caller
    assert len(registry) == 3
    assert registry.dropped_series == 3
    assert sum("series limit reached" in r.message for r in caplog.records) == 1
    _, samples = parse_exposition(render(registry))
    assert {name for name, _ in samples if name.endswith("_count")} == {
        "g_t_m0_count",
        "g_t_m1_count",
        "g_t_m2_count",
    }
    # A removal makes room; the next refusal warns again.
    assert registry.remove(names[0])
    assert registry.meter(names[5]) is registry.get(names[5])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        registry.meter(names[4])
    assert sum("series limit reached" in r.message for r in caplog.records) == 1


def test_deleting_a_topic_removes_its_series_and_keeps_the_others() -> None:
    clock = ManualClock()
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=clock))
    stats.mark_produce("gone", _appended(5, 50), None)
    stats.mark_produce("kept", _appended(1, 10), None)
    stats.set_partition_value(REMOTE_COPY_LAG_BYTES, "gone", 0, 100)
    stats.set_partition_value(REMOTE_COPY_LAG_BYTES, "kept", 0, 7)
    stats.remove_topic("gone")
    _, samples = parse_exposition(render(stats.registry))
    assert not [key for key in samples if ("topic", "gone") in key[1]]
    assert samples[("kafka_server_brokertopicmetrics_messagesinpersec_count", _topic("kept"))] == 1
    # The broker-wide count keeps its history; the broker-wide gauge loses the topic's share.
    assert samples[("kafka_server_brokertopicmetrics_messagesinpersec_count", _topic())] == 6
    assert samples[("kafka_server_brokertopicmetrics_remotecopylagbytes_value", _topic())] == 7
    # A topic created again under the same name starts from zero.
    stats.mark_produce("gone", _appended(2, 20), None)
    meter = stats.registry.get(broker_topic_metric_name(MESSAGES_IN_PER_SEC, "gone"))
    assert isinstance(meter, Meter) and meter.count == 2


# ---------------------------------------------------------------- what is counted
def _count(stats: BrokerTopicStats, name: str, topic: str | None = None) -> int:
    meter = stats.registry.get(broker_topic_metric_name(name, topic))
    assert isinstance(meter, Meter) or meter is None
    return 0 if meter is None else meter.count


def test_produce_counts_appends_failures_and_not_duplicates() -> None:
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=ManualClock()))
    stats.mark_produce("t", _appended(4, 400), None)
    stats.mark_produce("t", _appended(4, 400, duplicate=True), None)
    stats.mark_produce("t", None, NotLeaderOrFollowerError("not the leader of t-0"))
    stats.mark_produce("made-up", None, UnknownTopicOrPartitionError("no made-up-0"))
    assert _count(stats, TOTAL_PRODUCE_REQUESTS_PER_SEC) == 4
    assert _count(stats, TOTAL_PRODUCE_REQUESTS_PER_SEC, "t") == 3
    assert _count(stats, FAILED_PRODUCE_REQUESTS_PER_SEC) == 2
    assert _count(stats, FAILED_PRODUCE_REQUESTS_PER_SEC, "t") == 1
    assert _count(stats, MESSAGES_IN_PER_SEC, "t") == 4
    assert _count(stats, BYTES_IN_PER_SEC) == 400
    # An unknown topic creates no series of its own.
    assert not [n for n, _ in stats.registry.metrics() if n.tag("topic") == "made-up"]


def test_fetch_counts_bytes_out_and_failures() -> None:
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=ManualClock()))
    stats.mark_fetch("t", 1234, None)
    stats.mark_fetch("t", 0, None)
    stats.mark_fetch("t", 0, NotLeaderOrFollowerError("not the leader of t-0"))
    assert _count(stats, TOTAL_FETCH_REQUESTS_PER_SEC, "t") == 3
    assert _count(stats, BYTES_OUT_PER_SEC, "t") == 1234
    assert _count(stats, BYTES_OUT_PER_SEC) == 1234
    assert _count(stats, FAILED_FETCH_REQUESTS_PER_SEC, "t") == 1


def test_remote_meters_and_partition_gauges_appear_on_first_use() -> None:
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=ManualClock()))
    assert _count(stats, REMOTE_COPY_BYTES_PER_SEC) == 0
    stats.mark(REMOTE_COPY_BYTES_PER_SEC, "t", 4096)
    stats.set_partition_value(REMOTE_COPY_LAG_BYTES, "t", 0, 10)
    stats.set_partition_value(REMOTE_COPY_LAG_BYTES, "t", 1, 5)
    stats.set_partition_value(REMOTE_COPY_LAG_BYTES, "u", 0, 1)
    stats.remove_partition("t", 1)
    _, samples = parse_exposition(render(stats.registry))
    prefix = "kafka_server_brokertopicmetrics_"
    assert samples[(prefix + "remotecopybytespersec_count", _topic("t"))] == 4096
    assert samples[(prefix + "remotecopylagbytes_value", _topic("t"))] == 10
    assert samples[(prefix + "remotecopylagbytes_value", _topic())] == 11
    with pytest.raises(UnknownMetricError):
        stats.mark("NoSuchPerSec", None)
    with pytest.raises(UnknownMetricError):
        stats.set_partition_value(MESSAGES_IN_PER_SEC, "t", 0, 1)


def test_names_are_validated_and_kinds_do_not_mix() -> None:
    with pytest.raises(InvalidMetricNameError):
        MetricName(group="kafka.server", type="", name="N")
    with pytest.raises(InvalidMetricNameError):
        MetricName(group="g", type="t", name="n", tags=(("topic", "a"), ("topic", "b")))
    with pytest.raises(InvalidMetricNameError):
        MetricName(group="g", type="t", name="n", tags=(("bad-key", "a"),))
    registry = KafkaMetricsRegistry()
    name = MetricName(group="g", type="t", name="n")
    registry.meter(name)
    with pytest.raises(MetricTypeMismatchError):
        registry.gauge(name, lambda: 1)
    assert name.mbean_name() == "g:type=t,name=n"


def test_metrics_port_is_a_broker_config_disabled_by_default() -> None:
    config = KafkaConfig.from_props({"log.dirs": "/tmp/x"})
    assert config.get_int("metrics.port") == -1
    assert config.get_string("metrics.host") == "127.0.0.1"
    assert (
        KafkaConfig.from_props({"log.dirs": "/tmp/x", "metrics.port": "9404"}).get_int(
            "metrics.port"
        )
        == 9404
    )


def test_a_followers_fetch_is_replication_traffic_counted_broker_wide_only() -> None:
    stats = BrokerTopicStats(KafkaMetricsRegistry(clock=ManualClock()))
    stats.mark_fetch("orders", 900, None)  # a consumer
    stats.mark_fetch("orders", 4_000, None, follower=True)
    stats.mark_replication_bytes_in(300)
    _, samples = parse_exposition(render(stats.registry))

    prefix = "kafka_server_brokertopicmetrics_"
    assert samples[(prefix + "bytesoutpersec_count", _topic("orders"))] == 900
    assert samples[(prefix + "bytesoutpersec_count", _topic())] == 900
    assert samples[(prefix + "replicationbytesoutpersec_count", _topic())] == 4_000
    assert samples[(prefix + "replicationbytesinpersec_count", _topic())] == 300
    assert samples[(prefix + "totalfetchrequestspersec_count", _topic("orders"))] == 2
    assert (prefix + "replicationbytesoutpersec_count", _topic("orders")) not in samples
    with pytest.raises(UnknownMetricError, match="broker-wide only"):
        stats.topic_meter(REPLICATION_BYTES_OUT_PER_SEC, "orders")
