"""The cluster section of the status page, from the snapshot's ``details.cluster`` (written by
``jobs.cluster_status``; format in ``jobs.planning.cluster_view``). Pure: no Airflow, no I/O.

What a person reads first is one line of health: how many brokers, which one is the
controller, and whether partitions are under-replicated (ISR smaller than the replicas),
offline (no leader) or led by another replica than the preferred one. Then a table of the
brokers (address, controller, partitions led) and one of the partitions that need attention
first, each with its state in words, then the healthy ones (at most ``PARTITION_ROWS_MAX``).

A snapshot older than the tiering schedule says so in that line ("As of <time> (<age> ago),
stale: ...") and is never shown in the reassuring green: the cluster may have changed since.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PARTITION_ROWS_MAX = 500
CLUSTER_CSS = """
.health{padding:.6em;border:1px solid;margin:.6em 0}
.health.ok{background:#e8f5e9;border-color:#2b6e2b;color:#1d4d1d}
.health.bad{background:#fdecea;border-color:#b3261e;color:#6b1510}
.health.warn{background:#fff3cd;border-color:#e0b100}
.health.stale{background:#f1f1f1;border-color:#777;color:#333}
tr.under-replicated td{background:#fff3cd}tr.offline td{background:#fdecea}
td.state,th.state{text-align:left}
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaState:
    """One partition as the snapshot saw it."""

    partition: str
    leader: int | None
    leader_epoch: int | None
    preferred_leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]

    @property
    def offline(self) -> bool:
        return self.leader is None

    @property
    def under_replicated(self) -> bool:
        """Led, with fewer replicas in sync than assigned (an offline one is not counted)."""
        return not self.offline and len(self.isr) < len(self.replicas)

    @property
    def not_preferred(self) -> bool:
        return self.leader is not None and self.leader != self.preferred_leader

    def state(self) -> str:
        """The partition's state in words."""
        if self.offline:
            return f"offline: no leader (replicas {_ids(self.replicas)} are not available)"
        words = []
        if self.under_replicated:
            missing = [r for r in self.replicas if r not in self.isr]
            words.append(f"under-replicated: {_ids(missing)} not in sync")
        if self.not_preferred:
            words.append(f"led by {self.leader}, not the preferred replica {self.preferred_leader}")
        return "; ".join(words) or "ok: every replica in sync"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    controller_id: int | None
    brokers: tuple[tuple[int, str], ...]
    partitions: tuple[ReplicaState, ...]
    under_replicated: tuple[str, ...]
    offline: tuple[str, ...]
    partitions_total: int


def cluster_state(summary: Mapping[str, Any]) -> ClusterState | None:
    """The cluster of a run summary, or None when it has none (an older snapshot)."""
    details = summary.get("details")
    cluster = details.get("cluster") if isinstance(details, Mapping) else None
    if not isinstance(cluster, Mapping):
        return None
    brokers = tuple(
        (int(b["id"]), str(b.get("address", "?")))
        for b in cluster.get("brokers") or []
        if isinstance(b, Mapping) and isinstance(b.get("id"), int)
    )
    partitions = tuple(
        ReplicaState(
            partition=str(p.get("partition")),
            leader=_int(p.get("leader")),
            leader_epoch=_int(p.get("leader_epoch")),
            preferred_leader=_int(p.get("preferred_leader")),
            replicas=_int_tuple(p.get("replicas")),
            isr=_int_tuple(p.get("isr")),
            offline_replicas=_int_tuple(p.get("offline_replicas")),
        )
        for p in cluster.get("partitions") or []
        if isinstance(p, Mapping)
    )
    controller = _int(cluster.get("controller_id"))
    return ClusterState(
        controller_id=None if controller is None or controller < 0 else controller,
        brokers=tuple(sorted(brokers)),
        partitions=partitions,
        under_replicated=tuple(str(p) for p in cluster.get("under_replicated_partitions") or []),
        offline=tuple(str(p) for p in cluster.get("offline_partitions") or []),
        partitions_total=_int(cluster.get("partitions_total")) or len(partitions),
    )


def health_line(state: ClusterState) -> tuple[str, str]:
    """(css class, sentence): the cluster's health at a glance."""
    controller = (
        f"controller: broker {state.controller_id}"
        if state.controller_id is not None
        else "no controller"
    )
    head = f"{len(state.brokers)} brokers, {controller}."
    not_preferred = sum(1 for p in state.partitions if p.not_preferred)
    problems = []
    if state.offline:
        problems.append(f"{len(state.offline)} offline (no leader): {_names(state.offline)}")
    if state.under_replicated:
        problems.append(
            f"{len(state.under_replicated)} under-replicated: {_names(state.under_replicated)}"
        )
    if state.controller_id is None:
        problems.append("no broker is the controller")
    if problems:
        return "bad", f"{head} Partitions {'; '.join(problems)}."
    if not_preferred:
        return "warn", (
            f"{head} Every partition is fully replicated; {not_preferred} led by another"
            " replica than the preferred one (run the preferred_leader_election DAG)."
        )
    return "ok", (
        f"{head} All {state.partitions_total} partitions fully replicated and led by their"
        " preferred replica."
    )


def stale_health_line(state: ClusterState, as_of: str) -> tuple[str, str]:
    """(css class, sentence) of a snapshot taken ``as_of`` (its time and age) and older than
    the tiering schedule: the health it saw, said to be of then; grey rather than green or
    amber, red kept for what was broken then."""
    css, sentence = health_line(state)
    return ("bad" if css == "bad" else "stale"), (
        f"As of {as_of}, stale: the cluster may have changed since. {sentence}"
    )


def cluster_section(
    state: ClusterState | None, source: str = "", *, stale_as_of: str | None = None
) -> str:
    """The section's HTML (``<section id="cluster">``); ``source`` names the run that took
    the snapshot; ``stale_as_of`` (when and how old, e.g. ``2026-01-01 04:20:00 UTC (3 h
    ago)``) marks a snapshot older than the tiering schedule."""
    if state is None:
        return (
            '<section id="cluster"><h2>Cluster</h2><p>No cluster snapshot yet: the status'
            " task of the tiering DAG writes one after each run.</p></section>"
        )
    if stale_as_of is None:
        css, sentence = health_line(state)
    else:
        css, sentence = stale_health_line(state, stale_as_of)
    led = {broker: 0 for broker, _ in state.brokers}
    for p in state.partitions:
        if p.leader is not None:
            led[p.leader] = led.get(p.leader, 0) + 1
    broker_rows = "".join(
        f"<tr><td>{broker}</td><td>{html.escape(address)}</td>"
        f"<td>{'controller' if broker == state.controller_id else ''}</td>"
        f"<td>{led.get(broker, 0)}</td></tr>"
        for broker, address in state.brokers
    )
    ordered = sorted(
        state.partitions,
        key=lambda p: (not p.offline, not p.under_replicated, not p.not_preferred, p.partition),
    )
    shown = ordered[:PARTITION_ROWS_MAX]
    more = (
        f'<p class="note">{len(ordered) - len(shown)} more partitions not shown.</p>'
        if len(ordered) > len(shown)
        else ""
    )
    where = f'<p class="note">From {html.escape(source)}.</p>' if source else ""
    rows = "".join(_partition_row(p) for p in shown)
    return f"""<section id="cluster"><h2>Cluster</h2>
<p class="health {css}" role="status"><strong>{html.escape(sentence)}</strong></p>{where}
<table id="brokers"><thead><tr><th>broker</th><th>host:port</th><th>role</th>
<th>partitions led</th></tr></thead><tbody>{broker_rows}</tbody></table>
<h3>Leaders and in-sync replicas</h3>
<table id="replication"><thead><tr><th>partition</th><th>leader</th><th>leader epoch</th>
<th>preferred leader</th><th>replicas</th><th>in sync (ISR)</th><th>offline replicas</th>
<th class="state">state</th></tr></thead><tbody>{rows}</tbody></table>
{more}<p class="note">Under-replicated: some replicas are not in the ISR (a broker is down or
behind); a leader that is not the preferred replica (the first one) came from a failover.
</p></section>"""


def _partition_row(p: ReplicaState) -> str:
    css = "offline" if p.offline else "under-replicated" if p.under_replicated else "ok"
    cells = (
        p.partition,
        "none" if p.leader is None else str(p.leader),
        "-" if p.leader_epoch is None else str(p.leader_epoch),
        "-" if p.preferred_leader is None else str(p.preferred_leader),
        _ids(p.replicas),
        _ids(p.isr),
        _ids(p.offline_replicas) if p.offline_replicas else "-",
    )
    return (
        f'<tr class="{css}">'
        + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        + f'<td class="state">{html.escape(p.state())}</td></tr>'
    )


def _ids(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) or "none"


def _names(names: Sequence[str], shown: int = 5) -> str:
    listed = ", ".join(names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int_tuple(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
