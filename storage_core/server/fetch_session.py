"""Incremental fetch sessions on the leader (KIP-227; Kafka's ``FetchSession.scala``).

A fetcher that holds a session sends only the partitions whose fetch parameters changed
(and those to forget); the leader keeps the rest of the partition set (``CachedPartition``)
and answers only the partitions with something new: records, a moved high watermark or log
start offset, an error or a diverging epoch. An idle follower then sends and receives a few
bytes per round instead of every partition it follows.

Request metadata (``session_id``, ``session_epoch``), as Kafka's ``FetchMetadata``::

    (0, -1)  sessionless full fetch (FINAL_EPOCH): no session is created; a named one closes
    (x, 0)   full fetch (INITIAL_EPOCH): closes session x (if any), asks for a new one
    (x, n>0) incremental fetch n of session x: FETCH_SESSION_ID_NOT_FOUND if the session is
             unknown (evicted, broker restarted), INVALID_FETCH_SESSION_EPOCH if n is not the
             epoch expected, FETCH_SESSION_TOPIC_ID_ERROR if the request's version uses topic
             ids (v13+) and the session does not, or the other way round

Each successful incremental fetch moves the session's epoch to the next (``next_epoch``:
1, 2, ..., 2^31-1, then 1). Sessions are created for followers only (privileged, as Kafka's
are); a consumer's full fetch is answered sessionless (session id 0), which KIP-227 allows and
every client handles by sending full fetches.

``FetchSessionCache`` holds at most ``max.incremental.fetch.session.cache.slots`` sessions.
When it is full, a new session may evict (Kafka's ``tryEvict``) the least recently used one
if unused for ``eviction_ms``; otherwise the least valuable evictable one (ordered by
privileged, then partition count, then id) if the new one is worth more: followers' sessions
are evictable by consumers' only once older than ``eviction_ms``. A fetcher whose session was
evicted gets FETCH_SESSION_ID_NOT_FOUND and falls back to a full fetch.

Thread-safety: none; the broker's event loop thread owns the cache and the sessions.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.metrics.registry import KafkaMetricsRegistry, MetricName
from storage_core.protocol.fetch_metadata import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    INVALID_SESSION_ID,
    FetchMetadata,
    next_epoch,
)
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.server.fetch_response import FetchPartitionResponse

logger = logging.getLogger(__name__)

FIRST_TOPIC_ID_VERSION = 13
# Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000


class Closeable(Protocol):
    def close(self) -> None: ...


class CachedPartition:
    """A partition of a session: the fetcher's last request parameters and what the last
    response told it (``high_watermark``: -1 after an error, so the next answer is sent;
    ``local_log_start_offset``: this broker's log start offset). For idle partitions
    ``fetch_sessions`` keeps ``partition``, the hosted partition as of the session's
    ``partitions_generation``, and ``quiet``: the session's fetches of it, once the leader
    counts them as fetches at its log end (``replica.QuietFetches``). ``forgotten``: the
    fetcher removed it from the session."""

    __slots__ = (
        "answered_epoch",
        "fetch_offset",
        "fetcher_log_start_offset",
        "forgotten",
        "high_watermark",
        "last_fetched_epoch",
        "leader_epoch",
        "local_log_start_offset",
        "max_bytes",
        "partition",
        "quiet",
        "topic_id",
        "topic_partition",
    )

    def __init__(self, tp: TopicPartition, request: FetchRequestPartition) -> None:
        self.topic_partition = tp
        self.high_watermark = -1
        self.local_log_start_offset = -1
        self.answered_epoch = -1  # the session epoch it last returned records in
        self.partition: object | None = None
        self.quiet: SessionQuietFetches | None = None
        self.forgotten = False
        self.update_request_params(request)

    def update_request_params(self, request: FetchRequestPartition) -> None:
        self.topic_id = request.topic_id
        self.max_bytes = request.max_bytes
        self.fetch_offset = request.fetch_offset
        self.fetcher_log_start_offset = request.log_start_offset
        self.leader_epoch = request.current_leader_epoch
        self.last_fetched_epoch = request.last_fetched_epoch

    def request_data(self) -> FetchRequestPartition:
        return FetchRequestPartition(
            fetch_offset=self.fetch_offset,
            max_bytes=self.max_bytes,
            current_leader_epoch=self.leader_epoch,
            last_fetched_epoch=self.last_fetched_epoch,
            log_start_offset=self.fetcher_log_start_offset,
            topic_id=self.topic_id,
        )

    def maybe_update_response_data(self, response: FetchPartitionResponse, update: bool) -> bool:
        """Kafka's ``maybeUpdateResponseData``: whether the partition goes into an incremental
        response (records, a new HW or log start offset, an error, a diverging epoch); with
        ``update`` the cached HW and log start offset follow the response."""
        must_respond = response.records is not None and len(response.records) > 0
        if self.high_watermark != response.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = response.high_watermark
        if self.local_log_start_offset != response.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = response.log_start_offset
        if response.error_code != ErrorCode.none:
            if update:
                self.high_watermark = -1  # answered again once the error is gone
            must_respond = True
        if response.diverging_epoch is not None and response.diverging_epoch != (-1, -1):
            must_respond = True
        return must_respond


class SessionQuietFetches:
    """``replica.QuietFetches`` of a partition of a session: the session's fetches (their
    arrival: ``last_used_ms``) while the partition is in it."""

    __slots__ = ("_partition", "_session")

    def __init__(self, session: FetchSession, partition: CachedPartition) -> None:
        self._session = session
        self._partition = partition

    @property
    def quiet_fetch_ms(self) -> int:
        return -1 if self._partition.forgotten else self._session.last_used_ms


class FetchSession:
    """One fetcher's session: its partitions in round-robin order (a partition that returned
    records moves to the end, so the next response budget goes to the others first)."""

    __slots__ = (
        "cached_size",
        "creation_ms",
        "epoch",
        "id",
        "last_used_ms",
        "partitions",
        "partitions_generation",
        "privileged",
        "uses_topic_ids",
        "watch",
    )

    def __init__(
        self,
        *,
        session_id: int,
        privileged: bool,
        partitions: dict[TopicPartition, CachedPartition],
        uses_topic_ids: bool,
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1  # the size the cache accounted for; -1: not in the cache
        self.partitions_generation = -1  # see CachedPartition.partition
        # What watches the partitions for the session's fetches (fetch_sessions), closed
        # when the session leaves the cache.
        self.watch: Closeable | None = None

    def update(
        self,
        fetch_data: Mapping[TopicPartition, FetchRequestPartition],
        to_forget: Iterable[TopicPartition],
    ) -> tuple[int, int, int]:
        """Apply an incremental request; ``(added, updated, removed)`` counts."""
        added = updated = removed = 0
        for tp, request in fetch_data.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(tp, request)
                added += 1
            else:
                cached.update_request_params(request)
                updated += 1
        for tp in to_forget:
            forgotten = self.partitions.pop(tp, None)
            if forgotten is not None:
                forgotten.forgotten = True
                removed += 1
        return added, updated, removed

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: the smallest is evicted first."""
        return (self.privileged, self.cached_size, self.id)

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged},"
            f" partitions={len(self.partitions)}, uses_topic_ids={self.uses_topic_ids},"
            f" epoch={self.epoch})"
        )


class FetchSessionCache:
    """The leader's sessions (Kafka's ``FetchSessionCacheShard``, one shard: one loop thread).

    ``new_session_id`` draws positive random ids not in use (``random_int`` is injectable
    for tests). ``on_removed`` learns each session that leaves the cache (closed, evicted)."""

    def __init__(
        self,
        *,
        max_entries: int,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        random_int: Callable[[int, int], int] | None = None,
        on_evicted: Callable[[], None] = lambda: None,
    ) -> None:
        if max_entries < 0:
            raise ValueError(
                f"max.incremental.fetch.session.cache.slots must be >= 0, got {max_entries}"
            )
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._random_int = random_int or random.SystemRandom().randint
        self._sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0
        self._on_evicted = on_evicted

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> Iterator[FetchSession]:
        return iter(list(self._sessions.values()))

    def new_session_id(self) -> int:
        while True:
            session_id = self._random_int(1, INT32_MAX)
            if session_id != INVALID_SESSION_ID and session_id not in self._sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        *,
        privileged: bool,
        size: int,
        uses_topic_ids: bool,
        create_partitions: Callable[[], dict[TopicPartition, CachedPartition]],
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache has no room for it."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(
            privileged, size, now_ms
        ):
            logger.debug("no fetch session created privileged=%s size=%d", privileged, size)
            return INVALID_SESSION_ID
        session = FetchSession(
            session_id=self.new_session_id(),
            privileged=privileged,
            partitions=create_partitions(),
            uses_topic_ids=uses_topic_ids,
            now_ms=now_ms,
        )
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        logger.debug("created fetch session %s", session)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's ``tryEvict``: a stale session (unused for ``eviction_ms``) goes first;
        else the least valuable evictable one, if the new session is worth more."""
        if not self._sessions:
            return False
        # Scans (the cache is full here, at most max_entries): Kafka's sorted lastUsed map.
        oldest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            logger.info("evicting stale fetch session %s", oldest)
            self._evict(oldest)
            return True
        candidates = [s for s in self._sessions.values() if self._is_evictable(s, privileged)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < least.evictable_key():
            return False
        logger.info("evicting fetch session %s for one of %d partitions", least, size)
        self._evict(least)
        return True

    def _is_evictable(self, session: FetchSession, by_privileged: bool) -> bool:
        """As of its last use (Kafka files sessions into its evictable maps on touch): any
        session created ``eviction_ms`` before; for a privileged newcomer, also any
        unprivileged one."""
        old = session.last_used_ms - session.creation_ms > self.eviction_ms
        return old or (by_privileged and not session.privileged)

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1
        self._on_evicted()

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return None
        self.total_partitions -= max(session.cached_size, 0)
        session.cached_size = -1
        if session.watch is not None:
            session.watch.close()
            session.watch = None
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Mark ``session`` used now and account for its current size."""
        session.last_used_ms = now_ms
        self.total_partitions += len(session.partitions) - max(session.cached_size, 0)
        session.cached_size = len(session.partitions)


# ---------------------------------------------------------------------------- contexts
@dataclass(frozen=True, slots=True)
class FetchContextResponse:
    """What a fetch answers at the top level and which partitions it lists, in order."""

    error_code: int
    session_id: int
    partitions: list[tuple[TopicPartition, FetchPartitionResponse]]


class FetchContext:
    """How one Fetch request relates to sessions (Kafka's ``FetchContext``)."""

    error_code = int(ErrorCode.none)

    def partitions(self) -> dict[TopicPartition, FetchRequestPartition]:
        """The partitions to read, with the parameters to read them with."""
        raise NotImplementedError

    def update_and_generate_response_data(
        self, responses: Mapping[TopicPartition, FetchPartitionResponse]
    ) -> FetchContextResponse:
        raise NotImplementedError


class SessionErrorContext(FetchContext):
    """A session error: the response carries it and no partitions."""

    def __init__(self, error: ErrorCode, metadata: FetchMetadata) -> None:
        self.error_code = int(error)
        self.metadata = metadata

    def partitions(self) -> dict[TopicPartition, FetchRequestPartition]:
        return {}

    def update_and_generate_response_data(
        self, responses: Mapping[TopicPartition, FetchPartitionResponse]
    ) -> FetchContextResponse:
        return FetchContextResponse(self.error_code, INVALID_SESSION_ID, [])


class SessionlessFetchContext(FetchContext):
    """A full fetch answered without a session (session id 0)."""

    def __init__(self, fetch_data: dict[TopicPartition, FetchRequestPartition]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> dict[TopicPartition, FetchRequestPartition]:
        return self.fetch_data

    def update_and_generate_response_data(
        self, responses: Mapping[TopicPartition, FetchPartitionResponse]
    ) -> FetchContextResponse:
        return FetchContextResponse(0, INVALID_SESSION_ID, list(responses.items()))


class FullFetchContext(SessionlessFetchContext):
    """A full fetch that creates a session once answered (if the cache has room)."""

    def __init__(
        self,
        cache: FetchSessionCache,
        now_ms: Callable[[], int],
        fetch_data: dict[TopicPartition, FetchRequestPartition],
        *,
        uses_topic_ids: bool,
        is_from_follower: bool,
    ) -> None:
        super().__init__(fetch_data)
        self._cache = cache
        self._now_ms = now_ms
        self._uses_topic_ids = uses_topic_ids
        self._is_from_follower = is_from_follower

    def update_and_generate_response_data(
        self, responses: Mapping[TopicPartition, FetchPartitionResponse]
    ) -> FetchContextResponse:
        def create_partitions() -> dict[TopicPartition, CachedPartition]:
            cached: dict[TopicPartition, CachedPartition] = {}
            for tp, response in responses.items():
                request = self.fetch_data.get(tp)
                if request is None:
                    continue
                partition = CachedPartition(tp, request)
                partition.maybe_update_response_data(response, True)
                cached[tp] = partition
            return cached

        session_id = self._cache.maybe_create_session(
            self._now_ms(),
            privileged=self._is_from_follower,
            size=len(responses),
            uses_topic_ids=self._uses_topic_ids,
            create_partitions=create_partitions,
        )
        return FetchContextResponse(0, session_id, list(responses.items()))


class IncrementalFetchContext(FetchContext):
    """An incremental fetch of a session: every partition of the session is considered;
    the response lists only those with something new (Kafka's ``IncrementalFetchContext``)."""

    def __init__(self, metadata: FetchMetadata, session: FetchSession) -> None:
        self.metadata = metadata
        self.session = session

    def partitions(self) -> dict[TopicPartition, FetchRequestPartition]:
        return {tp: p.request_data() for tp, p in self.session.partitions.items()}

    def update_and_generate_response_data(
        self, responses: Mapping[TopicPartition, FetchPartitionResponse]
    ) -> FetchContextResponse:
        session = self.session
        if session.epoch != next_epoch(self.metadata.epoch):
            # Another request of the session came in between: this one is stale.
            logger.info(
                "incremental fetch session %d expected epoch %d, got %d: possible duplicate"
                " request",
                session.id,
                next_epoch(self.metadata.epoch),
                session.epoch,
            )
            return FetchContextResponse(int(ErrorCode.invalid_fetch_session_epoch), session.id, [])
        listed: list[tuple[TopicPartition, FetchPartitionResponse]] = []
        for tp, response in responses.items():
            cached = session.partitions.get(tp)
            if cached is None or not cached.maybe_update_response_data(response, True):
                continue
            listed.append((tp, response))
            if response.records is not None and len(response.records) > 0:
                session.partitions[tp] = session.partitions.pop(tp)  # round robin
                cached.answered_epoch = session.epoch
        return FetchContextResponse(0, session.id, listed)


class FetchManager:
    """Makes each Fetch request's context (Kafka's ``FetchManager.newContext``)."""

    def __init__(self, cache: FetchSessionCache, now_ms: Callable[[], int]) -> None:
        self.cache = cache
        self._now_ms = now_ms

    @staticmethod
    def for_broker(
        *, max_entries: int, now_ms: Callable[[], int], registry: KafkaMetricsRegistry
    ) -> FetchManager:
        """The broker's manager, with Kafka's gauges ``kafka.server:type=FetchSessionCache,
        name=NumIncrementalFetchSessions|NumIncrementalFetchPartitionsCached`` and meter
        ``IncrementalFetchSessionEvictionsPerSec``."""
        evictions = registry.meter(_cache_metric("IncrementalFetchSessionEvictionsPerSec"))
        cache = FetchSessionCache(max_entries=max_entries, on_evicted=evictions.mark)
        registry.gauge(_cache_metric("NumIncrementalFetchSessions"), lambda: len(cache))
        registry.gauge(
            _cache_metric("NumIncrementalFetchPartitionsCached"), lambda: cache.total_partitions
        )
        return FetchManager(cache, now_ms)

    def new_context(
        self,
        *,
        version: int,
        metadata: FetchMetadata,
        is_follower: bool,
        fetch_data: dict[TopicPartition, FetchRequestPartition],
        to_forget: Iterable[TopicPartition],
    ) -> FetchContext:
        uses_topic_ids = version >= FIRST_TOPIC_ID_VERSION
        if metadata.is_full:
            # A full fetch closes the session it names.
            if (
                metadata.session_id != INVALID_SESSION_ID
                and self.cache.remove(metadata.session_id) is not None
            ):
                logger.debug("full fetch closed fetch session %d", metadata.session_id)
            if metadata.epoch == FINAL_EPOCH or not is_follower:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(
                self.cache,
                self._now_ms,
                fetch_data,
                uses_topic_ids=uses_topic_ids,
                is_from_follower=is_follower,
            )
        session = self.cache.get(metadata.session_id)
        if session is None:
            logger.debug("fetch session %d not found", metadata.session_id)
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found, metadata)
        if session.epoch != metadata.epoch:
            logger.debug(
                "fetch session %d expected epoch %d, got %d",
                session.id,
                session.epoch,
                metadata.epoch,
            )
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch, metadata)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error, metadata)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            # Nothing left to fetch: the session closes and the answer is sessionless.
            self.cache.remove(session.id)
            return SessionlessFetchContext(fetch_data)
        self.cache.touch(session, self._now_ms())
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(metadata, session)


def _cache_metric(name: str) -> MetricName:
    return MetricName(group="kafka.server", type="FetchSessionCache", name=name)
