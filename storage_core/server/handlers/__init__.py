"""One module per Kafka API. Each exports ``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and
``async def handle(ctx: RequestContext, request) -> response`` (the kio response entity of the
request's version, or a frame the handler encoded itself: ``bytes`` for Produce,
``ResponseParts`` for Fetch). A module is served once it is listed in ``HANDLER_MODULES``.

A module may also export ``answer_unsupported_version(ctx) -> response``: a request of a
version outside its range is then answered at v0 (``ctx.api_version`` is 0) instead of closing
the connection (ApiVersions, KIP-511). A module listed in ``FAST_PATH_MODULES`` decodes some
frames of its ``API_KEY`` itself, ahead of the generic codec: ``decode(frame)`` answers the
request or None (the frame then goes the general way), and
``async def handle(services, request)`` the response.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.index import api_key_map, schema_name_map

from storage_core.server.broker_services import BrokerServices
from storage_core.server.request_context import RequestContext
from storage_core.server.response_parts import ResponseParts

HANDLER_MODULES: tuple[str, ...] = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "create_topics",
    "delete_topics",
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
    "create_partitions",
    "delete_records",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "describe_cluster",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "describe_topic_partitions",
    "describe_log_dirs",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "txn_offset_commit",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
)

FAST_PATH_MODULES: tuple[str, ...] = ("follower_fetch",)

Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class FastPath:
    """Frames an API decodes itself, and how it answers them (see the package docstring)."""

    decode: Callable[[bytes], Any | None]
    handle: Callable[[BrokerServices, Any], Awaitable[ResponseParts]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: Handler
    fast_path: FastPath | None = None
    answer_unsupported_version: Callable[[RequestContext], Any] | None = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def build_registry(
    module_names: tuple[str, ...] = HANDLER_MODULES,
    fast_path_modules: tuple[str, ...] = FAST_PATH_MODULES,
) -> dict[int, ApiHandler]:
    """API key -> handler, with version ranges clipped to the message schemas available."""
    registry: dict[int, ApiHandler] = {}
    for name in module_names:
        module = importlib.import_module(f"{__name__}.{name}")
        key = int(module.API_KEY)
        versions = schema_name_map[api_key_map[key]].keys()
        low = max(int(module.MIN_VERSION), min(versions))
        high = min(int(module.MAX_VERSION), max(versions))
        registry[key] = ApiHandler(
            api_key=key,
            min_version=low,
            max_version=high,
            handle=module.handle,
            answer_unsupported_version=getattr(module, "answer_unsupported_version", None),
        )
    for name in fast_path_modules:
        module = importlib.import_module(f"{__name__}.{name}")
        key = int(module.API_KEY)
        registry[key] = dataclasses.replace(
            registry[key], fast_path=FastPath(decode=module.decode, handle=module.handle)
        )
    return registry
