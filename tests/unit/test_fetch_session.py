"""Incremental fetch sessions on the leader (KIP-227): the cache's eviction rules and the
contexts of full, incremental and sessionless fetches, with the cases of Kafka's
``FetchSessionTest`` as the oracle (the same timings, sizes and expected survivors)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition, Uuid
from storage_core.protocol.fetch_metadata import (
    INVALID_SESSION_ID,
    FetchMetadata,
    next_epoch,
)
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.server.fetch_response import FetchPartitionResponse
from storage_core.server.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
)

FOO0, FOO1, BAR0 = TopicPartition("foo", 0), TopicPartition("foo", 1), TopicPartition("bar", 0)


def dummy_create(size: int) -> dict[TopicPartition, CachedPartition]:
    return {
        TopicPartition("t", i): CachedPartition(TopicPartition("t", i), request(i))
        for i in range(size)
    }


def request(
    fetch_offset: int, *, epoch: int = 5, topic_id: Uuid | None = None
) -> FetchRequestPartition:
    return FetchRequestPartition(
        fetch_offset=fetch_offset,
        max_bytes=100,
        current_leader_epoch=epoch,
        log_start_offset=0,
        topic_id=topic_id,
    )


def response(
    index: int,
    *,
    high_watermark: int,
    log_start_offset: int = 0,
    records: bytes = b"",
    error: ErrorCode = ErrorCode.none,
) -> FetchPartitionResponse:
    return FetchPartitionResponse(
        partition_index=index,
        error_code=int(error),
        high_watermark=high_watermark,
        last_stable_offset=high_watermark,
        log_start_offset=log_start_offset,
        records=records,
    )


def contains(cache: FetchSessionCache, *ids: int) -> bool:
    return {s.id for s in cache.sessions()} == set(ids)


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert [next_epoch(0), next_epoch(1), next_epoch(2**31 - 1)] == [1, 2, 1]
    assert next_epoch(-1) == -1


def test_session_ids_are_positive_and_unique() -> None:
    draws: Iterator[int] = iter([0, 7, 7, 9])
    cache = FetchSessionCache(max_entries=10, random_int=lambda _low, _high: next(draws))
    first = cache.maybe_create_session(
        0, privileged=True, size=1, uses_topic_ids=False, create_partitions=lambda: dummy_create(1)
    )
    second = cache.maybe_create_session(
        0, privileged=True, size=1, uses_topic_ids=False, create_partitions=lambda: dummy_create(1)
    )
    assert (first, second) == (7, 9)  # 0 is never an id, 7 was taken


def test_session_cache_evicts_stale_then_less_valuable_sessions() -> None:
    """Kafka's testSessionCache: 3 slots, sessions evictable after 100 ms."""
    cache = FetchSessionCache(max_entries=3, eviction_ms=100)

    def create(now: int, size: int, *, privileged: bool = False) -> int:
        return cache.maybe_create_session(
            now,
            privileged=privileged,
            size=size,
            uses_topic_ids=True,
            create_partitions=lambda: dummy_create(size),
        )

    id1, id2, id3 = create(0, 10), create(10, 20), create(20, 30)
    assert create(30, 40) == INVALID_SESSION_ID  # nothing stale, nothing old enough
    assert create(40, 5) == INVALID_SESSION_ID
    assert contains(cache, id1, id2, id3)
    cache.touch(_get(cache, id1), 200)
    id4 = create(210, 11)  # id2, unused since 10, is stale
    assert contains(cache, id1, id3, id4)
    cache.touch(_get(cache, id1), 400)
    cache.touch(_get(cache, id3), 390)
    cache.touch(_get(cache, id4), 400)
    id5 = create(410, 50)  # evicts the smallest old session: id1 (10 partitions)
    assert contains(cache, id3, id4, id5)
    assert create(410, 5) == INVALID_SESSION_ID  # smaller than every evictable one
    id6 = create(410, 5, privileged=True)  # a follower's evicts id4 (11)
    assert contains(cache, id3, id5, id6)
    assert cache.evictions == 3


def test_cached_partition_counts_follow_the_sessions() -> None:
    """Kafka's testResizeCachedSessions."""
    cache = FetchSessionCache(max_entries=2, eviction_ms=100)
    id1 = cache.maybe_create_session(
        0, privileged=False, size=2, uses_topic_ids=True, create_partitions=lambda: dummy_create(2)
    )
    id2 = cache.maybe_create_session(
        0, privileged=False, size=4, uses_topic_ids=True, create_partitions=lambda: dummy_create(4)
    )
    assert cache.total_partitions == 6 and len(cache) == 2
    session2 = _get(cache, id2)
    cache.touch(_get(cache, id1), 200)
    cache.touch(session2, 200)
    id3 = cache.maybe_create_session(
        200,
        privileged=False,
        size=5,
        uses_topic_ids=True,
        create_partitions=lambda: dummy_create(5),
    )
    assert contains(cache, id2, id3) and cache.total_partitions == 9 and cache.evictions == 1
    cache.remove(id3)
    assert cache.total_partitions == 4
    del session2.partitions[next(iter(session2.partitions))]
    cache.touch(session2, session2.last_used_ms)
    assert cache.total_partitions == 3


def _get(cache: FetchSessionCache, session_id: int) -> object:
    session = cache.get(session_id)
    assert session is not None
    return session


class Leader:
    """A FetchManager with a settable clock."""

    def __init__(self, *, slots: int = 10, eviction_ms: int = 1000) -> None:
        self.now = 0
        self.cache = FetchSessionCache(max_entries=slots, eviction_ms=eviction_ms)
        self.manager = FetchManager(self.cache, lambda: self.now)

    def context(
        self,
        metadata: FetchMetadata,
        fetch_data: dict[TopicPartition, FetchRequestPartition],
        *,
        forget: tuple[TopicPartition, ...] = (),
        follower: bool = True,
        version: int = 12,
    ) -> object:
        return self.manager.new_context(
            version=version,
            metadata=metadata,
            is_follower=follower,
            fetch_data=fetch_data,
            to_forget=forget,
        )

    def open(self) -> int:
        """A follower's session of foo-0 and foo-1 (HW 100 and 10)."""
        context = self.context(FetchMetadata(0, 0), {FOO0: request(0), FOO1: request(10)})
        assert isinstance(context, FullFetchContext)
        answer = context.update_and_generate_response_data(
            {FOO0: response(0, high_watermark=100), FOO1: response(1, high_watermark=10)}
        )
        assert answer.error_code == 0 and answer.session_id != INVALID_SESSION_ID
        assert [tp for tp, _ in answer.partitions] == [FOO0, FOO1]
        return answer.session_id


def test_an_incremental_fetch_answers_only_what_changed() -> None:
    leader = Leader()
    session_id = leader.open()
    # Epoch 1: foo-0 moves on and returns records, foo-1 is unchanged: only foo-0 answers.
    context = leader.context(FetchMetadata(session_id, 1), {FOO0: request(5)})
    assert isinstance(context, IncrementalFetchContext)
    assert context.partitions() == {FOO0: request(5), FOO1: request(10)}
    answer = context.update_and_generate_response_data(
        {
            FOO0: response(0, high_watermark=100, records=b"batch"),
            FOO1: response(1, high_watermark=10),
        }
    )
    assert (answer.error_code, answer.session_id) == (0, session_id)
    assert [tp for tp, _ in answer.partitions] == [FOO0]
    # foo-0 returned records: it moves to the end of the session (round robin).
    assert list(context.session.partitions) == [FOO1, FOO0]
    # Epoch 2: nothing sent, foo-1's HW moved: only foo-1 answers.
    context = leader.context(FetchMetadata(session_id, 2), {})
    assert isinstance(context, IncrementalFetchContext)
    answer = context.update_and_generate_response_data(
        {FOO1: response(1, high_watermark=11), FOO0: response(0, high_watermark=100)}
    )
    assert [tp for tp, _ in answer.partitions] == [FOO1]
    # Epoch 3: a log start offset change and an error answer; an error is answered again.
    context = leader.context(FetchMetadata(session_id, 3), {})
    assert isinstance(context, IncrementalFetchContext)
    answer = context.update_and_generate_response_data(
        {
            FOO1: response(1, high_watermark=11, log_start_offset=4),
            FOO0: response(0, high_watermark=-1, error=ErrorCode.not_leader_or_follower),
        }
    )
    assert [tp for tp, _ in answer.partitions] == [FOO1, FOO0]
    context = leader.context(FetchMetadata(session_id, 4), {})
    assert isinstance(context, IncrementalFetchContext)
    answer = context.update_and_generate_response_data(
        {
            FOO0: response(0, high_watermark=100),
            FOO1: response(1, high_watermark=11, log_start_offset=4),
        }
    )
    assert [tp for tp, _ in answer.partitions] == [FOO0]  # back from the error: answered


def test_session_errors() -> None:
    leader = Leader()
    session_id = leader.open()
    unknown = leader.context(FetchMetadata(session_id + 1, 1), {})
    assert isinstance(unknown, SessionErrorContext)
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found
    wrong_epoch = leader.context(FetchMetadata(session_id, 5), {})
    assert isinstance(wrong_epoch, SessionErrorContext)
    assert wrong_epoch.error_code == ErrorCode.invalid_fetch_session_epoch
    answer = wrong_epoch.update_and_generate_response_data({})
    assert (answer.session_id, answer.partitions) == (INVALID_SESSION_ID, [])
    topic_ids = leader.context(FetchMetadata(session_id, 1), {}, version=13)
    assert isinstance(topic_ids, SessionErrorContext)
    assert topic_ids.error_code == ErrorCode.fetch_session_topic_id_error
    # The errors left the session as it was: epoch 1 is still the one expected.
    assert isinstance(leader.context(FetchMetadata(session_id, 1), {}), IncrementalFetchContext)


def test_a_duplicate_request_gets_invalid_epoch() -> None:
    """Two requests of one epoch: the first one's context is stale once the second moved the
    epoch on (Kafka's possible duplicate request)."""
    leader = Leader()
    session_id = leader.open()
    first = leader.context(FetchMetadata(session_id, 1), {})
    assert isinstance(first, IncrementalFetchContext)
    second = leader.context(FetchMetadata(session_id, 2), {})
    assert isinstance(second, IncrementalFetchContext)
    answer = first.update_and_generate_response_data({FOO0: response(0, high_watermark=7)})
    assert answer.error_code == ErrorCode.invalid_fetch_session_epoch and not answer.partitions


def test_full_fetches_close_sessions_and_forgetting_everything_ends_one() -> None:
    leader = Leader()
    session_id = leader.open()
    # A full fetch naming the session closes it (and opens another).
    context = leader.context(FetchMetadata(session_id, 0), {BAR0: request(0)})
    assert isinstance(context, FullFetchContext)
    assert leader.cache.get(session_id) is None
    new_id = context.update_and_generate_response_data(
        {BAR0: response(0, high_watermark=3)}
    ).session_id
    assert new_id not in (INVALID_SESSION_ID, session_id)
    # FINAL_EPOCH: closed, and no new session.
    final = leader.context(FetchMetadata(new_id, -1), {BAR0: request(0)})
    assert isinstance(final, SessionlessFetchContext) and not isinstance(final, FullFetchContext)
    assert leader.cache.get(new_id) is None
    # Forgetting every partition closes the session: the answer is sessionless.
    third = leader.open()
    gone = leader.context(FetchMetadata(third, 1), {}, forget=(FOO0, FOO1))
    assert type(gone) is SessionlessFetchContext
    assert leader.cache.get(third) is None
    assert gone.update_and_generate_response_data({}).session_id == INVALID_SESSION_ID


def test_a_consumer_is_answered_sessionless() -> None:
    leader = Leader()
    context = leader.context(FetchMetadata(0, 0), {FOO0: request(0)}, follower=False)
    assert type(context) is SessionlessFetchContext
    answer = context.update_and_generate_response_data({FOO0: response(0, high_watermark=1)})
    assert answer.session_id == INVALID_SESSION_ID and len(leader.cache) == 0


def test_a_full_cache_answers_without_a_session() -> None:
    leader = Leader(slots=0)
    context = leader.context(FetchMetadata(0, 0), {FOO0: request(0)})
    assert isinstance(context, FullFetchContext)
    answer = context.update_and_generate_response_data({FOO0: response(0, high_watermark=1)})
    assert answer.session_id == INVALID_SESSION_ID
    assert [tp for tp, _ in answer.partitions] == [FOO0]


def test_a_follower_session_survives_a_consumer_and_is_evicted_by_a_bigger_follower() -> None:
    """Kafka's testPrivilegedSessionHandling, with followers' sessions only: a follower's
    session is not evicted by a newcomer until it is older than eviction_ms, then by a
    bigger one."""
    leader = Leader(slots=1, eviction_ms=1000)
    first = leader.open()
    leader.now = 500
    small = leader.context(FetchMetadata(0, 0), {BAR0: request(0)})
    assert isinstance(small, FullFetchContext)
    assert (
        small.update_and_generate_response_data({BAR0: response(0, high_watermark=1)}).session_id
        == INVALID_SESSION_ID
    )
    leader.now = 1600
    leader.cache.touch(_session(leader, first), 1600)  # in use, and older than 1000 ms now
    bigger = leader.context(
        FetchMetadata(0, 0),
        {BAR0: request(0), FOO0: request(0), TopicPartition("x", 0): request(0)},
    )
    assert isinstance(bigger, FullFetchContext)
    created = bigger.update_and_generate_response_data(
        {
            BAR0: response(0, high_watermark=1),
            FOO0: response(0, high_watermark=1),
            TopicPartition("x", 0): response(0, high_watermark=1),
        }
    ).session_id
    assert created != INVALID_SESSION_ID and leader.cache.get(first) is None


def _session(leader: Leader, session_id: int) -> object:
    session = leader.cache.get(session_id)
    assert session is not None
    return session


@pytest.mark.parametrize("version", [12, 13])
def test_topic_ids_in_sessions(version: int) -> None:
    """A session remembers whether it uses topic ids; the other kind of request is refused."""
    leader = Leader()
    topic_id = Uuid.random()
    context = leader.context(
        FetchMetadata(0, 0),
        {FOO0: request(0, topic_id=topic_id if version >= 13 else None)},
        version=version,
    )
    assert isinstance(context, FullFetchContext)
    session_id = context.update_and_generate_response_data(
        {FOO0: response(0, high_watermark=1)}
    ).session_id
    same = leader.context(FetchMetadata(session_id, 1), {}, version=version)
    assert isinstance(same, IncrementalFetchContext)
    assert same.partitions()[FOO0].topic_id == (topic_id if version >= 13 else None)
    other = leader.context(FetchMetadata(session_id, 2), {}, version=25 - version)
    assert isinstance(other, SessionErrorContext)
    assert other.error_code == ErrorCode.fetch_session_topic_id_error
