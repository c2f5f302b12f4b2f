"""SaslHandshake (key 17) reaching the API layer: on a connection already authenticated that
does not re-authenticate (``connections.max.reauth.ms`` is 0, or a second handshake within a
second), or on a listener without SASL. Kafka's ``KafkaApis.handleSaslHandshakeRequest``
answers ILLEGAL_SASL_STATE (34). A handshake on a SASL listener before authentication never
gets here: ``SaslServerAuthenticator`` takes it."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build
from storage_core.server.request_context import RequestContext

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    return build(
        ctx.response_module.SaslHandshakeResponse,
        error_code=ErrorCode.illegal_sasl_state,
        mechanisms=(),
    )
