"""The session id and epoch a Fetch request carries (KIP-227; Kafka's ``FetchMetadata``),
shared by the leader's session cache and the follower's session handler.

    (0, -1)  sessionless full fetch (FINAL_EPOCH)
    (x, 0)   full fetch (INITIAL_EPOCH): closes session x (if any), asks for a new one
    (x, n>0) incremental fetch n of session x

Epochs go 1, 2, ..., 2^31-1, then 1 again (0 is INITIAL_EPOCH, never an incremental one);
after FINAL_EPOCH comes FINAL_EPOCH.
"""

from __future__ import annotations

from dataclasses import dataclass

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """A request's (or the next request's) session id and epoch."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))
