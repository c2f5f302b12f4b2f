"""Metadata (key 3): brokers, cluster id, controller, and topics with their partitions.

A null topic list (v1+) or an empty one (v0) asks for every topic. An unknown topic is
created when the request allows it (v4+ flag; always before v4) and the broker's
``auto.create.topics.enable`` is true; otherwise it is UNKNOWN_TOPIC_OR_PARTITION. An
illegal name is INVALID_TOPIC_EXCEPTION. A partition whose log this broker could not load is
listed without a leader (LEADER_NOT_AVAILABLE) and with this broker as an offline replica.

With an authorizer (Kafka's ``handleTopicMetadataRequest``): a topic the principal may not
DESCRIBE is left out of an all-topics answer, and a named one answers
TOPIC_AUTHORIZATION_FAILED whether it exists or not; creating a missing topic needs CREATE on
the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED, nothing created). The authorized
operations on each topic (v8+) and on the cluster (v8-v10) are answered when asked.

Brokers are listed with their endpoints of the listener the client came through; a broker
without that listener is left out, and a partition whose live leader lacks it has no leader
(-1) and LISTENER_NOT_FOUND (v6+) or LEADER_NOT_AVAILABLE (older), as Kafka's
``ZkMetadataCache.getPartitionMetadata`` answers.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage_core.common import validate_topic_name
from storage_core.errors import StorageError
from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import (
    authorize,
    authorize_cluster,
    authorized_operations,
    filter_by_authorized,
)
from storage_core.server.handlers.common import (
    NO_THROTTLE,
    brokers_on_listener,
    error_code_of,
    from_kio_uuid,
    live_brokers,
    to_kio_uuid,
)
from storage_core.server.request_context import RequestContext
from storage_core.server.topic_store import TopicInfo

if TYPE_CHECKING:
    from storage_core.server.broker_services import BrokerServices

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    services = ctx.services
    store = services.topic_store
    reachable = brokers_on_listener(services, ctx.listener_name)
    listener = _ListenerView(
        name=ctx.listener_name,
        alive=frozenset(b.broker_id for b in live_brokers(services)),
        reachable=frozenset(b.broker_id for b, _endpoint in reachable),
    )
    topics: list[Any] = []
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        describable = filter_by_authorized(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            list(store.topics()),
            log_if_denied=False,
        )
        for known in sorted(store.topics().values(), key=lambda t: t.name):
            if known.name not in describable:
                continue  # a topic it may not describe is not disclosed
            topics.append(_topic(module, known, services, ctx.api_version, listener))
    else:
        allow_create = ctx.api_version < 4 or bool(request.allow_auto_topic_creation)
        describable = filter_by_authorized(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            (r.name for r in request.topics if r.name is not None),
        )
        for requested in request.topics:
            name = requested.name
            if name is None and ctx.api_version < 12:
                # v10-v11 let the name be null, but their response cannot carry a null name;
                # Kafka refuses lookups by id before v12 (INVALID_REQUEST).
                topics.append(_error_topic(module, "", ErrorCode.invalid_request))
                continue
            if name is None:  # v12+: by topic id
                by_id = store.get_by_id(from_kio_uuid(requested.topic_id))
                if by_id is not None and not authorize(
                    ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, by_id.name
                ):
                    topics.append(
                        _error_topic(
                            module, None, ErrorCode.topic_authorization_failed, requested.topic_id
                        )
                    )
                    continue
                if by_id is None:
                    topics.append(
                        _error_topic(module, None, ErrorCode.unknown_topic_id, requested.topic_id)
                    )
                else:
                    topics.append(_topic(module, by_id, services, ctx.api_version, listener))
                continue
            if name not in describable:  # whether it exists or not
                topics.append(_error_topic(module, name, ErrorCode.topic_authorization_failed))
                continue
            info: TopicInfo | None = None
            try:
                validate_topic_name(name)
                info = store.get(name)
                if info is None and allow_create and not _may_create(ctx, services, name):
                    topics.append(_error_topic(module, name, ErrorCode.topic_authorization_failed))
                    continue
                if info is None and allow_create:
                    # Creating logs fsyncs files: keep it off the event loop.
                    info = await services.replica_manager.run_io(
                        functools.partial(services.admin_manager.maybe_auto_create_topic, name)
                    )
            except StorageError as error:
                topics.append(_error_topic(module, name, error_code_of(error)))
                continue
            if info is None:
                topics.append(_error_topic(module, name, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(_topic(module, info, services, ctx.api_version, listener))
    if getattr(request, "include_topic_authorized_operations", False):
        topics = [_with_authorized_operations(ctx, t) for t in topics]
    image = services.metadata_cache.image()
    return build(
        module.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=tuple(
            build(
                module.MetadataResponseBroker,
                node_id=b.broker_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=b.rack,
            )
            for b, endpoint in reachable
        ),
        cluster_id=services.cluster_id,
        controller_id=image.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=_cluster_authorized_operations(ctx, request),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _ListenerView:
    """The client's listener, the live brokers, and those of them that have that listener."""

    name: str
    alive: frozenset[int]
    reachable: frozenset[int]


def _topic(
    module: Any, info: TopicInfo, services: BrokerServices, version: int, listener: _ListenerView
) -> Any:
    # A partition without a leader (none of its in-sync replicas is alive, or its log could not
    # be loaded on its leader, this broker) answers LEADER_NOT_AVAILABLE with leader -1, and
    # names its offline replicas, as Kafka reports them.
    local_offline = {
        tp.partition for tp in services.log_manager.offline_logs() if tp.topic == info.name
    }
    partitions = []
    for p in info.partitions:
        offline = set(p.offline_replicas)
        if p.partition in local_offline:
            offline.add(services.broker_id)
        leader = -1 if p.leader in offline else p.leader
        error = ErrorCode.leader_not_available if leader == -1 else ErrorCode.none
        if leader >= 0 and leader in listener.alive and leader not in listener.reachable:
            # alive, but not through the client's listener
            leader = -1
            error = ErrorCode.listener_not_found if version >= 6 else ErrorCode.leader_not_available
        partitions.append(
            build(
                module.MetadataResponsePartition,
                error_code=error,
                partition_index=p.partition,
                leader_id=leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas,
                # v0 lists only reachable in-sync replicas; later versions the ISR as it
                # is, with the unreachable ones in offline_replicas (Kafka's rule)
                isr_nodes=tuple(r for r in p.isr if r not in offline) if version == 0 else p.isr,
                offline_replicas=tuple(sorted(offline)),
            )
        )
    return build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=to_kio_uuid(info.topic_id),
        is_internal=info.internal,
        partitions=tuple(partitions),
        topic_authorized_operations=-2147483648,
    )


def _error_topic(module: Any, name: str | None, error: ErrorCode, topic_id: Any = None) -> Any:
    return build(
        module.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=topic_id if topic_id is not None else to_kio_uuid(None),
        is_internal=False,
        partitions=(),
        topic_authorized_operations=-2147483648,
    )


def _may_create(ctx: RequestContext, services: BrokerServices, name: str) -> bool:
    """CREATE on the cluster, else on the topic (asked only where the topic would be
    created)."""
    if not services.config.get_bool("auto.create.topics.enable"):
        return True
    return authorize(
        ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ) or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)


def _with_authorized_operations(ctx: RequestContext, topic: Any) -> Any:
    if topic.error_code != ErrorCode.none or topic.name is None:
        return topic
    return dataclasses.replace(
        topic,
        topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, topic.name),
    )


def _cluster_authorized_operations(ctx: RequestContext, request: Any) -> int:
    if not getattr(request, "include_cluster_authorized_operations", False):
        return -(2**31)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
