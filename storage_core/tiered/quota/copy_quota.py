"""Pacing copies to ``remote.log.manager.copy.max.bytes.per.second`` (KIP-956), as Kafka's
``RLMCopyTask`` waits on its copy quota, for the processes that copy here (jobs and tools)::

    before each segment:  throttle = quota manager's throttle time
                          while throttle > 0:  record it in remote-copy-throttle-time,
                                               sleep min(throttle, 1 s), ask again
                          record the segment's size (the whole .log) in the quota's rate
    then copy it

A segment is counted when it starts, so a copier runs at most one segment (and the first
window's worth of bytes) ahead of the rate; over a run of n equal segments the rate from the
first start to the last end is about n / (n - 1) times the bound at most.

A cluster-wide rate shared by ``k`` copiers running at once gives each ``rate / k``
(``share_of``): the Spark copy job splits it over the work units that run at the same time.

Thread-safety: ``acquire`` serialises callers on one lock (Kafka's fair copy quota lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.tiered.quota.remote_log_quotas import COPY_THROTTLE_TIME
from storage_core.tiered.quota.rlm_quota_manager import (
    COPY_MAX_BYTES_PER_SECOND,
    COPY_QUOTA_WINDOW_NUM,
    COPY_QUOTA_WINDOW_SIZE_SECONDS,
    LONG_MAX_VALUE,
    RLMQuotaManager,
    RLMQuotaManagerConfig,
    RLMQuotaMetrics,
    bytes_per_second_setting,
)

QUOTA_TIMEOUT_MS = 1000  # Kafka's RemoteLogManager.quotaTimeout()
COPY_QUOTA_CONFIGS = (
    COPY_MAX_BYTES_PER_SECOND,
    COPY_QUOTA_WINDOW_NUM,
    COPY_QUOTA_WINDOW_SIZE_SECONDS,
)


def _sleep_ms(duration_ms: int) -> None:
    time.sleep(duration_ms / 1000)


def share_of(bytes_per_second: float, concurrent_copiers: int) -> float:
    """Each of ``concurrent_copiers``' part of a rate they share."""
    if concurrent_copiers < 1:
        raise ValueError(f"concurrent_copiers must be >= 1, got {concurrent_copiers}")
    return bytes_per_second / concurrent_copiers


def is_unbounded(bytes_per_second: float | None) -> bool:
    """No quota: unset, or Kafka's default Long.MAX_VALUE."""
    return bytes_per_second is None or bytes_per_second >= LONG_MAX_VALUE


class CopyQuota:
    """One copier's wait on its copy quota; see the module docstring."""

    def __init__(
        self,
        config: RLMQuotaManagerConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep_ms: Callable[[int], None] = _sleep_ms,
    ) -> None:
        self.quota_manager = RLMQuotaManager(config, clock=clock)
        self.throttle_time_sensor = RLMQuotaMetrics(COPY_THROTTLE_TIME, clock=clock)
        self._sleep_ms = sleep_ms
        self._lock = threading.Lock()
        self.throttled_ms = 0
        """Total time spent waiting for the quota (ms)."""

    @staticmethod
    def of(
        bytes_per_second: float | None,
        props: Mapping[str, str] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep_ms: Callable[[int], None] = _sleep_ms,
    ) -> CopyQuota | None:
        """A quota of ``bytes_per_second`` with the windows of ``props`` (the broker's
        ``remote.log.manager.copy.quota.window.*``), or None when unbounded."""
        if bytes_per_second is None or is_unbounded(bytes_per_second):
            return None
        windows = RLMQuotaManagerConfig.copy_quota(props or {})
        config = RLMQuotaManagerConfig(
            quota_bytes_per_second=bytes_per_second,
            num_quota_samples=windows.num_quota_samples,
            quota_window_size_seconds=windows.quota_window_size_seconds,
        )
        return CopyQuota(config, clock=clock, sleep_ms=sleep_ms)

    def acquire(self, size_bytes: int) -> int:
        """Wait until the rate is within the quota, then count ``size_bytes``; the ms waited."""
        waited_ms = 0
        with self._lock:
            throttle_time_ms = self.quota_manager.get_throttle_time_ms()
            while throttle_time_ms > 0:
                self.throttle_time_sensor.record(throttle_time_ms)
                wait_ms = min(throttle_time_ms, QUOTA_TIMEOUT_MS)
                self._sleep_ms(wait_ms)
                waited_ms += wait_ms
                throttle_time_ms = self.quota_manager.get_throttle_time_ms()
            self.quota_manager.record(size_bytes)
            self.throttled_ms += waited_ms
        return waited_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyRate:
    """The copy rate a run paces to: ``bytes_per_second`` (None: no quota), where it came
    from (``argument``, ``broker <id>``, or ``default`` when no broker sets one) and the
    quota windows (``remote.log.manager.copy.quota.window.*``)."""

    bytes_per_second: float | None
    source: str
    window_props: Mapping[str, str]


def describe_copy_rate(cluster: KafkaCluster, override: float | None = None) -> CopyRate:
    """``override`` (a job argument), else the strictest ``remote.log.manager.copy.max.
    bytes.per.second`` of the cluster's brokers (DescribeConfigs of each BROKER resource:
    its own dynamic value, else the cluster default, else server.properties), as one rate
    for all the copies of the run."""
    admin = KafkaAdminClient(cluster)
    best: CopyRate | None = None
    for broker in sorted(cluster.metadata().brokers, key=lambda b: b.node_id):
        entries = admin.describe_configs(
            ConfigResourceType.BROKER,
            str(broker.node_id),
            COPY_QUOTA_CONFIGS,
            node_id=broker.node_id,
        )
        props = {e.name: e.value for e in entries if e.value is not None}
        rate = float(bytes_per_second_setting(props, COPY_MAX_BYTES_PER_SECOND))
        if best is None or (
            not is_unbounded(rate)
            and (best.bytes_per_second is None or rate < best.bytes_per_second)
        ):
            best = CopyRate(
                bytes_per_second=None if is_unbounded(rate) else rate,
                source=f"broker {broker.node_id}" if not is_unbounded(rate) else "default",
                window_props=props,
            )
    if best is None:
        best = CopyRate(bytes_per_second=None, source="default", window_props={})
    if override is not None:
        return CopyRate(
            bytes_per_second=override, source="argument", window_props=best.window_props
        )
    return best
