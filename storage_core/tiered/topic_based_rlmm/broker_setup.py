"""Create ``__remote_log_metadata`` and start the broker's RLMM (broker mode).

Called by ``KafkaBroker.start`` (which provides ``HostBroker``) after the local
partitions are hosted, when ``remote.log.storage.system.enable=true``. The topic is internal,
``cleanup.policy=delete``, ``retention.ms`` = ``remote.log.metadata.topic.retention.ms``
(default -1) with
``remote.log.metadata.topic.num.partitions`` partitions and
``remote.log.metadata.topic.replication.factor`` replicas (one on a single broker). An
existing topic keeps its partition count: user partitions must keep mapping to the same
metadata partition.

The topic can only be created once ``remote.log.metadata.topic.replication.factor`` brokers
are registered: brokers of a cluster start one after the other, so the first ones would find
too few. ``RemoteLogMetadataManagerStartup`` then retries in the background every
``remote.log.metadata.initialization.retry.interval.ms`` for up to
``remote.log.metadata.initialization.retry.max.timeout.ms`` (Kafka's RLMM initialization
thread), and hands the manager to the broker once it runs. With it starts the
``RemoteLogMetadataCompactor`` of the metadata partitions this broker leads (every
``remote.log.metadata.compaction.interval.ms``, 0: off; records younger than
``remote.log.metadata.compaction.min.lag.ms`` stay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.errors import InvalidReplicationFactorError, TopicExistsError
from storage_core.tiered.topic_based_rlmm.config import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    metadata_topic_configs,
)
from storage_core.tiered.topic_based_rlmm.host_broker import HostBroker
from storage_core.tiered.topic_based_rlmm.manager import TopicBasedRemoteLogMetadataManager
from storage_core.tiered.topic_based_rlmm.metadata_compactor import (
    CompactorConfig,
    MetadataPartitionHost,
    RemoteLogMetadataCompactor,
)
from storage_core.tiered.topic_based_rlmm.publishers import ReplicaManagerPublisher
from storage_core.tiered.topic_based_rlmm.readers import LocalLogMetadataReader

logger = logging.getLogger(__name__)

NOT_YET = (InvalidReplicationFactorError, TopicExistsError)
"""Why the topic is not there yet: too few brokers registered, or another broker created it
a moment ago and this broker's metadata does not show it yet."""


def _log_unavailable(error: InvalidReplicationFactorError | TopicExistsError) -> None:
    # Kafka's rule for internal topics: not before that many brokers are registered.
    # Without the manager no tiered offset is served and no local segment of a
    # remote-enabled topic is deleted (the deletion guard waits for it): nothing is lost.
    logger.warning(
        "tiered storage waits for %s: %s (retrying; with too few brokers registered, start"
        " the others or lower remote.log.metadata.topic.replication.factor)",
        REMOTE_LOG_METADATA_TOPIC_NAME,
        error,
    )


async def _create_topic_and_start(
    broker: HostBroker, consumer_config: ConsumerTaskConfig | None
) -> TopicBasedRemoteLogMetadataManager:
    """Raises one of ``NOT_YET`` while the topic can not be created or seen yet."""
    config = broker.config
    loop = asyncio.get_running_loop()
    topic = await loop.run_in_executor(
        None,
        broker.ensure_internal_topic,
        REMOTE_LOG_METADATA_TOPIC_NAME,
        config.get_int("remote.log.metadata.topic.num.partitions"),
        metadata_topic_configs(config.get_int("remote.log.metadata.topic.retention.ms")),
    )
    manager = TopicBasedRemoteLogMetadataManager.for_broker(
        broker,
        loop,
        num_metadata_topic_partitions=len(topic.partitions),
        consumer_config=consumer_config,
    )
    leaders: set[TopicIdPartition] = set()
    followers: set[TopicIdPartition] = set()
    for tp, partition in broker.replica_manager.partitions().items():
        if partition.log.config.remote_storage_enable:
            tip = TopicIdPartition(partition.topic_id, tp)
            (leaders if partition.is_leader else followers).add(tip)
    # Restoring snapshots reads files: not on the loop.
    await loop.run_in_executor(None, manager.on_partition_leadership_changes, leaders, followers)
    manager.start()
    logger.info(
        "remote log metadata manager started metadata_partitions=%d tracked_partitions=%d",
        len(topic.partitions),
        len(leaders) + len(followers),
    )
    return manager


class RemoteLogMetadataManagerStartup:
    """Starts the broker's RLMM when remote storage is on: at once when the topic exists or
    can be created, else from a background task that retries until it can (or gives up after
    the max timeout, logged: the broker then serves no tiered data, as before the retry).

    ``on_started`` gets the running manager, on the broker's loop. ``start`` and ``stop`` run
    on that loop; ``stop`` ends the retries and closes the manager.
    """

    def __init__(
        self,
        broker: HostBroker,
        on_started: Callable[[TopicBasedRemoteLogMetadataManager], None],
        *,
        consumer_config: ConsumerTaskConfig | None = None,
    ) -> None:
        self._broker = broker
        self._on_started = on_started
        self._consumer_config = consumer_config
        self._retries: asyncio.Task[None] | None = None
        self.manager: TopicBasedRemoteLogMetadataManager | None = None
        self.compactor: RemoteLogMetadataCompactor | None = None

    async def start(self) -> None:
        if not self._broker.config.get_bool("remote.log.storage.system.enable"):
            return
        try:
            self._started(await _create_topic_and_start(self._broker, self._consumer_config))
        except NOT_YET as error:
            _log_unavailable(error)
            self._retries = asyncio.get_running_loop().create_task(self._retry())

    def _started(self, manager: TopicBasedRemoteLogMetadataManager) -> None:
        self.manager = manager
        self.compactor = metadata_compactor(self._broker, manager, asyncio.get_running_loop())
        if self.compactor is not None:
            self.compactor.start()
        self._on_started(manager)

    async def _retry(self) -> None:
        config = self._broker.config
        interval_s = config.get_int("remote.log.metadata.initialization.retry.interval.ms") / 1000
        max_timeout_ms = config.get_int("remote.log.metadata.initialization.retry.max.timeout.ms")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_timeout_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                manager = await _create_topic_and_start(self._broker, self._consumer_config)
            except NOT_YET as error:
                if loop.time() >= deadline:
                    logger.error(
                        "gave up creating %s after %d ms: %s; tiered storage stays unavailable"
                        " on this broker until it restarts",
                        REMOTE_LOG_METADATA_TOPIC_NAME,
                        max_timeout_ms,
                        error,
                    )
                    return
                continue
            except Exception:
                if loop.time() >= deadline:
                    logger.exception("remote log metadata manager did not start; giving up")
                    return
                logger.exception("remote log metadata manager did not start; retrying")
                continue
            self._started(manager)
            return

    async def stop(self) -> None:
        retries, self._retries = self._retries, None
        if retries is not None:
            retries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retries
        compactor, self.compactor = self.compactor, None
        if compactor is not None:
            await asyncio.get_running_loop().run_in_executor(None, compactor.close)
        await stop_remote_log_metadata_manager(self.manager)


async def stop_remote_log_metadata_manager(
    manager: TopicBasedRemoteLogMetadataManager | None,
) -> None:
    """Close the manager off the loop (it joins its thread and writes checkpoints)."""
    if manager is not None:
        await asyncio.get_running_loop().run_in_executor(None, manager.close)


def metadata_compactor(
    broker: HostBroker,
    manager: TopicBasedRemoteLogMetadataManager,
    loop: asyncio.AbstractEventLoop,
) -> RemoteLogMetadataCompactor | None:
    """The compactor of the metadata partitions ``broker`` leads (not started), or ``None``
    when ``remote.log.metadata.compaction.interval.ms`` is 0."""
    config = broker.config
    interval_ms = config.get_int("remote.log.metadata.compaction.interval.ms")
    if interval_ms <= 0:
        return None
    replica_manager = broker.replica_manager

    def tp_of(partition: int) -> TopicPartition:
        return TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, partition)

    def led_partitions() -> list[int]:
        return [
            tp.partition
            for tp, hosted in replica_manager.partitions().items()
            if tp.topic == REMOTE_LOG_METADATA_TOPIC_NAME and hosted.is_leader
        ]

    def move_log_start(partition: int, offset: int) -> None:
        tp = tp_of(partition)
        hosted = replica_manager.get_partition(tp)
        if not hosted.is_leader:
            return  # leadership moved since the round began: the new leader decides
        if hosted.log.maybe_increment_log_start_offset(offset, "DeleteRecords"):
            broker.log_manager.checkpoint_log_start_offsets()
            loop.call_soon_threadsafe(replica_manager.on_log_start_offset_incremented, tp)

    reader = LocalLogMetadataReader(lambda p: replica_manager.get_partition(tp_of(p)).log)
    host = MetadataPartitionHost(
        led_partitions=led_partitions,
        log_start_offset=lambda p: replica_manager.get_partition(tp_of(p)).log.log_start_offset,
        high_watermark=lambda p: replica_manager.get_partition(tp_of(p)).log.high_watermark,
        reader=reader,
        read_appended=reader.read_appended,
        publish_batch=ReplicaManagerPublisher(
            replica_manager, loop, clock=broker.clock
        ).publish_batch,
        move_log_start=move_log_start,
        consumer_position=lambda p: manager.consumer.positions().get(p),
        max_batch_bytes=lambda p: min(
            (log_config := replica_manager.get_partition(tp_of(p)).log.config).segment_bytes,
            log_config.max_message_bytes,
        ),
    )
    return RemoteLogMetadataCompactor(
        host,
        config=CompactorConfig(
            interval_ms=interval_ms,
            min_lag_ms=config.get_int("remote.log.metadata.compaction.min.lag.ms"),
            restate=config.get_bool("remote.log.metadata.compaction.restate.enable"),
        ),
        clock_ms=broker.clock.milliseconds,
    )
