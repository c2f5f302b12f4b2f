"""Static membership (KIP-345) with real confluent-kafka consumers over loopback.

Two consumers with ``group.instance.id`` split a 4-partition topic: ``a`` in this process,
``b`` in a child process (``tests.integration.static_member``). ``b`` is SIGKILLed and started
again well within ``session.timeout.ms``: the new process gets ``b``'s partitions back, ``a``
sees no revoke or assign callback and keeps its partitions, the group stays Stable with the
same members (``b`` under a new member id), and both consume what is produced afterwards.
A static member that does not come back is removed when its session expires, as any member.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, MemberDescription
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_consumer_groups import create_topic, produce

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "static"
GROUP = "static-group"
PARTITIONS = 4
SESSION_MS = 30_000
DEADLINE_S = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        yield process


class ChildMember:
    """``tests.integration.static_member`` in its own process; its events are collected."""

    def __init__(
        self, broker: BrokerProcess, instance_id: str, session_ms: int = SESSION_MS
    ) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.static_member",
                broker.bootstrap,
                TOPIC,
                GROUP,
                instance_id,
                str(session_ms),
            ],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self._events.append(json.loads(line))

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def assigned(self) -> set[int] | None:
        """The last assignment it reported (None before any)."""
        last = [e["assigned"] for e in self.events if "assigned" in e]
        return set(last[-1]) if last else None

    def records(self) -> set[tuple[int, int, str]]:
        return {tuple(e["record"]) for e in self.events if "record" in e}  # type: ignore[misc]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


class LocalMember:
    """A static confluent-kafka consumer in this process, recording its callbacks."""

    def __init__(
        self, broker: BrokerProcess, instance_id: str, session_ms: int = SESSION_MS
    ) -> None:
        self.callbacks: list[tuple[str, list[int]]] = []
        self.records: set[tuple[int, int, str]] = set()
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": GROUP,
                "group.instance.id": instance_id,
                "session.timeout.ms": session_ms,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe(
            [TOPIC],
            on_assign=lambda _c, ps: self._record("assign", ps),
            on_revoke=lambda _c, ps: self._record("revoke", ps),
        )

    def _record(self, kind: str, partitions: list[TopicPartition]) -> None:
        self.callbacks.append((kind, sorted(p.partition for p in partitions)))

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            value = message.value()
            self.records.add((message.partition(), message.offset(), value.decode()))

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(a: LocalMember, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        a.poll()


def group_members(broker: BrokerProcess) -> tuple[ConsumerGroupState, dict[str, str]]:
    """The group's state and group.instance.id -> member id, through DescribeGroups."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    description = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=30)
    members: list[MemberDescription] = description.members
    return description.state, {m.group_instance_id: m.member_id for m in members}


def test_a_static_member_restarted_within_its_session_gets_its_partitions_back(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, TOPIC, PARTITIONS)
    a = LocalMember(broker, "instance-a")
    b = b2 = None
    try:
        poll_until(a, lambda: len(a.assigned()) == PARTITIONS, "a to get every partition")
        b = ChildMember(broker, "instance-b")
        everything = set(range(PARTITIONS))
        poll_until(
            a,
            lambda: (
                (b_parts := b.assigned()) is not None
                and bool(b_parts)
                and a.assigned() == everything - b_parts
            ),
            "a and b to split the partitions",
        )
        b_partitions = b.assigned()
        a_partitions = a.assigned()
        state, before = group_members(broker)
        assert state is ConsumerGroupState.STABLE
        assert set(before) == {"instance-a", "instance-b"}
        callbacks_before = list(a.callbacks)

        b.kill()  # no LeaveGroup: the coordinator only stops hearing from it
        b2 = ChildMember(broker, "instance-b")
        poll_until(a, lambda: b2.assigned() is not None, "the restarted b to be assigned")
        assert b2.assigned() == b_partitions
        # Give a rebalance, if there were one, time to reach a (heartbeats every 3 s).
        settle_until = time.monotonic() + 5
        poll_until(a, lambda: time.monotonic() > settle_until, "a quiet period")
        assert a.callbacks == callbacks_before, "a saw a rebalance"
        assert a.assigned() == a_partitions
        assert [e for e in b2.events if "revoked" in e] == []
        state, after = group_members(broker)
        assert state is ConsumerGroupState.STABLE
        assert after["instance-a"] == before["instance-a"]
        assert after["instance-b"] not in ("", before["instance-b"])

        sent = produce(broker, TOPIC, "after", 2 * PARTITIONS, PARTITIONS)
        expected = {(p, o, v.decode()) for p, o, _k, v in sent}
        poll_until(a, lambda: a.records | b2.records() >= expected, "every record consumed")
        assert {p for p, _o, _v in a.records} <= a_partitions
        assert {p for p, _o, _v in b2.records()} <= b_partitions
    finally:
        for child in (b, b2):
            if child is not None:
                child.stop()
        a.consumer.close()


def test_a_static_member_that_does_not_come_back_is_removed_at_session_expiry(
    broker: BrokerProcess,
) -> None:
    session_ms = 6000  # group.min.session.timeout.ms
    create_topic(broker, TOPIC, PARTITIONS)
    a = LocalMember(broker, "instance-a", session_ms)
    b = ChildMember(broker, "instance-b", session_ms)
    try:
        poll_until(
            a,
            lambda: (
                bool(b.assigned()) and len(a.assigned()) == PARTITIONS - len(b.assigned() or ())
            ),
            "a and b to split the partitions",
        )
        b.kill()
        killed_at = time.monotonic()
        poll_until(a, lambda: len(a.assigned()) == PARTITIONS, "a to take every partition")
        assert time.monotonic() - killed_at >= session_ms / 1000 - 1
        state, members = group_members(broker)
        assert state is ConsumerGroupState.STABLE
        assert set(members) == {"instance-a"}
    finally:
        b.stop()
        a.consumer.close()


def test_static_membership_on_the_wire(broker: BrokerProcess) -> None:
    """Raw frames: JoinGroup v9 tells a restarted static leader to skip the assignment, v5
    returns the old leader id instead; the replaced member id is fenced; LeaveGroup v5 removes
    the member by instance id alone; the emptied group can then be deleted."""
    join_v9, join_v5 = raw_wire.request_classes(11, 9), raw_wire.request_classes(11, 5)
    sync = raw_wire.request_classes(14, 5)
    leave = raw_wire.request_classes(13, 5)
    seconds = datetime.timedelta(seconds=10)

    def join(sock: socket.socket, version: int) -> Any:
        module = join_v9 if version == 9 else join_v5
        return raw_wire.call(
            sock,
            11,
            version,
            group_id=GROUP,
            session_timeout=seconds,
            rebalance_timeout=seconds,
            member_id="",
            group_instance_id="wire",
            protocol_type="consumer",
            protocols=(module.JoinGroupRequestProtocol(name="range", metadata=b"sub"),),
        )

    def sync_group(sock: socket.socket, member_id: str, assignments: dict[str, bytes]) -> Any:
        return raw_wire.call(
            sock,
            14,
            5,
            group_id=GROUP,
            generation_id=1,
            member_id=member_id,
            group_instance_id="wire",
            protocol_type="consumer",
            protocol_name="range",
            assignments=tuple(
                sync.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()
            ),
        )

    with raw_wire.connect(broker.port) as sock:
        first = join(sock, 9)
        assert (first.error_code, first.generation_id) == (ErrorCode.none, 1)
        m1 = first.member_id
        assert first.leader == m1 and [m.member_id for m in first.members] == [m1]
        assert sync_group(sock, m1, {m1: b"p0-p3"}).assignment == b"p0-p3"

        again = join(sock, 9)  # the same instance, restarted
        m2 = again.member_id
        assert (again.error_code, again.generation_id, again.leader) == (ErrorCode.none, 1, m2)
        assert again.skip_assignment and [m.member_id for m in again.members] == [m2]
        fenced = raw_wire.call(
            sock, 12, 4, group_id=GROUP, generation_id=1, member_id=m1, group_instance_id="wire"
        )
        assert fenced.error_code == ErrorCode.fenced_instance_id
        assert sync_group(sock, m2, {}).assignment == b"p0-p3"

        old_client = join(sock, 5)
        assert old_client.error_code == ErrorCode.none
        assert (old_client.leader, old_client.members) == (m2, ())  # the previous leader id
        assert old_client.member_id not in (m1, m2)

        left = raw_wire.call(
            sock,
            13,
            5,
            group_id=GROUP,
            members=(leave.MemberIdentity(member_id="", group_instance_id="wire"),),
        )
        assert left.error_code == ErrorCode.none
        assert [(m.group_instance_id, m.error_code) for m in left.members] == [
            ("wire", ErrorCode.none)
        ]
        deleted = raw_wire.call(sock, 42, 2, groups_names=(GROUP, "missing"))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (GROUP, ErrorCode.none),
            ("missing", ErrorCode.group_id_not_found),
        ]
