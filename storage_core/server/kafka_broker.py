"""The broker process: wires the log manager, topics, partitions and the listener together.

Start-up: load (and if needed recover) every log, read the topic metadata, become leader of
every local partition with a new leader epoch, then listen. Shutdown (SIGTERM/SIGINT): stop
listening, drain I/O, flush logs, write checkpoints and the clean-shutdown marker, so that the
next start skips recovery.

Thread-safety: the broker's state changes on the asyncio loop; disk work runs on the replica
manager's I/O threads.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.controller.producer_id_manager import ProducerIdManager
from storage_core.controller.topic_store import TopicInfo, TopicStore
from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.errors import InvalidConfigError, PolicyViolationError, StorageError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.metrics import BrokerTopicStats, KafkaMetricsRegistry
from storage_core.metrics.http_server import MetricsHttpServer, maybe_start_metrics_server
from storage_core.replication.partition import Partition
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.dynamic_broker_config import (
    BrokerConfigUpdateError,
    DynamicBrokerConfigStore,
)
from storage_core.server.group_coordinator_setup import start_group_coordinator
from storage_core.server.handlers import ApiHandler, build_registry
from storage_core.server.kafka_config import KafkaConfig, new_cluster_id
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig
from storage_core.tiered.remote_log_manager import RemoteLogManager
from storage_core.tiered.topic_based_rlmm.broker_setup import (
    maybe_start_remote_log_metadata_manager,
    stop_remote_log_metadata_manager,
)
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager

logger = logging.getLogger(__name__)

INTERNAL_TOPIC_PREFIX = "__"


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int


class KafkaBroker:
    """One broker node. ``await start()``, serve, ``await stop()``."""

    def __init__(self, config: KafkaConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.clock = clock
        log_dirs = config.log_dirs()
        log_dirs[0].mkdir(parents=True, exist_ok=True)
        self.dynamic_broker_config = DynamicBrokerConfigStore(log_dirs[0])
        self.default_log_config = self._dynamic_log_defaults()
        self.log_manager = LogManager(
            log_dirs,
            self.default_log_config,
            topic_configs=self._topic_overrides,
            clock=clock,
            retention_check_interval_ms=config.get_int("log.retention.check.interval.ms"),
            flush_recovery_point_interval_ms=config.get_int(
                "log.flush.offset.checkpoint.interval.ms"
            ),
            flush_start_offset_interval_ms=config.get_int(
                "log.flush.start.offset.checkpoint.interval.ms"
            ),
            producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
            producer_id_expiration_check_interval_ms=config.get_int(
                "producer.id.expiration.check.interval.ms"
            ),
        )
        self.topic_store = TopicStore(
            log_dirs[0],
            broker_ids=(self.broker_id,),
            remote_storage_system_enable=config.get_bool("remote.log.storage.system.enable"),
        )
        self.producer_id_manager = ProducerIdManager(log_dirs[0])
        self.metrics = KafkaMetricsRegistry(clock=clock)
        self.metrics_server: MetricsHttpServer | None = None
        self.replica_manager = ReplicaManager(
            self.log_manager,
            local_broker_id=self.broker_id,
            topic_stats=BrokerTopicStats(self.metrics),
        )
        self.api_registry: dict[int, ApiHandler] = build_registry()
        self.group_coordinator: GroupCoordinator | None = None
        self.remote_log_metadata_manager: TopicBasedRemoteLogMetadataManager | None = None
        # Tiered storage on the broker: deletion guards, remote reads, log start offset.
        self.remote_log_manager: RemoteLogManager | None = None
        if config.get_bool("remote.log.storage.system.enable"):
            try:
                self.remote_log_manager = RemoteLogManager.from_config(
                    config.props,
                    broker_id=self.broker_id,
                    log_dir=log_dirs[0],
                    rlmm=None,
                    clock=clock,
                    topic_stats=self.replica_manager.topic_stats,
                )
            except InvalidConfigError:
                # Local data stays safe without it: a remote-enabled log deletes no segment
                # locally until a remote log manager guards it (Log._deletion_guard_for).
                logger.exception(
                    "tiered storage unavailable: the remote storage manager cannot be built;"
                    " set remote.log.storage.manager.class.name and its rsm.config.* settings"
                )
        self.replica_manager.remote_log_manager = self.remote_log_manager
        self.socket_server = SocketServer(self, config=SocketServerConfig.from_kafka_config(config))
        self.endpoint = BrokerEndpoint(node_id=self.broker_id, host="127.0.0.1", port=-1)
        self._topic_lock = threading.RLock()
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ dynamic configs
    def _dynamic_log_defaults(
        self, *, default: Mapping[str, str] | None = None, broker: Mapping[str, str] | None = None
    ) -> LogConfig:
        """Topic defaults from server.properties, the cluster's dynamic defaults and this
        broker's dynamic configs, the last winning (Kafka's DynamicLogConfig); ``default`` and
        ``broker`` replace the stored dynamic configs of their level."""
        store = self.dynamic_broker_config
        return LogConfig.from_broker_props(
            {
                **self.config.props,
                **(store.configs(per_broker=False) if default is None else default),
                **(store.configs(per_broker=True) if broker is None else broker),
            }
        )

    def alter_dynamic_broker_configs(self, configs: Mapping[str, str], *, per_broker: bool) -> None:
        """Persist a resource's new dynamic configs; topic defaults take effect at once on every
        topic without its own override (a new ``log.retention.ms`` at the next retention pass).
        Nothing changes when the resulting topic defaults are invalid (INVALID_REQUEST).
        """
        with self._topic_lock:
            try:
                defaults = self._dynamic_log_defaults(
                    **({"broker": configs} if per_broker else {"default": configs})
                )
            except InvalidConfigError as error:
                raise BrokerConfigUpdateError(str(error)) from None
            self.dynamic_broker_config.replace(configs, per_broker=per_broker)
            if defaults == self.default_log_config:
                return
            self.default_log_config = defaults
            self.log_manager.default_config = defaults
            for name in self.topic_store.topics():
                self.log_manager.update_topic_config(name, self.topic_log_config(name))
            logger.info("dynamic topic defaults applied per_broker=%s", per_broker)

    # ------------------------------------------------------------------ topics
    def _topic_overrides(self, topic: str) -> Mapping[str, str]:
        info = self.topic_store.get(topic)
        return {} if info is None else info.configs

    def topic_log_config(self, topic: str) -> LogConfig:
        return self.default_log_config.with_overrides(self._topic_overrides(topic))

    @property
    def cluster_id(self) -> str:
        return self.topic_store.cluster_id

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        internal: bool = False,
        replica_assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic and its local partitions (or only validate, as CreateTopics can).

        ``replica_assignment`` (replicas by partition 0..n-1) replaces the count and factor.
        """
        if num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get_int("default.replication.factor")
        with self._topic_lock:
            if validate_only:
                return self.topic_store.validate_new_topic(
                    name,
                    num_partitions,
                    replication_factor,
                    configs,
                    self.default_log_config,
                    replica_assignment=replica_assignment,
                )
            topic = self.topic_store.create_topic(
                name,
                num_partitions,
                replication_factor,
                configs,
                self.default_log_config,
                internal=internal,
                replica_assignment=replica_assignment,
            )
            self._host_partitions(topic)
            return topic

    def maybe_auto_create_topic(self, name: str) -> TopicInfo | None:
        """Metadata for an unknown topic creates it when ``auto.create.topics.enable``."""
        if not self.config.get_bool("auto.create.topics.enable"):
            return None
        if name.startswith(INTERNAL_TOPIC_PREFIX):
            return None
        existing = self.topic_store.get(name)
        if existing is not None:
            return existing
        return self.create_topic(
            name,
            self.config.get_int("num.partitions"),
            min(self.config.get_int("default.replication.factor"), 1),
            {},
        )

    def ensure_internal_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """Create an internal topic (``__consumer_offsets``...) on first use."""
        with self._topic_lock:
            existing = self.topic_store.get(name)
            if existing is not None:
                return existing
            return self.create_topic(name, num_partitions, 1, configs, internal=True)

    def delete_topic(self, name: str) -> TopicInfo:
        if not self.config.get_bool("delete.topic.enable"):
            raise PolicyViolationError("Topic deletion is disabled (delete.topic.enable=false).")
        with self._topic_lock:
            existing = self.topic_store.get(name)
            if existing is None:
                return self.topic_store.delete_topic(name)  # UNKNOWN_TOPIC_OR_PARTITION
            rlm = self.remote_log_manager
            tps = [TopicPartition(name, a.partition) for a in existing.partitions]
            deleted: list[TopicInfo] = []

            def commit() -> None:
                # Runs once every partition dir is renamed for deletion; if anything here
                # raises, the renames are undone and the topic stays whole.
                if rlm is not None and self.topic_log_config(name).remote_storage_enable:
                    rlm.on_partitions_deleted(
                        [TopicIdPartition(existing.topic_id, tp) for tp in tps]
                    )
                deleted.append(self.topic_store.delete_topic(name))
                for tp in tps:
                    self.replica_manager.remove_partition(tp)
                    if rlm is not None:
                        rlm.on_partition_removed(tp)

            self.log_manager.delete_logs(tps, commit)
            self.replica_manager.topic_stats.remove_topic(name)
            return deleted[0]

    def add_partitions(
        self,
        name: str,
        new_total: int,
        *,
        validate_only: bool,
        replica_assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        with self._topic_lock:
            topic = self.topic_store.create_partitions(
                name,
                new_total,
                validate_only=validate_only,
                replica_assignment=replica_assignment,
            )
            if not validate_only:
                self._host_partitions(topic)
            return topic

    def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: tuple[str, ...],
        *,
        validate_only: bool,
    ) -> TopicInfo:
        with self._topic_lock:
            topic = self.topic_store.alter_configs(
                name,
                set_configs,
                delete_configs,
                self.default_log_config,
                validate_only=validate_only,
            )
            if not validate_only:
                config = self.topic_log_config(name)
                self.log_manager.update_topic_config(name, config)
                rlm = self.remote_log_manager
                if rlm is not None and config.remote_storage_enable:
                    # Remote storage enabled on a topic with data: track its remote
                    # metadata now (Kafka's TopicConfigHandler), not at the next refresh.
                    for tp, partition in self.replica_manager.partitions().items():
                        if tp.topic == name:
                            rlm.on_partition_hosted(partition)
            return topic

    def _host_partitions(self, topic: TopicInfo) -> None:
        """Open the log and become leader for each partition of ``topic`` led by this broker."""
        config = self.topic_log_config(topic.name)
        for assignment in topic.partitions:
            if self.broker_id not in assignment.replicas:
                continue
            tp = TopicPartition(topic.name, assignment.partition)
            try:
                existing = self.replica_manager.partitions().get(tp)
                if existing is not None:
                    continue
                log = self.log_manager.get_or_create_log(tp, topic_id=topic.topic_id, config=config)
                partition = Partition(
                    tp,
                    topic.topic_id,
                    log,
                    local_broker_id=self.broker_id,
                    on_high_watermark_advanced=self.replica_manager.on_high_watermark_advanced,
                )
                if assignment.leader == self.broker_id:
                    partition.make_leader(
                        leader_epoch=assignment.leader_epoch,
                        replicas=assignment.replicas,
                        isr=assignment.isr,
                    )
                self.replica_manager.add_partition(partition)
                if self.remote_log_manager is not None:
                    self.remote_log_manager.on_partition_hosted(partition)
            except StorageError:
                logger.exception("cannot host partition=%s; it stays offline", tp)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.replica_manager.bind_loop(loop)
        await loop.run_in_executor(None, self.log_manager.startup)
        if not self.topic_store.cluster_id:
            self.topic_store.set_cluster_id(self.config.cluster_id() or new_cluster_id())
        self.topic_store.bump_leader_epochs(self.broker_id)
        for topic in self.topic_store.topics().values():
            self._host_partitions(topic)
        hosted = set(self.replica_manager.partitions())
        for tp in self.log_manager.all_logs():
            if tp not in hosted:
                logger.warning(
                    "log of a partition unknown to the topic metadata is left alone and not"
                    " served partition=%s",
                    tp,
                )
        self.group_coordinator = await start_group_coordinator(self)
        self.remote_log_metadata_manager = await maybe_start_remote_log_metadata_manager(self)
        if self.remote_log_manager is not None:
            self.remote_log_manager.set_remote_log_metadata_manager(
                self.remote_log_metadata_manager
            )
            self.remote_log_manager.start()
        self.metrics_server = await maybe_start_metrics_server(
            self.metrics,
            host=self.config.get_string("metrics.host"),
            port=self.config.get_int("metrics.port"),
        )
        listener = self.config.listeners()[0]
        port = await self.socket_server.start(listener.host, listener.port)
        advertised = self.config.advertised_listeners()
        host = advertised[0].host if advertised else (listener.host or "127.0.0.1")
        if host in ("0.0.0.0", "::"):  # noqa: S104 (a wildcard bind is advertised as loopback)
            host = "127.0.0.1"
        advertised_port = advertised[0].port if advertised and advertised[0].port else port
        self.endpoint = BrokerEndpoint(node_id=self.broker_id, host=host, port=advertised_port)
        logger.info(
            "broker started broker_id=%d listener=%s:%d cluster_id=%s partitions=%d",
            self.broker_id,
            listener.host,
            port,
            self.cluster_id,
            len(hosted),
        )

    async def stop(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.socket_server.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        loop = asyncio.get_running_loop()
        if self.remote_log_manager is not None:
            await loop.run_in_executor(None, self.remote_log_manager.close)
        await stop_remote_log_metadata_manager(self.remote_log_metadata_manager)
        await loop.run_in_executor(None, self.replica_manager.shutdown)
        await loop.run_in_executor(None, self.log_manager.shutdown)
        self._stopped.set()
        logger.info("broker shut down cleanly broker_id=%d", self.broker_id)


async def run_until_signalled(config: KafkaConfig) -> None:
    """Start a broker and serve until SIGTERM or SIGINT, then shut down cleanly."""
    broker = KafkaBroker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(
        f"storage-core broker {broker.broker_id} listening on"
        f" {broker.endpoint.host}:{broker.endpoint.port}",
        flush=True,
    )
    await stop.wait()
    logger.info("shutdown requested broker_id=%d", broker.broker_id)
    await broker.stop()
