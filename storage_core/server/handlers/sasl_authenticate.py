"""SaslAuthenticate (key 36) reaching the API layer: after authentication completed, or on a
listener without SASL. Kafka's ``KafkaApis.handleSaslAuthenticateRequest`` answers
ILLEGAL_SASL_STATE (34) with this message. During authentication ``SaslServerAuthenticator``
takes it."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build
from storage_core.server.request_context import RequestContext

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    return build(
        ctx.response_module.SaslAuthenticateResponse,
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )
