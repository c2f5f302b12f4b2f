"""Kafka's ``AbstractFetcherThread``: the part of a follower fetcher thread that knows no log.

A fetcher thread owns the fetch states of the partitions it fetches from one leader broker
(``PartitionFetchState`` per partition, in round-robin order) and runs rounds of ``do_work``
until it is shut down; the rounds themselves (truncation, Fetch, applying the answers to the
logs, the remote log auxiliary state) are ``ReplicaFetcherThread``'s. Here: the thread's
lifecycle, the partition states and lags as the ``ReplicaFetcherManager`` reads and removes
them, back-off of partitions (``delay_partitions``), a request failed as a whole, and the
partitions given up on (``FailedPartitions``).

Locking (Kafka's ``partitionMapLock``): ``_lock`` (a condition) guards the fetch states and
lags; a thread with nothing to fetch waits on it until a partition is added or removed or a
back-off ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from storage_core.client.errors import ClientError
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.replication.fetch_state import FetchStates, PartitionFetchState
from storage_core.replication.leader_end_point import RemoteLeaderEndPoint
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig

# The lines keep the logger they were always written with.
logger = logging.getLogger("storage_core.replication.replica_fetcher_thread")

_IDLE_WAIT_MIN_MS = 10


class FailedPartitions:
    """Partitions a fetcher gave up on (storage errors, unexpected failures) until they are
    added again (Kafka's ``FailedPartitions``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: set[TopicPartition] = set()

    def add(self, tp: TopicPartition) -> None:
        with self._lock:
            self._partitions.add(tp)

    def remove_all(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            self._partitions.difference_update(tps)

    def __contains__(self, tp: object) -> bool:
        with self._lock:
            return tp in self._partitions

    def __len__(self) -> int:
        with self._lock:
            return len(self._partitions)

    def partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._partitions)


class AbstractFetcherThread(threading.Thread):
    """A fetcher thread's state and lifecycle; ``do_work`` is one round of fetching."""

    def __init__(
        self,
        *,
        name: str,
        leader: RemoteLeaderEndPoint,
        config: ReplicaFetcherConfig,
        failed_partitions: FailedPartitions,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.leader = leader
        self._config = config
        self._failed = failed_partitions
        self._clock = clock
        self._lock = threading.Condition()
        self._states = FetchStates()
        self._lags: dict[TopicPartition, int] = {}
        self._running = True
        self.fetch_requests = 0  # Kafka's RequestsPerSec, as a count
        self.bytes_fetched = 0  # Kafka's BytesPerSec, as a count

    # ================================================================== lifecycle
    def run(self) -> None:
        logger.info(
            "fetcher starting fetcher=%s leader=%d", self.name, self.leader.source_broker_id
        )
        while self._running:
            try:
                self.do_work()
            except Exception:  # a bug must not stop replication of every partition
                logger.exception("fetcher round failed fetcher=%s", self.name)
                with self._lock:
                    self._delay_partitions(self._states, self._config.fetch_backoff_ms)
                    self._lock.wait(self._config.fetch_backoff_ms / 1000)
        logger.info("fetcher stopped fetcher=%s", self.name)

    def initiate_shutdown(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify_all()
        self.leader.initiate_close()

    def shutdown(self) -> None:
        """Stop the thread and close its connection; returns once the thread has ended."""
        self.initiate_shutdown()
        if self.is_alive():
            self.join()
        self.leader.close()

    @property
    def is_running(self) -> bool:
        return self._running

    # ================================================================== partitions
    def remove_partitions(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionFetchState]:
        """Stop fetching ``tps``; once this returns no append can happen for them."""
        removed: dict[TopicPartition, PartitionFetchState] = {}
        with self._lock:
            for tp in tps:
                state = self._states.pop(tp, None)
                self._lags.pop(tp, None)
                if state is not None:
                    removed[tp] = state
            self._lock.notify_all()
        return removed

    def remove_all_partitions(self) -> dict[TopicPartition, PartitionFetchState]:
        with self._lock:
            return self.remove_partitions(list(self._states))

    @property
    def partition_count(self) -> int:
        with self._lock:
            return len(self._states)

    def partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._states)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        with self._lock:
            return self._states.get(tp)

    def lag(self, tp: TopicPartition) -> int | None:
        """Leader HW minus the next fetch offset at the last response (Kafka's ConsumerLag)."""
        with self._lock:
            return self._lags.get(tp)

    def max_lag(self) -> int:
        with self._lock:
            return max(self._lags.values(), default=0)

    # ================================================================== the loop
    def do_work(self) -> None:
        raise NotImplementedError

    def _now_ms(self) -> int:
        return self._clock.nanoseconds() // 1_000_000

    def _idle_wait_ms(self, now_ms: int) -> int:
        waits = [
            s.delay_until_ms - now_ms
            for s in self._states.values()
            if s.delay_until_ms is not None and s.delay_until_ms > now_ms
        ]
        return max(min([self._config.fetch_backoff_ms, *waits]), _IDLE_WAIT_MIN_MS)

    # ------------------------------------------------------------------ errors
    def _on_request_failure(
        self, api: str, error: ClientError, partitions: Iterable[TopicPartition]
    ) -> None:
        """A request failed as a whole (connection, timeout, framing): reconnect later."""
        self.leader.disconnect()
        if not self._running:
            return
        logger.warning(
            "request to the leader failed, backing off fetcher=%s leader=%d api=%s"
            " backoff_ms=%d error=%s",
            self.name,
            self.leader.source_broker_id,
            api,
            self._config.fetch_backoff_ms,
            error,
        )
        with self._lock:
            self._delay_partitions(partitions, self._config.fetch_backoff_ms)

    def _delay_partitions(self, tps: Iterable[TopicPartition], backoff_ms: int) -> None:
        """Back off (lock held)."""
        now_ms = self._now_ms()
        for tp in list(tps):
            state = self._states.get(tp)
            if state is not None:
                self._states[tp] = state.delayed(now_ms, backoff_ms)
        self._lock.notify_all()

    def _mark_partition_failed(self, tp: TopicPartition) -> None:
        self._failed.add(tp)
        self._states.pop(tp, None)
        self._lags.pop(tp, None)
        logger.warning("partition marked as failed partition=%s fetcher=%s", tp, self.name)
