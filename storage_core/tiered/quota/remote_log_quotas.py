"""The broker's remote-tier quotas (KIP-956), as Kafka's ``RemoteLogManager`` holds them.

    fetch quota   remote.log.manager.fetch.max.bytes.per.second (default Long.MAX_VALUE:
                  none), over remote.log.manager.fetch.quota.window.num (11) windows of
                  remote.log.manager.fetch.quota.window.size.seconds (1). Each remote read
                  records the record bytes it returned (Kafka's ``RemoteLogReader``). A
                  consumer fetch of a tiered offset while the rate is over the quota reads
                  nothing from the store: that partition answers no records and no error,
                  the fetch waits for its other partitions as any fetch without data does,
                  and the throttle time is recorded (Kafka's ``ReplicaManager.
                  handleOffsetOutOfRangeError``). Replicas are never throttled here (they
                  are told OFFSET_MOVED_TO_TIERED_STORAGE before any read).
    copy quota    remote.log.manager.copy.max.bytes.per.second with its windows: the broker
                  copies nothing itself (jobs do, ``copy_quota``), but it keeps the bound so
                  that DescribeConfigs shows the value the jobs pace to, and exposes it.

Both bounds are dynamic broker configs (``kafka-configs --entity-type brokers
[--entity-default | --entity-name ID] --alter --add-config
remote.log.manager.fetch.max.bytes.per.second=N``): ``reconfigure`` takes the broker's
effective configs (static, then the cluster default, then the broker's own) and applies a
changed bound at once (Kafka's ``DynamicRemoteLogConfig``). The windows are read at start.

Metrics (Kafka's names, JMX ``kafka.server:type=...``)::

    kafka.server:type=RemoteLogManager,name=remote-fetch-throttle-time-avg|max   ms, NaN
    kafka.server:type=RemoteLogManager,name=remote-copy-throttle-time-avg|max    when none
    kafka.server:type=RLMFetch,name=byte-rate     measured remote read rate (bytes/s)
    kafka.server:type=RLMCopy,name=byte-rate      (0 on the broker: jobs copy)

Thread-safety: as ``RLMQuotaManager``; ``reconfigure`` may run on any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.metrics import KafkaMetricsRegistry, MetricName
from storage_core.tiered.quota.rlm_quota_manager import (
    COPY_MAX_BYTES_PER_SECOND,
    FETCH_MAX_BYTES_PER_SECOND,
    RLMQuotaManager,
    RLMQuotaManagerConfig,
    RLMQuotaMetrics,
    bytes_per_second_setting,
)

logger = logging.getLogger(__name__)

METRICS_GROUP = "kafka.server"
RLM_METRICS_TYPE = "RemoteLogManager"
FETCH_THROTTLE_TIME = "remote-fetch-throttle-time"
COPY_THROTTLE_TIME = "remote-copy-throttle-time"


class RemoteLogQuotas:
    """The fetch and copy quota managers and their throttle-time sensors."""

    def __init__(
        self,
        *,
        fetch: RLMQuotaManagerConfig,
        copy: RLMQuotaManagerConfig,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.fetch_quota_manager = RLMQuotaManager(fetch, clock=clock)
        self.copy_quota_manager = RLMQuotaManager(copy, clock=clock)
        self.fetch_throttle_time_sensor = RLMQuotaMetrics(FETCH_THROTTLE_TIME, clock=clock)
        self.copy_throttle_time_sensor = RLMQuotaMetrics(COPY_THROTTLE_TIME, clock=clock)

    @staticmethod
    def from_config(props: Mapping[str, str], *, clock: Clock = SYSTEM_CLOCK) -> RemoteLogQuotas:
        return RemoteLogQuotas(
            fetch=RLMQuotaManagerConfig.fetch_quota(props),
            copy=RLMQuotaManagerConfig.copy_quota(props),
            clock=clock,
        )

    def get_fetch_throttle_time_ms(self) -> int:
        return self.fetch_quota_manager.get_throttle_time_ms()

    def maybe_throttle_fetch(self) -> int:
        """The fetch throttle time (ms), recorded in the sensor when > 0 (Kafka's
        ``ReplicaManager`` does both for each throttled partition of a consumer fetch)."""
        throttle_time_ms = self.fetch_quota_manager.get_throttle_time_ms()
        if throttle_time_ms > 0:
            self.fetch_throttle_time_sensor.record(throttle_time_ms)
        return throttle_time_ms

    def record_fetch(self, size_bytes: int) -> None:
        self.fetch_quota_manager.record(size_bytes)

    def reconfigure(self, props: Mapping[str, str]) -> None:
        """Apply changed bounds from the broker's effective configs (``DynamicRemoteLogConfig``)."""
        for name, manager in (
            (FETCH_MAX_BYTES_PER_SECOND, self.fetch_quota_manager),
            (COPY_MAX_BYTES_PER_SECOND, self.copy_quota_manager),
        ):
            new_value = bytes_per_second_setting(props, name)
            old_value = manager.quota_bytes_per_second
            if new_value != old_value:
                manager.update_quota(new_value)
                logger.info(
                    "dynamic remote log manager config updated config=%s old_value=%d new_value=%d",
                    name,
                    old_value,
                    new_value,
                )

    def register_metrics(self, registry: KafkaMetricsRegistry) -> None:
        for sensor in (self.fetch_throttle_time_sensor, self.copy_throttle_time_sensor):
            registry.gauge(_name(RLM_METRICS_TYPE, sensor.name + "-avg"), sensor.avg)
            registry.gauge(_name(RLM_METRICS_TYPE, sensor.name + "-max"), sensor.max)
        registry.gauge(_name("RLMFetch", "byte-rate"), self.fetch_quota_manager.byte_rate)
        registry.gauge(_name("RLMCopy", "byte-rate"), self.copy_quota_manager.byte_rate)


def _name(metric_type: str, name: str) -> MetricName:
    return MetricName(group=METRICS_GROUP, type=metric_type, name=name)
