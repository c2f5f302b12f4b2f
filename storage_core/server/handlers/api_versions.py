"""ApiVersions (key 18): the API version ranges this broker serves (KIP-511 for v3+)."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build
from storage_core.server.request_context import RequestContext

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def api_versions_response(ctx: RequestContext, module: ModuleType, error: ErrorCode) -> Any:
    keys = tuple(
        module.ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
        for h in sorted(ctx.services.api_versions.values(), key=lambda h: h.api_key)
    )
    return build(
        module.ApiVersionsResponse,
        error_code=error,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(ctx, ctx.response_module, ErrorCode.none)


def answer_unsupported_version(ctx: RequestContext) -> Any:
    """KIP-511: an ApiVersions of a version this broker does not serve is answered with v0
    and UNSUPPORTED_VERSION (35), listing the versions it serves."""
    return api_versions_response(ctx, ctx.response_module, ErrorCode.unsupported_version)
