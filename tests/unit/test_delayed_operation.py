"""The purgatory (Kafka's DelayedOperation / DelayedOperationPurgatory): watch under keys,
try-complete when a key changes, expire on a timer; an operation completes exactly once and
then leaves every watch list it was in."""

from __future__ import annotations

import asyncio

from storage_core.replication.delayed_operation import (
    DelayedOperation,
    DelayedOperationPurgatory,
)


class Countdown(DelayedOperation):
    """Completes once ``remaining`` reaches 0; records what happened to it, in order."""

    __slots__ = ("events", "remaining")

    def __init__(self, remaining: int, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.remaining = remaining
        self.events: list[str] = []

    def try_complete(self) -> bool:
        self.events.append("tried")
        if self.remaining > 0:
            return False
        self.force_complete()
        return True

    def on_complete(self) -> None:
        self.events.append("completed")

    def on_expiration(self) -> None:
        self.events.append("expired")


def test_an_operation_completes_once_when_a_key_it_watches_is_checked() -> None:
    async def run() -> None:
        purgatory: DelayedOperationPurgatory[str, Countdown] = DelayedOperationPurgatory("Test")
        op = Countdown(remaining=1, delay_ms=60_000)
        other = Countdown(remaining=1, delay_ms=60_000)
        purgatory.watch(op, ["a", "b"])
        purgatory.watch(other, ["b"])
        assert len(purgatory) == 2

        purgatory.check_and_complete("a")
        assert op.events == ["tried"]  # not done yet: stays watched
        assert other.events == []  # not watched under "a"

        op.remaining = 0
        purgatory.check_and_complete("a")
        assert op.events == ["tried", "tried", "completed"]
        assert purgatory.watched("a") == []
        assert purgatory.watched("b") == [other]  # left "b" too
        assert len(purgatory) == 1

        purgatory.check_and_complete("b")  # tries only what is still watched there
        assert op.events == ["tried", "tried", "completed"]
        assert other.events == ["tried"]

    asyncio.run(run())


def test_an_operation_expires_after_its_delay_with_a_last_try_first() -> None:
    async def run() -> None:
        purgatory: DelayedOperationPurgatory[str, Countdown] = DelayedOperationPurgatory("Test")
        op = Countdown(remaining=1, delay_ms=20)
        purgatory.watch(op, ["a"])
        await asyncio.sleep(0.2)
        assert op.events == ["tried", "expired", "completed"]
        assert purgatory.watched("a") == []
        assert len(purgatory) == 0

    asyncio.run(run())


def test_a_completed_operation_does_not_expire() -> None:
    async def run() -> None:
        purgatory: DelayedOperationPurgatory[str, Countdown] = DelayedOperationPurgatory("Test")
        op = Countdown(remaining=0, delay_ms=20)
        purgatory.watch(op, ["a"])
        purgatory.check_and_complete("a")
        await asyncio.sleep(0.2)  # the timer was cancelled with the completion
        assert op.events == ["tried", "completed"]

    asyncio.run(run())
