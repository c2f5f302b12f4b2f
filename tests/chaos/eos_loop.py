"""The exactly-once loop of ``tests.chaos.eos``: one process (so the nemesis can SIGKILL it)
running a confluent-kafka consume-transform-produce loop, KIP-447 style.

    python -m tests.chaos.eos_loop --bootstrap B --input IN --output OUT --group G
        --transactional-id T --run N --end 120,97,103 --outcomes FILE [--batch 10] [--pace-ms 100]

A read_committed consumer in group ``G`` (no auto commit) reads ``IN``; per batch a
transactional producer (``T``, the same id in every run, so a new run fences the one before)
begins a transaction, produces each record's transformation to ``OUT`` with the same key,
waits until they are written and ``--pace-ms`` more (the transaction stays open most of the
time, so that kills meet it open), adds the batch's next offsets with
``send_offsets_to_transaction`` and commits. An abortable error aborts the transaction and
rewinds the consumer to the group's committed offsets; a retriable one retries the step; a
fatal one ends the process with status 3 (the harness starts it again), and a call blocked
well past its timeout with status 5 (``Watchdog``).

Records: the input's key is ``k<n>`` and its value the key's sequence number (decimal); the
output's value is ``<key>|<seq>|<run>|<txn>``: which run and which of its transactions wrote
it, so that a reader tells the attempts apart.

``FILE`` gets a line per decided transaction, ``<run> <txn> committed|aborted <records>
<time.time()>``, written when the outcome is known (a run killed in between leaves it
unwritten). The loop exits 0 once the group's committed offsets of every input partition reach
``--end`` (the input's high watermarks: the input is filled before the loop starts).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

T = TypeVar("T")

TIMEOUT_S = 15.0  # of each transactional call; a retriable failure is tried again
RETRIES_MAX = 10  # per step, for retriable errors
EXIT_FATAL = 3
EXIT_UNRECOVERABLE = 4
EXIT_HUNG = 5
# A transactional call blocked this long past its own timeout is taken to be hung: librdkafka's
# coordinator requests do not check their timeout (confluentinc/librdkafka#5456), and a group
# coordinator cached from a broker that left the metadata is not looked up again (#5511), so
# send_offsets_to_transaction can block for good after the group coordinator's broker died.
HUNG_AFTER_S = 2 * TIMEOUT_S
TRANSACTION_TIMEOUT_MS = 20_000
SESSION_TIMEOUT_MS = 6_000


class FatalLoopError(Exception):
    """The producer (or the consumer) is in a state only a new process can leave: fenced by a
    newer run, or fatal in librdkafka's sense. The harness starts the loop again."""


def output_value(key: str, seq: int, run: int, txn: int) -> bytes:
    return f"{key}|{seq}|{run}|{txn}".encode()


def parse_output(value: bytes) -> tuple[str, int, int, int]:
    """``(key, seq, run, txn)`` of an output value; ValueError for anything else."""
    key, seq, run, txn = value.decode().split("|")
    return key, int(seq), int(run), int(txn)


class Watchdog(threading.Thread):
    """Ends the process with ``EXIT_HUNG`` when one call lasts longer than ``HUNG_AFTER_S``:
    a client call blocked inside librdkafka cannot be interrupted, and a new run (which fences
    this one) is what an operator would start."""

    def __init__(self) -> None:
        super().__init__(name="eos-loop-watchdog", daemon=True)
        self._lock = threading.Lock()
        self._call: tuple[str, float] | None = None  # (what, time.monotonic() at its start)

    @contextmanager
    def watching(self, what: str) -> Iterator[None]:
        with self._lock:
            self._call = (what, time.monotonic())
        try:
            yield
        finally:
            with self._lock:
                self._call = None

    def run(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                call = self._call
            if call is not None and time.monotonic() - call[1] > HUNG_AFTER_S:
                print(
                    f"{call[0]} blocked for {time.monotonic() - call[1]:.0f} s, past its"
                    f" {TIMEOUT_S:.0f} s timeout (librdkafka#5456, #5511); exiting for a new run",
                    flush=True,
                )
                os._exit(EXIT_HUNG)


WATCHDOG = Watchdog()


def retrying(step: Callable[[], T], what: str) -> T:
    """``step()``, again while it fails with a retriable error (at most ``RETRIES_MAX`` times);
    other errors go to the caller. Each call is watched by ``WATCHDOG``."""
    for attempt in range(RETRIES_MAX + 1):
        try:
            with WATCHDOG.watching(what):
                return step()
        except KafkaException as exception:
            error: KafkaError = exception.args[0]
            if error.fatal():
                raise FatalLoopError(f"{what}: {error}") from exception
            if not error.retriable() or error.txn_requires_abort() or attempt == RETRIES_MAX:
                raise
            print(f"{what}: retriable {error}, again", flush=True)
            time.sleep(0.2)
    raise AssertionError("unreachable")


class Loop:
    def __init__(self, args: argparse.Namespace, outcomes: IO[str]) -> None:
        self.args = args
        self.outcomes = outcomes
        self.end = [int(n) for n in args.end.split(",")]
        self.txn = 0
        self.producer = Producer(
            {
                "bootstrap.servers": args.bootstrap,
                "transactional.id": args.transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "client.id": f"eos-loop-{args.run}",
                **({"debug": args.debug} if args.debug else {}),
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": args.group,
                "client.id": f"eos-loop-{args.run}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 1000,
            }
        )

    def run(self) -> int:
        retrying(lambda: self.producer.init_transactions(TIMEOUT_S), "init_transactions")
        self.consumer.subscribe([self.args.input])
        while True:
            messages = [m for m in self.consumer.consume(self.args.batch, 1.0) if m.error() is None]
            if not messages:
                if self.finished():
                    print(f"run {self.args.run}: the input is done", flush=True)
                    return 0
                continue
            self.transform(messages)

    def transform(self, messages: list[Message]) -> None:
        """One transaction of ``messages``; aborted and rewound on an abortable error."""
        self.txn += 1
        offsets: dict[int, int] = {}
        try:
            self.producer.begin_transaction()
            for message in messages:
                key = message.key().decode()
                seq = int(message.value().decode())
                self.producer.produce(
                    self.args.output,
                    key=key,
                    value=output_value(key, seq, self.args.run, self.txn),
                )
                offsets[int(message.partition())] = int(message.offset()) + 1
            with WATCHDOG.watching("flush"):  # written, undecided: what a kill now leaves open
                self.producer.flush(TIMEOUT_S)
            positions = [TopicPartition(self.args.input, p, o) for p, o in offsets.items()]
            if self.args.offsets_apart:
                self.commit_offsets_apart(positions, len(messages))
                return
            time.sleep(self.args.pace_ms / 1000)
            metadata = self.consumer.consumer_group_metadata()
            retrying(
                lambda: self.producer.send_offsets_to_transaction(positions, metadata, TIMEOUT_S),
                "send_offsets_to_transaction",
            )
            retrying(lambda: self.producer.commit_transaction(TIMEOUT_S), "commit_transaction")
        except KafkaException as exception:
            error: KafkaError = exception.args[0]
            if error.fatal():
                raise FatalLoopError(f"transaction {self.txn}: {error}") from exception
            if not error.txn_requires_abort() and not error.retriable():
                print(f"transaction {self.txn}: {error}; aborting it", flush=True)
            else:
                print(f"transaction {self.txn}: abortable {error}", flush=True)
            retrying(lambda: self.producer.abort_transaction(TIMEOUT_S), "abort_transaction")
            self.decided("aborted", len(messages))
            self.rewind()
            return
        self.decided("committed", len(messages))

    def commit_offsets_apart(self, positions: list[TopicPartition], records: int) -> None:
        """The harness's check of itself (``--offsets-apart``): the transaction commits without
        the offsets, which the consumer commits afterwards, ``--pace-ms`` later. A kill in
        between has the next run transform the batch again: the output holds it twice, which
        the run must report."""
        retrying(lambda: self.producer.commit_transaction(TIMEOUT_S), "commit_transaction")
        self.decided("committed", records)
        time.sleep(self.args.pace_ms / 1000)
        retrying(lambda: self.consumer.commit(offsets=positions, asynchronous=False), "commit")

    def decided(self, outcome: str, records: int) -> None:
        self.outcomes.write(f"{self.args.run} {self.txn} {outcome} {records} {time.time():.3f}\n")
        self.outcomes.flush()

    def rewind(self) -> None:
        """Seek every assigned partition back to the group's committed offset (the log start
        where none is committed), so an aborted batch is read again."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        committed = retrying(
            lambda: self.consumer.committed(assignment, timeout=TIMEOUT_S), "committed"
        )
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def finished(self) -> bool:
        """Whether the group's committed offsets reached the input's end on every partition."""
        wanted = [TopicPartition(self.args.input, p) for p in range(len(self.end))]
        try:
            committed = self.consumer.committed(wanted, timeout=TIMEOUT_S)
        except KafkaException as exception:
            print(f"committed offsets not read: {exception}", flush=True)
            return False
        return all(tp.offset == self.end[tp.partition] for tp in committed)

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--end", required=True, help="the input's high watermarks, p0,p1,...")
    parser.add_argument("--outcomes", required=True)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--pace-ms", type=int, default=100)
    parser.add_argument("--debug", default="", help="librdkafka debug contexts of the producer")
    parser.add_argument(
        "--offsets-apart",
        action="store_true",
        help="commit the offsets after the transaction, not in it: duplicates (checks the checks)",
    )
    args = parser.parse_args(argv)
    WATCHDOG.start()
    with open(args.outcomes, "a", encoding="utf-8") as outcomes:
        loop = Loop(args, outcomes)
        try:
            status = loop.run()
        except FatalLoopError as error:
            print(f"run {args.run}: fatal: {error}", flush=True)
            return EXIT_FATAL
        except KafkaException as error:
            print(f"run {args.run}: unrecoverable: {error}", flush=True)
            return EXIT_UNRECOVERABLE
        loop.close()
        return status


if __name__ == "__main__":
    sys.exit(main())
