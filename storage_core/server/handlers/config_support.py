"""What DescribeConfigs shows and how (Incremental)AlterConfigs changes it, for topics and the
broker (Kafka's ``ConfigHelper`` and the controller's ``ConfigurationControlManager``).

A topic config's value is the first of its synonyms, most precise first:

    DYNAMIC_TOPIC_CONFIG (1)  the topic's own override (``retention.ms``), from the topic store
    STATIC_BROKER_CONFIG (4)  a broker default set in server.properties (``log.retention.hours``)
    DEFAULT_CONFIG       (5)  the built-in default, under the primary broker name

A broker config's value is its dynamic one for this broker (DYNAMIC_BROKER_CONFIG, 2), else
the cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG, 3), else server.properties (4),
else the built-in default (5); configs Kafka cannot change while running are read-only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from storage_core.common import validate_topic_name
from storage_core.errors import InvalidConfigError, StorageError, UnknownTopicOrPartitionError
from storage_core.log.log_config import (
    BROKER_SYNONYMS,
    LIST_CONFIG_NAMES,
    TOPIC_CONFIG_NAMES,
    LogConfig,
)
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigSource, ConfigType
from storage_core.protocol.messages import build
from storage_core.server.dynamic_broker_config import ALL_DYNAMIC_CONFIGS, is_sensitive
from storage_core.server.handlers.common import error_code_of
from storage_core.server.kafka_config import BROKER_CONFIG_DEFS
from storage_core.server.topic_store import TopicInfo

if TYPE_CHECKING:
    from storage_core.server.broker_services import BrokerServices

MAX_RESOURCES_PER_REQUEST = 1000
MAX_CONFIGS_PER_RESOURCE = 1000


class InvalidRequestError(StorageError):
    """A request is malformed (duplicate resources or keys, unknown operations or types)."""

    error_code = "invalid_request"


TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "segment.jitter.ms": ConfigType.LONG,
    "segment.index.bytes": ConfigType.INT,
    "index.interval.bytes": ConfigType.INT,
    "retention.ms": ConfigType.LONG,
    "retention.bytes": ConfigType.LONG,
    "local.retention.ms": ConfigType.LONG,
    "local.retention.bytes": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "max.message.bytes": ConfigType.INT,
    "file.delete.delay.ms": ConfigType.LONG,
    "min.insync.replicas": ConfigType.INT,
    "preallocate": ConfigType.BOOLEAN,
    "remote.storage.enable": ConfigType.BOOLEAN,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
    "cleanup.policy": ConfigType.LIST,
    "message.timestamp.type": ConfigType.STRING,
    "compression.type": ConfigType.STRING,
    "delete.retention.ms": ConfigType.LONG,
    "min.compaction.lag.ms": ConfigType.LONG,
    "max.compaction.lag.ms": ConfigType.LONG,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "message.timestamp.before.max.ms": ConfigType.LONG,
    "message.timestamp.after.max.ms": ConfigType.LONG,
    "message.timestamp.difference.max.ms": ConfigType.LONG,
    "compression.gzip.level": ConfigType.INT,
    "compression.lz4.level": ConfigType.INT,
    "compression.zstd.level": ConfigType.INT,
    "message.format.version": ConfigType.STRING,
    "message.downconversion.enable": ConfigType.BOOLEAN,
    "remote.log.copy.disable": ConfigType.BOOLEAN,
    "remote.log.delete.on.disable": ConfigType.BOOLEAN,
    "remote.log.restore.enable": ConfigType.BOOLEAN,
    "remote.log.restore.leader.epoch": ConfigType.INT,
    "leader.replication.throttled.replicas": ConfigType.LIST,
    "follower.replication.throttled.replicas": ConfigType.LIST,
}

TOPIC_CONFIG_DOCS: dict[str, str] = {
    "segment.bytes": "The segment file size for the log; retention and cleaning work a"
    " segment at a time.",
    "segment.ms": "The time after which the active segment is rolled even if it is not full.",
    "segment.jitter.ms": "The maximum random jitter subtracted from segment.ms to avoid"
    " thundering herds of segment rolling.",
    "segment.index.bytes": "The size of the index that maps offsets to file positions.",
    "index.interval.bytes": "How often (in bytes) an entry is added to the offset index.",
    "retention.ms": "The maximum time a log segment is retained before it is discarded"
    " (delete policy); -1 means no time limit.",
    "retention.bytes": "The maximum size a partition can grow to before old segments are"
    " discarded (delete policy); -1 means no size limit.",
    "local.retention.ms": "How long segments are kept locally once tiered; -2 means retention.ms.",
    "local.retention.bytes": "How many bytes are kept locally once tiered; -2 means"
    " retention.bytes.",
    "flush.messages": "The number of messages written before the log is forced to disk.",
    "flush.ms": "The time after which the log is forced to disk.",
    "max.message.bytes": "The largest record batch size allowed.",
    "file.delete.delay.ms": "The time to wait before deleting a file from the filesystem.",
    "min.insync.replicas": "The minimum number of in-sync replicas an acks=all produce needs.",
    "preallocate": "True if the file should be preallocated on disk when a segment is created.",
    "remote.storage.enable": "Whether tiered storage is enabled for the topic.",
    "unclean.leader.election.enable": "Whether replicas outside the ISR may be elected leader.",
    "cleanup.policy": "A list of 'delete' (discard old segments by time or size) and 'compact'"
    " (keep the latest value of each key).",
    "message.timestamp.type": "Whether a record's timestamp is CreateTime or LogAppendTime.",
    "compression.type": "The final compression of the topic's data: uncompressed, gzip,"
    " snappy, lz4, zstd or producer (keep the producer's codec).",
    "delete.retention.ms": "How long delete tombstones are kept for compacted topics"
    " (stored; no log cleaner runs here).",
    "min.compaction.lag.ms": "The minimum time a message stays uncompacted (stored; no log"
    " cleaner runs here).",
    "max.compaction.lag.ms": "The maximum time a message stays ineligible for compaction"
    " (stored; no log cleaner runs here).",
    "min.cleanable.dirty.ratio": "The dirty share of the log that triggers cleaning"
    " (stored; no log cleaner runs here).",
    "message.timestamp.before.max.ms": "How far a CreateTime timestamp may lie before the"
    " broker's clock; records beyond it are refused with INVALID_TIMESTAMP.",
    "message.timestamp.after.max.ms": "How far a CreateTime timestamp may lie after the"
    " broker's clock; records beyond it are refused with INVALID_TIMESTAMP.",
    "message.timestamp.difference.max.ms": "[DEPRECATED] Both bounds of the timestamp window"
    " while message.timestamp.before/after.max.ms keep their defaults.",
    "compression.gzip.level": "The gzip level used with compression.type=gzip (stored; batches"
    " are kept as produced).",
    "compression.lz4.level": "The lz4 level used with compression.type=lz4 (stored; batches"
    " are kept as produced).",
    "compression.zstd.level": "The zstd level used with compression.type=zstd (stored; batches"
    " are kept as produced).",
    "message.format.version": "[DEPRECATED] Ignored: every batch is written in format v2.",
    "message.downconversion.enable": "[DEPRECATED] Ignored: fetches are never down-converted.",
    "remote.log.copy.disable": "Stop copying segments to remote storage while keeping remote"
    " data readable.",
    "remote.log.delete.on.disable": "Delete the remote data when remote storage is disabled.",
    "remote.log.restore.enable": "Set by a restore from the remote tier's bucket (the"
    " restore_topic job sets and removes it) once the restored segments are published: each"
    " new replica then starts its log after them, with their leader epochs.",
    "remote.log.restore.leader.epoch": "Set by a restore from the remote tier's bucket while it"
    " runs: the restored partitions' last leader epoch. A new partition leads in the epoch"
    " after it, and a new replica stays offline until remote.log.restore.enable is set.",
    "leader.replication.throttled.replicas": "Replicas to throttle on the leader side, as"
    " partitionId:brokerId pairs or '*' (stored; no replication quotas here).",
    "follower.replication.throttled.replicas": "Replicas to throttle on the follower side, as"
    " partitionId:brokerId pairs or '*' (stored; no replication quotas here).",
}

_BROKER_KIND_TYPES = {
    "int": ConfigType.INT,
    "long": ConfigType.LONG,
    "bool": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "list": ConfigType.LIST,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConfig:
    """One row of a DescribeConfigs answer; ``synonyms`` are most precise first."""

    name: str
    value: str | None
    source: ConfigSource
    config_type: ConfigType
    read_only: bool
    synonyms: tuple[ConfigSynonym, ...]
    documentation: str | None
    is_sensitive: bool = False  # a password: its value is never shown


def broker_synonyms(topic_config: str) -> tuple[str, ...]:
    """Broker names of a topic config's default, most precise first (``log.retention.ms``)."""
    return BROKER_SYNONYMS.get(topic_config, ("log." + topic_config,))


def describe_topic(
    info: TopicInfo,
    default_config: LogConfig,
    broker_props: Mapping[str, str],
    *,
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[DescribedConfig]:
    """Every topic config with its value, source and synonyms, sorted by name.

    A broker synonym (``log.retention.ms``) is looked up in the broker's dynamic configs, the
    cluster's dynamic defaults, then server.properties, as Kafka lists them.
    """
    layers = (
        (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic or {}),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_default or {}),
        (ConfigSource.STATIC_BROKER_CONFIG, broker_props),
    )
    effective = default_config.with_overrides(info.configs).to_props()
    built_in = LogConfig().to_props()
    rows = []
    for name in sorted(TOPIC_CONFIG_NAMES):
        synonyms: list[ConfigSynonym] = []
        if name in info.configs:
            synonyms.append(
                ConfigSynonym(
                    name=name, value=info.configs[name], source=ConfigSource.DYNAMIC_TOPIC_CONFIG
                )
            )
        names = broker_synonyms(name)
        for synonym in names:
            synonyms.extend(
                ConfigSynonym(name=synonym, value=props[synonym], source=source)
                for source, props in layers
                if synonym in props
            )
        synonyms.append(
            ConfigSynonym(
                name=names[0] if names else name,
                value=built_in[name],
                source=ConfigSource.DEFAULT_CONFIG,
            )
        )
        rows.append(
            DescribedConfig(
                name=name,
                value=effective[name],
                source=synonyms[0].source,
                config_type=TOPIC_CONFIG_TYPES.get(name, ConfigType.STRING),
                read_only=False,
                synonyms=tuple(synonyms),
                documentation=TOPIC_CONFIG_DOCS.get(name),
            )
        )
    return rows


def describe_broker(
    default_config: LogConfig,
    broker_props: Mapping[str, str],
    *,
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[DescribedConfig]:
    """The broker's own configs and its topic defaults (``log.*``), sorted by name, with the
    dynamic values of this broker and of the cluster default in front."""
    rows = _static_broker_rows(default_config, broker_props)
    for source, values in (
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_default or {}),
        (ConfigSource.DYNAMIC_BROKER_CONFIG, dynamic or {}),
    ):
        for name, value in values.items():
            rows[name] = _with_dynamic(rows.get(name), name, value, source)
    return [rows[name] for name in sorted(rows)]


def describe_dynamic_default(dynamic_default: Mapping[str, str]) -> list[DescribedConfig]:
    """The cluster-wide dynamic broker configs (the BROKER resource named "")."""
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return [_with_dynamic(None, n, v, source) for n, v in sorted(dynamic_default.items())]


def _with_dynamic(
    row: DescribedConfig | None, name: str, value: str, source: ConfigSource
) -> DescribedConfig:
    sensitive = is_sensitive(name)
    synonym = ConfigSynonym(name=name, value=None if sensitive else value, source=source)
    return DescribedConfig(
        name=name,
        value=None if sensitive else value,
        source=source,
        config_type=row.config_type if row is not None else ConfigType.STRING,
        read_only=False,
        synonyms=(synonym, *(row.synonyms if row is not None else ())),
        documentation=row.documentation if row is not None else None,
        is_sensitive=sensitive,
    )


def _static_broker_rows(
    default_config: LogConfig, broker_props: Mapping[str, str]
) -> dict[str, DescribedConfig]:
    rows: dict[str, DescribedConfig] = {}
    for name, (kind, default) in BROKER_CONFIG_DEFS.items():
        rows[name] = _static_row(
            name,
            broker_props.get(name),
            _text(default),
            _BROKER_KIND_TYPES.get(kind, ConfigType.STRING),
            None,
        )
    defaults = default_config.to_props()
    built_in = LogConfig().to_props()
    for topic_name in TOPIC_CONFIG_NAMES:
        names = broker_synonyms(topic_name)
        if not names:
            continue
        set_synonyms = tuple(
            ConfigSynonym(name=n, value=broker_props[n], source=ConfigSource.STATIC_BROKER_CONFIG)
            for n in names
            if n in broker_props
        )
        default_synonym = ConfigSynonym(
            name=names[0], value=built_in[topic_name], source=ConfigSource.DEFAULT_CONFIG
        )
        rows[names[0]] = DescribedConfig(
            name=names[0],
            value=defaults[topic_name],
            source=ConfigSource.STATIC_BROKER_CONFIG
            if set_synonyms
            else ConfigSource.DEFAULT_CONFIG,
            config_type=TOPIC_CONFIG_TYPES.get(topic_name, ConfigType.STRING),
            read_only=names[0] not in ALL_DYNAMIC_CONFIGS,
            synonyms=(*set_synonyms, default_synonym),
            documentation=f"The default {topic_name} of topics without their own.",
        )
    return rows


def _static_row(
    name: str, value: str | None, default: str, config_type: ConfigType, doc: str | None
) -> DescribedConfig:
    default_synonym = ConfigSynonym(name=name, value=default, source=ConfigSource.DEFAULT_CONFIG)
    if value is None:
        return DescribedConfig(
            name=name,
            value=default,
            source=ConfigSource.DEFAULT_CONFIG,
            config_type=config_type,
            read_only=name not in ALL_DYNAMIC_CONFIGS,
            synonyms=(default_synonym,),
            documentation=doc,
        )
    return DescribedConfig(
        name=name,
        value=value,
        source=ConfigSource.STATIC_BROKER_CONFIG,
        config_type=config_type,
        read_only=name not in ALL_DYNAMIC_CONFIGS,
        synonyms=(
            ConfigSynonym(name=name, value=value, source=ConfigSource.STATIC_BROKER_CONFIG),
            default_synonym,
        ),
        documentation=doc,
    )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_broker_resource(name: str, broker_id: int) -> None:
    """A BROKER resource names this broker's id, or is empty (the cluster-wide default)."""
    if name == "":
        return
    try:
        node_id = int(name)
    except ValueError:
        raise InvalidRequestError(f"Node id must be an integer, but it is: {name}") from None
    if node_id != broker_id:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {broker_id} or empty string, but received {name}"
        )


def check_unique_keys(names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    if len(names) > MAX_CONFIGS_PER_RESOURCE:
        raise InvalidRequestError(
            f"{len(names)} configs in one resource; at most {MAX_CONFIGS_PER_RESOURCE} are allowed"
        )


def check_operations(ops: Sequence[tuple[str, int, str | None]]) -> None:
    """INVALID_REQUEST for an operation code that is not SET, DELETE, APPEND or SUBTRACT."""
    for _name, operation, _value in ops:
        if operation not in AlterConfigOpType.__members__.values():
            raise InvalidRequestError(f"Unknown operations type {operation}")


def incremental_changes(
    ops: Sequence[tuple[str, int, str | None]], current: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(set, delete) for a topic from ``(name, operation, value)`` triples.

    ``current`` is the effective config (override, else the broker's default) that APPEND and
    SUBTRACT start from; lists keep their order, APPEND skips values already present.
    """
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    for name, operation, value in ops:
        try:
            op = AlterConfigOpType(operation)
        except ValueError:
            raise InvalidRequestError(f"Unknown operations type {operation}") from None
        if op is AlterConfigOpType.DELETE or (op is AlterConfigOpType.SET and value is None):
            delete_configs.append(name)
            continue
        if op is AlterConfigOpType.SET:
            set_configs[name] = str(value)
            continue
        if name not in LIST_CONFIG_NAMES:
            raise InvalidConfigError(f"Can't {op.name} to key {name} because its type is not LIST.")
        items = [p for p in current.get(name, "").split(",") if p]
        changes = [p for p in (value or "").split(",")]
        if op is AlterConfigOpType.APPEND:
            items.extend(p for p in changes if p not in items)
        else:
            items = [p for p in items if p not in changes]
        set_configs[name] = ",".join(items)
    return set_configs, tuple(delete_configs)


def topic_info_or_raise(services: BrokerServices, name: str) -> TopicInfo:
    """The topic, or INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION."""
    validate_topic_name(name)
    info = services.topic_store.get(name)
    if info is None:
        raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
    return info


async def alter_each_resource(
    module: Any, resources: Sequence[Any], alter: Callable[[Any], Awaitable[None]]
) -> tuple[Any, ...]:
    """One ``AlterConfigsResourceResponse`` per resource (AlterConfigs and its incremental
    twin): each resource succeeds or fails alone; duplicates and too many are INVALID_REQUEST.
    """
    seen = Counter((r.resource_type, r.resource_name) for r in resources)
    responses = []
    for index, resource in enumerate(resources):
        error: StorageError | None = None
        try:
            if index >= MAX_RESOURCES_PER_REQUEST:
                raise InvalidRequestError(
                    f"at most {MAX_RESOURCES_PER_REQUEST} resources per request"
                )
            if seen[(resource.resource_type, resource.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            await alter(resource)
        except StorageError as exc:
            error = exc
        responses.append(
            build(
                module.AlterConfigsResourceResponse,
                error_code=error_code_of(error),
                error_message=None if error is None else str(error),
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return tuple(responses)
