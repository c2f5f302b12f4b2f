"""Broker metrics with Kafka's JMX names, exposed in Prometheus' text format.

- ``registry``: ``MetricName``, ``Meter``, ``Gauge``, the bounded ``KafkaMetricsRegistry``.
- ``broker_topic_stats``: Kafka's ``BrokerTopicStats`` (``kafka.server:type=BrokerTopicMetrics``).
- ``prometheus``: the text exposition format 0.0.4, named as the JMX exporter names Kafka's.
- ``http_server``: ``GET /metrics`` on ``metrics.host``:``metrics.port``.
"""

from storage_core.metrics.broker_topic_stats import BrokerTopicStats
from storage_core.metrics.registry import Gauge, KafkaMetricsRegistry, Meter, MetricName

__all__ = ["BrokerTopicStats", "Gauge", "KafkaMetricsRegistry", "Meter", "MetricName"]
