"""What the exactly-once run wrote, read back, and its checker.

``read_topic`` reads every partition of a topic from its log start to its end with the given
isolation level (read_committed: up to the LSO, which the caller first waits to reach the HW).

``check`` is a pure function of the input's record count per key, what a read_committed and a
read_uncommitted consumer read from the output, and the outcomes the loop wrote down
(``<run> <txn> committed|aborted <records> <time>``). An *attempt* is one transaction of one run of
the loop, ``(run, txn)``, read off each output value (``<key>|<seq>|<run>|<txn>``). It holds
when:

- every input record ``(key, seq)`` is read committed exactly once (none lost, none twice);
- each key's seqs come in order in the committed read (a key's records share one partition);
- no record of an attempt the loop saw aborted is read committed;
- every attempt is all or nothing: its records read committed are all its records read
  uncommitted, or none of them;
- every attempt the loop saw committed is read committed.

Attempts read uncommitted but not committed are the aborted ones (aborted by the loop, by a
new run fencing a killed one, or by the coordinator's timeout): they must exist, since the
nemesis kills the loop in the middle of transactions, and their count is reported.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as CTopicPartition

from tests.chaos.eos_loop import parse_output

MAX_REPORTED = 20  # violations listed per kind; counts stay exact

Attempt = tuple[int, int]  # (run, txn)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRecord:
    partition: int
    offset: int
    value: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    attempt: Attempt
    committed: bool
    records: int
    at: float  # time.time() when the loop learnt it


def parse_outcomes(lines: Iterable[str]) -> list[Outcome]:
    """The loop's outcome lines; a line cut by a SIGKILL (the last one) is skipped."""
    outcomes = []
    for line in lines:
        fields = line.split()
        if len(fields) != 5 or fields[2] not in ("committed", "aborted"):
            continue
        try:
            at = float(fields[4])
        except ValueError:
            continue
        outcomes.append(
            Outcome(
                attempt=(int(fields[0]), int(fields[1])),
                committed=fields[2] == "committed",
                records=int(fields[3]),
                at=at,
            )
        )
    return outcomes


@dataclass(frozen=True, slots=True, kw_only=True)
class EosReport:
    expected: int  # input records
    read_committed: int
    read_uncommitted: int
    attempts_committed: int  # distinct attempts read committed
    attempts_aborted: int  # attempts read uncommitted only
    aborted_records: int  # their records
    lost: list[tuple[str, int]]
    duplicated: list[tuple[str, int]]
    reordered: list[str]
    aborted_visible: list[Attempt]
    partial: list[Attempt]
    committed_missing: list[Attempt]
    unreadable: list[bytes]
    counts: dict[str, int]  # exact count of each violation

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        lines = [
            f"{self.expected} input records; output read committed {self.read_committed},"
            f" uncommitted {self.read_uncommitted}",
            f"transactions: {self.attempts_committed} committed,"
            f" {self.attempts_aborted} aborted ({self.aborted_records} records"
            " written by aborted attempts, none read committed)"
            if not self.aborted_visible
            else f"transactions: {self.attempts_committed} committed,"
            f" {self.attempts_aborted} aborted ({self.aborted_records} records)",
        ]
        shown = {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "aborted attempts read committed": self.aborted_visible,
            "attempts read committed in part": self.partial,
            "attempts committed but not read": self.committed_missing,
            "unreadable values": self.unreadable,
        }
        for name, found in shown.items():
            count = self.counts[name]
            if count:
                lines.append(f"{name}: {count}, e.g. {found}")
        lines.append("exactly once: " + ("yes" if self.ok else "NO"))
        return "\n".join(lines)


def check(
    expected: Mapping[str, int],
    committed: Sequence[OutputRecord],
    uncommitted: Sequence[OutputRecord],
    outcomes: Sequence[Outcome],
) -> EosReport:
    """``expected``: the input's record count per key (seqs 0 to count - 1). ``committed`` and
    ``uncommitted``: the output read with each isolation level, in offset order per
    partition."""
    unreadable: list[bytes] = []

    def parsed(records: Sequence[OutputRecord]) -> list[tuple[OutputRecord, str, int, Attempt]]:
        rows = []
        for record in records:
            try:
                key, seq, run, txn = parse_output(record.value)
            except ValueError:
                unreadable.append(record.value)
                continue
            rows.append((record, key, seq, (run, txn)))
        return rows

    read = parsed(committed)
    everything = parsed(uncommitted)

    seen = Counter((key, seq) for _, key, seq, _ in read)
    wanted = {(key, seq) for key, count in expected.items() for seq in range(count)}
    lost = sorted(wanted - set(seen))
    duplicated = sorted(item for item, n in seen.items() if n > 1)

    by_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for record, key, seq, _ in read:
        by_key[key].append((record.partition, record.offset, seq))
    reordered = []
    for key, rows in sorted(by_key.items()):
        partitions = {partition for partition, _, _ in rows}
        seqs = [seq for _, _, seq in sorted(rows)]
        if len(partitions) > 1 or any(b <= a for a, b in itertools.pairwise(seqs)):
            reordered.append(f"{key}: partitions {sorted(partitions)}, seqs {seqs[:50]}")

    committed_records = Counter(attempt for _, _, _, attempt in read)
    all_records = Counter(attempt for _, _, _, attempt in everything)
    aborted_by_loop = {o.attempt for o in outcomes if not o.committed}
    committed_by_loop = {o.attempt for o in outcomes if o.committed}
    aborted_visible = sorted(aborted_by_loop & set(committed_records))
    partial = sorted(a for a, n in committed_records.items() if n != all_records[a])
    committed_missing = sorted(committed_by_loop - set(committed_records))
    aborted = {a: n for a, n in all_records.items() if a not in committed_records}

    found = {
        "lost": lost,
        "duplicated": duplicated,
        "reordered": reordered,
        "aborted attempts read committed": aborted_visible,
        "attempts read committed in part": partial,
        "attempts committed but not read": committed_missing,
        "unreadable values": unreadable,
    }
    return EosReport(
        expected=len(wanted),
        read_committed=len(committed),
        read_uncommitted=len(uncommitted),
        attempts_committed=len(committed_records),
        attempts_aborted=len(aborted),
        aborted_records=sum(aborted.values()),
        lost=lost[:MAX_REPORTED],
        duplicated=duplicated[:MAX_REPORTED],
        reordered=reordered[:MAX_REPORTED],
        aborted_visible=aborted_visible[:MAX_REPORTED],
        partial=partial[:MAX_REPORTED],
        committed_missing=committed_missing[:MAX_REPORTED],
        unreadable=unreadable[:MAX_REPORTED],
        counts={name: len(items) for name, items in found.items()},
    )


def read_topic(
    bootstrap: str, topic: str, ends: Mapping[int, int], *, isolation: str, timeout_s: float = 60.0
) -> list[OutputRecord]:
    """Every record of ``topic`` below ``ends`` (partition -> offset (exclusive): the HW, or for
    read_committed the LSO) with ``isolation`` ("read_committed" or "read_uncommitted").
    Control records take offsets but are not delivered: a partition is read once a record at
    the end minus one is delivered or the consumer meets the partition's end (EOF) there."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"eos-checker-{isolation}",
            "group.id": f"eos-checker-{isolation}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        records: list[OutputRecord] = []
        deadline = time.monotonic() + timeout_s
        position = dict.fromkeys(ends, 0)  # next offset to read, as far as this read knows
        while any(position[p] < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} ({isolation}): read up to {position}, not {ends}")
            for message in consumer.consume(500, 0.5):
                partition, offset = int(message.partition() or 0), int(message.offset() or 0)
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # offset: the end it met
                        position[partition] = max(position[partition], offset)
                    continue
                position[partition] = max(position[partition], offset + 1)
                if offset < ends[partition]:
                    records.append(
                        OutputRecord(partition=partition, offset=offset, value=message.value())
                    )
        return records
    finally:
        consumer.close()
