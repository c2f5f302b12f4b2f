"""Create ``__transaction_state`` and start the transaction coordinator over its partitions.

The topic is created on first use (the first FindCoordinator for a transactional id), internal
and compacted, with Kafka's settings: ``transaction.state.log.num.partitions``
partitions (50), ``transaction.state.log.replication.factor`` replicas (3, not before that many
brokers are registered), ``min.insync.replicas`` = ``transaction.state.log.min.isr`` (2) and
``transaction.state.log.segment.bytes`` segments. An existing topic keeps its partition count:
transactional ids must keep mapping to the same partition. The coordinator serves the ids of
the partitions this broker leads, at the partition's leader epoch, and follows leadership as
it moves; its markers go to the partition leaders over the inter-broker listener with the
broker's own client security, or are appended in place on the partitions this broker leads.
"""

from __future__ import annotations

import asyncio
import logging

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_completion import MarkerChannel
from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_marker_channel import (
    CompleteCallback,
    FailedCallback,
    TransactionMarkerChannelManager,
)
from storage_core.coordinator.transaction.transaction_state_manager import (
    TransactionStateManager,
)
from storage_core.coordinator.transaction.transaction_state_manager_logic import (
    TransactionConfig,
)
from storage_core.log.log import Log
from storage_core.security.client_transport import ClientSecurityConfig
from storage_core.server.broker_services import BrokerServices
from storage_core.server.topic_store import TopicInfo
from storage_core.server.txn_marker_writer import LocalTxnMarkerWriter

logger = logging.getLogger(__name__)


def ensure_transaction_state_topic(services: BrokerServices) -> TopicInfo:
    """``__transaction_state`` as it is, or created now (blocking: call off the event loop)."""
    config = services.config
    return services.admin_manager.ensure_internal_topic(
        TRANSACTION_STATE_TOPIC_NAME,
        config.get_int("transaction.state.log.num.partitions"),
        {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(config.get_int("transaction.state.log.min.isr")),
            "segment.bytes": str(config.get_int("transaction.state.log.segment.bytes")),
            "unclean.leader.election.enable": "false",
        },
    )


def transaction_config(services: BrokerServices) -> TransactionConfig:
    config = services.config
    return TransactionConfig(
        transactional_id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        transaction_max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
        abort_timed_out_transactions_interval_ms=config.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        remove_expired_transactional_ids_interval_ms=config.get_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
    )


def led_transaction_partitions(services: BrokerServices) -> dict[int, int]:
    """The ``__transaction_state`` partitions this broker leads, with their leader epochs."""
    return {
        tp.partition: partition.leader_epoch
        for tp, partition in services.replica_manager.partitions().items()
        if tp.topic == TRANSACTION_STATE_TOPIC_NAME and partition.is_leader
    }


async def start_transaction_coordinator(
    services: BrokerServices,
    *,
    inter_broker_listener_name: str,
    inter_broker_security: ClientSecurityConfig,
) -> TransactionCoordinator:
    """Start the coordinator over the ``__transaction_state`` partitions this broker leads
    (none before the topic exists: it is created by the first FindCoordinator for a
    transactional id, as Kafka does, not for a cluster that never uses transactions)."""
    config = services.config

    def num_partitions() -> int:
        topic = services.metadata_cache.image().topic(TRANSACTION_STATE_TOPIC_NAME)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return config.get_int("transaction.state.log.num.partitions")

    def transaction_log(partition: int) -> Log:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition)
        return services.replica_manager.leader_partition(tp).log

    local_writer = LocalTxnMarkerWriter(services, asyncio.get_running_loop())

    def marker_channel(on_complete: CompleteCallback, on_failed: FailedCallback) -> MarkerChannel:
        return TransactionMarkerChannelManager(
            broker_id=services.broker_id,
            metadata_cache=services.metadata_cache,
            inter_broker_listener_name=inter_broker_listener_name,
            on_complete=on_complete,
            on_failed=on_failed,
            security=inter_broker_security,
            request_timeout_ms=config.get_int("request.timeout.ms"),
            local_writer=local_writer,
        )

    def offsets_topic_partitions() -> int:
        offsets = services.metadata_cache.image().topic(OFFSETS_TOPIC_NAME)
        if offsets is not None:
            return len(offsets.partitions)
        return config.get_int("offsets.topic.num.partitions")

    coordinator = TransactionCoordinator(
        config=transaction_config(services),
        state_manager=TransactionStateManager(
            num_partitions=num_partitions,
            get_log=transaction_log,
            replica_manager=services.replica_manager,
            clock=services.clock,
        ),
        producer_ids=services.producer_id_manager,
        marker_channel=marker_channel,
        offsets_topic_num_partitions=offsets_topic_partitions,
        run_io=services.replica_manager.run_io,
        clock=services.clock,
    )
    await coordinator.startup(led_transaction_partitions(services))
    return coordinator
