"""The restore drill's pure parts: which partitions a night drills, the scratch topics' names,
and the tables its Great Expectations suites check (``expectations.restore_drill``).

Sample (``sample_partitions``): the remote-enabled partitions sorted by topic and partition
form a ring; night ``d`` (its proleptic ordinal) drills the ``count`` partitions from position
``d * count mod n`` on. Consecutive nights take consecutive arcs of the ring, so every
partition is drilled within ``ceil(n / count)`` nights, and a night's choice never depends on
anything but the date and the partitions.

Scratch topic (``scratch_topic_name``): ``restore-drill-<yyyymmdd>-<topic>``. Not ``__drill-...``:
a leading ``__`` is how Kafka marks its internal topics (``__consumer_offsets``,
``__remote_log_metadata``), which tools hide and people leave alone; a drill's topic is a
normal topic that lives an hour. A fixed leading ``restore-drill-`` says what it is in any
topic listing, lets one PREFIXED ACL grant the pipeline Create and Delete on drill topics
only, and lets the drill refuse to delete anything else (``is_scratch_topic``). The night
comes before the source's name so the prefix stays fixed; a name past Kafka's 249 characters
keeps a hash of the source's name instead of its tail.

Tables (rows are dicts; columns in ``*_COLUMNS`` order, row ids in ``*_ROW_ID``):

    drill_partitions      one row per drilled partition: the source's offsets when the drill
                          began, the restored log start and next offset, what went wrong
                          (restore_problem: the restore's own error; read_problem: a side
                          could not be read back; range_problem: the restored range does not
                          cover the source's remote log)
    drill_batches         one row per record batch base offset of the source or the restored
                          partition in the restored range: both sides' last offset, partition
                          leader epoch and CRC, whether each side has it, whether the restored
                          batch's bytes match its CRC, whether it follows the previous restored
                          batch without a gap
    drill_group_offsets   one row per group offset committed under a scratch topic: inside
                          [restored log start, restored next offset] or not
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCRATCH_PREFIX = "restore-drill-"
TOPIC_NAME_MAX = 249  # Kafka's Topic.MAX_NAME_LENGTH
_HASHED_SUFFIX = 12  # "-" and 11 hex digits
SAMPLE_PARTITIONS_DEFAULT = 3
SAMPLE_PARTITIONS_MAX = 100

DRILL_PARTITIONS_COLUMNS = (
    "topic",
    "partition",
    "scratch_topic",
    "source_log_start_offset",
    "source_highest_tiered_offset",
    "restored_log_start_offset",
    "restored_next_offset",
    "batches",
    "restore_problem",
    "read_problem",
    "range_problem",
)
DRILL_PARTITIONS_ROW_ID = ("topic", "partition", "scratch_topic")
DRILL_BATCHES_COLUMNS = (
    "topic",
    "partition",
    "base_offset",
    "source_last_offset",
    "restored_last_offset",
    "source_leader_epoch",
    "restored_leader_epoch",
    "source_crc",
    "restored_crc",
    "missing_in_restored",
    "missing_in_source",
    "restored_crc_invalid",
    "gap_before",
)
DRILL_BATCHES_ROW_ID = ("topic", "partition", "base_offset")
DRILL_GROUP_OFFSETS_COLUMNS = (
    "group_id",
    "scratch_topic",
    "partition",
    "committed_offset",
    "restored_log_start_offset",
    "restored_next_offset",
    "out_of_range",
)
DRILL_GROUP_OFFSETS_ROW_ID = ("group_id", "scratch_topic", "partition", "committed_offset")
TABLE_COLUMNS: Mapping[str, Sequence[str]] = {
    "drill_partitions": DRILL_PARTITIONS_COLUMNS,
    "drill_batches": DRILL_BATCHES_COLUMNS,
    "drill_group_offsets": DRILL_GROUP_OFFSETS_COLUMNS,
}
TABLE_ROW_IDS: Mapping[str, Sequence[str]] = {
    "drill_partitions": DRILL_PARTITIONS_ROW_ID,
    "drill_batches": DRILL_BATCHES_ROW_ID,
    "drill_group_offsets": DRILL_GROUP_OFFSETS_ROW_ID,
}

Row = dict[str, Any]


class DrillScratchTopicError(ValueError):
    """A name or topic id that is not the drill's own scratch topic was about to be deleted."""


# ---------------------------------------------------------------------------- sample


def sample_partitions(
    candidates: Iterable[tuple[str, int]], count: int, night: datetime.date
) -> list[tuple[str, int]]:
    """The ``count`` partitions night ``night`` drills (see the module docstring), sorted."""
    if count < 1:
        raise ValueError(f"a drill samples at least one partition, not {count}")
    ring = sorted(set(candidates))
    if len(ring) <= count:
        return ring
    start = (night.toordinal() * count) % len(ring)
    return sorted(ring[(start + i) % len(ring)] for i in range(count))


def nights_to_cover(partitions: int, count: int) -> int:
    """How many consecutive nights drill every one of ``partitions`` at least once."""
    return max(1, -(-partitions // count))


# ---------------------------------------------------------------------------- scratch topics


def scratch_topic_name(topic: str, night: datetime.date) -> str:
    """``restore-drill-<yyyymmdd>-<topic>``, within Kafka's 249 characters."""
    head = f"{SCRATCH_PREFIX}{night:%Y%m%d}-"
    name = head + topic
    if len(name) <= TOPIC_NAME_MAX:
        return name
    digest = hashlib.sha256(topic.encode()).hexdigest()[: _HASHED_SUFFIX - 1]
    return f"{head}{topic[: TOPIC_NAME_MAX - len(head) - _HASHED_SUFFIX]}-{digest}"


def is_scratch_topic(name: str) -> bool:
    """Whether ``name`` is a drill's scratch topic (``restore-drill-<8 digits>-...``)."""
    if not name.startswith(SCRATCH_PREFIX):
        return False
    rest = name[len(SCRATCH_PREFIX) :]
    return len(rest) > 9 and rest[:8].isdigit() and rest[8] == "-"


def ensure_scratch_target(
    topic: str, topic_id: object, *, scratch_ids: Mapping[str, object]
) -> None:
    """``DrillScratchTopicError`` unless ``topic`` is a scratch topic this drill created and
    ``topic_id`` is the id it was created with: deletion only ever targets those."""
    if not is_scratch_topic(topic):
        raise DrillScratchTopicError(
            f"refusing to delete {topic!r} ({topic_id}): not a restore drill's scratch topic"
            f" ({SCRATCH_PREFIX}<yyyymmdd>-<topic>)"
        )
    expected = scratch_ids.get(topic)
    if expected is None or str(expected) != str(topic_id):
        raise DrillScratchTopicError(
            f"refusing to delete {topic} with topic id {topic_id}: this drill created it as"
            f" {expected} (another incarnation of the name is not the drill's)"
        )


# ---------------------------------------------------------------------------- batches


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchHeader:
    """What the drill compares of one record batch (v2): offsets (both inclusive), the
    partition leader epoch, the stored CRC and whether the batch's bytes match it."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    crc_valid: bool

    def __post_init__(self) -> None:
        if self.last_offset < self.base_offset:
            raise ValueError(f"batch last offset {self.last_offset} < base {self.base_offset}")


def batch_rows(
    topic: str,
    partition: int,
    *,
    source: Sequence[BatchHeader],
    restored: Sequence[BatchHeader],
    restored_log_start_offset: int,
    restored_next_offset: int,
    source_log_start_offset: int,
    source_tiered_next_offset: int = -1,
) -> list[Row]:
    """One row per base offset of either side from the restored log start: the restored
    batches below the restored next offset, the source's below whichever is higher, that or
    the offset after the source's highest tiered offset (``source_tiered_next_offset``: what
    the bucket held when the drill began must all be restored). Batches below the source's
    log start are not compared with it (the source no longer serves them:
    ``missing_in_source`` is then null)."""
    low, high = restored_log_start_offset, restored_next_offset
    source_high = max(high, source_tiered_next_offset)
    sources = {b.base_offset: b for b in source if low <= b.base_offset < source_high}
    restoreds = {b.base_offset: b for b in restored if b.base_offset < high}
    rows = []
    expected_next = low
    for base in sorted(set(sources) | set(restoreds)):
        s, r = sources.get(base), restoreds.get(base)
        gap_before = None
        if r is not None:
            gap_before = r.base_offset != expected_next
            expected_next = r.last_offset + 1
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "base_offset": base,
                "source_last_offset": None if s is None else s.last_offset,
                "restored_last_offset": None if r is None else r.last_offset,
                "source_leader_epoch": None if s is None else s.leader_epoch,
                "restored_leader_epoch": None if r is None else r.leader_epoch,
                "source_crc": None if s is None else s.crc,
                "restored_crc": None if r is None else r.crc,
                "missing_in_restored": r is None,
                "missing_in_source": None if base < source_log_start_offset else s is None,
                "restored_crc_invalid": None if r is None else not r.crc_valid,
                "gap_before": gap_before,
            }
        )
    return rows


def tail_gap_row(topic: str, partition: int, rows: Sequence[Row], restored_next: int) -> Row | None:
    """A row for a restored partition whose batches end before its next offset (the last
    offsets were not served): ``gap_before`` true at the next offset."""
    restored = [r for r in rows if r["restored_last_offset"] is not None]
    end = max((int(r["restored_last_offset"]) + 1 for r in restored), default=None)
    if end is None or end == restored_next:
        return None
    return {
        **dict.fromkeys(DRILL_BATCHES_COLUMNS),
        "topic": topic,
        "partition": partition,
        "base_offset": restored_next,
        "missing_in_restored": False,
        "gap_before": True,
    }


# ---------------------------------------------------------------------------- partitions


def range_problem(
    *,
    source_log_start_offset: int,
    source_highest_tiered_offset: int,
    restored_log_start_offset: int | None,
    restored_next_offset: int | None,
) -> str | None:
    """Why the restored range does not cover what the source had tiered when the drill
    began, or None: it must start at or below the source's log start and reach past its
    highest tiered offset (copies made during the drill may add more)."""
    if source_highest_tiered_offset < source_log_start_offset:
        return None  # nothing tiered above the log start: nothing the bucket must hold
    if restored_log_start_offset is None or restored_next_offset is None:
        return "the restored partition answered no offsets"
    problems = []
    if restored_log_start_offset > source_log_start_offset:
        problems.append(
            f"restored log start {restored_log_start_offset} > source log start"
            f" {source_log_start_offset}"
        )
    if restored_next_offset <= source_highest_tiered_offset:
        problems.append(
            f"restored next offset {restored_next_offset} <= source highest tiered offset"
            f" {source_highest_tiered_offset}"
        )
    return "; ".join(problems) or None


# ---------------------------------------------------------------------------- group offsets


def group_offset_rows(
    committed: Mapping[str, Mapping[tuple[str, int], int]],
    ranges: Mapping[tuple[str, int], tuple[int, int]],
) -> list[Row]:
    """One row per (group, scratch partition) with a committed offset; ``ranges`` holds
    each drilled scratch partition's (log start, next offset). A committed offset of a scratch
    partition the drill did not restore has no range: it is out of range."""
    rows = []
    for group_id in sorted(committed):
        for (topic, partition), offset in sorted(committed[group_id].items()):
            low, high = ranges.get((topic, partition), (None, None))
            rows.append(
                {
                    "group_id": group_id,
                    "scratch_topic": topic,
                    "partition": partition,
                    "committed_offset": offset,
                    "restored_log_start_offset": low,
                    "restored_next_offset": high,
                    "out_of_range": low is None or high is None or not low <= offset <= high,
                }
            )
    return rows
