"""Helpers shared by the consumer group handlers (FindCoordinator ... DescribeGroups)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from storage_core.coordinator.group.errors import CoordinatorNotAvailableError
from storage_core.coordinator.group.group_coordinator import GroupCoordinator

if TYPE_CHECKING:
    from storage_core.server.request_context import RequestContext

_ONE_MS = datetime.timedelta(milliseconds=1)

NOT_RUNNING = CoordinatorNotAvailableError("the group coordinator is not running on this broker")


def coordinator_of(ctx: RequestContext) -> GroupCoordinator | None:
    """The broker's group coordinator, or None when it has none (yet)."""
    coordinator = getattr(ctx.services, "group_coordinator", None)
    return coordinator if isinstance(coordinator, GroupCoordinator) else None


def to_ms(value: datetime.timedelta) -> int:
    """A kio duration field as the int32 milliseconds on the wire."""
    return value // _ONE_MS


def client_host(ctx: RequestContext) -> str:
    """The client address as Kafka reports it (``InetAddress.toString``: ``/127.0.0.1``)."""
    host = ctx.client_host
    return host if host.startswith("/") else f"/{host}"
