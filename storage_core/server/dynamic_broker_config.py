"""Dynamic broker configs: which broker configs (Incremental)AlterConfigs may change and how they
are kept (Kafka's ``DynamicBrokerConfig`` and ``ConfigAdminManager`` rules).

Kafka's rules, for a BROKER resource named by this broker's id (per-broker) or empty (the
cluster-wide default), each refusal INVALID_REQUEST with Kafka's message:

- a config Kafka knows but cannot change while running (``log.dirs``, ``log.retention.hours``)
  -> "Cannot update these configs dynamically: Set(...)";
- an SSL keystore/truststore setting without a listener prefix -> "These security configs can
  be dynamically updated only per-listener using the listener prefix: Set(...)";
- a value of the wrong type -> Kafka's "Invalid value ..." message;
- a per-broker config (listeners, SSL and SASL settings, ``listener.name.*``) at the
  cluster-wide default -> "Cannot update these configs at default cluster level, broker id
  must be specified: Set(...)";
- not Kafka's: what the listeners read once at start (TLS, the SASL mechanisms, JAAS configs
  and re-authentication, the listeners themselves) -> "This broker cannot change TLS, SASL or
  listener settings while it runs", rather than keeping a value it would not act on.

Every other name is accepted: Kafka's dynamic configs and, as Kafka allows, names it does not
know (custom configs). Accepted values are stored and shown by DescribeConfigs as
DYNAMIC_BROKER_CONFIG (2) or DYNAMIC_DEFAULT_BROKER_CONFIG (3). Topic defaults (``log.*``,
``message.max.bytes``, ``min.insync.replicas``...) act at once on topics without their own
override (``AdminManager.alter_dynamic_broker_configs``), and so do the KIP-956 remote copy and
fetch quotas (``remote.log.manager.{copy,fetch}.max.bytes.per.second``, at least 1, applied by
the reconfigurables the broker registers with the ``AdminManager``); the other accepted configs
are kept but not acted on (no cleaner or thread pools to reconfigure here).

File ``dynamic-broker-configs.json`` in the first log dir, rewritten atomically (temp file,
fsync, rename, fsync dir) on every change:

    {"version": 1, "broker": {"sasl.kerberos.min.time.before.relogin": "60000"},
     "default": {"log.cleaner.threads": "2"}}

Thread-safety: every method takes the store's lock; the mappings handed out are copies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from storage_core.errors import CorruptCheckpointError, InvalidConfigError, StorageError
from storage_core.log.checkpoints import write_atomically
from storage_core.log.log_config import BROKER_SYNONYMS, TOPIC_CONFIG_NAMES, LogConfig
from storage_core.server.kafka_config import BROKER_CONFIG_DEFS

DYNAMIC_BROKER_CONFIG_FILE = "dynamic-broker-configs.json"
FORMAT_VERSION = 1
MAX_DYNAMIC_CONFIGS = 1000  # per resource (this broker, the cluster default)
MAX_VALUE_CHARS = 64 * 1024

# SslConfigs.RECONFIGURABLE_CONFIGS: only per listener (listener.name.<l>.ssl...).
DYNAMIC_SECURITY_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
    }
)
# DynamicListenerConfig.ReconfigurableConfigs
_LISTENER_CONFIGS = frozenset(
    {
        "advertised.listeners",
        "listeners",
        "listener.security.protocol.map",
        "principal.builder.class",
        "ssl.protocol",
        "ssl.provider",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.endpoint.identification.algorithm",
        "ssl.secure.random.implementation",
        "ssl.client.auth",
        "ssl.engine.factory.class",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.jaas.config",
        "sasl.enabled.mechanisms",
        "sasl.kerberos.service.name",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "max.connections",
        "max.connection.creation.rate",
        "num.network.threads",
    }
)
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
PER_BROKER_CONFIGS = (DYNAMIC_SECURITY_CONFIGS | _LISTENER_CONFIGS) - (
    _CLUSTER_LEVEL_LISTENER_CONFIGS
)
# DynamicLogConfig: the first broker synonym of every topic config but message.format.version.
_DYNAMIC_LOG_CONFIGS = frozenset(
    synonyms[0]
    for name in TOPIC_CONFIG_NAMES
    if name != "message.format.version"
    for synonyms in (BROKER_SYNONYMS.get(name, ("log." + name,)),)
    if synonyms
)
ALL_DYNAMIC_CONFIGS: frozenset[str] = frozenset(
    {
        *DYNAMIC_SECURITY_CONFIGS,
        *_LISTENER_CONFIGS,
        *_DYNAMIC_LOG_CONFIGS,
        # LogCleaner
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        # DynamicThreadPool
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "metric.reporters",
        # SocketServer
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        # DynamicProducerStateManagerConfig
        "producer.id.expiration.ms",
        "transaction.partition.verification.enable",
        # DynamicRemoteLogConfig
        "remote.log.index.file.cache.total.size.bytes",
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.list.offsets.request.timeout.ms",
        # QuotaConfig.brokerQuotaConfigs
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)
# Kafka's broker configs that are not dynamic (those this broker knows, and a few more that
# Kafka's own sample configs carry): changing one needs a restart.
NON_DYNAMIC_CONFIGS: frozenset[str] = (
    frozenset(
        {
            *BROKER_CONFIG_DEFS,
            *(s for t in TOPIC_CONFIG_NAMES for s in BROKER_SYNONYMS.get(t, ("log." + t,))),
            "log.message.format.version",
            "process.roles",
            "controller.quorum.voters",
            "controller.quorum.bootstrap.servers",
            "controller.listener.names",
            "inter.broker.listener.name",
            "security.inter.broker.protocol",
            "zookeeper.connect",
            "authorizer.class.name",
            "num.partitions",
            "log.cleaner.enable",
        }
    )
    - ALL_DYNAMIC_CONFIGS
    - {"metrics.port", "metrics.host"}
)
# Kafka's types of the dynamic configs that are numbers or booleans (the rest are strings,
# lists or passwords, which any text fits).
_INT_CONFIGS = (
    "num.io.threads",
    "num.replica.fetchers",
    "background.threads",
    "num.recovery.threads.per.data.dir",
    "log.cleaner.threads",
    "log.cleaner.io.buffer.size",
    "max.connections.per.ip",
    "max.connection.creation.rate",
    "num.network.threads",
    "remote.fetch.max.wait.ms",
    "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
)
_LONG_CONFIGS = (
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.backoff.ms",
    "sasl.kerberos.min.time.before.relogin",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second",
    "remote.list.offsets.request.timeout.ms",
)
_AT_LEAST_ONE_CONFIGS = frozenset(
    {
        "remote.log.index.file.cache.total.size.bytes",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
    }
)
_DOUBLE_CONFIGS = (
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
)
_TYPES: dict[str, str] = {
    **{name: kind for name, (kind, _default) in BROKER_CONFIG_DEFS.items()},
    **dict.fromkeys(_INT_CONFIGS, "int"),
    **dict.fromkeys(_LONG_CONFIGS, "long"),
    **dict.fromkeys(_DOUBLE_CONFIGS, "double"),
    "transaction.partition.verification.enable": "bool",
}
LIST_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
        "sasl.enabled.mechanisms",
        "sasl.kerberos.principal.to.local.rules",
        "metric.reporters",
        "log.cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)
# Read once when the listeners start (listeners.py): refused dynamically rather than ignored
_STATIC_LISTENER_CONFIGS = frozenset(
    {"listeners", "advertised.listeners", "listener.security.protocol.map"}
)
_SASL_READ_AT_START = (
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "sasl.server.max.receive.size",
    "sasl.mechanism.inter.broker.protocol",
    "connections.max.reauth.ms",
)
_SENSITIVE_SUFFIXES = ("password", "jaas.config", "ssl.keystore.key")
_LISTENER_PREFIX = "listener.name."


class BrokerConfigUpdateError(StorageError):
    """A broker config change Kafka refuses (Kafka answers INVALID_REQUEST); nothing changed."""

    error_code = "invalid_request"


def is_sensitive(name: str) -> bool:
    """Passwords and JAAS configs are never shown (DescribeConfigs gives null)."""
    return name.endswith(_SENSITIVE_SUFFIXES)


def _base_name(name: str) -> str:
    """``listener.name.<l>.<config>`` -> ``<config>``; other names unchanged."""
    if name.startswith(_LISTENER_PREFIX):
        rest = name[len(_LISTENER_PREFIX) :]
        _listener, sep, base = rest.partition(".")
        if sep:
            return base
    return name


def _read_at_start(name: str) -> bool:
    """A setting the listeners read once, when they start: TLS, the SASL mechanisms, their
    JAAS configs (PLAIN's users, the broker's own login) and re-authentication, the listeners.
    Kerberos settings are not among them: GSSAPI cannot be enabled here, so they change
    nothing either way (librdkafka's 0081-admin test sets one)."""
    base = _base_name(name)
    return (
        base.startswith("ssl.")
        or name in _STATIC_LISTENER_CONFIGS
        or base.endswith(_SASL_READ_AT_START)
    )


def _kafka_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def validate_broker_configs(props: Mapping[str, str], *, per_broker: bool) -> None:
    """Kafka's ``DynamicBrokerConfig.validateConfigs`` for the whole new set of a resource."""
    names = set(props)
    if len(names) > MAX_DYNAMIC_CONFIGS:
        raise BrokerConfigUpdateError(
            f"{len(names)} dynamic broker configs; at most {MAX_DYNAMIC_CONFIGS} are allowed"
        )
    non_dynamic = names & NON_DYNAMIC_CONFIGS
    if non_dynamic:
        raise BrokerConfigUpdateError(
            f"Cannot update these configs dynamically: {_kafka_set(non_dynamic)}"
        )
    unprefixed_security = names & DYNAMIC_SECURITY_CONFIGS
    if unprefixed_security:
        raise BrokerConfigUpdateError(
            "These security configs can be dynamically updated only per-listener using the"
            f" listener prefix: {_kafka_set(unprefixed_security)}"
        )
    not_reconfigurable = {n for n in names if _read_at_start(n)}
    if not_reconfigurable:  # the listeners read them once at start: never ignore a change
        raise BrokerConfigUpdateError(
            "This broker cannot change TLS, SASL or listener settings while it runs:"
            f" {_kafka_set(not_reconfigurable)}; set them in server.properties and restart it"
        )
    for name, value in props.items():
        if len(value) > MAX_VALUE_CHARS:
            raise BrokerConfigUpdateError(
                f"Invalid value for configuration {name}: longer than {MAX_VALUE_CHARS} characters"
            )
        _validate_type(_base_name(name), value)
    if not per_broker:
        per_broker_names = {
            n
            for n in names
            if n in PER_BROKER_CONFIGS
            or (
                n.startswith(_LISTENER_PREFIX)
                and _base_name(n) not in _CLUSTER_LEVEL_LISTENER_CONFIGS
            )
        }
        if per_broker_names:
            raise BrokerConfigUpdateError(
                "Cannot update these configs at default cluster level, broker id must be"
                f" specified: {_kafka_set(per_broker_names)}"
            )


def _validate_type(name: str, value: str) -> None:
    topic_names = [t for t in TOPIC_CONFIG_NAMES if name in BROKER_SYNONYMS.get(t, ("log." + t,))]
    if topic_names:
        try:
            LogConfig.from_broker_props({name: value})
        except InvalidConfigError as error:
            raise BrokerConfigUpdateError(f"{name}: {error}") from None
        return
    kind = _TYPES.get(name)
    text = value.strip()
    try:
        if kind in ("int", "long"):
            number = int(text)
            if kind == "int" and not -(2**31) <= number < 2**31:
                raise ValueError("not a 32-bit integer")
            if name in _AT_LEAST_ONE_CONFIGS and number < 1:  # DynamicRemoteLogConfig
                raise BrokerConfigUpdateError(
                    f"Dynamic remote log manager config update validation failed for"
                    f" {name}={number}, value should be at least 1"
                )
        elif kind == "double":
            float(text)
        elif kind == "bool" and text.lower() not in ("true", "false"):
            raise ValueError("must be true or false")
    except ValueError as error:
        raise BrokerConfigUpdateError(
            f"Invalid value {value} for configuration {name}: {error}"
        ) from None


class DynamicBrokerConfigStore:
    """The dynamic configs of this broker (``broker``) and of the cluster default (``default``)."""

    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / DYNAMIC_BROKER_CONFIG_FILE
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, str]] = {"broker": {}, "default": {}}
        if self._path.exists():
            try:
                document = json.loads(self._path.read_text(encoding="utf-8"))
                if document.get("version") != FORMAT_VERSION:
                    raise ValueError(f"unsupported version {document.get('version')!r}")
                for scope in ("broker", "default"):
                    self._configs[scope] = {str(k): str(v) for k, v in document[scope].items()}
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise CorruptCheckpointError(
                    f"dynamic broker config file {self._path} cannot be read ({error}); fix or"
                    " remove it (removing it drops every dynamic broker config)"
                ) from None

    def configs(self, *, per_broker: bool) -> dict[str, str]:
        with self._lock:
            return dict(self._configs["broker" if per_broker else "default"])

    def replace(self, configs: Mapping[str, str], *, per_broker: bool) -> None:
        """Validate ``configs`` as the resource's whole new set, then persist it."""
        validate_broker_configs(configs, per_broker=per_broker)
        with self._lock:
            self._configs["broker" if per_broker else "default"] = dict(configs)
            document = {"version": FORMAT_VERSION, **self._configs}
            write_atomically(self._path, json.dumps(document, indent=1, sort_keys=True) + "\n")


def incremental_broker_changes(
    ops: Iterable[tuple[str, int, str | None]],
    current: Mapping[str, str],
    static_props: Mapping[str, str],
) -> dict[str, str]:
    """The resource's new dynamic configs after SET (0), DELETE (1), APPEND (2), SUBTRACT (3).

    APPEND/SUBTRACT work on Kafka's list configs and start from the dynamic value, else the
    server.properties one (Kafka's ``ConfigAdminManager.prepareIncrementalConfigs``).
    """
    configs = dict(current)
    for name, operation, value in ops:
        if operation == 0:
            configs[name] = str(value)
        elif operation == 1:
            configs.pop(name, None)
        elif operation in (2, 3):
            verb = "append" if operation == 2 else "subtract"
            if name not in LIST_CONFIGS:
                if name not in ALL_DYNAMIC_CONFIGS and name not in NON_DYNAMIC_CONFIGS:
                    raise InvalidConfigError(f"Unknown config name: {name}")
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
            start = configs.get(name, static_props.get(name, ""))
            items = [p for p in start.split(",") if p]
            changes = (value or "").split(",")
            if operation == 2:
                items.extend(p for p in changes if p not in items)
            else:
                items = [p for p in items if p not in changes]
            configs[name] = ",".join(items)
        else:
            raise BrokerConfigUpdateError(f"Unknown operations type {operation}")
    return configs
