"""Broker configuration: ``server.properties`` with Kafka's names, types and defaults.

The file is read as Java properties (``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuations). Command-line overrides (``--override key=value``) win over the
file. Unknown keys are kept and logged once, as Kafka does ("supplied but isn't a known
config"), so that later components can read their own keys.

Topic defaults (``log.segment.bytes``, ``log.retention.ms`` ...) are turned into a
``LogConfig`` by ``LogConfig.from_broker_props``; this module owns the broker-only keys.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage_core.errors import InvalidConfigError
from storage_core.java_properties import parse_properties
from storage_core.log.log_config import BROKER_SYNONYMS, TOPIC_CONFIG_NAMES, LogConfig
from storage_core.records.open_file_cache import (
    DEFAULT_MAX_IDLE_FILES,
    validate_segment_open_files_max,
)
from storage_core.security.kafka_principal import SecurityProtocol
from storage_core.server.listeners import (
    EndPoint,
    inter_broker_listener,
    listener_security_protocol_map,
    parse_endpoints,
)
from storage_core.server.security_config import refuse_unsupported_security

logger = logging.getLogger(__name__)

INT_MAX = 2**31 - 1

# name -> (type, default). Types: "int", "long", "bool", "string", "list".
BROKER_CONFIG_DEFS: dict[str, tuple[str, Any]] = {
    "broker.id": ("int", 0),
    "node.id": ("int", -1),
    "cluster.id": ("string", ""),
    "listeners": ("list", "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": ("list", ""),
    "listener.security.protocol.map": ("string", ""),  # "": Kafka's identity map
    "inter.broker.listener.name": ("string", ""),
    "security.inter.broker.protocol": ("string", ""),  # "": PLAINTEXT
    "log.dirs": ("list", ""),
    "log.dir": ("string", "/tmp/kafka-logs"),  # noqa: S108 (Kafka's documented default)
    "num.partitions": ("int", 1),
    "default.replication.factor": ("int", 1),
    "auto.create.topics.enable": ("bool", True),
    "delete.topic.enable": ("bool", True),
    "message.max.bytes": ("int", 1024 * 1024 + 12),
    "socket.request.max.bytes": ("int", 100 * 1024 * 1024),
    "socket.send.buffer.bytes": ("int", 100 * 1024),
    "socket.receive.buffer.bytes": ("int", 100 * 1024),
    "queued.max.requests": ("int", 500),
    "max.connections": ("int", INT_MAX),
    "max.connections.per.ip": ("int", INT_MAX),
    "connections.max.idle.ms": ("long", 600_000),
    "queued.max.request.bytes": ("long", -1),  # -1: derived, see SocketServerConfig
    # Followers' replica fetchers (Kafka's names and defaults)
    "num.replica.fetchers": ("int", 1),
    "replica.fetch.max.bytes": ("int", 1024 * 1024),
    "replica.fetch.wait.max.ms": ("int", 500),
    "replica.fetch.min.bytes": ("int", 1),
    "replica.fetch.backoff.ms": ("int", 1000),
    "replica.fetch.response.max.bytes": ("int", 10 * 1024 * 1024),
    "replica.socket.timeout.ms": ("int", 30_000),
    "replica.lag.time.max.ms": ("long", 30_000),
    "max.incremental.fetch.session.cache.slots": ("int", 1000),
    "replica.high.watermark.checkpoint.interval.ms": ("long", 5_000),
    "fetch.max.bytes": ("int", 55 * 1024 * 1024),
    "log.retention.check.interval.ms": ("long", 300_000),
    # Idle files of inactive segments kept open (storage_core.records.open_file_cache)
    "log.segment.open.files.max": ("int", DEFAULT_MAX_IDLE_FILES),
    "log.flush.scheduler.interval.ms": ("long", 2**63 - 1),
    "log.flush.offset.checkpoint.interval.ms": ("int", 60_000),
    "log.flush.start.offset.checkpoint.interval.ms": ("int", 60_000),
    "offsets.topic.num.partitions": ("int", 50),
    "offsets.topic.replication.factor": ("int", 3),
    "offsets.topic.segment.bytes": ("int", 100 * 1024 * 1024),
    "offsets.retention.minutes": ("int", 10_080),
    "offsets.commit.timeout.ms": ("int", 5000),
    "group.initial.rebalance.delay.ms": ("int", 3000),
    "group.min.session.timeout.ms": ("int", 6000),
    "group.max.session.timeout.ms": ("int", 1_800_000),
    "transactional.id.expiration.ms": ("int", 604_800_000),
    "transaction.state.log.num.partitions": ("int", 50),
    "transaction.state.log.replication.factor": ("int", 3),
    "transaction.state.log.min.isr": ("int", 2),
    "transaction.state.log.segment.bytes": ("int", 100 * 1024 * 1024),
    "transaction.max.timeout.ms": ("int", 900_000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ("int", 10_000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": ("int", 3_600_000),
    "transaction.partition.verification.enable": ("bool", True),
    "producer.id.expiration.ms": ("int", 86_400_000),
    "producer.id.expiration.check.interval.ms": ("int", 600_000),
    "request.timeout.ms": ("int", 30_000),
    # KIP-405 tiered storage (Kafka's names and defaults)
    "remote.log.storage.system.enable": ("bool", False),
    "remote.log.storage.manager.class.name": ("string", ""),
    "remote.log.metadata.manager.class.name": ("string", ""),
    "remote.log.metadata.topic.num.partitions": ("int", 50),
    "remote.log.metadata.topic.replication.factor": ("int", 3),
    "remote.log.metadata.topic.retention.ms": ("long", -1),
    "remote.log.metadata.consume.wait.ms": ("long", 120_000),
    "remote.log.metadata.initialization.retry.interval.ms": ("long", 100),
    "remote.log.metadata.initialization.retry.max.timeout.ms": ("long", 120_000),
    "remote.log.metadata.compaction.interval.ms": ("long", 60_000),
    "remote.log.metadata.compaction.min.lag.ms": ("long", 120_000),
    "remote.log.metadata.compaction.restate.enable": ("bool", True),
    "remote.log.index.file.cache.total.size.bytes": ("long", 1024 * 1024 * 1024),
    "remote.log.reader.threads": ("int", 10),
    "remote.fetch.max.wait.ms": ("int", 500),
    "remote.log.manager.task.interval.ms": ("long", 30_000),
    # KIP-956 quotas (Long.MAX_VALUE: none); the windows are read at start
    "remote.log.manager.copy.max.bytes.per.second": ("long", 2**63 - 1),
    "remote.log.manager.copy.quota.window.num": ("int", 11),
    "remote.log.manager.copy.quota.window.size.seconds": ("int", 1),
    "remote.log.manager.fetch.max.bytes.per.second": ("long", 2**63 - 1),
    "remote.log.manager.fetch.quota.window.num": ("int", 11),
    "remote.log.manager.fetch.quota.window.size.seconds": ("int", 1),
    "shutdown.timeout.ms": ("int", 30_000),
    # The cluster: brokers coordinate through Apache ZooKeeper (Kafka's ZooKeeper mode); an
    # empty zookeeper.connect runs the same controller over the single-node store
    "zookeeper.connect": ("string", ""),
    "zookeeper.session.timeout.ms": ("int", 18_000),
    "zookeeper.set.acl": ("bool", False),
    "zookeeper.connection.timeout.ms": ("int", -1),  # -1: zookeeper.session.timeout.ms
    "controlled.shutdown.enable": ("bool", True),
    "controlled.shutdown.max.retries": ("int", 3),
    "controlled.shutdown.retry.backoff.ms": ("long", 5000),
    "auto.leader.rebalance.enable": ("bool", True),
    "leader.imbalance.check.interval.seconds": ("long", 300),
    "leader.imbalance.per.broker.percentage": ("int", 10),
    "broker.rack": ("string", ""),
    # Prometheus endpoint (GET /metrics) for the broker's metrics; -1 disables it
    "metrics.port": ("int", -1),
    "metrics.host": ("string", "127.0.0.1"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaConfig:
    """Typed, validated broker properties. Build one with ``KafkaConfig.from_props``."""

    props: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_props(props: Mapping[str, Any]) -> KafkaConfig:
        text_props = {str(k).strip(): str(v).strip() for k, v in props.items()}
        refuse_unsupported_security(text_props)  # before anything else: never run open
        config = KafkaConfig(props=text_props)
        for name in text_props:
            if name in BROKER_CONFIG_DEFS:
                config._get(name)  # validates the value now, not at first use
            elif name not in _KNOWN_TOPIC_DEFAULT_NAMES and not name.startswith(_PASS_THROUGH):
                logger.warning("The configuration %r was supplied but isn't a known config", name)
        config.log_config()  # validates every log.* default
        _validate_listeners(config)
        if not config.log_dirs():
            raise InvalidConfigError("log.dirs (or log.dir) must name at least one directory")
        _validate_replica_fetcher_configs(config)
        validate_segment_open_files_max(config.get_int("log.segment.open.files.max"))
        return config

    @staticmethod
    def load(path: Path, overrides: Mapping[str, str] | None = None) -> KafkaConfig:
        """Read ``server.properties`` and apply overrides; names the file in every error."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidConfigError(f"cannot read broker config {path}: {error}") from None
        props = parse_properties(text)
        props.update(overrides or {})
        try:
            return KafkaConfig.from_props(props)
        except InvalidConfigError as error:
            raise InvalidConfigError(f"{path}: {error}") from None

    # ------------------------------------------------------------------ typed access
    def _get(self, name: str) -> Any:
        kind, default = BROKER_CONFIG_DEFS[name]
        raw = self.props.get(name)
        if raw is None:
            return default
        if kind in ("int", "long"):
            try:
                value = int(raw)
            except ValueError:
                raise InvalidConfigError(
                    f"Invalid value {raw!r} for configuration {name}: not a number"
                ) from None
            if kind == "int" and not -(2**31) <= value <= INT_MAX:
                raise InvalidConfigError(
                    f"Invalid value {raw!r} for configuration {name}: not a 32-bit integer"
                )
            return value
        if kind == "bool":
            if raw.lower() not in ("true", "false"):
                raise InvalidConfigError(
                    f"Invalid value {raw!r} for configuration {name}: must be true or false"
                )
            return raw.lower() == "true"
        return raw

    def get_int(self, name: str) -> int:
        value = self._get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConfigError(f"configuration {name} is not a number")
        return value

    def get_bool(self, name: str) -> bool:
        return bool(self._get(name))

    def get_string(self, name: str) -> str:
        return str(self._get(name)) if name in BROKER_CONFIG_DEFS else self.props.get(name, "")

    @property
    def broker_id(self) -> int:
        node_id = self.get_int("node.id")
        return node_id if node_id >= 0 else self.get_int("broker.id")

    def log_dirs(self) -> list[Path]:
        raw = self.props.get("log.dirs") or self.get_string("log.dir")
        return [Path(p.strip()) for p in raw.split(",") if p.strip()]

    def listeners(self) -> list[EndPoint]:
        raw = self.get_string("listeners")
        endpoints = parse_endpoints(
            raw, listener_security_protocol_map(self.props), require_distinct_ports=True
        )
        if not endpoints:
            raise InvalidConfigError("listeners must name at least one NAME://host:port")
        return endpoints

    def advertised_listeners(self) -> list[EndPoint]:
        """``advertised.listeners`` as set (Kafka: ``listeners`` when it is not)."""
        raw = self.get_string("advertised.listeners")
        return parse_endpoints(
            raw, listener_security_protocol_map(self.props), require_distinct_ports=False
        )

    def effective_advertised_listeners(self) -> list[EndPoint]:
        """``advertised.listeners``, or ``listeners`` when it is not set."""
        return self.advertised_listeners() or self.listeners()

    def inter_broker_listener(self) -> tuple[str, SecurityProtocol]:
        """The listener brokers use between themselves, and its security protocol."""
        return inter_broker_listener(self.props, listener_security_protocol_map(self.props))

    def log_config(self) -> LogConfig:
        """The broker's default topic config (``log.*`` keys and their synonyms)."""
        return LogConfig.from_broker_props(self.props)

    def cluster_id(self) -> str:
        return self.get_string("cluster.id")


# Topic defaults live in LogConfig; these prefixes belong to later components.
_PASS_THROUGH = (
    "remote.log.",
    "rsm.config.",
    "rlmm.config.",
    "log.local.",
    "controller.",
    "ssl.",  # read per listener (listeners.py, ssl_factory.py)
    "sasl.",  # read per listener and mechanism (sasl_config.py)
    "listener.name.",
    "authorizer.",  # the ACL authorizer's (security.authorizer.acl_authorizer)
    "super.users",
    "allow.everyone.if.no.acl.found",
)
_KNOWN_TOPIC_DEFAULT_NAMES = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
        "log.index.size.max.bytes",
        "log.index.interval.bytes",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.segment.delete.delay.ms",
        "log.cleanup.policy",
        "log.message.timestamp.type",
        "log.preallocate",
        "compression.type",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "process.roles",
        *("log." + name for name in TOPIC_CONFIG_NAMES),
        *(synonym for synonyms in BROKER_SYNONYMS.values() for synonym in synonyms),
    }
)


def _validate_listeners(config: KafkaConfig) -> None:
    """Kafka's checks of listeners, advertised listeners and the inter-broker listener."""
    names = [e.listener_name for e in config.listeners()]
    advertised = [e.listener_name for e in config.effective_advertised_listeners()]
    inter_broker, _protocol = config.inter_broker_listener()
    if inter_broker not in advertised:
        raise InvalidConfigError(
            "inter.broker.listener.name must be a listener name defined in"
            " advertised.listeners. The valid options based on currently configured listeners"
            f" are {','.join(advertised)}"
        )
    if not set(advertised) <= set(names):
        raise InvalidConfigError(
            "advertised.listeners listener names must be equal to or a subset of the ones"
            f" defined in listeners. Found {','.join(advertised)}. The valid options based on"
            f" the current configuration are {','.join(names)}"
        )


def _validate_replica_fetcher_configs(config: KafkaConfig) -> None:
    """Kafka's checks of the follower fetch settings, at start rather than at first fetch."""
    for name in (
        "num.replica.fetchers",
        "replica.fetch.max.bytes",
        "replica.fetch.min.bytes",
        "replica.fetch.response.max.bytes",
        "replica.socket.timeout.ms",
    ):
        if config.get_int(name) < 1:
            raise InvalidConfigError(
                f"Invalid value {config.get_int(name)} for configuration {name}: must be >= 1"
            )
    for name in ("replica.fetch.wait.max.ms", "replica.fetch.backoff.ms"):
        if config.get_int(name) < 0:
            raise InvalidConfigError(
                f"Invalid value {config.get_int(name)} for configuration {name}: must be >= 0"
            )
    if config.get_int("replica.fetch.wait.max.ms") > config.get_int("replica.socket.timeout.ms"):
        raise InvalidConfigError(
            "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to"
            " prevent unnecessary socket timeouts"
        )
    if config.get_int("replica.fetch.wait.max.ms") > config.get_int("replica.lag.time.max.ms"):
        raise InvalidConfigError(
            "replica.fetch.wait.max.ms should always be less than or equal to"
            " replica.lag.time.max.ms to prevent frequent changes in ISR"
        )


def new_cluster_id() -> str:
    """A Kafka-style cluster id: 22 characters of URL-safe base64 of a random UUID."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
