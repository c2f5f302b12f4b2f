"""Topic-level log configuration with Kafka's property names, defaults and bounds.

Values come from ``server.properties`` (as ``log.*`` broker defaults) and are overridden per topic
by the topic's own properties (``segment.bytes``, ``retention.ms`` ...). ``LogConfig`` is an
immutable value: changing a config builds a new one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_core.errors import InvalidConfigError
from storage_core.log.metadata_version import is_metadata_version

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Every topic config of Kafka 3.9 (``TopicConfig``/``LogConfig``; 4.0 dropped only the three
# deprecated ``message.format.version``, ``message.timestamp.difference.max.ms`` and
# ``message.downconversion.enable``, still accepted here for older clients), with Kafka's types,
# defaults and validators. Topic config name -> (field name, default, minimum) for the numbers.
# The broker-level name is ``log.`` + topic name for most keys (Kafka's
# ``ServerTopicConfigSynonyms``); the exceptions are listed below.
_TOPIC_CONFIGS: dict[str, tuple[str, int, int]] = {
    "segment.bytes": ("segment_bytes", 1024 * 1024 * 1024, 14),
    "segment.ms": ("segment_ms", 7 * 24 * 60 * 60 * 1000, 1),
    "segment.jitter.ms": ("segment_jitter_ms", 0, 0),
    "segment.index.bytes": ("segment_index_bytes", 10 * 1024 * 1024, 4),
    "index.interval.bytes": ("index_interval_bytes", 4096, 0),
    "retention.ms": ("retention_ms", 7 * 24 * 60 * 60 * 1000, -1),
    "retention.bytes": ("retention_bytes", -1, -1),
    "local.retention.ms": ("local_retention_ms", -2, -2),
    "local.retention.bytes": ("local_retention_bytes", -2, -2),
    "flush.messages": ("flush_messages", LONG_MAX, 1),
    "flush.ms": ("flush_ms", LONG_MAX, 0),
    "max.message.bytes": ("max_message_bytes", 1024 * 1024 + 12, 0),
    "file.delete.delay.ms": ("file_delete_delay_ms", 60_000, 0),
    "min.insync.replicas": ("min_insync_replicas", 1, 1),
    "delete.retention.ms": ("delete_retention_ms", 24 * 60 * 60 * 1000, 0),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", LONG_MAX, 1),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", LONG_MAX, 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", LONG_MAX, 0),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", LONG_MAX, 0),
    "compression.gzip.level": ("compression_gzip_level", -1, -1),
    "compression.lz4.level": ("compression_lz4_level", 9, 1),
    "compression.zstd.level": ("compression_zstd_level", 3, -131072),
    # This product's, not Kafka's: set by a restore from the bucket while it runs.
    "remote.log.restore.leader.epoch": ("remote_log_restore_leader_epoch", -1, -1),
}
# Kafka's INT configs (the others are LONG): at most 2**31 - 1, or the maximum given here.
_INT_MAXIMUMS: dict[str, int] = {
    "remote.log.restore.leader.epoch": INT_MAX,
    "segment.bytes": INT_MAX,
    "segment.index.bytes": INT_MAX,
    "index.interval.bytes": INT_MAX,
    "max.message.bytes": INT_MAX,
    "min.insync.replicas": INT_MAX,
    "compression.gzip.level": 9,  # Deflater.BEST_COMPRESSION; -1 is Deflater.DEFAULT_COMPRESSION
    "compression.lz4.level": 17,
    "compression.zstd.level": 22,
}
_GZIP_LEVEL_MIN = 1  # levels 1..9 (inclusive) or -1
_DOUBLE_CONFIGS: dict[str, tuple[str, float, float, float]] = {
    # name -> (field, default, minimum, maximum), bounds inclusive
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", 0.5, 0.0, 1.0),
}
_BOOLEAN_CONFIGS: dict[str, tuple[str, bool]] = {
    "preallocate": ("preallocate", False),
    "remote.storage.enable": ("remote_storage_enable", False),
    "remote.log.copy.disable": ("remote_log_copy_disable", False),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", False),
    "remote.log.restore.enable": ("remote_log_restore_enable", False),  # this product's
    "unclean.leader.election.enable": ("unclean_leader_election_enable", False),
    "message.downconversion.enable": ("message_downconversion_enable", True),
}
_STRING_CONFIGS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "cleanup.policy": ("cleanup_policy", "delete", ("delete", "compact")),
    "message.timestamp.type": (
        "message_timestamp_type",
        "CreateTime",
        ("CreateTime", "LogAppendTime"),
    ),
    "compression.type": (
        "compression_type",
        "producer",
        ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    ),
    # Free-form strings with their own validators (empty ``allowed``), see ``_parse_free``.
    "message.format.version": ("message_format_version", "3.0-IV1", ()),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", "", ()),
    "follower.replication.throttled.replicas": (
        "follower_replication_throttled_replicas",
        "",
        (),
    ),
}
# Comma-separated lists: each item must be one of the allowed values, in any order.
LIST_CONFIG_NAMES = frozenset(
    {
        "cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)
_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
# Broker names that are not simply "log." + the topic name.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms",),
    "max.message.bytes": ("message.max.bytes",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "local.retention.ms": ("log.local.retention.ms",),
    "local.retention.bytes": ("log.local.retention.bytes",),
    "remote.storage.enable": (),
    "remote.log.copy.disable": (),
    "remote.log.delete.on.disable": (),
    "remote.log.restore.enable": (),
    "remote.log.restore.leader.epoch": (),
    "min.insync.replicas": ("min.insync.replicas",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "leader.replication.throttled.replicas": (),
    "follower.replication.throttled.replicas": (),
}
_UNIT_MS = {"minutes": 60_000, "hours": 3_600_000}

TOPIC_CONFIG_NAMES = frozenset(
    [*_TOPIC_CONFIGS, *_BOOLEAN_CONFIGS, *_STRING_CONFIGS, *_DOUBLE_CONFIGS]
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """The configuration of one partition's log (Kafka's ``LogConfig``)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    file_delete_delay_ms: int = 60_000
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # Set by a restore from the bucket while it runs (storage_core.replication.remote_log_restore):
    # the restored lineage's last leader epoch (new partitions lead above it, new empty
    # replicas wait for their data), then "enable" once the restored segments are published.
    remote_log_restore_leader_epoch: int = -1
    remote_log_restore_enable: bool = False
    unclean_leader_election_enable: bool = False
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    # Stored and described, not acted on (no log cleaner, no recompression, no quotas here).
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_format_version: str = "3.0-IV1"
    message_downconversion_enable: bool = True
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    # Enforced on produce: records whose CreateTime is outside [now - before, now + after].
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX

    @property
    def max_index_size_bytes(self) -> int:
        """``segment.index.bytes``: the preallocated size of each index file."""
        return self.segment_index_bytes

    @property
    def is_compacted(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def is_delete(self) -> bool:
        """Kafka's ``LogConfig.delete``: segments go by ``retention.ms``/``retention.bytes``
        (false for ``compact`` alone and for an empty ``cleanup.policy``)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far (ms) a CreateTime may lie before the broker's clock; the deprecated
        ``message.timestamp.difference.max.ms`` counts while this one keeps its default."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far (ms) a CreateTime may lie after the broker's clock (see the one before)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, where -2 means "same as ``retention.ms``"."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, where -2 means "same as ``retention.bytes``"."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """A new config with topic-level properties (Kafka names) applied on top of this one."""
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            if name in _TOPIC_CONFIGS:
                int_field, _default, minimum = _TOPIC_CONFIGS[name]
                changes[int_field] = _parse_int(
                    name, raw, minimum, _INT_MAXIMUMS.get(name, LONG_MAX)
                )
            elif name in _DOUBLE_CONFIGS:
                double_field, _d, low, high = _DOUBLE_CONFIGS[name]
                changes[double_field] = _parse_double(name, raw, low, high)
            elif name in _BOOLEAN_CONFIGS:
                changes[_BOOLEAN_CONFIGS[name][0]] = _parse_bool(name, raw)
            elif name in _STRING_CONFIGS:
                str_field, _default_text, allowed = _STRING_CONFIGS[name]
                text = str(raw).strip()
                if not allowed:
                    text = _parse_free(name, text)
                elif name in LIST_CONFIG_NAMES:
                    text = _parse_list(name, text, allowed)
                elif text not in allowed:
                    raise InvalidConfigError(
                        f"Invalid value {text!r} for configuration {name}: must be one of {allowed}"
                    )
                changes[str_field] = text
            else:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
        return dataclasses.replace(self, **changes)

    @staticmethod
    def from_broker_props(props: Mapping[str, Any]) -> LogConfig:
        """The default topic config of a broker, read from its ``log.*`` properties."""
        topic_props: dict[str, Any] = {}
        for name in TOPIC_CONFIG_NAMES:
            synonyms = BROKER_SYNONYMS.get(name, ("log." + name,))
            for synonym in synonyms:  # the most precise unit wins, as in Kafka
                if synonym in props:
                    value = props[synonym]
                    unit = synonym.rsplit(".", 1)[-1]
                    if unit in _UNIT_MS:
                        value = _parse_int(synonym, value, -1) * _UNIT_MS[unit]
                    topic_props[name] = value
                    break
        return LogConfig().with_overrides(topic_props)

    def to_props(self) -> dict[str, str]:
        """Kafka-named string properties (for DescribeConfigs and persisted topic configs)."""
        out: dict[str, str] = {}
        for name, (int_field, _d, _m) in _TOPIC_CONFIGS.items():
            out[name] = str(getattr(self, int_field))
        for name, (bool_field, _b) in _BOOLEAN_CONFIGS.items():
            out[name] = "true" if getattr(self, bool_field) else "false"
        for name, (str_field, _s, _a) in _STRING_CONFIGS.items():
            out[name] = str(getattr(self, str_field))
        for name, (double_field, _f, _lo, _hi) in _DOUBLE_CONFIGS.items():
            out[name] = str(getattr(self, double_field))
        return out


def _parse_free(name: str, text: str) -> str:
    """Validators of the string configs without a fixed set of values."""
    if name == "message.format.version":
        if not is_metadata_version(text):
            raise InvalidConfigError(
                f"Invalid value {text} for configuration {name}: Version {text} is not a valid"
                " version; give a Kafka version such as 0.10.0.0, 2.8 or 3.0-IV1 (the setting is"
                " ignored from 3.0)"
            )
        return text
    items = [item.strip() for item in text.split(",")]
    if not (all(_THROTTLED_REPLICA.fullmatch(i) for i in items) or "".join(items) == "*"):
        raise InvalidConfigError(
            f"Invalid value {text} for configuration {name}: {name} must be the literal '*' or a"
            " list of replicas in the following format:"
            " [partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )
    return ",".join(items)


def _parse_double(name: str, raw: Any, low: float, high: float) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: not a number"
        ) from None
    if not low <= value <= high:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Value must be between"
            f" {low} and {high} (inclusive)"
        )
    return value


def _parse_int(name: str, raw: Any, minimum: int, maximum: int = LONG_MAX) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: not a number")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: not a number"
        ) from None
    if name == "compression.gzip.level" and value != -1 and value < _GZIP_LEVEL_MIN:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Value must be between"
            f" {_GZIP_LEVEL_MIN} and {maximum} or equal to -1"
        )
    if value < minimum:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: must be at least {minimum}"
        )
    if value > maximum:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: must be at most {maximum}"
        )
    return value


def _parse_list(name: str, text: str, allowed: tuple[str, ...]) -> str:
    """Kafka's LIST with ``ValidList.in(allowed)``: an empty text is the empty list, which is
    valid (an empty ``cleanup.policy`` neither deletes by retention nor compacts); an empty
    item within a list is not."""
    if not text:
        return ""
    items = [item.strip() for item in text.split(",")]
    if any(item not in allowed for item in items):
        raise InvalidConfigError(
            f"Invalid value {text!r} for configuration {name}: must be a comma-separated list"
            f" of {allowed}"
        )
    return ",".join(items)


def _parse_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: must be true/false")


def validate_remote_storage(
    config: LogConfig, *, previous: LogConfig | None, system_enabled: bool
) -> None:
    """Kafka's tiered-storage rules for a topic config (``LogConfig.validate`` and KIP-950).

    Raises ``InvalidConfigError`` naming the rule: remote storage needs the broker's
    ``remote.log.storage.system.enable``, a ``delete`` cleanup policy, and local retention
    within total retention; once enabled it is switched off only together with
    ``remote.log.delete.on.disable=true``.
    """
    if config.remote_storage_enable:
        if not system_enabled and (previous is None or not previous.remote_storage_enable):
            raise InvalidConfigError(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be"
                " configured with remote log storage (set remote.log.storage.system.enable=true"
                " on the broker first)."
            )
        if config.is_compacted:
            raise InvalidConfigError(
                "Remote log storage only supports topics with cleanup.policy=delete;"
                f" cleanup.policy={config.cleanup_policy} cannot have remote.storage.enable=true."
            )
        _validate_local_within_total(
            "local.retention.ms", config.local_retention_ms, "retention.ms", config.retention_ms
        )
        _validate_local_within_total(
            "local.retention.bytes",
            config.local_retention_bytes,
            "retention.bytes",
            config.retention_bytes,
        )
    elif (
        previous is not None
        and previous.remote_storage_enable
        and not config.remote_log_delete_on_disable
    ):
        raise InvalidConfigError(
            "It is invalid to disable remote storage without deleting remote data. To keep"
            " the remote data read-only, set remote.storage.enable=true and"
            " remote.log.copy.disable=true. To disable remote storage and delete all remote"
            " data, set remote.storage.enable=false and remote.log.delete.on.disable=true."
        )


def _validate_local_within_total(
    local_name: str, local_value: int, total_name: str, total_value: int
) -> None:
    if local_value == -2 or total_value == -1:
        return  # -2: "same as the total"; -1 total: unlimited, anything local fits
    if local_value == -1:
        raise InvalidConfigError(
            f"Value must not be -1 as {total_name} value is set as {total_value}"
            f" (configuration {local_name})."
        )
    if local_value > total_value:
        raise InvalidConfigError(
            f"Value must not be more than {total_name} property value: {total_value}"
            f" (configuration {local_name}={local_value})."
        )
