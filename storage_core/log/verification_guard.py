"""Transaction verification state of a producer on one partition (KIP-890 part 1): Kafka's
``VerificationGuard`` and ``VerificationStateEntry``.

A leader that sees a transactional batch from a producer without an ongoing transaction on
the partition asks the transaction coordinator whether the partition was added to the
transaction. Before asking it creates (or reuses) the producer's ``VerificationStateEntry``,
whose guard the answer carries back to the append: the batch is written only if the
partition's entry still holds that same guard. Any transactional append of the producer
(data or a marker) clears the entry, so that a marker written between the question and the
append (the transaction ended meanwhile) makes the late append fail instead of opening a
transaction the coordinator does not know of (a hanging transaction). A fresh guard per
entry rules out the ABA case: verify, abort marker, a new transaction not knowing the
partition, then the stale answer.

The entry also keeps the lowest sequence seen (with its epoch): while the producer's first
batch waits for verification, a higher sequence of the same epoch is refused as out of
order, so that a retried lower batch is not overtaken.

Both are immutable values; an entry changes by building a new one with the same guard.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, replace
from typing import ClassVar

_ids = itertools.count(1)
_ids_lock = threading.Lock()


def _next_guard_value() -> int:
    with _ids_lock:
        return next(_ids)


@dataclass(frozen=True, slots=True)
class VerificationGuard:
    """Identifies one verification of one producer on one partition (Kafka's
    ``VerificationGuard``). ``SENTINEL`` (value 0) stands for "no guard": it verifies
    nothing, not even itself."""

    value: int

    SENTINEL: ClassVar[VerificationGuard]

    @staticmethod
    def create() -> VerificationGuard:
        """A guard no other guard of this process equals."""
        return VerificationGuard(_next_guard_value())

    def verify(self, verifying_guard: VerificationGuard) -> bool:
        """True if ``verifying_guard`` (carried by an append) is this guard, and not the
        sentinel."""
        return verifying_guard.value != 0 and verifying_guard == self


VerificationGuard.SENTINEL = VerificationGuard(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class VerificationStateEntry:
    """A producer waiting for verification on a partition (Kafka's
    ``VerificationStateEntry``): when it was created (``timestamp_ms``, for expiry with the
    producer state entries), its guard, and the lowest sequence (with its epoch) of the
    batches that asked for it."""

    timestamp_ms: int
    verification_guard: VerificationGuard
    lowest_sequence: int
    epoch: int

    @staticmethod
    def create(timestamp_ms: int, sequence: int, epoch: int) -> VerificationStateEntry:
        return VerificationStateEntry(
            timestamp_ms=timestamp_ms,
            verification_guard=VerificationGuard.create(),
            lowest_sequence=sequence,
            epoch=epoch,
        )

    def with_lowest_sequence_and_epoch(
        self, incoming_sequence: int, incoming_epoch: int
    ) -> VerificationStateEntry:
        """Kafka's ``maybeUpdateLowestSequenceAndEpoch``: a lower sequence of the same epoch
        becomes the lowest; a higher epoch restarts the sequence at the incoming one. The
        guard stays."""
        if incoming_epoch > self.epoch:
            return replace(self, epoch=incoming_epoch, lowest_sequence=incoming_sequence)
        if incoming_epoch == self.epoch and incoming_sequence < self.lowest_sequence:
            return replace(self, lowest_sequence=incoming_sequence)
        return self
