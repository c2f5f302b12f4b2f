"""The follower fetch settings, read once from the broker config (Kafka's names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BrokerConfigSource(Protocol):
    """What is read from the broker config (``KafkaConfig``)."""

    def get_int(self, name: str) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaFetcherConfig:
    """``replica.fetch.*`` and friends; every bound is checked when built."""

    num_replica_fetchers: int = 1
    fetch_max_bytes: int = 1024 * 1024  # per partition (replica.fetch.max.bytes)
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_backoff_ms: int = 1000
    fetch_response_max_bytes: int = 10 * 1024 * 1024
    socket_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in (
            "num_replica_fetchers",
            "fetch_max_bytes",
            "fetch_min_bytes",
            "fetch_response_max_bytes",
            "socket_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.fetch_wait_max_ms < 0 or self.fetch_backoff_ms < 0:
            raise ValueError("fetch_wait_max_ms and fetch_backoff_ms must be >= 0")
        if self.fetch_wait_max_ms > self.socket_timeout_ms:
            raise ValueError("replica.socket.timeout.ms must be at least replica.fetch.wait.max.ms")

    @staticmethod
    def from_broker_config(config: BrokerConfigSource) -> ReplicaFetcherConfig:
        return ReplicaFetcherConfig(
            num_replica_fetchers=config.get_int("num.replica.fetchers"),
            fetch_max_bytes=config.get_int("replica.fetch.max.bytes"),
            fetch_wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
            fetch_min_bytes=config.get_int("replica.fetch.min.bytes"),
            fetch_backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            fetch_response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            socket_timeout_ms=config.get_int("replica.socket.timeout.ms"),
        )
