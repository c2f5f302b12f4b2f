"""CreateTopics (key 19): create topics with partitions, replication factor and configs.

Each topic succeeds or fails alone, whole, with Kafka's error: TOPIC_ALREADY_EXISTS,
INVALID_TOPIC_EXCEPTION (an illegal name, or one colliding with an existing topic by '.'/'_'),
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG,
INVALID_REQUEST (a topic listed twice, an internal topic, an assignment with a count),
POLICY_VIOLATION. Every topic of a request gets its result. ``validate_only`` changes nothing.
With an authorizer: CREATE on the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED,
nothing created); the new topic's configs only with DESCRIBE_CONFIGS on it (else
``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED and no configs).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.controller.manual_assignment import validate_new_topic_assignment
from storage_core.errors import StorageError
from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize, filter_by_authorized
from storage_core.server.handlers.common import (
    NO_THROTTLE,
    error_code_of,
    milliseconds,
    to_kio_uuid,
)
from storage_core.server.handlers.config_support import InvalidRequestError, describe_topic
from storage_core.server.request_context import RequestContext
from storage_core.server.topic_store import TopicInfo

logger = logging.getLogger(__name__)

# Topics the broker creates itself, with the layout its coordinators need: a client may not
# create them (Kafka refuses __cluster_metadata this way; its coordinators create the others).
INTERNAL_TOPIC_NAMES = frozenset(
    {
        "__cluster_metadata",
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
        "__remote_log_metadata",
    }
)

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    services = ctx.services
    counts = Counter(t.name for t in request.topics)
    creatable = (
        set(counts)
        if authorize(
            ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
        )
        else filter_by_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, counts)
    )
    config_visible = filter_by_authorized(
        ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts, log_if_denied=False
    )
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(
                _result(
                    module,
                    topic.name,
                    info=None,
                    error=ErrorCode.invalid_request,
                    message=f"Create topics request from client `{ctx.client_id}` contains"
                    f" multiple entries for the following topics: {topic.name}",
                )
            )
            continue
        if topic.name not in creatable:
            results.append(
                _result(
                    module,
                    topic.name,
                    info=None,
                    error=ErrorCode.topic_authorization_failed,
                    message="Authorization failed.",
                )
            )
            continue
        if topic.name in INTERNAL_TOPIC_NAMES:
            results.append(
                _result(
                    module,
                    topic.name,
                    info=None,
                    error=ErrorCode.invalid_request,
                    message=f"Creation of internal topic {topic.name} is prohibited.",
                )
            )
            continue
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        try:
            info = await services.replica_manager.run_io(
                functools.partial(
                    services.admin_manager.create_topic,
                    topic.name,
                    int(topic.num_partitions),
                    int(topic.replication_factor),
                    configs,
                    validate_only=bool(request.validate_only),
                    replica_assignment=_manual_assignment(
                        topic, brokers=services.topic_store.broker_ids()
                    ),
                    # Kafka waits up to the request's timeout for the leaders, 0: not at all
                    wait_s=milliseconds(request.timeout) / 1000,
                )
            )
        except Exception as error:  # one topic's failure never costs the others their answer
            message = str(error)
            if not isinstance(error, StorageError):
                logger.exception("CreateTopics failed unexpectedly topic=%s", topic.name)
                message = "The server experienced an unexpected error when processing the request."
            results.append(
                _result(module, topic.name, info=None, error=error_code_of(error), message=message)
            )
            continue
        partitions = len(info.partitions)
        factor = len(info.partitions[0].replicas)
        shown = topic.name in config_visible
        results.append(
            _result(
                module,
                topic.name,
                info=info,
                configs=_effective_configs(module, ctx, info) if shown else None,
                config_error=ErrorCode.none if shown else ErrorCode.topic_authorization_failed,
                error=ErrorCode.none,
                message=None,
                num_partitions=partitions,
                replication_factor=int(factor),
            )
        )
    return build(module.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _manual_assignment(
    topic: Any, *, brokers: tuple[int, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """The topic's manual replica assignment checked as Kafka's controller does, or None.

    With an assignment the request must leave the partition count and the replication factor
    to it (-1 each), else INVALID_REQUEST.
    """
    if not topic.assignments:
        return None
    if int(topic.replication_factor) != -1:
        raise InvalidRequestError(
            "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if int(topic.num_partitions) != -1:
        raise InvalidRequestError(
            "A manual partition assignment was specified, but numPartitions was not set to -1."
        )
    return validate_new_topic_assignment(
        ((int(a.partition_index), tuple(int(b) for b in a.broker_ids)) for a in topic.assignments),
        brokers=brokers,
    )


def _effective_configs(module: Any, ctx: RequestContext, info: TopicInfo) -> tuple[Any, ...]:
    """v5+: every config of the new topic with its value and source, as DescribeConfigs shows
    it (Kafka's controller answers the same); older versions have no such field."""
    config_class = getattr(module, "CreatableTopicConfigs", None)
    if config_class is None:
        return ()
    services = ctx.services
    rows = describe_topic(
        info,
        services.admin_manager.default_log_config,
        services.config.props,
        dynamic=services.dynamic_broker_config.configs(per_broker=True),
        dynamic_default=services.dynamic_broker_config.configs(per_broker=False),
    )
    return tuple(
        config_class(
            name=row.name,
            value=row.value,
            read_only=row.read_only,
            config_source=int(row.source),
            is_sensitive=False,
        )
        for row in rows
    )


def _result(
    module: Any,
    name: str,
    *,
    info: TopicInfo | None,
    error: ErrorCode,
    message: str | None,
    configs: tuple[Any, ...] | None = (),
    config_error: ErrorCode = ErrorCode.none,
    num_partitions: int = -1,
    replication_factor: int = -1,
) -> Any:
    return build(
        module.CreatableTopicResult,
        name=name,
        topic_id=to_kio_uuid(info.topic_id if info is not None else None),
        error_code=error,
        error_message=message,
        topic_config_error_code=config_error,
        num_partitions=num_partitions,
        replication_factor=replication_factor,
        configs=configs if info is not None else None,
    )
