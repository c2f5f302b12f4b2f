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
import functools
import logging
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence

from storage_core.client.connection import ConnectionConfig
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.controller.producer_id_manager import ProducerIdManager
from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.errors import InvalidConfigError, StorageError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.log.meta_properties import ensure_meta_properties
from storage_core.metrics import BrokerTopicStats, KafkaMetricsRegistry
from storage_core.metrics.http_server import MetricsHttpServer, maybe_start_metrics_server
from storage_core.replication.alter_partition_manager import AlterPartitionManager
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    removed_by_reassignment,
)
from storage_core.replication.partition import IsrUpdate
from storage_core.replication.replica_fetcher_manager import ReplicaFetcherManager
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.replication.replica_metrics import register_replica_manager_metrics
from storage_core.security.authorizer.acl_authorizer import authorizer_from_config
from storage_core.security.credential_cache import CredentialProvider
from storage_core.server.add_partitions_to_txn_manager import add_partitions_to_txn_manager_for
from storage_core.server.admin_manager import AdminManager, dynamic_log_defaults
from storage_core.server.broker_services import BrokerEndpoint, BrokerServices
from storage_core.server.cluster_membership import ClusterMembership, ran_on_log_dirs
from storage_core.server.connection_quotas import ConnectionQuotas
from storage_core.server.coordinator_leadership import notify_coordinators
from storage_core.server.dynamic_broker_config import DynamicBrokerConfigStore
from storage_core.server.fetch_session import FetchManager
from storage_core.server.group_coordinator_setup import start_group_coordinator
from storage_core.server.handlers import build_registry
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.listeners import ListenerSecurity, inter_broker_client_security
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig
from storage_core.server.topic_store import TopicInfo, TopicStore
from storage_core.server.transaction_coordinator_setup import start_transaction_coordinator
from storage_core.tiered.recovery.topic_manifest_writer import TopicManifestWriter, TopicSettings
from storage_core.tiered.remote_log_manager import RemoteLogManager
from storage_core.tiered.remote_storage_manager import (
    RefusedRemoteStorageConfigError,
    RemoteObjectStore,
)
from storage_core.tiered.topic_based_rlmm.broker_setup import (
    RemoteLogMetadataManagerStartup,
)
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager
from storage_core.zk.zk_data import EndPoint

logger = logging.getLogger(__name__)

DELETION_RETRY_S = 5.0


class KafkaBroker:
    """One broker node. ``await start()``, serve, ``await stop()``."""

    def __init__(self, config: KafkaConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.clock = clock
        # Each listener's security first (TLS keys, certificates, principal rules): a broker
        # that cannot serve one of them refuses to start before it touches anything.
        self.listener_securities = [
            ListenerSecurity.for_endpoint(config.props, e) for e in config.listeners()
        ]
        self.inter_broker_listener_name, _ = config.inter_broker_listener()
        self.inter_broker_security = inter_broker_client_security(config.props)
        self.inter_broker_connection_config = ConnectionConfig(
            client_id=f"broker-{self.broker_id}", security=self.inter_broker_security
        )
        """How this broker's own clients (the RLMM's producer and consumer) reach the cluster:
        the inter-broker listener, with its protocol."""
        log_dirs = config.log_dirs()
        log_dirs[0].mkdir(parents=True, exist_ok=True)
        self.dynamic_broker_config = DynamicBrokerConfigStore(log_dirs[0])
        default_log_config = dynamic_log_defaults(config, self.dynamic_broker_config)
        self.log_manager = LogManager(
            log_dirs,
            default_log_config,
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
            high_watermark_checkpoint_interval_ms=config.get_int(
                "replica.high.watermark.checkpoint.interval.ms"
            ),
            producer_id_expiration_check_interval_ms=config.get_int(
                "producer.id.expiration.check.interval.ms"
            ),
            segment_open_files_max=config.get_int("log.segment.open.files.max"),
        )
        self.metadata_cache = MetadataCache(self.broker_id)
        self.membership = ClusterMembership(
            config,
            log_dir=log_dirs[0],
            cache=self.metadata_cache,
            unclean_leader_election_enable=self._unclean_leader_election_enable,
            on_partitions=self._on_partitions_changed,
            on_deletion_marked=self._on_topics_marked_for_deletion,
        )
        self.controller = self.membership.controller
        self.producer_id_manager = ProducerIdManager(
            self.broker_id, self.membership.zk, log_dirs[0]
        )
        self.topic_store = TopicStore(
            broker_id=self.broker_id,
            zk=self.membership.zk,
            controller=self.controller,
            cache=self.metadata_cache,
            remote_storage_system_enable=config.get_bool("remote.log.storage.system.enable"),
        )
        self.admin_manager = AdminManager(
            config,
            dynamic_broker_config=self.dynamic_broker_config,
            default_log_config=default_log_config,
            log_manager=self.log_manager,
            topic_store=self.topic_store,
            topic_log_config=self.topic_log_config,
            uses_zookeeper=self.membership.uses_zookeeper,
        )

        self.metrics = KafkaMetricsRegistry(clock=clock)
        self.metrics_server: MetricsHttpServer | None = None
        self.replica_manager = ReplicaManager(
            self.log_manager,
            local_broker_id=self.broker_id,
            topic_stats=BrokerTopicStats(self.metrics),
            clock=clock,
            replica_lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
        )
        self.alter_partition_manager = AlterPartitionManager(
            self.membership.zk, on_committed=self._on_isr_committed
        )
        self.alter_partition_manager.start()
        self.replica_manager.submit_isr_update = self.alter_partition_manager.submit
        self.replica_manager.is_broker_alive = lambda b: self.metadata_cache.image().is_alive(b)
        self.replica_manager.metadata_contains = lambda tp: (
            self.metadata_cache.image().partition(tp) is not None
        )
        self.replica_fetcher_manager = ReplicaFetcherManager(
            broker_id=self.broker_id,
            config=config,
            get_partition=self.replica_manager.get_partition,
            endpoint_of=self._endpoint_of,
            remote_log_manager=lambda: self.remote_log_manager,
            clock=clock,
            on_bytes_appended=self.replica_manager.topic_stats.mark_replication_bytes_in,
            security=self.inter_broker_security,
        )
        self.replica_fetcher_manager.register_metrics(self.metrics)
        self.replica_manager.replica_fetcher_manager = self.replica_fetcher_manager
        self.isr_change_meters = register_replica_manager_metrics(
            self.metrics,
            self.replica_manager,
            offline_partitions=lambda: len(self.metadata_cache.image().offline()),
        )
        self.membership.register_metrics(self.metrics)
        api_registry = build_registry()
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.remote_log_metadata_manager: TopicBasedRemoteLogMetadataManager | None = None
        self._rlmm_startup = RemoteLogMetadataManagerStartup(self, self._use_rlmm)
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
            except RefusedRemoteStorageConfigError:
                raise  # a setting it would ignore or cannot honour: refuse to start, naming it
            except InvalidConfigError:
                # Local data stays safe without it: a remote-enabled log deletes no segment
                # locally until a remote log manager guards it (retention.deletion_guard_for).
                logger.exception(
                    "tiered storage unavailable: the remote storage manager cannot be built;"
                    " set remote.log.storage.manager.class.name and its rsm.config.* settings"
                )
        if self.remote_log_manager is not None:  # KIP-956 quotas: dynamic broker configs
            self.admin_manager.add_reconfigurable(self.remote_log_manager.quotas.reconfigure)
            rsm = self.remote_log_manager.rsm
            if isinstance(rsm, RemoteObjectStore):  # whole objects: the topic manifests
                self.remote_log_manager.topic_manifests = TopicManifestWriter(
                    rsm, self._topic_settings, clock=clock
                )
        self.replica_manager.remote_log_manager = self.remote_log_manager
        self.endpoint = BrokerEndpoint(node_id=self.broker_id, host="127.0.0.1", port=-1)
        """The advertised endpoint of the inter-broker listener (port -1 until it listens)."""
        self.endpoints: dict[str, BrokerEndpoint] = {}
        """Every advertised endpoint, by listener name (empty until the broker listens)."""
        self.authorizer = authorizer_from_config(config.props, self.membership.zk.zk)
        # users' SCRAM credentials, loaded before any request is served, then kept in step
        self.credential_provider = CredentialProvider(self.membership.zk.zk)
        self.services = BrokerServices(
            broker_id=self.broker_id,
            config=config,
            clock=clock,
            replica_manager=self.replica_manager,
            log_manager=self.log_manager,
            metadata_cache=self.metadata_cache,
            topic_store=self.topic_store,
            controller=self.controller,
            producer_id_manager=self.producer_id_manager,
            dynamic_broker_config=self.dynamic_broker_config,
            admin_manager=self.admin_manager,
            api_versions=api_registry,
            current_endpoint=lambda: self.endpoint,
            current_endpoints=lambda: self.endpoints,
            current_group_coordinator=lambda: self.group_coordinator,
            current_transaction_coordinator=lambda: self.transaction_coordinator,
            add_partitions_to_txn_manager=add_partitions_to_txn_manager_for(
                config, self.metadata_cache, lambda: self.transaction_coordinator
            ),
            authorizer=self.authorizer,
            config_entities=self.credential_provider.store,
            fetch_manager=FetchManager.for_broker(
                max_entries=config.get_int("max.incremental.fetch.session.cache.slots"),
                now_ms=clock.milliseconds,
                registry=self.metrics,
            ),
        )
        # One socket server per listener; they share one memory pool (queued.max.request.bytes)
        # and the connection limits (max.connections, max.connections.per.ip), as in Kafka
        socket_server_config = SocketServerConfig.from_kafka_config(config)
        self.socket_servers: dict[str, SocketServer] = {}
        memory_pool = None
        quotas = ConnectionQuotas()
        for listener_security in self.listener_securities:
            server = SocketServer(
                self.services,
                api_registry,
                config=socket_server_config,
                listener=listener_security,
                memory_pool=memory_pool,
                credentials=self.credential_provider.cache,
                quotas=quotas,
            )
            memory_pool = server.memory_pool
            self.socket_servers[listener_security.listener_name] = server
        self.socket_server = next(iter(self.socket_servers.values()))
        """The first listener's server."""
        self._hosting_lock = threading.RLock()
        self._startup_topic_configs: dict[str, dict[str, str]] = {}
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ topics
    def _topic_overrides(self, topic: str) -> Mapping[str, str]:
        info = self.topic_store.get(topic)
        if info is None:  # while logs load, before this broker's metadata is read
            return self._startup_topic_configs.get(topic, {})
        return info.configs

    def _topic_settings(self, topic: str) -> TopicSettings | None:
        """What the topic's manifest records of it, from this broker's metadata."""
        info = self.topic_store.get(topic)
        if info is None or not info.partitions:
            return None
        return TopicSettings(
            topic_id=info.topic_id,
            partition_count=len(info.partitions),
            replication_factor=len(info.partitions[0].replicas),
            configs=dict(info.configs),
        )

    def topic_log_config(self, topic: str) -> LogConfig:
        return self.admin_manager.default_log_config.with_overrides(self._topic_overrides(topic))

    @property
    def cluster_id(self) -> str:
        return self.topic_store.cluster_id

    def _unclean_leader_election_enable(self, topic: str) -> bool:
        return self.topic_log_config(topic).unclean_leader_election_enable

    def ensure_internal_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """The internal topic as it is, or created now (``AdminManager.ensure_internal_topic``;
        the broker-mode RLMM creates ``__remote_log_metadata`` through it)."""
        return self.admin_manager.ensure_internal_topic(name, num_partitions, configs)

    # ------------------------------------------------------------------ controller decisions
    def _log_config_in(self, image: MetadataImage, topic: str) -> LogConfig:
        metadata = image.topic(topic)
        return self.admin_manager.default_log_config.with_overrides(
            metadata.configs if metadata else {}
        )

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where a follower reaches its leader: the leader's registered (advertised) address."""
        registration = self.metadata_cache.image().brokers.get(broker_id)
        if registration is None:
            return None
        endpoint = registration.endpoint(self.inter_broker_listener_name)
        if endpoint is None:
            logger.warning(
                "broker %d registers no endpoint of the inter-broker listener %s; cannot fetch"
                " from it until it does",
                broker_id,
                self.inter_broker_listener_name,
            )
            return None
        return endpoint.host, endpoint.port

    def _on_isr_committed(self, update: IsrUpdate, previous: tuple[int, ...]) -> None:
        self.isr_change_meters.mark(previous, update.isr)

    def _on_partitions_changed(
        self, image: MetadataImage, changes: Mapping[TopicPartition, PartitionMetadata | None]
    ) -> None:
        """The controller changed these partitions (or their topic's configs): host, lead,
        follow or stop, then tell the components that care (Kafka's LeaderAndIsr path)."""
        previous = self.metadata_cache.image()  # the listener shows ``image`` after this call
        with self._hosting_lock:
            for topic in sorted({tp.topic for tp, state in changes.items() if state is not None}):
                self.log_manager.update_topic_config(topic, self._log_config_in(image, topic))
            result = self.replica_manager.become_leader_or_follower(
                {
                    tp: state
                    for tp, state in changes.items()
                    if state is None
                    or not (image.topic(tp.topic) and image.topics[tp.topic].marked_for_deletion)
                },
                topic_ids={t.name: t.topic_id for t in image.topics.values()},
                log_config=lambda topic: self._log_config_in(image, topic),
            )
            rlm = self.remote_log_manager
            if rlm is not None:
                # every hosted partition that changed, its topic's configs included (remote
                # storage just enabled: its remote metadata is tracked now, Kafka's
                # TopicConfigHandler)
                hosted = self.replica_manager.partitions()
                for tp in changes:
                    if tp in hosted:
                        rlm.on_partition_hosted(hosted[tp])
                for tp in result.stopped:
                    rlm.on_partition_removed(tp)
            notify_coordinators(result, self.group_coordinator, self.transaction_coordinator)
            if any(p.topic_partition.topic == OFFSETS_TOPIC_NAME for p in result.leaders):
                # Told after the election, so applied once the partitions are loaded: their
                # previous leader may have lost them before its tombstones were written.
                self._remove_offsets_of_deleted(image, _marked_for_deletion(image))
            self._delete_reassigned_away(previous, image, result.stopped)

    def _delete_reassigned_away(
        self, previous: MetadataImage, image: MetadataImage, stopped: Sequence[TopicPartition]
    ) -> None:
        """Replicas a reassignment took off this broker are deleted (Kafka's StopReplica with
        delete); a broker that stops hosting a partition for any other reason keeps its log."""
        removed = removed_by_reassignment(previous, image, self.broker_id, stopped)
        if not removed:
            return
        try:
            self.log_manager.delete_logs(removed)
            logger.info(
                "replicas reassigned away deleted, partitions=%s", [str(tp) for tp in removed]
            )
        except StorageError:
            logger.exception(
                "cannot delete replicas reassigned away; their logs stay until the topic is"
                " deleted, partitions=%s",
                [str(tp) for tp in removed],
            )

    def _on_topics_marked_for_deletion(self, image: MetadataImage, topics: set[str]) -> None:
        """Remove this broker's replicas of topics being deleted, then acknowledge (the role of
        StopReplica with delete in Kafka). A failure is retried until it succeeds: a topic is
        never left half-deleted on disk. The group coordinator drops the topics' offsets
        first (Kafka's ``onPartitionsDeleted``; again on a retry, which finds none left)."""
        self._remove_offsets_of_deleted(image, topics)
        for topic in sorted(topics):
            try:
                self._delete_local_replicas(image, topic)
                self.membership.zk.acknowledge_topic_deletion(topic, self.broker_id)
            except Exception:
                logger.exception(
                    "cannot remove the replicas of a deleted topic, retrying topic=%s", topic
                )
                timer = threading.Timer(
                    DELETION_RETRY_S,
                    self._on_topics_marked_for_deletion,
                    args=(self.metadata_cache.image(), {topic}),
                )
                timer.daemon = True
                timer.start()

    def _remove_offsets_of_deleted(self, image: MetadataImage, topics: Iterable[str]) -> None:
        """Every broker tells its group coordinator the partitions of topics being deleted:
        the groups it coordinates drop their offsets of them with tombstones."""
        coordinator = self.group_coordinator
        if coordinator is None:
            return  # not started: ``start`` tells it the topics marked by then
        coordinator.on_partitions_deleted(
            [
                TopicPartition(name, p.partition)
                for name in topics
                if (metadata := image.topic(name)) is not None
                for p in metadata.partitions
            ]
        )

    def _delete_local_replicas(self, image: MetadataImage, name: str) -> None:
        with self._hosting_lock:
            tps = [tp for tp in self.log_manager.all_logs() if tp.topic == name]
            tps += [
                tp for tp in self.replica_manager.partitions() if tp.topic == name and tp not in tps
            ]
            if not tps:
                return
            metadata = image.topic(name)
            rlm = self.remote_log_manager
            # Only a partition's leader marks its remote data for deletion (Kafka's
            # StopPartition(deleteRemoteLog) is for the leader): its tiering job deletes it.
            led = [tp for tp, p in self.replica_manager.partitions().items() if p.is_leader]

            def commit() -> None:
                # Runs once every partition dir is renamed for deletion; if anything here
                # raises, the renames are undone and the replicas stay whole.
                if (
                    rlm is not None
                    and metadata is not None
                    and metadata.topic_id is not None
                    and self._log_config_in(image, name).remote_storage_enable
                ):
                    rlm.on_partitions_deleted(
                        [TopicIdPartition(metadata.topic_id, tp) for tp in tps if tp in led]
                    )
                for tp in tps:
                    self.replica_manager.remove_partition(tp)
                    if rlm is not None:
                        rlm.on_partition_removed(tp)

            self.log_manager.delete_logs(tps, commit)
            self.replica_manager.topic_stats.remove_topic(name)

    def _use_rlmm(self, manager: TopicBasedRemoteLogMetadataManager) -> None:
        self.remote_log_metadata_manager = manager
        if self.remote_log_manager is not None:
            self.remote_log_manager.set_remote_log_metadata_manager(manager)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.replica_manager.bind_loop(loop)
        cluster_id = await loop.run_in_executor(None, self.membership.connect)
        if self.authorizer is not None:  # its ACLs loaded before any request is served
            await loop.run_in_executor(None, self.authorizer.start)
        await loop.run_in_executor(None, self.credential_provider.start)
        # read before the files are written: only a broker that ran on these log dirs before
        # takes a registration at its endpoint for its own previous run's
        ran_here_before = await loop.run_in_executor(
            None,
            functools.partial(
                ran_on_log_dirs,
                self.log_manager.log_dirs,
                broker_id=self.broker_id,
                cluster_id=cluster_id,
            ),
        )
        # every log dir is this broker's of this cluster, or the start is refused untouched
        await loop.run_in_executor(
            None,
            functools.partial(
                ensure_meta_properties,
                self.log_manager.log_dirs,
                broker_id=self.broker_id,
                cluster_id=cluster_id,
            ),
        )
        # Logs load with their topics' configs (remote storage, retention...), read first, as
        # Kafka's LogManager gets them from ZooKeeper before it loads anything.
        self._startup_topic_configs = await loop.run_in_executor(
            None, self.membership.read_topic_configs
        )
        await loop.run_in_executor(None, self.log_manager.startup)
        self.replica_manager.startup()
        # metrics first: once the Kafka port accepts, /metrics answers too
        self.metrics_server = await maybe_start_metrics_server(
            self.metrics,
            host=self.config.get_string("metrics.host"),
            port=self.config.get_int("metrics.port"),
        )
        # Listen now (clients wait in the backlog) so that the registration names the ports.
        listeners = {e.listener_name: e for e in self.config.listeners()}
        bound_ports = {
            name: await self.socket_servers[name].bind(e.host, e.port)
            for name, e in listeners.items()
        }
        registered = []
        for advertised in self.config.effective_advertised_listeners():
            name = advertised.listener_name
            host = advertised.host or listeners[name].host or "127.0.0.1"
            if host in ("0.0.0.0", "::"):  # noqa: S104 (a wildcard bind is advertised as loopback)
                host = "127.0.0.1"
            port = advertised.port or bound_ports[name]
            self.endpoints[name] = BrokerEndpoint(node_id=self.broker_id, host=host, port=port)
            registered.append(
                EndPoint(
                    listener=name,
                    host=host,
                    port=port,
                    security_protocol=advertised.security_protocol.name,
                )
            )
        self.endpoint = self.endpoints[self.inter_broker_listener_name]
        await loop.run_in_executor(
            None,
            functools.partial(
                self.membership.register_and_start,
                tuple(registered),
                ran_here_before=ran_here_before,
            ),
        )
        hosted = set(self.replica_manager.partitions())
        for tp in self.log_manager.all_logs():
            if tp not in hosted:
                logger.warning(
                    "log of a partition unknown to the cluster metadata is left alone and not"
                    " served partition=%s",
                    tp,
                )
        self.group_coordinator = await start_group_coordinator(self.services)
        image = self.metadata_cache.image()
        self._remove_offsets_of_deleted(image, _marked_for_deletion(image))
        self.transaction_coordinator = await start_transaction_coordinator(
            self.services,
            inter_broker_listener_name=self.inter_broker_listener_name,
            inter_broker_security=self.inter_broker_security,
        )
        await self._rlmm_startup.start()  # now, or once enough brokers are registered
        if self.remote_log_manager is not None:
            self.remote_log_manager.start()
        for server in self.socket_servers.values():
            server.start_processing()
        logger.info(
            "broker started broker_id=%d listeners=%s cluster_id=%s partitions=%d",
            self.broker_id,
            ",".join(
                f"{name}://{listeners[name].host}:{port}" for name, port in bound_ports.items()
            ),
            self.cluster_id,
            len(hosted),
        )

    async def stop(self) -> None:
        # leaderships leave first, while this broker still serves (clients move with them);
        # it stops following at once, so that no leader takes it back into an ISR meanwhile
        if self.membership.controlled_shutdown_enabled:
            self.replica_manager.stop_follower_fetching()
        await asyncio.get_running_loop().run_in_executor(None, self.membership.controlled_shutdown)
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        for server in self.socket_servers.values():
            await server.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.transaction_coordinator is not None:
            await self.transaction_coordinator.shutdown()
        if self.services.add_partitions_to_txn_manager is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, self.services.add_partitions_to_txn_manager.shutdown
            )
        loop = asyncio.get_running_loop()
        if self.remote_log_manager is not None:
            await loop.run_in_executor(None, self.remote_log_manager.close)
        await self._rlmm_startup.stop()
        # followers stop first: no append may reach a log the log manager is closing
        await loop.run_in_executor(None, self.replica_fetcher_manager.shutdown)
        await loop.run_in_executor(None, self.alter_partition_manager.shutdown)
        if self.authorizer is not None:
            self.authorizer.close()
        self.credential_provider.close()
        await loop.run_in_executor(None, self.membership.close)
        await loop.run_in_executor(None, self.replica_manager.shutdown)
        await loop.run_in_executor(None, self.log_manager.shutdown)
        self._stopped.set()
        logger.info("broker shut down cleanly broker_id=%d", self.broker_id)


async def run_until_signalled(config: KafkaConfig) -> None:
    """Start a broker and serve until SIGTERM or SIGINT, then shut down cleanly."""
    broker = KafkaBroker(config)
    try:
        await broker.start()
    except BaseException:
        # e.g. ZooKeeper unreachable, or a live broker holds this broker.id: release what
        # started (logs flushed, threads stopped) so that the process exits with the error
        await broker.stop()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    first = next(iter(broker.endpoints.values()), broker.endpoint)
    print(
        f"storage-core broker {broker.broker_id} listening on {first.host}:{first.port}"
        + "".join(f" {name}://{e.host}:{e.port}" for name, e in broker.endpoints.items()),
        flush=True,
    )
    await stop.wait()
    logger.info("shutdown requested broker_id=%d", broker.broker_id)
    await broker.stop()


def _marked_for_deletion(image: MetadataImage) -> list[str]:
    """The topics being deleted (marked, not yet removed from ZooKeeper)."""
    return sorted(t.name for t in image.topics.values() if t.marked_for_deletion)
