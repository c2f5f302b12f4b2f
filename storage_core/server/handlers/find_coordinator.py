"""FindCoordinator (key 10): a group's coordinator is the leader of its ``__consumer_offsets``
partition, a transactional id's the leader of its ``__transaction_state`` partition. The first
request creates the topic when the broker could not at start, as Kafka does.

v0-v3 ask for one key; v4+ (KIP-699) for a batch in ``coordinator_keys``. Until the group
coordinator runs, the answer is COORDINATOR_NOT_AVAILABLE and clients retry.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.group.offsets_records import OFFSETS_TOPIC_NAME
from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC_NAME
from storage_core.errors import StorageError
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.group_coordinator_setup import ensure_offsets_topic
from storage_core.server.handlers.auth_helper import authorize
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.handlers.group_support import coordinator_of
from storage_core.server.handlers.txn_support import txn_coordinator_of
from storage_core.server.request_context import RequestContext
from storage_core.server.transaction_coordinator_setup import ensure_transaction_state_topic

logger = logging.getLogger(__name__)

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 4

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
MAX_COORDINATOR_KEYS = 10_000
_RESOURCE_OF_KEY_TYPE = {
    GROUP_KEY_TYPE: ResourceType.GROUP,
    TRANSACTION_KEY_TYPE: ResourceType.TRANSACTIONAL_ID,
}


async def _maybe_create_internal_topic(ctx: RequestContext, key_type: int) -> None:
    """The first FindCoordinator creates ``__consumer_offsets`` / ``__transaction_state`` when
    the broker could not at start (too few brokers for its replication factor), as Kafka does."""
    services = ctx.services
    if key_type == GROUP_KEY_TYPE:
        running: object = coordinator_of(ctx)
        name, ensure = OFFSETS_TOPIC_NAME, ensure_offsets_topic
    else:
        running = txn_coordinator_of(ctx)
        name, ensure = TRANSACTION_STATE_TOPIC_NAME, ensure_transaction_state_topic
    if running is None or services.metadata_cache.image().topic(name):
        return
    try:
        await services.replica_manager.run_io(functools.partial(ensure, services))
    except StorageError as error:
        logger.info("%s not created yet: %s", name, error)


def _may_describe_a_key(ctx: RequestContext, key_type: int, request: Any) -> bool:
    if key_type not in _RESOURCE_OF_KEY_TYPE:
        return False
    if ctx.services.authorizer is None:
        return True
    keys = [str(request.key)] if ctx.api_version < 4 else list(request.coordinator_keys)
    return any(
        authorize(
            ctx, AclOperation.DESCRIBE, _RESOURCE_OF_KEY_TYPE[key_type], key, log_if_denied=False
        )
        for key in keys[:MAX_COORDINATOR_KEYS]
    )


def _answer(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", -1, "", -1
    if key_type == GROUP_KEY_TYPE and not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key
    ):
        return ErrorCode.group_authorization_failed, "Group authorization failed.", -1, "", -1
    if key_type == TRANSACTION_KEY_TYPE and not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        message = "Transactional Id authorization failed."
        return ErrorCode.transactional_id_authorization_failed, message, -1, "", -1
    what = "group" if key_type == GROUP_KEY_TYPE else "transactional id"
    coordinator: GroupCoordinator | TransactionCoordinator | None = (
        coordinator_of(ctx) if key_type == GROUP_KEY_TYPE else txn_coordinator_of(ctx)
    )
    if coordinator is None or not coordinator.is_active:
        message = f"the {what} coordinator is not available yet"
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    # this broker's endpoint of the listener the client came through (Kafka's
    # getAliveBrokerNode(id, listenerName)); a broker always has every listener of its own
    endpoint = ctx.services.endpoint_for(ctx.listener_name) or ctx.services.endpoint
    # the coordinator is the leader of the key's partition of the internal topic
    topic = OFFSETS_TOPIC_NAME if key_type == GROUP_KEY_TYPE else TRANSACTION_STATE_TOPIC_NAME
    image = ctx.services.metadata_cache.image()
    if image.topic(topic) is None:
        message = f"{topic} does not exist yet"
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    partition = image.partition(TopicPartition(topic, coordinator.partition_for(key)))
    leader = image.brokers.get(partition.leader) if partition is not None else None
    if leader is None:
        message = f"the {what}'s {topic} partition has no leader right now"
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    if leader.broker_id == endpoint.node_id:
        return ErrorCode.none, None, endpoint.node_id, endpoint.host, endpoint.port
    listener = leader.endpoint(ctx.listener_name)
    if listener is None:  # Kafka: the coordinator is not available through this listener
        message = (
            f"the {what}'s coordinator (broker {leader.broker_id}) has no listener"
            f" {ctx.listener_name}"
        )
        return ErrorCode.coordinator_not_available, message, -1, "", -1
    return ErrorCode.none, None, leader.broker_id, listener.host, listener.port


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
    if _may_describe_a_key(ctx, key_type, request):  # a denied request creates nothing
        await _maybe_create_internal_topic(ctx, key_type)
    if ctx.api_version < 4:
        error, message, node_id, host, port = _answer(ctx, key_type, str(request.key))
        return build(
            module.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            node_id=node_id,
            host=host,
            port=port,
        )
    keys = tuple(request.coordinator_keys)
    coordinators = []
    for key in keys:
        if len(keys) > MAX_COORDINATOR_KEYS:
            error, message, node_id, host, port = (
                ErrorCode.invalid_request,
                f"{len(keys)} coordinator keys in one request, more than {MAX_COORDINATOR_KEYS}",
                -1,
                "",
                -1,
            )
        else:
            error, message, node_id, host, port = _answer(ctx, key_type, str(key))
        coordinators.append(
            module.Coordinator(
                key=key,
                node_id=node_id,
                host=host,
                port=port,
                error_code=error,
                error_message=message,
            )
        )
    return build(
        module.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators)
    )
