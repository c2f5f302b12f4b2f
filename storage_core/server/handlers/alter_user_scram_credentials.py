"""AlterUserScramCredentials (key 51): upsert and delete users' SCRAM credentials
(``user_scram_credentials``), served by any broker. Needs ALTER on the CLUSTER once an
authorizer is configured (every user then gets CLUSTER_AUTHORIZATION_FAILED)."""

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
from storage_core.server.user_scram_credentials import Deletion, Upsertion, UserResult

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    upsertions = [
        Upsertion(
            name=u.name,
            mechanism=int(u.mechanism),
            iterations=int(u.iterations),
            salt=bytes(u.salt),
            salted_password=bytes(u.salted_password),
        )
        for u in request.upsertions
    ]
    deletions = [Deletion(name=d.name, mechanism=int(d.mechanism)) for d in request.deletions]
    store = ctx.services.config_entities
    if store is None:  # every broker has one; services built without it serve no SCRAM API
        raise RuntimeError("this broker's services keep no user config entities")
    if not authorize_cluster(ctx, AclOperation.ALTER):
        # Kafka's getErrorResponse: each user once, sorted, with the error's default message
        users = sorted({u.name for u in upsertions} | {d.name for d in deletions})
        results = [
            UserResult(
                user=user,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="Cluster authorization failed.",
            )
            for user in users
        ]
    else:
        results = await asyncio.get_running_loop().run_in_executor(
            None,
            user_scram_credentials.alter,
            store,
            upsertions,
            deletions,
        )
    return build(
        module.AlterUserScramCredentialsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            module.AlterUserScramCredentialsResult(
                user=r.user, error_code=r.error_code, error_message=r.error_message
            )
            for r in results
        ),
    )
