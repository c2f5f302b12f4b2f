"""How far a fetch may read (Kafka's ``FetchIsolation``).

``LOG_END``: a follower replica reads up to the leader's log end (the HW moves once the
followers have the records). ``HIGH_WATERMARK``: a read_uncommitted consumer (isolation level
0) reads below the high watermark. ``TXN_COMMITTED``: a read_committed consumer (isolation
level 1) reads below the last stable offset and gets the aborted transactions of what it
read, so that it can drop their records.
"""

from __future__ import annotations

import enum

READ_COMMITTED = 1
"""The Fetch and ListOffsets ``isolation_level`` of read_committed consumers."""


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"

    @staticmethod
    def of(replica_id: int, isolation_level: int) -> FetchIsolation:
        """Kafka's ``FetchIsolation.of``: replicas read to the log end, consumers by level."""
        if replica_id >= 0:
            return FetchIsolation.LOG_END
        if isolation_level == READ_COMMITTED:
            return FetchIsolation.TXN_COMMITTED
        return FetchIsolation.HIGH_WATERMARK
