"""What the broker-mode RLMM needs of the broker it runs in, and nothing more.

``KafkaBroker`` provides all of it; naming it here instead keeps ``tiered`` free of the server
and replication packages (which depend on ``tiered``): the config values it reads, the clock,
the internal topic it creates, the partitions this broker hosts (with their logs, topic ids
and roles), appends through the replica manager (``publishers.RecordAppender``), the log
of a partition by name and its inter-broker listener's address and connection settings (to
reach the other brokers' leaders over that listener's protocol).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from storage_core.client.connection import ConnectionConfig
from storage_core.clock import Clock
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.tiered.topic_based_rlmm.publishers import RecordAppender


class BrokerConfig(Protocol):
    def get_bool(self, name: str) -> bool: ...
    def get_int(self, name: str) -> int: ...
    def log_dirs(self) -> Sequence[Path]: ...


class HostedPartition(Protocol):
    """A partition this broker hosts (``replication.partition.Partition``)."""

    @property
    def topic_id(self) -> Uuid: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def log(self) -> Log: ...


class HostedReplicas(RecordAppender, Protocol):
    """The broker's ``ReplicaManager``: its partitions, and appends to those it leads."""

    def partitions(self) -> Mapping[TopicPartition, HostedPartition]: ...

    def on_log_start_offset_incremented(self, tp: TopicPartition) -> None:
        """Wake the followers' fetches of ``tp`` so they learn its new log start offset."""
        ...

    def get_partition(self, tp: TopicPartition) -> HostedPartition: ...


class LocalLogs(Protocol):
    """The broker's ``LogManager``."""

    def get_log(self, tp: TopicPartition) -> Log | None: ...

    def checkpoint_log_start_offsets(self) -> None: ...


class InternalTopic(Protocol):
    @property
    def partitions(self) -> Collection[object]: ...


class Endpoint(Protocol):
    """Where this broker's inter-broker listener is reached (its registered endpoint)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class HostBroker(Protocol):
    """The broker the RLMM runs in (not the handlers' ``server.broker_services.BrokerServices``)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def endpoint(self) -> Endpoint: ...
    @property
    def inter_broker_connection_config(self) -> ConnectionConfig:
        """How this broker's own clients connect (the inter-broker listener's protocol)."""
        ...

    @property
    def clock(self) -> Clock: ...
    @property
    def replica_manager(self) -> HostedReplicas: ...
    @property
    def log_manager(self) -> LocalLogs: ...

    def ensure_internal_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str]
    ) -> InternalTopic:
        """The topic as it is, or created now (blocking: call it off the event loop)."""
        ...
