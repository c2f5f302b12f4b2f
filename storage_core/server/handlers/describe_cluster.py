"""DescribeCluster (key 60): cluster id, controller and brokers, as a broker endpoint answers.

Every registered broker, and the controller as this broker's metadata shows it.
``endpoint_type`` (v1+) must be 1 (brokers): 2 (controllers) is MISMATCHED_ENDPOINT_TYPE,
anything else UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at v0). Without an authorizer every cluster
operation is allowed, so ``cluster_authorized_operations`` lists all of them when asked; with
one, those the principal may do if it may DESCRIBE the cluster, else none (0).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize_cluster, authorized_operations
from storage_core.server.handlers.common import NO_THROTTLE, brokers_on_listener
from storage_core.server.request_context import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKER_ENDPOINT = 1
CONTROLLER_ENDPOINT = 2
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    services = ctx.services
    endpoint_type = int(getattr(request, "endpoint_type", BROKER_ENDPOINT))
    if endpoint_type not in (BROKER_ENDPOINT, CONTROLLER_ENDPOINT):
        return _error(
            module,
            ErrorCode.invalid_request
            if ctx.api_version == 0
            else ErrorCode.unsupported_endpoint_type,
            f"Unsupported endpoint type {endpoint_type}",
        )
    if endpoint_type != BROKER_ENDPOINT:
        return _error(
            module,
            ErrorCode.invalid_request
            if ctx.api_version == 0
            else ErrorCode.mismatched_endpoint_type,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of"
            " type CONTROLLER",
        )
    operations = AUTHORIZED_OPERATIONS_OMITTED
    if request.include_cluster_authorized_operations:
        operations = (
            authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
            if authorize_cluster(ctx, AclOperation.DESCRIBE)
            else 0
        )
    return build(
        module.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=services.cluster_id,
        controller_id=services.metadata_cache.image().controller_id,
        brokers=tuple(
            build(
                module.DescribeClusterBroker,
                broker_id=b.broker_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=b.rack,
                is_fenced=False,
            )
            for b, endpoint in brokers_on_listener(services, ctx.listener_name)
        ),
        cluster_authorized_operations=operations,
    )


def _error(module: Any, error: ErrorCode, message: str) -> Any:
    return build(
        module.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id="",
        controller_id=-1,
        brokers=(),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
