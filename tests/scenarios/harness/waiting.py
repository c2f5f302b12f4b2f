"""The wait-until loops of the stages: a condition until it holds, and ``settle``, a picture
taken again until it is the expected one (brokers replicate, elect, checkpoint and delete
periodically, so a story waits for the state a step must reach instead of sleeping)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tests import cluster_support

T = TypeVar("T")


def until(check: Callable[[], T | None], *, what: str, timeout_s: float = 30.0) -> T:
    """``cluster_support.eventually`` for a check that answers ``None`` while not there yet:
    its first truthy answer (errors while asking count as "not yet")."""
    return cluster_support.eventually(check, what=what, timeout_s=timeout_s)  # type: ignore[return-value]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Poll ``condition`` every 50 ms; an error while asking fails the story at once."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def settle(
    take: Callable[[], str],
    want: str,
    *,
    timeout_s: float,
    poll_s: float,
    unreadable: tuple[type[Exception], ...] = (),
) -> str:
    """Take the picture every ``poll_s`` until it is ``want`` or ``timeout_s`` passed; the
    last one taken. An error of ``unreadable`` while taking it reads as the picture
    ``unreadable: <error>`` (e.g. retention deleted a segment while it was read)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            seen = take()
        except unreadable as error:
            seen = f"unreadable: {error}"
        if seen == want or time.monotonic() > deadline:
            return seen
        time.sleep(poll_s)
