"""KIP-956 quotas: Kafka's RLMQuotaManager numbers (RLMQuotaManagerTest), the throttle-time
sensors, the broker's dynamic reconfiguration of the bounds, and the copy pacing on a manual
clock."""

from __future__ import annotations

import math

import pytest

from storage_core.clock import ManualClock
from storage_core.server.dynamic_broker_config import (
    BrokerConfigUpdateError,
    validate_broker_configs,
)
from storage_core.tiered.quota.copy_quota import CopyQuota, share_of
from storage_core.tiered.quota.remote_log_quotas import RemoteLogQuotas
from storage_core.tiered.quota.rlm_quota_manager import (
    LONG_MAX_VALUE,
    QuotaConfigError,
    RLMQuotaManager,
    RLMQuotaManagerConfig,
    RLMQuotaMetrics,
)


def manager(bound: float, clock: ManualClock, samples: int = 11, window_s: int = 1):
    config = RLMQuotaManagerConfig(
        quota_bytes_per_second=bound, num_quota_samples=samples, quota_window_size_seconds=window_s
    )
    return RLMQuotaManager(config, clock=clock)


def test_quota_exceeded_as_kafka_computes_it() -> None:
    clock = ManualClock()
    quota = manager(50, clock)
    assert quota.get_throttle_time_ms() == 0
    quota.record(500)
    clock.sleep(1000)  # 500 bytes in the 1 s window: 10x the bound
    assert quota.get_throttle_time_ms() == 9000
    clock.sleep(8000)  # 500 / 9 s: still over
    assert quota.get_throttle_time_ms() == 1000
    clock.sleep(1000)  # 500 / 10 s = the bound: acceptable
    assert quota.get_throttle_time_ms() == 0
    assert quota.byte_rate() == pytest.approx(50.0)


def test_update_quota_applies_at_once_to_the_kept_samples() -> None:
    clock = ManualClock()
    quota = manager(50, clock)
    quota.record(51)
    assert quota.get_throttle_time_ms() > 0
    quota.update_quota(60)
    assert quota.get_throttle_time_ms() == 0
    quota.update_quota(40)
    assert quota.get_throttle_time_ms() > 0
    with pytest.raises(QuotaConfigError):
        quota.update_quota(0)


def test_old_windows_are_forgotten_and_the_default_never_throttles() -> None:
    clock = ManualClock()
    quota = manager(100, clock, samples=3, window_s=2)
    quota.record(10_000)
    assert quota.get_throttle_time_ms() > 0
    clock.sleep(3 * 2000)  # samples * window since the last event: purged
    assert quota.byte_rate() == 0.0
    assert quota.get_throttle_time_ms() == 0
    unbounded = RLMQuotaManager(RLMQuotaManagerConfig.fetch_quota({}), clock=clock)
    assert unbounded.quota_bytes_per_second == LONG_MAX_VALUE
    unbounded.record(10**15)
    assert unbounded.get_throttle_time_ms() == 0


def test_configs_take_kafka_names_defaults_and_ranges() -> None:
    config = RLMQuotaManagerConfig.copy_quota(
        {
            "remote.log.manager.copy.max.bytes.per.second": "1048576",
            "remote.log.manager.copy.quota.window.num": "5",
            "remote.log.manager.copy.quota.window.size.seconds": "2",
        }
    )
    assert (config.quota_bytes_per_second, config.num_quota_samples) == (1048576, 5)
    assert config.quota_window_size_seconds == 2
    fetch = RLMQuotaManagerConfig.fetch_quota({})
    assert (fetch.num_quota_samples, fetch.quota_window_size_seconds) == (11, 1)
    with pytest.raises(QuotaConfigError, match=r"fetch\.max\.bytes\.per\.second.*at least 1"):
        RLMQuotaManagerConfig.fetch_quota({"remote.log.manager.fetch.max.bytes.per.second": "0"})
    with pytest.raises(QuotaConfigError, match=r"window\.num: not a number"):
        RLMQuotaManagerConfig.copy_quota({"remote.log.manager.copy.quota.window.num": "x"})


def test_throttle_time_sensor_avg_and_max() -> None:
    clock = ManualClock()
    sensor = RLMQuotaMetrics("remote-fetch-throttle-time", clock=clock)
    assert math.isnan(sensor.avg()) and math.isnan(sensor.max())
    sensor.record(100)
    sensor.record(300)
    assert (sensor.avg(), sensor.max()) == (200.0, 300.0)
    clock.sleep(60_000)  # Kafka's default metric windows: 2 x 30 s
    assert math.isnan(sensor.avg())


def test_broker_fetch_quota_throttles_records_and_reconfigures() -> None:
    clock = ManualClock()
    quotas = RemoteLogQuotas.from_config(
        {"remote.log.manager.fetch.max.bytes.per.second": "1000"}, clock=clock
    )
    assert quotas.maybe_throttle_fetch() == 0
    quotas.record_fetch(5000)
    throttle_ms = quotas.maybe_throttle_fetch()
    assert throttle_ms == 4000
    assert quotas.fetch_throttle_time_sensor.max() == 4000
    # kafka-configs --alter --add-config remote.log.manager.fetch.max.bytes.per.second=10000
    quotas.reconfigure({"remote.log.manager.fetch.max.bytes.per.second": "10000"})
    assert quotas.fetch_quota_manager.quota_bytes_per_second == 10000
    assert quotas.maybe_throttle_fetch() == 0
    # --delete-config: back to Kafka's default, no quota
    quotas.reconfigure({})
    assert quotas.fetch_quota_manager.quota_bytes_per_second == LONG_MAX_VALUE


def test_copy_pacing_holds_the_rate_after_the_first_window() -> None:
    """20 segments of 8 KiB at 32 KiB/s: the first window's 32 KiB (plus one segment) go at
    once, then each segment starts when the rate is back at the bound."""
    clock = ManualClock()
    start_ms = clock.milliseconds()
    waits: list[int] = []

    def sleep_ms(duration_ms: int) -> None:
        waits.append(duration_ms)
        clock.sleep(duration_ms)

    quota = CopyQuota.of(32 * 1024, {}, clock=clock, sleep_ms=sleep_ms)
    assert quota is not None
    starts = []
    for _ in range(20):
        quota.acquire(8 * 1024)
        starts.append(clock.milliseconds() - start_ms)
    assert starts[:5] == [0] * 5
    # segment k (from 0) starts once k segments / elapsed <= the bound: at k * 250 ms
    assert starts[5:] == pytest.approx([k * 250 for k in range(5, 20)], abs=2)
    assert quota.throttled_ms == starts[-1]
    assert quota.throttle_time_sensor.max() > 0
    # no wait longer than Kafka's quotaTimeout before asking again
    assert max(waits) <= 1000 and sum(waits) == starts[-1]


def test_copy_quota_unbounded_and_shares() -> None:
    assert CopyQuota.of(None) is None
    assert CopyQuota.of(float(LONG_MAX_VALUE)) is None
    assert share_of(1000.0, 4) == 250.0
    with pytest.raises(ValueError, match="concurrent_copiers"):
        share_of(1000.0, 0)


def test_dynamic_broker_config_rules_of_the_quotas() -> None:
    """The bounds change while the broker runs (at least 1, DynamicRemoteLogConfig's words);
    the windows are read at start, so a dynamic change of one is refused as Kafka does."""
    fetch = "remote.log.manager.fetch.max.bytes.per.second"
    validate_broker_configs({fetch: "1048576"}, per_broker=False)
    validate_broker_configs({"remote.log.manager.copy.max.bytes.per.second": "1"}, per_broker=True)
    with pytest.raises(BrokerConfigUpdateError, match=f"failed for {fetch}=0, value should be"):
        validate_broker_configs({fetch: "0"}, per_broker=False)
    with pytest.raises(BrokerConfigUpdateError, match="Cannot update these configs dynamically"):
        validate_broker_configs(
            {"remote.log.manager.fetch.quota.window.num": "5"}, per_broker=False
        )
