"""The broker's side of the topic and config admin requests (Kafka's ``ZkAdminManager`` as
``KafkaApis`` calls it, with ``AutoTopicCreationManager``'s auto-created and internal topics
and ``DynamicLogConfig``'s topic defaults).

CreateTopics, DeleteTopics, CreatePartitions and (Incremental)AlterConfigs reach the topic
metadata (``TopicStore``) through here, with this broker's defaults applied (``num.partitions``,
``default.replication.factor``, ``delete.topic.enable``, the dynamic topic defaults).

Thread-safety: blocking (ZooKeeper writes, waits for metadata): call it off the event loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.errors import InvalidConfigError, PolicyViolationError, TopicExistsError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.server.dynamic_broker_config import (
    BrokerConfigUpdateError,
    DynamicBrokerConfigStore,
)
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.topic_store import TopicInfo, TopicStore

# Its lines were the broker's and keep the broker's logger name.
logger = logging.getLogger("storage_core.server.kafka_broker")

INTERNAL_TOPIC_PREFIX = "__"
INTERNAL_TOPIC_REPLICATION_FACTORS = {
    OFFSETS_TOPIC_NAME: "offsets.topic.replication.factor",
    "__remote_log_metadata": "remote.log.metadata.topic.replication.factor",
    "__transaction_state": "transaction.state.log.replication.factor",
}


def dynamic_log_defaults(
    config: KafkaConfig,
    store: DynamicBrokerConfigStore,
    *,
    default: Mapping[str, str] | None = None,
    broker: Mapping[str, str] | None = None,
) -> LogConfig:
    """Topic defaults from server.properties, the cluster's dynamic defaults and this
    broker's dynamic configs, the last winning (Kafka's DynamicLogConfig); ``default`` and
    ``broker`` replace the stored dynamic configs of their level."""
    return LogConfig.from_broker_props(
        {
            **config.props,
            **(store.configs(per_broker=False) if default is None else default),
            **(store.configs(per_broker=True) if broker is None else broker),
        }
    )


class AdminManager:
    """Topic admin and dynamic topic defaults of one broker; ``default_log_config`` is the
    current topic defaults (replaced, never changed in place, by a dynamic config change)."""

    def __init__(
        self,
        config: KafkaConfig,
        *,
        dynamic_broker_config: DynamicBrokerConfigStore,
        default_log_config: LogConfig,
        log_manager: LogManager,
        topic_store: TopicStore,
        topic_log_config: Callable[[str], LogConfig],
        uses_zookeeper: bool,
    ) -> None:
        self.config = config
        self.dynamic_broker_config = dynamic_broker_config
        self.default_log_config = default_log_config
        self.log_manager = log_manager
        self.topic_store = topic_store
        self._topic_log_config = topic_log_config
        self._uses_zookeeper = uses_zookeeper
        self._topic_lock = threading.RLock()
        self._reconfigurables: list[Callable[[Mapping[str, str]], None]] = []

    # ------------------------------------------------------------------ dynamic configs
    def effective_broker_props(self) -> dict[str, str]:
        """server.properties, then the cluster's dynamic defaults, then this broker's dynamic
        configs, the last winning (Kafka's ``DynamicBrokerConfig`` order)."""
        return {
            **self.config.props,
            **self.dynamic_broker_config.configs(per_broker=False),
            **self.dynamic_broker_config.configs(per_broker=True),
        }

    def add_reconfigurable(self, reconfigure: Callable[[Mapping[str, str]], None]) -> None:
        """Kafka's ``addBrokerReconfigurable``: ``reconfigure`` gets the effective broker
        configs now and after every dynamic broker config change (it picks what it uses)."""
        with self._topic_lock:
            self._reconfigurables.append(reconfigure)
            reconfigure(self.effective_broker_props())

    def alter_dynamic_broker_configs(self, configs: Mapping[str, str], *, per_broker: bool) -> None:
        """Persist a resource's new dynamic configs; topic defaults take effect at once on every
        topic without its own override (a new ``log.retention.ms`` at the next retention pass).
        Nothing changes when the resulting topic defaults are invalid (INVALID_REQUEST).
        """
        with self._topic_lock:
            try:
                defaults = dynamic_log_defaults(
                    self.config,
                    self.dynamic_broker_config,
                    **({"broker": configs} if per_broker else {"default": configs}),
                )
            except InvalidConfigError as error:
                raise BrokerConfigUpdateError(str(error)) from None
            self.dynamic_broker_config.replace(configs, per_broker=per_broker)
            effective = self.effective_broker_props()
            for reconfigure in self._reconfigurables:
                reconfigure(effective)
            if defaults == self.default_log_config:
                return
            self.default_log_config = defaults
            self.log_manager.default_config = defaults
            for name in self.topic_store.topics():
                self.log_manager.update_topic_config(name, self._topic_log_config(name))
            logger.info("dynamic topic defaults applied per_broker=%s", per_broker)

    # ------------------------------------------------------------------ topics
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
        from_any_broker: bool = False,
        wait_s: float | None = None,
    ) -> TopicInfo:
        """Create a topic (or only validate, as CreateTopics can); it returns once this
        broker's metadata shows the topic with its leaders, or at once with ``wait_s <= 0``
        (``TopicStore.create_topic``).

        ``replica_assignment`` (replicas by partition 0..n-1) replaces the count and factor.
        """
        if num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get_int("default.replication.factor")
        if validate_only:
            return self.topic_store.validate_new_topic(
                name,
                num_partitions,
                replication_factor,
                configs,
                self.default_log_config,
                replica_assignment=replica_assignment,
            )
        return self.topic_store.create_topic(
            name,
            num_partitions,
            replication_factor,
            configs,
            self.default_log_config,
            internal=internal,
            replica_assignment=replica_assignment,
            from_any_broker=from_any_broker,
            wait_s=wait_s,
        )

    def maybe_auto_create_topic(self, name: str) -> TopicInfo | None:
        """Metadata for an unknown topic creates it when ``auto.create.topics.enable``."""
        if not self.config.get_bool("auto.create.topics.enable"):
            return None
        if name.startswith(INTERNAL_TOPIC_PREFIX):
            return None
        existing = self.topic_store.get(name)
        if existing is not None:
            return existing
        try:
            return self.create_topic(
                name,
                self.config.get_int("num.partitions"),
                self.config.get_int("default.replication.factor"),
                {},
                from_any_broker=True,
            )
        except TopicExistsError:  # created meanwhile by another client or broker
            return self.topic_store.get(name)

    def ensure_internal_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """Create an internal topic (``__consumer_offsets``...) on first use, with its
        configured replication factor (Kafka's rule: not before that many brokers are
        registered; the single-node store has one broker, which is then enough)."""
        existing = self.topic_store.get(name)
        if existing is not None:
            return existing
        factor = self.config.get_int(
            INTERNAL_TOPIC_REPLICATION_FACTORS.get(name, "default.replication.factor")
        )
        if not self._uses_zookeeper:
            factor = 1
            # one broker holds every replica: a min ISR above 1 would refuse every acks=all
            # write to the topic (__transaction_state asks for 2)
            if int(configs.get("min.insync.replicas", "1")) > factor:
                configs = {**configs, "min.insync.replicas": str(factor)}
        try:
            return self.create_topic(
                name, num_partitions, factor, configs, internal=True, from_any_broker=True
            )
        except TopicExistsError:
            # another broker created it first: its znode exists, this broker's metadata
            # shows it a moment later
            return self.topic_store.await_topic(name)

    def delete_topic(self, name: str) -> TopicInfo:
        """Mark the topic for deletion through the controller and wait until every replica's
        broker has removed its logs and the topic is gone from this broker's metadata."""
        if not self.config.get_bool("delete.topic.enable"):
            raise PolicyViolationError("Topic deletion is disabled (delete.topic.enable=false).")
        topic = self.topic_store.delete_topic(name)  # UNKNOWN_TOPIC_OR_PARTITION if unknown
        self.topic_store.await_deleted(name, topic.topic_id)
        return topic

    def add_partitions(
        self,
        name: str,
        new_total: int,
        *,
        validate_only: bool,
        replica_assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        return self.topic_store.create_partitions(
            name,
            new_total,
            validate_only=validate_only,
            replica_assignment=replica_assignment,
        )

    def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: tuple[str, ...],
        *,
        validate_only: bool,
    ) -> TopicInfo:
        """Write the topic's configs (every broker applies them from its metadata)."""
        return self.topic_store.alter_configs(
            name,
            set_configs,
            delete_configs,
            self.default_log_config,
            validate_only=validate_only,
        )
