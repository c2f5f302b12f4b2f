"""The event thread runs every queued event in order and survives failures: a failing handler,
and an owner's error reaction that fails too (the controller's resignation meeting the same
lost ZooKeeper session as the event it reacts to)."""

from __future__ import annotations

import threading

import pytest

from storage_core.controller.event_manager import EventManager


def test_events_after_a_failing_handler_and_a_failing_error_reaction_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reactions: list[str] = []

    def react(name: str, _exc: Exception) -> None:
        reactions.append(name)
        raise ConnectionError("the session is gone")

    def fail() -> None:
        raise RuntimeError("event failed")

    events = EventManager("test-events", on_error=react)
    events.start()
    try:
        ran = threading.Event()
        events.put("First", fail)
        events.put("Second", ran.set)
        assert ran.wait(5), "the event after the failures never ran: the thread died"
        assert reactions == ["First"]
        assert events.call("Third", lambda: 42).result(timeout=5) == 42
    finally:
        events.stop()
    assert "event error handler failed, queue=test-events event=First" in caplog.text
