"""A seeded schedule of faults and the nemesis that injects and heals them on a
``RelayedCluster``, logging every action with its time.

Faults (each with its heal):

    kill-leader   SIGKILL the leader of a partition      heal: start it again
    kill-random   SIGKILL a broker chosen at random      heal: start it again
    pause         SIGSTOP a broker for longer than       heal: SIGCONT
                  zookeeper.session.timeout.ms
    cut-follower  on the leader's relay, cut the links   heal: relay them again
                  of one follower's fetchers
                  (client id broker-<F>-fetcher-*)

``plan(seed, rounds, partitions)`` is pure: the same seed gives the same schedule. Each block
of four rounds holds every kind once, in a seeded order, so a short run still meets each.
Choices that depend on the cluster at the time (who leads the partition, which follower) are
resolved when the fault is injected, with the fault's own seeded ``pick``.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.cluster import REPLICA_LAG_TIME_MAX_MS, SESSION_TIMEOUT_MS, RelayedCluster


class FaultKind(enum.Enum):
    KILL_LEADER = "kill-leader"
    KILL_RANDOM = "kill-random"
    PAUSE = "pause"
    CUT_FOLLOWER = "cut-follower"


ALL_KINDS = tuple(FaultKind)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    round: int
    kind: FaultKind
    partition: int  # the partition whose leader or follower is hit
    pick: int  # seeded choice among the candidates found at injection time
    hold_s: float  # how long the fault lasts before its heal


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    at: float  # time.time()
    monotonic: float
    round: int
    action: str
    detail: str

    def __str__(self) -> str:
        stamp = (
            time.strftime("%H:%M:%S", time.localtime(self.at))
            + f".{int(self.at * 1000) % 1000:03d}"
        )
        return f"{stamp} round {self.round} {self.action} {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Injected:
    fault: Fault
    target: int  # the broker hit (for cut-follower: the follower)
    leader: int  # the partition's leader when the fault began (-1: none)
    at: float  # time.monotonic() of the injection
    heal: Callable[[], None]


# A pause outlives the session so the broker's registration expires; a cut outlives the lag
# limit so the leader drops the follower from the ISR.
PAUSE_HOLD_S = SESSION_TIMEOUT_MS / 1000 * 1.5
CUT_HOLD_S = REPLICA_LAG_TIME_MAX_MS / 1000 * 2.5
KILL_HOLD_S = 2.0


def plan(seed: int, rounds: int, partitions: int) -> list[Fault]:
    rng = random.Random(seed)
    kinds: list[FaultKind] = []
    while len(kinds) < rounds:
        kinds += rng.sample(ALL_KINDS, len(ALL_KINDS))
    hold = {
        FaultKind.KILL_LEADER: KILL_HOLD_S,
        FaultKind.KILL_RANDOM: KILL_HOLD_S,
        FaultKind.PAUSE: PAUSE_HOLD_S,
        FaultKind.CUT_FOLLOWER: CUT_HOLD_S,
    }
    return [
        Fault(
            round=n,
            kind=kind,
            partition=rng.randrange(partitions),
            pick=rng.randrange(1 << 30),
            hold_s=hold[kind],
        )
        for n, kind in enumerate(kinds[:rounds])
    ]


class Nemesis:
    """Injects faults into ``cluster`` for ``topic`` and heals them; ``events`` is the log."""

    def __init__(
        self, cluster: RelayedCluster, topic: str, *, echo: Callable[[str], None] | None = None
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.echo = echo
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def log(self, round_: int, action: str, detail: str) -> Event:
        event = Event(
            at=time.time(), monotonic=time.monotonic(), round=round_, action=action, detail=detail
        )
        with self._lock:
            self.events.append(event)
        if self.echo is not None:
            self.echo(str(event))
        return event

    def inject(self, fault: Fault) -> Injected:
        state = self.cluster.partition_state(self.topic, fault.partition)
        leader = state.leader if state is not None else -1
        where = f"{self.topic}-{fault.partition}"
        if fault.kind is FaultKind.KILL_LEADER:
            if leader < 0:
                raise RuntimeError(f"{where} has no leader to kill")
            return self._kill(fault, leader, leader, f"leader of {where}")
        if fault.kind is FaultKind.KILL_RANDOM:
            target = sorted(self.cluster.alive())[fault.pick % len(self.cluster.alive())]
            return self._kill(fault, target, leader, "random broker")
        if fault.kind is FaultKind.PAUSE:
            target = sorted(self.cluster.alive())[fault.pick % len(self.cluster.alive())]
            self.cluster.pause(target)
            event = self.log(fault.round, "SIGSTOP", f"broker {target} for {fault.hold_s:.1f} s")

            def resume() -> None:
                self.cluster.resume(target)
                self.log(fault.round, "SIGCONT", f"broker {target}")

            return Injected(
                fault=fault, target=target, leader=leader, at=event.monotonic, heal=resume
            )
        if leader < 0:
            raise RuntimeError(f"{where} has no leader whose follower link could be cut")
        followers = [b for b in self.cluster.replicas(self.topic, fault.partition) if b != leader]
        follower = followers[fault.pick % len(followers)]
        pattern = f"broker-{follower}-fetcher-*"
        relay = self.cluster.relays[leader]
        dropped = relay.cut(pattern)
        event = self.log(
            fault.round,
            "cut",
            f"{pattern} on broker {leader}'s relay ({where}; {dropped} connections dropped)",
        )

        def heal_cut() -> None:
            relay.heal(pattern)
            refused = relay.refused.get(pattern, 0)
            self.log(
                fault.round, "heal", f"{pattern} on broker {leader}'s relay ({refused} refused)"
            )

        return Injected(
            fault=fault, target=follower, leader=leader, at=event.monotonic, heal=heal_cut
        )

    def _kill(self, fault: Fault, target: int, leader: int, why: str) -> Injected:
        self.cluster.kill(target)
        event = self.log(fault.round, "SIGKILL", f"broker {target} ({why})")

        def restart() -> None:
            self.cluster.start_broker(target)
            self.log(fault.round, "started", f"broker {target}")

        return Injected(fault=fault, target=target, leader=leader, at=event.monotonic, heal=restart)

    def run(self, fault: Fault) -> Injected:
        """Inject, hold, heal; returns what was injected."""
        injected = self.inject(fault)
        time.sleep(fault.hold_s)
        injected.heal()
        return injected
