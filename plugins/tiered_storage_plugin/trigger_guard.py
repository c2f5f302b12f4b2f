"""Guards the trigger of destructive DAGs in the api-server (a root middleware of the plugin).

For the DAGs of ``GUARDED_DAGS`` it refuses a trigger whose request ``parse_request`` refuses
(``confirm`` not equal to ``topic``, partitions without a topic, ...; for
``preferred_leader_election`` ``parse_election_request``: no topic, bad partitions; for
``restore_topic`` ``parse_restore_request``: no topic, a bad topic id) with 400 and
the reason, before a run exists (Airflow's own Param validation refuses bad types and patterns
the same way). Every other request is passed to Airflow untouched, and so are requests without
credentials (Airflow answers 401).

Airflow's trigger form also unpauses the DAG ("Unpause on trigger", ticked by default): it sends
the trigger and ``PATCH /api/v2/dags/<id> {"is_paused": false}``, whatever the trigger's answer.
The guarded DAGs have no schedule, so that unpause starts nothing: a refused trigger leaves no
run of any DAG. (When ``partition_deletion`` also held the hourly sweep, this middleware paused
the DAG again after a refused trigger; the scheduler could create the sweep's run before it
did. The sweep is the ``partition_deletion_sweep`` DAG now, which nothing here unpauses.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

GUARDED_DAGS = frozenset({"partition_deletion", "preferred_leader_election", "restore_topic"})
TRIGGER_PATH = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BODY_BYTES_MAX = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class DestructiveTriggerGuard:
    """ASGI middleware; see the module docstring."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = TRIGGER_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "POST" or not _has_credentials(scope):
            await self.app(scope, receive, send)
            return
        dag_id = match["dag_id"]
        if dag_id not in GUARDED_DAGS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        reason = refusal(dag_id, body)
        if reason is not None:
            await _send_json(send, 400, {"detail": reason})
            return
        await self.app(scope, _replay(body), send)


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
    if dag_id == "restore_topic":
        from tiered_storage_plugin.restore import RestoreRequestError, parse_restore_request

        try:
            parse_restore_request(conf)
        except RestoreRequestError as exc:
            return f"refused, no run created: {exc}"
    return None


def _has_credentials(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    return b"authorization" in headers or b"_token=" in headers.get(b"cookie", b"")


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands Airflow the body already read, then a disconnect."""
    replayed = False

    async def receive() -> Message:
        nonlocal replayed
        if replayed:
            return {"type": "http.disconnect"}
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


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
