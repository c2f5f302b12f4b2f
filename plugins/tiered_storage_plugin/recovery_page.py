"""The disaster-recovery section of the status page: per remote-enabled topic, when its topic
manifest was last written to the bucket and when a restore drill last proved it restorable.
Pure: no Airflow, no I/O.

Where the figures come from:

- **Last topic manifest**: the latest ``jobs.cluster_status`` snapshot's ``details.topics``
  (the job reads each topic's ``<prefix>/<topic>-<topicId>/topic-manifest.json`` back from the
  bucket and keeps its ``writtenAtMs``). Not the ``topic_manifests`` job's summaries: the
  bucket is what a restore would find, whichever run wrote it (a manual one, one whose summary
  was removed), and when runs are missed or fail the time read there simply ages and turns
  stale, where a summary could only say what a run claimed. It also keeps the page to one
  source for everything it says about the cluster now, the snapshot, whose age the page
  already shows.
- **Drills**: every ``restore_drill`` run summary under the reports root (``details.drilled``:
  one row per drilled partition with its problems; ``details.suites``: the failed
  expectations with the rows they failed on). A drill is history, not state: nothing in the
  cluster or the bucket records it, so its summaries are the record.

Which drill counts (``topic_drills``): a run drilled a topic when one of its drilled rows is of
that topic. It **passed** for that topic when none of the topic's rows has a problem and no
failed expectation is the topic's. A failed expectation is a topic's when one of its failing
rows names the topic (``topic``, or its ``scratch_topic``); one that names no row, or lists
fewer rows than it counts (the rest cut off), is every drilled topic's: a failure is never
hidden behind an attribution it cannot make. The last successful drill is the newest run in
which the topic passed; the latest drill is shown beside it when it failed, so a red drill is
never hidden behind an older green one. A run that stopped before drilling anything (no
``details.drilled``) names no topic: when it is the newest drill run it is shown above the table.

Stale: a manifest older than ``MANIFEST_STALE_INTERVALS`` tiering intervals (and a run's own
duration: the manifests and the snapshot are written side by side in each tiering run), a
successful drill older than ``DRILL_STALE_S``. A topic never drilled, whose latest drill failed,
without a manifest or with a stale one is "not proven" in the section's first line.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from tiered_storage_plugin.durations import human_duration

DRILL_JOB = "restore_drill"
DRILL_RUNS_MAX = 1000  # nightly: about three years of drills
DRILL_STALE_S = 2 * 24 * 3600
DRILL_STALE_TEXT = "2 days"
MANIFEST_STALE_INTERVALS = 2
STALE_GRACE_S = 60  # a tiering run's own duration
PROBLEMS_SHOWN_MAX = 3
PROBLEM_CHARS_MAX = 300
RECOVERY_CSS = """
#recovery td,#recovery th{text-align:left;vertical-align:top}
#recovery td.bad{background:#fdecea}#recovery td.warn{background:#fff3cd}
"""


class Summary(Protocol):
    """What this module reads of a run summary (``status.RunSummary``)."""

    @property
    def job(self) -> str: ...
    @property
    def data(self) -> Mapping[str, Any]: ...
    def finished_at(self) -> datetime | None: ...


_S = TypeVar("_S", bound=Summary)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDrill:
    """One drill run's verdict on one topic."""

    topic: str
    finished: datetime
    run: str
    partitions: tuple[int, ...]
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True, kw_only=True)
class DrillHistory:
    """A topic's latest drill and its last successful one (None: none such)."""

    latest: TopicDrill | None
    last_success: TopicDrill | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestState:
    """A topic's manifest as the snapshot read it from the bucket."""

    written_at: datetime | None
    error: str | None


def drill_summaries(summaries: Iterable[_S]) -> list[_S]:
    """The ``restore_drill`` run summaries of ``summaries`` (oldest first), the last
    ``DRILL_RUNS_MAX``."""
    return [s for s in summaries if s.job == DRILL_JOB][-DRILL_RUNS_MAX:]


def topic_drills(summary: Summary, run: str) -> list[TopicDrill]:
    """The verdict of the drill run ``summary`` on each topic it drilled (see the module
    docstring); ``run`` names the run on the page. Empty when it drilled nothing."""
    finished = summary.finished_at()
    details = summary.data.get("details")
    if summary.job != DRILL_JOB or finished is None or not isinstance(details, Mapping):
        return []
    rows = [r for r in details.get("drilled") or [] if isinstance(r, Mapping)]
    partitions: dict[str, list[int]] = {}
    problems: dict[str, list[str]] = {}
    scratch: dict[str, str] = {}
    for row in rows:
        topic = row.get("topic")
        if not isinstance(topic, str):
            continue
        partitions.setdefault(topic, [])
        problems.setdefault(topic, [])
        if isinstance(row.get("partition"), int):
            partitions[topic].append(row["partition"])
        if isinstance(row.get("scratch_topic"), str):
            scratch[row["scratch_topic"]] = topic
        for field in ("restore_problem", "read_problem", "range_problem"):
            if row.get(field):
                problems[topic].append(f"{topic}-{row.get('partition')}: {row[field]}")
    for failed in failed_expectations(details):
        named = {_row_topic(r, scratch) for r in failed["rows"]} - {None}
        counted = failed["unexpected_count"]
        whole = bool(named) and (counted is None or len(failed["rows"]) >= counted)
        for topic, found in problems.items():
            if topic in named or not whole:
                found.append(failed["reason"])
    if details.get("success") is False and not any(problems.values()):
        for found in problems.values():  # failed, and nothing says why: every topic's
            found.append("the drill's checks failed (see its Data Docs)")
    return [
        TopicDrill(
            topic=topic,
            finished=finished.astimezone(UTC),
            run=run,
            partitions=tuple(sorted(set(partitions[topic]))),
            problems=tuple(problems[topic]),
        )
        for topic in sorted(problems)
    ]


def failed_expectations(details: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each failed expectation of the drill's suites: its reason, failing rows and count."""
    found = []
    suites = details.get("suites")
    for suite in (suites or {}).values() if isinstance(suites, Mapping) else ():
        if not isinstance(suite, Mapping):
            continue
        for failed in suite.get("failed_expectations") or []:
            if not isinstance(failed, Mapping):
                continue
            rows = [r for r in failed.get("rows") or [] if isinstance(r, Mapping)]
            count = failed.get("unexpected_count")
            reason = str(failed.get("reason") or failed.get("expectation") or "a check failed")
            found.append(
                {
                    "reason": reason,
                    "rows": rows,
                    "unexpected_count": count if isinstance(count, int) else None,
                }
            )
    return found


def _row_topic(row: Mapping[str, Any], scratch: Mapping[str, str]) -> str | None:
    topic = row.get("topic")
    if isinstance(topic, str):
        return topic
    name = row.get("scratch_topic")
    return scratch.get(name) if isinstance(name, str) else None


def drill_history(drills: Iterable[TopicDrill]) -> dict[str, DrillHistory]:
    """Per topic, its latest drill and its last successful one (by finish time)."""
    latest: dict[str, TopicDrill] = {}
    success: dict[str, TopicDrill] = {}
    for drill in sorted(drills, key=lambda d: d.finished):
        latest[drill.topic] = drill
        if drill.passed:
            success[drill.topic] = drill
    return {
        topic: DrillHistory(latest=drill, last_success=success.get(topic))
        for topic, drill in latest.items()
    }


def run_failure(summary: Summary) -> str | None:
    """Why a drill run failed without drilling anything (its errors), else None."""
    details = summary.data.get("details")
    if isinstance(details, Mapping) and details.get("drilled"):
        return None
    if summary.data.get("status") not in ("failed", "error"):
        return None
    errors = summary.data.get("errors") or []
    texts = [str(e.get("error")) for e in errors if isinstance(e, Mapping) and e.get("error")]
    return "; ".join(_short(t) for t in texts[:PROBLEMS_SHOWN_MAX]) or "no error recorded"


def is_manifest_stale(age_s: float, interval_s: float | None) -> bool:
    """Older than ``MANIFEST_STALE_INTERVALS`` tiering intervals and a run's duration."""
    return interval_s is not None and age_s > MANIFEST_STALE_INTERVALS * interval_s + STALE_GRACE_S


def is_drill_stale(age_s: float) -> bool:
    return age_s > DRILL_STALE_S


def manifest_states(snapshot: Mapping[str, Any] | None) -> dict[str, ManifestState] | None:
    """Per remote-enabled topic its manifest, from a ``cluster_status`` summary's
    ``details.topics``; None when the snapshot has none (an older job's)."""
    details = snapshot.get("details") if snapshot is not None else None
    topics = details.get("topics") if isinstance(details, Mapping) else None
    if not isinstance(topics, Mapping):
        return None
    states = {}
    for name, fields in topics.items():
        if not isinstance(fields, Mapping):
            continue
        written_ms = fields.get("manifest_written_at_ms")
        written = (
            datetime.fromtimestamp(written_ms / 1000, UTC)
            if isinstance(written_ms, int) and not isinstance(written_ms, bool)
            else None
        )
        error = fields.get("manifest_error")
        states[str(name)] = ManifestState(
            written_at=written, error=None if error is None else str(error)
        )
    return states


def recovery_json(
    topics: Sequence[str],
    manifests: Mapping[str, ManifestState] | None,
    drills: Sequence[tuple[Summary, str]],
) -> dict[str, Any]:
    """Per topic what the section shows, for ``status.json`` (times ISO 8601 UTC)."""
    history = drill_history(d for summary, run in drills for d in topic_drills(summary, run))

    def drill(d: TopicDrill | None) -> dict[str, Any] | None:
        if d is None:
            return None
        return {
            "finished": d.finished.isoformat(),
            "run": d.run,
            "partitions": list(d.partitions),
            "passed": d.passed,
            "problems": list(d.problems),
        }

    found = {}
    for topic in topics:
        state = None if manifests is None else manifests.get(topic)
        drills_of = history.get(topic)
        found[topic] = {
            "manifest_written_at": None
            if state is None or state.written_at is None
            else state.written_at.isoformat(),
            "manifest_error": None if state is None else state.error,
            "last_successful_drill": drill(None if drills_of is None else drills_of.last_success),
            "latest_drill": drill(None if drills_of is None else drills_of.latest),
        }
    return found


# ---------------------------------------------------------------------------- rendering


def manifest_cell(
    state: ManifestState | None, now: datetime, interval_s: float | None
) -> tuple[str, str]:
    """(css class, text) of a topic's "last topic manifest" cell."""
    if state is None:
        return "warn", "unknown: the status snapshot does not say (an older status job)"
    if state.written_at is None:
        if state.error is not None:
            return "bad", f"unknown: {_short(state.error)}"
        return "bad", "no manifest yet: the tiering DAG's topic_manifests task writes it"
    age_s = max(0.0, (now - state.written_at).total_seconds())
    text = _when(state.written_at, age_s)
    if is_manifest_stale(age_s, interval_s):
        limit = human_duration(MANIFEST_STALE_INTERVALS * (interval_s or 0))
        return "bad", (
            f"{text}; stale: older than {MANIFEST_STALE_INTERVALS} tiering intervals ({limit}),"
            " the topic_manifests task is not keeping it current"
        )
    return "ok", text


def success_cell(history: DrillHistory | None, now: datetime) -> tuple[str, str]:
    """(css class, text) of a topic's "last successful restore drill" cell."""
    if history is None:
        return "bad", "never drilled"
    drill = history.last_success
    if drill is None:
        return "bad", "never passed: no drill of this topic has passed yet"
    age_s = max(0.0, (now - drill.finished).total_seconds())
    text = f"{_when(drill.finished, age_s)}, partitions {_ints(drill.partitions)} ({drill.run})"
    if is_drill_stale(age_s):
        return "bad", f"{text}; stale: older than {DRILL_STALE_TEXT}"
    return "ok", text


def latest_cell(history: DrillHistory | None, now: datetime) -> tuple[str, str]:
    """(css class, text) of a topic's "latest restore drill" cell."""
    if history is None or history.latest is None:
        return "bad", "never drilled"
    drill = history.latest
    if drill.passed:
        return "ok", "passed (the last successful drill)"
    age_s = max(0.0, (now - drill.finished).total_seconds())
    shown = "; ".join(_short(p) for p in drill.problems[:PROBLEMS_SHOWN_MAX])
    more = len(drill.problems) - PROBLEMS_SHOWN_MAX
    tail = f"; and {more} more" if more > 0 else ""
    return "bad", (
        f"FAILED {_when(drill.finished, age_s)}, partitions {_ints(drill.partitions)}"
        f" ({drill.run}): {shown}{tail}"
    )


def not_proven(
    topics: Sequence[str],
    manifests: Mapping[str, ManifestState] | None,
    history: Mapping[str, DrillHistory],
    now: datetime,
    interval_s: float | None,
) -> list[str]:
    """``<topic> (<why>)`` for each topic whose restore is not proven now."""
    found = []
    for topic in topics:
        why = []
        state = None if manifests is None else manifests.get(topic)
        css, _ = manifest_cell(state, now, interval_s)
        if css != "ok":
            why.append(
                "no manifest" if state is None or state.written_at is None else "stale manifest"
            )
        drills = history.get(topic)
        if drills is None:
            why.append("never drilled")
        elif drills.latest is not None and not drills.latest.passed:
            why.append("latest drill failed")
        elif success_cell(drills, now)[0] != "ok":
            why.append("drill stale")
        if why:
            found.append(f"{topic} ({', '.join(why)})")
    return found


def recovery_section(
    topics: Sequence[str],
    manifests: Mapping[str, ManifestState] | None,
    drills: Sequence[tuple[Summary, str]],
    *,
    now: datetime,
    interval_s: float | None,
) -> str:
    """The section's HTML (``<section id="disaster-recovery">``): ``topics`` are the
    remote-enabled topics of the latest snapshot, ``manifests`` its manifests, ``drills`` the
    drill run summaries (oldest first) with the name of the run that wrote each."""
    verdicts = [d for summary, run in drills for d in topic_drills(summary, run)]
    history = drill_history(verdicts)
    if not topics:
        return (
            '<section id="disaster-recovery"><h2>Disaster recovery</h2><p>No remote-enabled'
            " topic in the latest status snapshot.</p></section>"
        )
    missing = not_proven(topics, manifests, history, now, interval_s)
    if missing:
        css = "bad"
        sentence = (
            f"Restore from the bucket not proven for {len(missing)} of {len(topics)} topics: "
            + "; ".join(missing)
            + "."
        )
    else:
        css = "ok"
        sentence = (
            f"All {len(topics)} topics have a current manifest and a restore drill passed"
            f" within {DRILL_STALE_TEXT}."
        )
    alert = ""
    if drills:
        summary, run = drills[-1]
        why = run_failure(summary)
        finished = summary.finished_at()
        if why is not None:
            when = "" if finished is None else f", finished {finished:%Y-%m-%d %H:%M:%S} UTC"
            alert = (
                '<p class="health bad" role="alert">The latest restore drill'
                f" ({html.escape(run)}{when}) failed before drilling any partition:"
                f" {html.escape(why)}</p>"
            )
    rows = []
    for topic in topics:
        state = None if manifests is None else manifests.get(topic)
        cells = (
            manifest_cell(state, now, interval_s),
            success_cell(history.get(topic), now),
            latest_cell(history.get(topic), now),
        )
        rows.append(
            f"<tr><td>{html.escape(topic)}</td>"
            + "".join(f'<td class="{c}">{html.escape(t)}</td>' for c, t in cells)
            + "</tr>"
        )
    return f"""<section id="disaster-recovery"><h2>Disaster recovery</h2>
<p class="health {css}" role="status"><strong>{html.escape(sentence)}</strong></p>{alert}
<table id="recovery"><thead><tr><th>topic</th><th>last topic manifest</th>
<th>last successful restore drill</th><th>latest restore drill</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<p class="note">The manifest time is read from the bucket by the status snapshot; it is stale
when older than {MANIFEST_STALE_INTERVALS} tiering intervals. A drill (the restore_drill DAG,
nightly) restores sampled partitions into a scratch topic and checks every record batch against
the source; a successful drill older than {DRILL_STALE_TEXT} is stale.</p>
</section>"""


def _when(at: datetime, age_s: float) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC ({human_duration(age_s)} ago)"


def _ints(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) or "-"


def _short(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= PROBLEM_CHARS_MAX else one[: PROBLEM_CHARS_MAX - 1] + "\u2026"
