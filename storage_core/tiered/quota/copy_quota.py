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

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.tiered.quota.remote_log_quotas import COPY_THROTTLE_TIME
from storage_core.tiered.quota.rlm_quota_manager import (
    LONG_MAX_VALUE,
    RLMQuotaManager,
    RLMQuotaManagerConfig,
    RLMQuotaMetrics,
)

QUOTA_TIMEOUT_MS = 1000  # Kafka's RemoteLogManager.quotaTimeout()


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
