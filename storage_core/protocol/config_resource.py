"""Kafka's enums of the config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs),
one definition for the client and the broker: ``ConfigResource.Type``,
``DescribeConfigsResponse.ConfigSource`` and ``DescribeConfigsResponse.ConfigType``,
``AlterConfigOp.OpType``.
"""

from __future__ import annotations

import enum


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` (the ``resource_type`` of config requests)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (DescribeConfigs ``config_source``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @staticmethod
    def from_id(value: int) -> ConfigSource:
        try:
            return ConfigSource(value)
        except ValueError:
            return ConfigSource.UNKNOWN


class ConfigType(enum.IntEnum):
    """A config's type as DescribeConfigs v3+ reports it (``config_type``)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs ``config_operation`` (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
