"""DescribeUserScramCredentials (key 50): the SCRAM mechanisms and iterations of users'
credentials, never their salts or keys (``user_scram_credentials``). Needs DESCRIBE on the
CLUSTER once an authorizer is configured (CLUSTER_AUTHORIZATION_FAILED otherwise)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server import user_scram_credentials
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.request_context import RequestContext

CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."  # Errors' default
API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        # Kafka puts the error at the top and once per user asked for (unnamed). librdkafka
        # (2.16) frees memory it does not own when it reads a top-level error in this response
        # and aborts or corrupts its process; so the error goes in the results only: once per
        # user asked for, named, or once without a name when every user was asked for (the
        # Java client and kafka-python read per-user errors too)
        asked = [user.name for user in request.users or ()] or [""]
        return build(
            module.DescribeUserScramCredentialsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            error_message=None,
            results=tuple(
                module.DescribeUserScramCredentialsResult(
                    user=user,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
                    credential_infos=(),
                )
                for user in asked
            ),
        )
    users = None if request.users is None else [u.name for u in request.users]
    store = ctx.services.config_entities
    if store is None:  # every broker has one; services built without it serve no SCRAM API
        raise RuntimeError("this broker's services keep no user config entities")
    results = await asyncio.get_running_loop().run_in_executor(
        None, user_scram_credentials.describe, store, users
    )
    return build(
        module.DescribeUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(
            module.DescribeUserScramCredentialsResult(
                user=r.user,
                error_code=r.error_code,
                error_message=r.error_message,
                credential_infos=tuple(
                    module.CredentialInfo(mechanism=m, iterations=i) for m, i in r.credential_infos
                ),
            )
            for r in results
        ),
    )
