"""``TopicBasedRemoteLogMetadataManager``: the RLMM over ``__remote_log_metadata`` (KIP-405).

One class, two modes that share the ``ConsumerTask`` (consume and apply) and differ in where
records go and come from:

- **broker mode** (``for_broker``, built by ``broker_setup`` inside ``KafkaBroker.start``):
  publishes through the broker's ``ReplicaManager`` as a leader append (acks=-1) where the
  broker leads the metadata partition, else produces to its leader (acks=all), and tails
  the broker's local replicas of the metadata partitions (leader or follower: below the
  HW), fetching from the leaders those it does not host. It tracks the hosted user
  partitions of topics with ``remote.storage.enable=true`` (re-checked every second, and on
  ``on_partition_leadership_changes``). Snapshots live in each partition's directory, the
  committed offsets in the first log dir. Queries about an untracked partition raise
  ``RemoteResourceNotFoundError``, about one still loading ``RemoteLogMetadataNotReadyError``.
- **client mode** (``for_client``, for batch jobs in other processes): produces with
  acks=all and fetches through ``storage_core.client``. Any partition it publishes for or is
  asked about is tracked on demand and queries wait (up to the consume wait) until it is
  ready. Snapshots and committed offsets go to ``snapshot_dir`` when one is given.

Publishing (``add_remote_log_segment_metadata``, ``update_remote_log_segment_metadata``,
``put_remote_partition_delete_metadata``) serializes the event with ``RemoteLogMetadataSerde``,
appends it to ``RemoteLogMetadataTopicPartitioner``'s metadata partition, then waits until
this manager's own consumer applied that offset (read-your-writes), at most
``consume_wait_ms`` (``RemoteLogMetadataConsumeTimeoutError``). An event the cache refuses
(an illegal transition) raises the cache's error after it was published and skipped.

Threading contract: every method may be called from any thread. Publishing and client-mode
queries block; in the broker, never call them on the asyncio loop thread (publishing there
raises ``BlockingCallOnEventLoopError``): use ``await asyncio.to_thread(...)``, not the
replica manager's I/O pool, whose threads the append itself needs. Broker-mode queries do not
block (they read the in-memory cache). The consumer runs on its own thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.errors import UnknownTopicOrPartitionError
from storage_core.log.log import Log
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.errors import (
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from storage_core.tiered.metadata.segment_listing import RemoteLogSegmentsSummary
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.topic_based_rlmm.config import (
    DEFAULT_CONSUME_WAIT_MS,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
)
from storage_core.tiered.topic_based_rlmm.consumer_task import ConsumerTask, SnapshotDirFor
from storage_core.tiered.topic_based_rlmm.errors import (
    RemoteLogMetadataManagerClosedError,
    RemoteLogMetadataNotReadyError,
)
from storage_core.tiered.topic_based_rlmm.host_broker import HostBroker
from storage_core.tiered.topic_based_rlmm.publishers import (
    LeaderRoutingPublisher,
    MetadataPublisher,
    ProducerPublisher,
    ReplicaManagerPublisher,
)
from storage_core.tiered.topic_based_rlmm.readers import (
    ClientMetadataReader,
    HostedFirstMetadataReader,
    LocalLogMetadataReader,
    MetadataPartitionReader,
)

logger = logging.getLogger(__name__)


class TopicBasedRemoteLogMetadataManager:
    """The topic-based RLMM; see the module doc for modes and the threading contract."""

    def __init__(
        self,
        *,
        publisher: MetadataPublisher,
        reader: MetadataPartitionReader,
        num_metadata_topic_partitions: int,
        consume_wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        snapshot_dir_for: SnapshotDirFor | None = None,
        committed_offsets_dir: Path | None = None,
        track_on_demand: bool = False,
        hosted_partitions: Callable[[], set[TopicIdPartition]] | None = None,
        consumer_config: ConsumerTaskConfig | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if consume_wait_ms <= 0:
            raise ValueError(f"consume_wait_ms must be positive, got {consume_wait_ms}")
        self.partitioner = RemoteLogMetadataTopicPartitioner(num_metadata_topic_partitions)
        self.consume_wait_ms = consume_wait_ms
        self.track_on_demand = track_on_demand
        self._publisher = publisher
        self._reader = reader
        self._on_close = on_close
        self._closed = False
        self.consumer = ConsumerTask(
            reader,
            self.partitioner,
            snapshot_dir_for=snapshot_dir_for,
            committed_offsets_dir=committed_offsets_dir,
            config=consumer_config,
            hosted_partitions=hosted_partitions,
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_broker(
        cls,
        broker: HostBroker,
        loop: asyncio.AbstractEventLoop,
        *,
        num_metadata_topic_partitions: int,
        consumer_config: ConsumerTaskConfig | None = None,
    ) -> TopicBasedRemoteLogMetadataManager:
        """Broker mode over ``broker``'s replica and log managers (not started)."""
        replica_manager = broker.replica_manager
        log_manager = broker.log_manager

        def metadata_log(partition: int) -> Log:
            tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            return replica_manager.get_partition(tp).log

        def snapshot_dir_for(tip: TopicIdPartition) -> Path | None:
            log = log_manager.get_log(tip.topic_partition)
            if log is None or log.topic_id != tip.topic_id:
                return None
            return log.dir

        def hosted_partitions() -> set[TopicIdPartition]:
            hosted = set()
            for tp, partition in replica_manager.partitions().items():
                if partition.log.config.remote_storage_enable:
                    hosted.add(TopicIdPartition(partition.topic_id, tp))
            return hosted

        def own_listener() -> KafkaCluster:
            return KafkaCluster(
                f"{broker.endpoint.host}:{broker.endpoint.port}",
                config=broker.inter_broker_connection_config,
            )

        def forwarder() -> ProducerPublisher:
            return ProducerPublisher(own_listener(), clock=broker.clock)

        def is_hosted(partition: int) -> bool:
            tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            return tp in replica_manager.partitions()

        publisher = LeaderRoutingPublisher(
            ReplicaManagerPublisher(replica_manager, loop, clock=broker.clock), forwarder
        )
        reader = HostedFirstMetadataReader(
            is_hosted,
            LocalLogMetadataReader(metadata_log),
            lambda: ClientMetadataReader(own_listener()),
        )

        def close_clients() -> None:
            publisher.close()
            reader.close()

        return cls(
            publisher=publisher,
            reader=reader,
            num_metadata_topic_partitions=num_metadata_topic_partitions,
            consume_wait_ms=broker.config.get_int("remote.log.metadata.consume.wait.ms"),
            snapshot_dir_for=snapshot_dir_for,
            committed_offsets_dir=broker.config.log_dirs()[0],
            track_on_demand=False,
            hosted_partitions=hosted_partitions,
            consumer_config=consumer_config,
            on_close=close_clients,
        )

    @classmethod
    def for_client(
        cls,
        bootstrap_servers: str,
        *,
        snapshot_dir: Path | None = None,
        consume_wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        connection_config: ConnectionConfig | None = None,
        consumer_config: ConsumerTaskConfig | None = None,
    ) -> TopicBasedRemoteLogMetadataManager:
        """Client mode through the brokers at ``bootstrap_servers`` (started).

        The metadata topic must exist (brokers with ``remote.log.storage.system.enable``
        create it); its partition count is read from the cluster metadata.
        """
        publish_cluster = KafkaCluster(bootstrap_servers, config=connection_config)
        consume_cluster = KafkaCluster(bootstrap_servers, config=connection_config)
        try:
            topic = publish_cluster.refresh_metadata([REMOTE_LOG_METADATA_TOPIC_NAME]).topic(
                REMOTE_LOG_METADATA_TOPIC_NAME
            )
            if topic is None or not topic.partitions:
                raise UnknownTopicOrPartitionError(
                    f"{REMOTE_LOG_METADATA_TOPIC_NAME} does not exist on {bootstrap_servers};"
                    " start the brokers with remote.log.storage.system.enable=true"
                )
            publisher = ProducerPublisher(publish_cluster)
            reader = ClientMetadataReader(consume_cluster)
        except BaseException:
            publish_cluster.close()
            consume_cluster.close()
            raise

        def close_clients() -> None:
            publisher.close()
            reader.close()

        def snapshot_dir_for(tip: TopicIdPartition) -> Path | None:
            return None if snapshot_dir is None else snapshot_dir / tip.topic_partition.dir_name

        manager = cls(
            publisher=publisher,
            reader=reader,
            num_metadata_topic_partitions=len(topic.partitions),
            consume_wait_ms=consume_wait_ms,
            snapshot_dir_for=snapshot_dir_for,
            committed_offsets_dir=snapshot_dir,
            track_on_demand=True,
            consumer_config=consumer_config,
            on_close=close_clients,
        )
        manager.start()
        return manager

    def start(self) -> None:
        """Start the consumer thread."""
        self.consumer.start()

    def __enter__(self) -> TopicBasedRemoteLogMetadataManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop consuming, write snapshots and committed offsets, close client connections."""
        if self._closed:
            return
        self._closed = True
        self.consumer.close()
        if self._on_close is not None:
            self._on_close()

    # ------------------------------------------------------------------ publishing
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise IllegalRemoteLogStateTransitionError(
                f"segment {metadata.remote_log_segment_id} is added with state"
                f" {metadata.state.name}; add it in COPY_SEGMENT_STARTED, then update it"
            )
        self._publish(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise IllegalRemoteLogStateTransitionError(
                f"an update of segment {update.remote_log_segment_id} can not carry"
                " COPY_SEGMENT_STARTED; add the segment's metadata instead"
            )
        self._publish(update.topic_id_partition, update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._publish(metadata.topic_id_partition, metadata)

    def _publish(self, tip: TopicIdPartition, event: RemoteLogMetadata) -> None:
        self._ensure_open()
        value = serde.serialize(event)
        self.consumer.track([tip])
        metadata_partition = self.partitioner.metadata_partition(tip)
        offset = self._publisher.publish(metadata_partition, value)
        self.consumer.wakeup()
        refused = self.consumer.wait_until_applied(tip, offset, self.consume_wait_ms)
        if refused is not None:
            raise refused

    # ------------------------------------------------------------------ queries
    def _cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        self._ensure_open()
        if self.track_on_demand:
            self.consumer.track([tip])
            self.consumer.wait_until_ready(tip, self.consume_wait_ms)
        cache = self.consumer.cache(tip)
        if cache is None:
            raise RemoteResourceNotFoundError(
                f"No remote log metadata is tracked for partition {tip} on this broker"
                " (it is not hosted here, or its topic has remote.storage.enable=false)"
            )
        if not self.consumer.is_ready(tip):
            raise RemoteLogMetadataNotReadyError(
                f"Remote log metadata of partition {tip} is still loading; retry shortly"
            )
        return cache

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._cache(topic_id_partition).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self._cache(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(self._cache(topic_id_partition).list_remote_log_segments(leader_epoch))

    def remote_log_segments_summary(
        self, topic_id_partition: TopicIdPartition
    ) -> RemoteLogSegmentsSummary:
        return self._cache(topic_id_partition).remote_log_segments_summary()

    def remote_partition_delete_metadata(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        return self._cache(topic_id_partition).remote_partition_delete_metadata()

    # ------------------------------------------------------------------ lifecycle
    def on_partition_leadership_changes(
        self,
        leader_partitions: set[TopicIdPartition],
        follower_partitions: set[TopicIdPartition],
    ) -> None:
        self._ensure_open()
        self.consumer.track(leader_partitions | follower_partitions)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        self.consumer.untrack(partitions)

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        return self.consumer.is_ready(topic_id_partition)

    def wait_until_caught_up(self, topic_id_partition: TopicIdPartition, timeout_ms: int) -> None:
        """Block until the partition's metadata reflects every event published to its
        metadata partition before the call (an acks=all publish once acknowledged): up to
        the local replica's log end when it is hosted here (its high watermark may lag the
        leader's), else up to the leader's high watermark read after the call
        (``ConsumerTask.wait_until_caught_up``)."""
        self._ensure_open()
        self.consumer.track([topic_id_partition])
        metadata_partition = self.partitioner.metadata_partition(topic_id_partition)
        hosted_log_end = getattr(self._reader, "hosted_log_end_offset", None)
        at_least = hosted_log_end(metadata_partition) if hosted_log_end is not None else None
        self.consumer.wait_until_caught_up(
            topic_id_partition, at_least=at_least or 0, timeout_ms=timeout_ms
        )

    def _ensure_open(self) -> None:
        if self._closed:
            raise RemoteLogMetadataManagerClosedError(
                "this remote log metadata manager is closed; build a new one"
            )
