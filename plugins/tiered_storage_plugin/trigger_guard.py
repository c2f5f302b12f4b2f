"""Guards the trigger of destructive DAGs in the api-server (a root middleware of the plugin).

Airflow's trigger form unpauses a paused DAG when it triggers it ("Unpause on trigger",
ticked by default): it sends ``PATCH /api/v2/dags/<id> {"is_paused": false}`` and then
``POST /api/v2/dags/<id>/dagRuns``, whatever the POST's answer. For ``partition_deletion`` a
refused trigger would leave the DAG unpaused and its hourly sweep running. For the DAGs of
``GUARDED_DAGS`` this middleware:

1. refuses a trigger whose request ``parse_request`` refuses (``confirm`` not equal to
   ``topic``, partitions without a topic, ...; for ``preferred_leader_election``
   ``parse_election_request``: no topic, bad partitions) with 400 and the reason, before a
   run exists
   (Airflow's own Param validation refuses bad types and patterns the same way);
2. after any refused trigger (400 or 422, ours or Airflow's), pauses the DAG again if it was
   unpaused through the API within ``UNPAUSE_WINDOW_S`` before (Airflow's audit log has
   ``patch_dag`` with ``is_paused: false``): the unpause that came with the refused trigger.
   It checks again ``RECHECK_DELAYS_S`` later, for an unpause that lands after the refusal.

An unpause made on its own (not followed by a refused trigger) is left as it is. Requests
without credentials are passed to Airflow untouched (it answers 401).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

GUARDED_DAGS = frozenset({"partition_deletion", "preferred_leader_election"})
TRIGGER_PATH = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BODY_BYTES_MAX = 1024 * 1024
UNPAUSE_WINDOW_S = 30.0
RECHECK_DELAYS_S = (1.0, 3.0)
REFUSED_STATUSES = frozenset({400, 422})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger(__name__)


class DestructiveTriggerGuard:
    """ASGI middleware; see the module docstring."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = TRIGGER_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "POST" or not _has_credentials(scope):
            await self.app(scope, receive, send)
            return
        dag_id = match["dag_id"]
        if dag_id not in GUARDED_DAGS:
            await self.app(scope, receive, send)
            return
        started = datetime.now(UTC)
        body = await _read_body(receive)
        reason = refusal(dag_id, body)
        if reason is not None:
            # paused again before the answer: a client reading the DAG after the 400 sees it
            await self._undo_unpause(dag_id, started)
            await _send_json(send, 400, {"detail": reason})
            return
        status = await self._forward(scope, body, send)
        if status in REFUSED_STATUSES:
            await self._undo_unpause(dag_id, started)

    async def _forward(self, scope: Scope, body: bytes, send: Send) -> int:
        replayed = False
        status = 0

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return {"type": "http.disconnect"}
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, replay, watch)
        return status

    async def _undo_unpause(self, dag_id: str, started: datetime) -> None:
        since = started - timedelta(seconds=UNPAUSE_WINDOW_S)
        await asyncio.to_thread(pause_if_unpaused_since, dag_id, since)

        async def recheck() -> None:
            for delay in RECHECK_DELAYS_S:
                await asyncio.sleep(delay)
                await asyncio.to_thread(pause_if_unpaused_since, dag_id, since)

        task = asyncio.get_running_loop().create_task(recheck())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def refusal(dag_id: str, body: bytes) -> str | None:
    """Why the trigger of ``dag_id`` with this request body is refused, or None."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return None  # Airflow answers 422 for a body that is not JSON
    conf = request.get("conf") if isinstance(request, dict) else None
    if not isinstance(conf, dict):
        return None
    if dag_id == "partition_deletion":
        from tiered_storage_plugin.deletion import DeletionRequestError, parse_request

        try:
            parse_request(conf)
        except DeletionRequestError as exc:
            return f"refused, no run created: {exc}"
    if dag_id == "preferred_leader_election":
        from tiered_storage_plugin.election import ElectionRequestError, parse_election_request

        try:
            parse_election_request(conf)
        except ElectionRequestError as exc:
            return f"refused, no run created: {exc}"
    return None


def pause_if_unpaused_since(dag_id: str, since: datetime) -> bool:
    """Pause ``dag_id`` if the audit log has it unpaused through the API since ``since``."""
    from airflow.models.dag import DagModel
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select, update

    with create_session() as session:
        extras = session.scalars(
            select(Log.extra).where(
                Log.dag_id == dag_id, Log.event == "patch_dag", Log.dttm >= since
            )
        ).all()
        if not any(_unpaused(extra) for extra in extras):
            return False
        changed = session.execute(
            update(DagModel)
            .where(DagModel.dag_id == dag_id, DagModel.is_paused.is_(False))
            .values(is_paused=True)
        )
    if getattr(changed, "rowcount", 0):
        log.warning("dag=%s paused again: it was unpaused by a trigger that was refused", dag_id)
    return True


def _unpaused(extra: str | None) -> bool:
    try:
        fields = json.loads(extra or "{}")
    except ValueError:
        return False
    return isinstance(fields, dict) and fields.get("is_paused") in (False, "false", "False")


def _has_credentials(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    return b"authorization" in headers or b"_token=" in headers.get(b"cookie", b"")


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > BODY_BYTES_MAX:
            break
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _send_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
