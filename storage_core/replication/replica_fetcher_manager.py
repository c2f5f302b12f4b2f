"""The follower's fetcher threads (Kafka's ``AbstractFetcherManager`` / ``ReplicaFetcherManager``).

A followed partition goes to the thread keyed ``(leader broker id, fetcher id)``, where the
fetcher id is Kafka's ``abs(31 * topic.hashCode() + partition) % num.replica.fetchers`` (Java's
``String.hashCode``, so the same partitions share a thread as on a Kafka broker). A thread is
started on first use and shut down once idle (``shutdown_idle_fetcher_threads``).

``max_lag`` is Kafka's ``ReplicaFetcherManager`` ``MaxLag`` gauge: the largest lag (leader's
high watermark minus the follower's next fetch offset, at the last response) over every
partition of every thread.

Thread-safety: every method may be called from any thread; ``_lock`` guards the thread map.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.metrics.registry import KafkaMetricsRegistry, MetricName
from storage_core.replication.abstract_fetcher_thread import FailedPartitions
from storage_core.replication.fetch_state import InitialFetchState, PartitionFetchState
from storage_core.replication.leader_end_point import EndpointOf, RemoteLeaderEndPoint
from storage_core.replication.replica_fetcher_config import (
    BrokerConfigSource,
    ReplicaFetcherConfig,
)
from storage_core.replication.replica_fetcher_thread import (
    GetPartition,
    GetRemoteLogManager,
    ReplicaFetcherThread,
)
from storage_core.security.client_transport import PLAINTEXT_CLIENT, ClientSecurityConfig

logger = logging.getLogger(__name__)

_INT32_MASK = 0xFFFFFFFF
_CLIENT_ID = "Replica"  # Kafka's clientId tag of the ReplicaFetcherManager gauges


@dataclass(frozen=True, slots=True, order=True)
class BrokerIdAndFetcherId:
    broker_id: int
    fetcher_id: int


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around), as a signed int."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & _INT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's ``getFetcherId``: ``Utils.abs(31 * topic.hashCode() + partition) % n``."""
    mixed = (31 * java_string_hash(tp.topic) + tp.partition) & _INT32_MASK
    return (mixed & 0x7FFFFFFF) % num_fetchers  # Utils.abs: the sign bit dropped


def replica_fetcher_manager_metric(name: str) -> MetricName:
    return MetricName(
        group="kafka.server",
        type="ReplicaFetcherManager",
        name=name,
        tags=(("clientId", _CLIENT_ID),),
    )


class ReplicaFetcherManager:
    """Adds and removes followed partitions on per-leader fetcher threads."""

    def __init__(
        self,
        *,
        broker_id: int,
        config: ReplicaFetcherConfig | BrokerConfigSource,
        get_partition: GetPartition,
        endpoint_of: EndpointOf,
        truncation_on_fetch: bool = True,
        remote_log_manager: GetRemoteLogManager | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_bytes_appended: Callable[[int], None] = lambda size_bytes: None,
        security: ClientSecurityConfig = PLAINTEXT_CLIENT,
    ) -> None:
        """``on_bytes_appended``: the bytes of each follower append (ReplicationBytesInPerSec);
        ``security``: how the fetchers connect to leaders (the inter-broker listener's)."""
        self.broker_id = broker_id
        self._security = security
        self._on_bytes_appended = on_bytes_appended
        # The broker's RemoteLogManager (built after this manager, hence asked each time):
        # followers build their remote log auxiliary state through it.
        self._remote_log_manager = remote_log_manager
        self.config = (
            config
            if isinstance(config, ReplicaFetcherConfig)
            else ReplicaFetcherConfig.from_broker_config(config)
        )
        self._get_partition = get_partition
        self._endpoint_of = endpoint_of
        self._truncation_on_fetch = truncation_on_fetch
        self._clock = clock
        self._lock = threading.RLock()
        self._threads: dict[BrokerIdAndFetcherId, ReplicaFetcherThread] = {}
        self.failed_partitions = FailedPartitions()
        self._closed = False

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id_for(tp, self.config.num_replica_fetchers)

    # ------------------------------------------------------------------ partitions
    def add_fetcher_for_partitions(
        self, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None:
        """Fetch ``partitions`` from their leaders (Kafka's ``addFetcherForPartitions``)."""
        groups: dict[BrokerIdAndFetcherId, dict[TopicPartition, InitialFetchState]] = {}
        for tp, initial in partitions.items():
            key = BrokerIdAndFetcherId(initial.leader_id, self.fetcher_id(tp))
            groups.setdefault(key, {})[tp] = initial
        with self._lock:
            if self._closed:
                raise RuntimeError("the replica fetcher manager is shut down")
            for key, initial_states in sorted(groups.items()):
                thread = self._threads.get(key)
                if thread is None or not thread.is_alive():
                    thread = self._create_fetcher_thread(key)
                    self._threads[key] = thread
                    thread.start()
                thread.add_partitions(initial_states)
                logger.info(
                    "added fetcher leader=%d fetcher_id=%d partitions=%s",
                    key.broker_id,
                    key.fetcher_id,
                    ",".join(str(tp) for tp in sorted(initial_states)),
                )

    def _create_fetcher_thread(self, key: BrokerIdAndFetcherId) -> ReplicaFetcherThread:
        name = f"ReplicaFetcherThread-{key.fetcher_id}-{key.broker_id}"
        leader = RemoteLeaderEndPoint(
            source_broker_id=key.broker_id,
            local_broker_id=self.broker_id,
            endpoint_of=self._endpoint_of,
            config=self.config,
            client_id=f"broker-{self.broker_id}-fetcher-{key.fetcher_id}",
            security=self._security,
        )
        return ReplicaFetcherThread(
            name=name,
            leader=leader,
            config=self.config,
            get_partition=self._get_partition,
            failed_partitions=self.failed_partitions,
            truncation_on_fetch=self._truncation_on_fetch,
            remote_log_manager=self._remote_log_manager,
            clock=self._clock,
            on_bytes_appended=self._on_bytes_appended,
        )

    def remove_fetcher_for_partitions(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionFetchState]:
        """Stop fetching ``partitions``; once this returns, no fetcher appends to their logs."""
        wanted = set(partitions)
        removed: dict[TopicPartition, PartitionFetchState] = {}
        with self._lock:
            for thread in self._threads.values():
                removed.update(thread.remove_partitions(wanted))
            self.failed_partitions.remove_all(wanted)
        if wanted:
            logger.info("removed fetcher partitions=%s", ",".join(str(tp) for tp in sorted(wanted)))
        return removed

    def shutdown_idle_fetcher_threads(self) -> int:
        """Stop the threads left without partitions; returns how many were stopped."""
        with self._lock:
            idle = [key for key, t in self._threads.items() if t.partition_count == 0]
            threads = [self._threads.pop(key) for key in idle]
        for thread in threads:
            thread.shutdown()
        return len(threads)

    def shutdown(self) -> None:
        """Stop every thread (Kafka's ``closeAllFetchers``): all are told first, then awaited."""
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
            self._threads.clear()
        for thread in threads:
            thread.initiate_shutdown()
        for thread in threads:
            thread.shutdown()
        logger.info("replica fetcher manager shut down broker=%d", self.broker_id)

    # ------------------------------------------------------------------ observation
    def fetcher_threads(self) -> dict[BrokerIdAndFetcherId, ReplicaFetcherThread]:
        with self._lock:
            return dict(self._threads)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        for thread in self.fetcher_threads().values():
            state = thread.fetch_state(tp)
            if state is not None:
                return state
        return None

    def lag(self, tp: TopicPartition) -> int | None:
        """The partition's lag (Kafka's per-partition ``ConsumerLag`` of the fetcher)."""
        for thread in self.fetcher_threads().values():
            lag = thread.lag(tp)
            if lag is not None:
                return lag
        return None

    def max_lag(self) -> int:
        """Kafka's ``MaxLag``: the largest partition lag over all fetcher threads (0 if none)."""
        return max((t.max_lag() for t in self.fetcher_threads().values()), default=0)

    def dead_thread_count(self) -> int:
        return sum(1 for t in self.fetcher_threads().values() if not t.is_alive())

    def register_metrics(self, registry: KafkaMetricsRegistry) -> None:
        """Kafka's gauges ``kafka.server:type=ReplicaFetcherManager,name=MaxLag|
        FailedPartitionsCount|DeadThreadCount,clientId=Replica``."""
        samples: dict[str, Callable[[], float]] = {
            "MaxLag": self.max_lag,
            "FailedPartitionsCount": lambda: len(self.failed_partitions),
            "DeadThreadCount": self.dead_thread_count,
        }
        for name, sample in samples.items():
            registry.gauge(replica_fetcher_manager_metric(name), sample)
