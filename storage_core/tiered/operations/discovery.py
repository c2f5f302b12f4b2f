"""Which partitions a tiering run works on, and which it leaves out and why.

A run is given the log dirs of one or more brokers as this host sees them (a broker id ->
log dirs map). For every partition of the cluster's remote-enabled topics (DescribeConfigs
``remote.storage.enable``) Metadata gives its leader and leader epoch; the partition is read
from the *leader's* log dirs. ``plan_targets`` decides over those values, in this order::

    topic unknown to the cluster (a directory of it was found)   -> left out
    topic not remote-enabled                                      -> left out (reported only
                                                                     when the run names it)
    no leader (offline)                                           -> left out
    leader not in the map                                         -> left out
    the leader reports it in a log dir the map does not give      -> left out
    no directory of the partition in the leader's log dirs        -> left out
    otherwise                                                     -> a target, fenced at the
                                                                     leader epoch read here

A map of one broker is the single-broker form (a job run on each broker for what it leads):
partitions led elsewhere, or leaderless, are reported only when this broker holds a
directory of them (it is a follower). A map of several brokers means to cover the cluster:
every partition left out is reported. Directories of a remote-enabled topic's partition
index the cluster does not have are reported as well. Nothing here prints; callers report
the ``SkippedPartition`` values as they see fit.

The map is checked against the brokers before anything is planned:

- each mapped log dir's ``meta.properties`` (written by the broker that owns the dir) must
  name the broker id the map gives it and the cluster's id (Metadata's); otherwise the run
  stops with ``InvalidConfigError`` naming the dir and both ids (``check_log_dir_owners``).
  A dir without the file (of a broker that predates it) is accepted;
- each live broker of the map is asked for its log dirs (DescribeLogDirs, the planned topics
  only): a partition it leads that it holds in a log dir of which the map gives no copy is
  left out, naming that dir as the broker reports it. A broker that does not answer is not
  asked again and its partitions are planned from the map alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.client.admin import KafkaAdminClient
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    RequestTimeoutError,
)
from storage_core.client.metadata import NO_LEADER, ClusterMetadata, TopicMetadata
from storage_core.common import TopicPartition, Uuid
from storage_core.errors import InvalidConfigError, StorageError, UnknownTopicOrPartitionError
from storage_core.log.log_config import TOPIC_CONFIG_NAMES, LogConfig
from storage_core.log.meta_properties import ZkMetaProperties, read_meta_properties
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.topic_based_rlmm import (
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)

# Tools and jobs are short-lived: their metadata consumer polls often so that it answers
# quickly.
RLMM_IDLE_POLL_MS = 20
# A run names at most this many brokers' log dirs.
BROKERS_MAX = 10_000

BrokerLogDirs = Mapping[int, Sequence[Path]]
# broker id -> each mapped log dir's meta.properties (None: the dir has none)
LogDirOwners = Mapping[int, Mapping[Path, ZkMetaProperties | None]]
# broker id -> partition -> the log dir holding it, as the broker reports it (brokers that
# answered DescribeLogDirs only)
ReportedLogDirs = Mapping[int, Mapping[TopicPartition, str]]


class BrokerIdentity(Protocol):
    """What ``resolve_broker_id`` needs of a broker config (``KafkaConfig`` has it)."""

    @property
    def broker_id(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionTarget:
    """A remote-enabled partition to work on, as planned: its directory among its leader's
    log dirs, the leader (id and host, from Metadata) and the leader epoch to fence at."""

    directory: Path
    topic_partition: TopicPartition
    topic_id: Uuid
    leader_epoch: int
    config: LogConfig
    leader_id: int = NO_LEADER
    leader_host: str | None = None


class SkipReason(Enum):
    """Why a partition is left out (in the order ``plan_targets`` decides)."""

    # Metadata leaves out the topics the principal may not describe: say so
    TOPIC_UNKNOWN = (
        "topic unknown to the cluster (deleted, or no Describe ACL on it for this principal)"
    )
    NOT_REMOTE_ENABLED = "remote storage is not enabled for the topic"
    PARTITION_UNKNOWN = "partition unknown to the cluster"
    NO_LEADER = "no leader (offline)"
    LEADER_NOT_GIVEN = "the leader's log dirs are not given"
    LOG_DIR_NOT_GIVEN = "the leader holds the partition in a log dir the map does not give"
    LEADER_UNAVAILABLE = "the leader did not answer, or no longer leads, while it was planned"
    NO_DIRECTORY = "no directory of the partition in the leader's log dirs"


@dataclass(frozen=True, slots=True, kw_only=True)
class SkippedPartition:
    """A partition left out of the run: ``why``, and ``reason`` saying it for a reader (with
    the broker ids involved)."""

    topic_partition: TopicPartition
    why: SkipReason
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetDiscovery:
    """The targets and the partitions left out, each sorted by topic and partition."""

    targets: tuple[PartitionTarget, ...]
    skipped: tuple[SkippedPartition, ...]


# ---------------------------------------------------------------------------- reading
def resolve_broker_id(
    explicit: int | None, broker_config: BrokerIdentity | None, metadata: ClusterMetadata
) -> int:
    """``--broker-id``, else the broker config's id, else the cluster's only broker."""
    if explicit is not None:
        return explicit
    if broker_config is not None:
        return broker_config.broker_id
    if len(metadata.brokers) == 1:
        return metadata.brokers[0].node_id
    ids = sorted(b.node_id for b in metadata.brokers)
    raise InvalidConfigError(
        f"the cluster has brokers {ids}: pass --broker-id (or --broker-config) to say whose"
        " log dir this is"
    )


def topic_log_config(admin: KafkaAdminClient, topic: str) -> LogConfig:
    """The topic's effective config, as DescribeConfigs reports it."""
    entries = admin.describe_configs(ConfigResourceType.TOPIC, topic)
    return LogConfig().with_overrides(
        {e.name: e.value for e in entries if e.value is not None and e.name in TOPIC_CONFIG_NAMES}
    )


def metadata_client(
    bootstrap_server: str, *, connection_config: ConnectionConfig | None = None
) -> TopicBasedRemoteLogMetadataManager:
    """A client-mode metadata manager that polls ``__remote_log_metadata`` briskly (tools and
    jobs run briefly, so waiting out the default idle poll would dominate them), connecting
    as ``connection_config`` says (its security settings)."""
    return TopicBasedRemoteLogMetadataManager.for_client(
        bootstrap_server,
        connection_config=connection_config,
        consumer_config=ConsumerTaskConfig(idle_poll_ms=RLMM_IDLE_POLL_MS),
    )


def partition_dirs(log_dir: Path, topic: str | None) -> Iterator[tuple[TopicPartition, Path]]:
    """``<topic>-<n>`` directories of ``log_dir`` (of ``topic`` only, when given), sorted;
    directories of deleted or moved partitions (``...-delete``, ``...-future``) are not."""
    if not log_dir.is_dir():
        raise InvalidConfigError(f"log dir {log_dir} is not a directory")
    for entry in sorted(log_dir.iterdir()):
        if not entry.is_dir():
            continue
        try:
            tp = TopicPartition.parse_dir_name(entry.name)
        except StorageError:
            continue
        if topic is None or tp.topic == topic:
            yield tp, entry


def found_partition_dirs(
    broker_log_dirs: BrokerLogDirs, topic: str | None
) -> dict[int, dict[TopicPartition, Path]]:
    """Each broker's partition directories (the first log dir holding one wins)."""
    if len(broker_log_dirs) > BROKERS_MAX:
        raise InvalidConfigError(
            f"{len(broker_log_dirs)} brokers' log dirs given, at most {BROKERS_MAX}"
        )
    found: dict[int, dict[TopicPartition, Path]] = {}
    for broker_id, log_dirs in sorted(broker_log_dirs.items()):
        dirs = found.setdefault(broker_id, {})
        for log_dir in log_dirs:
            for tp, directory in partition_dirs(log_dir, topic):
                dirs.setdefault(tp, directory)
    return found


def read_view(consumer: KafkaConsumer, target: PartitionTarget) -> LogView:
    """A view with the leader's current log start offset, LSO and HW (asked before reading;
    the LSO first, so that it is never above the HW asked after it)."""
    tp = target.topic_partition
    log_start_offset = consumer.earliest_offset(tp.topic, tp.partition)
    last_stable_offset = consumer.last_stable_offset(tp.topic, tp.partition)
    high_watermark = consumer.latest_offset(tp.topic, tp.partition)
    view = LogView.read(
        target.directory,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        last_stable_offset=last_stable_offset,
    )
    if view.topic_id != target.topic_id:
        raise UnknownTopicOrPartitionError(
            f"{target.directory} holds topic id {view.topic_id}, the cluster's {tp.topic} has"
            f" {target.topic_id}: a leftover of a deleted topic; it is not tiered"
        )
    return view


def read_log_dir_owners(
    broker_log_dirs: BrokerLogDirs,
) -> dict[int, dict[Path, ZkMetaProperties | None]]:
    """Each mapped log dir's ``meta.properties`` (``None`` where it has none)."""
    return {
        broker_id: {Path(d): read_meta_properties(Path(d)) for d in log_dirs}
        for broker_id, log_dirs in sorted(broker_log_dirs.items())
    }


def read_reported_log_dirs(
    admin: KafkaAdminClient,
    metadata: ClusterMetadata,
    broker_ids: Sequence[int],
    topics: Mapping[str, Sequence[int]],
) -> dict[int, dict[TopicPartition, str]]:
    """Where each live broker of the map holds the partitions of ``topics`` (DescribeLogDirs);
    brokers not registered, or that do not answer, are left out. A denial (the principal has
    no Describe on the cluster) raises, naming that ACL."""
    reported: dict[int, dict[TopicPartition, str]] = {}
    if not topics:
        return reported
    for broker_id in broker_ids:
        if metadata.broker(broker_id) is None:
            continue
        try:
            described = admin.describe_log_dirs(broker_id, topics)
        except BrokerResponseError as exc:
            if exc.error == ErrorCode.cluster_authorization_failed:
                raise  # names the ACL: the map's check is never skipped silently
            continue
        except ClientError:
            continue  # dead or unreachable: planned from the map alone
        held = reported.setdefault(broker_id, {})
        for log_dir in described:
            for tp in log_dir.partitions:
                held.setdefault(tp, log_dir.log_dir)
    return reported


def discover_targets(
    cluster: KafkaCluster, broker_log_dirs: BrokerLogDirs, *, topic: str | None
) -> TargetDiscovery:
    """Read the log dirs, Metadata, the topics' configs and the brokers' own log dirs, check
    the map (``check_log_dir_owners``), then ``plan_targets``."""
    found = found_partition_dirs(broker_log_dirs, topic)
    owners = read_log_dir_owners(broker_log_dirs)
    metadata = cluster.refresh_metadata(None if topic is None else [topic])
    check_log_dir_owners(owners, cluster_id=metadata.cluster_id)
    admin = KafkaAdminClient(cluster)
    configs: dict[str, LogConfig | None] = {}
    for described in metadata.topics:
        if is_known(described) and not described.is_internal:
            config = topic_log_config(admin, described.name)
            configs[described.name] = config if config.remote_storage_enable else None
    planned_topics = {
        described.name: [p.partition for p in described.partitions]
        for described in metadata.topics
        if configs.get(described.name) is not None and (topic is None or described.name == topic)
    }
    broker_ids = sorted(broker_log_dirs)
    reported = read_reported_log_dirs(admin, metadata, broker_ids, planned_topics)
    return plan_targets(
        metadata, configs, found, broker_ids=broker_ids, topic=topic, reported_dirs=reported
    )


# ---------------------------------------------------------------------------- deciding
def is_known(described: TopicMetadata | None) -> bool:
    return (
        described is not None
        and described.topic_id is not None
        and described.error == ErrorCode.none
    )


def leader_elsewhere_reason(leader_id: int, broker_ids: Sequence[int]) -> str:
    if len(broker_ids) == 1:
        return f"leader is broker {leader_id}, not {broker_ids[0]}"
    return (
        f"leader is broker {leader_id}, whose log dirs are not given"
        f" (given: brokers {', '.join(str(b) for b in broker_ids)})"
    )


def check_log_dir_owners(owners: LogDirOwners, *, cluster_id: str | None) -> None:
    """Each mapped log dir whose ``meta.properties`` names another broker than the map gives
    it, or another cluster than ``cluster_id`` (Metadata's), stops the run with
    ``InvalidConfigError`` naming the dir, the broker id given and the one found."""
    for broker_id, log_dirs in sorted(owners.items()):
        for log_dir, meta in sorted(log_dirs.items()):
            if meta is None:
                continue  # written by a broker that predates meta.properties
            if meta.broker_id != broker_id:
                raise InvalidConfigError(
                    f"log dir {log_dir} is given as broker {broker_id}'s, but its"
                    f" meta.properties names broker.id {meta.broker_id}: it holds broker"
                    f" {meta.broker_id}'s partitions; fix the broker id -> log dirs map"
                    " (--broker-log-dirs / STORAGE_CORE_BROKER_LOG_DIRS)"
                )
            if cluster_id and meta.cluster_id is not None and meta.cluster_id != cluster_id:
                raise InvalidConfigError(
                    f"log dir {log_dir} is given as broker {broker_id}'s, but its"
                    f" meta.properties names cluster.id {meta.cluster_id}, not {cluster_id}"
                    " of the bootstrap servers: it belongs to another cluster; fix the log"
                    " dirs map or --bootstrap-server"
                )


# Errors of a leader that died, cannot be reached, or lost the partition since Metadata.
UNREACHABLE_ERRORS = (BrokerUnreachableError, ConnectionClosedError, RequestTimeoutError)
LEADERSHIP_ERROR_CODES = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.broker_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.request_timed_out,
        ErrorCode.network_exception,
    }
)


def is_leader_unreachable(error: BaseException) -> bool:
    """The leader could not be talked to at all (died, stopped, or its address is gone)."""
    return isinstance(error, UNREACHABLE_ERRORS)


def leader_unavailable(target: PartitionTarget, error: BaseException) -> SkippedPartition | None:
    """The partition left out when reading its leader's view failed because the leader died,
    cannot be reached or no longer leads it (it moved since Metadata); ``None`` for any other
    error (a corrupt segment, a topic id mismatch...), which must fail the run."""
    about_leadership = is_leader_unreachable(error) or (
        isinstance(error, BrokerResponseError) and error.error in LEADERSHIP_ERROR_CODES
    )
    if not about_leadership:
        return None
    host = f" at {target.leader_host}" if target.leader_host else ""
    message = " ".join(str(error).split()) or type(error).__name__
    return SkippedPartition(
        topic_partition=target.topic_partition,
        why=SkipReason.LEADER_UNAVAILABLE,
        reason=(
            f"leader broker {target.leader_id}{host} (leader epoch {target.leader_epoch}) did"
            f" not answer while the partition was planned: {type(error).__name__}: {message};"
            " the next run plans it from its new leader"
        ),
    )


def log_dir_not_given_reason(leader_id: int, log_dir: str) -> str:
    return (
        f"broker {leader_id} holds the partition in its log dir {log_dir}, which the map does"
        f" not give (add it to broker {leader_id}'s log dirs)"
    )


def plan_targets(
    metadata: ClusterMetadata,
    configs: Mapping[str, LogConfig | None],
    found: Mapping[int, Mapping[TopicPartition, Path]],
    *,
    broker_ids: Sequence[int],
    topic: str | None,
    reported_dirs: ReportedLogDirs | None = None,
) -> TargetDiscovery:
    """The decision of the module docstring over what was read: ``configs`` holds each
    described topic's config when it is remote-enabled, else ``None``; ``found`` each mapped
    broker's partition directories; ``broker_ids`` the brokers of the map;
    ``reported_dirs`` where the brokers that answered hold their partitions (their own paths)."""
    held_by_broker = reported_dirs or {}
    covers_cluster = len(broker_ids) > 1
    held = {tp for dirs in found.values() for tp in dirs}
    targets: list[PartitionTarget] = []
    skipped: dict[TopicPartition, SkippedPartition] = {}

    def skip(tp: TopicPartition, why: SkipReason, reason: str | None = None) -> None:
        skipped.setdefault(
            tp, SkippedPartition(topic_partition=tp, why=why, reason=reason or why.value)
        )

    for tp in sorted(held):
        if not is_known(metadata.topic(tp.topic)):
            skip(tp, SkipReason.TOPIC_UNKNOWN)
    for described in sorted(metadata.topics, key=lambda t: t.name):
        if topic is not None and described.name != topic:
            continue
        if not is_known(described) or described.is_internal or described.topic_id is None:
            continue
        config = configs.get(described.name)
        if config is None:
            if topic is not None:
                for partition in described.partitions:
                    tp = TopicPartition(described.name, partition.partition)
                    skip(tp, SkipReason.NOT_REMOTE_ENABLED)
            continue
        indexes = {p.partition for p in described.partitions}
        for tp in sorted(held):
            if tp.topic == described.name and tp.partition not in indexes:
                skip(tp, SkipReason.PARTITION_UNKNOWN)
        for partition in sorted(described.partitions, key=lambda p: p.partition):
            tp = TopicPartition(described.name, partition.partition)
            leader_id = partition.leader_id
            reported = covers_cluster or tp in held
            if leader_id == NO_LEADER or leader_id < 0:
                if reported:
                    skip(tp, SkipReason.NO_LEADER)
                continue
            if leader_id not in broker_ids:
                if reported:
                    skip(
                        tp,
                        SkipReason.LEADER_NOT_GIVEN,
                        leader_elsewhere_reason(leader_id, broker_ids),
                    )
                continue
            directory = found.get(leader_id, {}).get(tp)
            held_in = held_by_broker.get(leader_id, {}).get(tp)
            if directory is None and held_in is not None:
                skip(
                    tp,
                    SkipReason.LOG_DIR_NOT_GIVEN,
                    log_dir_not_given_reason(leader_id, held_in),
                )
                continue
            if directory is None:
                skip(
                    tp,
                    SkipReason.NO_DIRECTORY,
                    f"no directory of the partition in broker {leader_id}'s log dirs",
                )
                continue
            leader = metadata.broker(leader_id)
            targets.append(
                PartitionTarget(
                    directory=directory,
                    topic_partition=tp,
                    topic_id=described.topic_id,
                    leader_epoch=partition.leader_epoch,
                    config=config,
                    leader_id=leader_id,
                    leader_host=None if leader is None else leader.host,
                )
            )
    return TargetDiscovery(
        targets=tuple(targets),
        skipped=tuple(skipped[tp] for tp in sorted(skipped)),
    )
