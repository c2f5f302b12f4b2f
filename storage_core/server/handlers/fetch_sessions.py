"""Fetch requests in incremental fetch sessions (KIP-227): each request's context from the
broker's ``FetchManager`` (``server/fetch_session.py``), and the answer to an incremental one.

An incremental fetch answers for every partition of its session, as Kafka's does, but an idle
partition costs nothing per fetch. A partition the request does not name is *quiet* while this
broker leads it at the epoch the fetcher knows, the fetcher is at its log end, and neither the
high watermark nor the log start offset moved since the last answer: nothing would be read and
nothing is answered. The session's ``SessionWatch`` (in the fetch purgatory, for the session's
life) notes every partition that moves (records appended, log start offset or high watermark
moved, leadership lost), so a fetch looks only at the partitions its request names, those
noted as moved and those it found with something to answer before (until they are quiet:
a fetcher may not take every record it is sent); it looks at all of them
(a full scan) on the session's first incremental fetch and after partitions were added to or
removed from the broker.

Kafka records every fetch in the follower's state, and its caught-up time decides whether
the follower stays in the ISR once the log end moves. A quiet partition's fetches are not
looked at one by one: the first look that finds it quiet hands the leader's ``Partition`` the
session's fetches (``note_quiet_follower``), which it records as the follower's last fetch
at the log end when the partition next moves (``replica``'s module docstring). A follower that
stops fetching, or whose session forgets the partition, stops counting as fetching.

With nothing to answer, the fetch parks on the watch until one of its partitions moves or
``max_wait_ms`` passes, then looks again. The watch's waiter is parked before the partitions
are read, so an append during the read wakes it.

Thread-safety: loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.protocol.fetch_metadata import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchMetadata,
)
from storage_core.replication.delayed_fetch import FetchRequestPartition, SessionWatch, until
from storage_core.replication.partition import Partition
from storage_core.server.fetch_response import (
    FetchPartitionResponse,
    FetchTopicResponse,
    encode_fetch_response,
)
from storage_core.server.fetch_session import (
    FetchContext,
    FetchContextResponse,
    FetchManager,
    FetchSession,
    IncrementalFetchContext,
    SessionlessFetchContext,
    SessionQuietFetches,
)
from storage_core.server.handlers.fetch_reads import (
    MAX_WAIT_MS_MAX,
    partition_response,
    read_partitions,
)
from storage_core.server.response_parts import ResponseParts

if TYPE_CHECKING:
    from storage_core.records.file_region import FileRegion
    from storage_core.server.broker_services import BrokerServices


def new_context(
    services: BrokerServices,
    *,
    version: int,
    session_id: int,
    session_epoch: int,
    replica_id: int,
    fetch_data: dict[TopicPartition, FetchRequestPartition],
    to_forget: Iterable[TopicPartition],
) -> FetchContext:
    """The request's context; sessionless when the broker keeps no sessions."""
    # Services built without one (tests of the handlers alone) answer sessionless.
    manager: FetchManager | None = getattr(services, "fetch_manager", None)
    if manager is None or version < 7:
        return SessionlessFetchContext(fetch_data)
    return manager.new_context(
        version=version,
        metadata=FetchMetadata(session_id, session_epoch),
        is_follower=replica_id >= 0,
        fetch_data=fetch_data,
        to_forget=to_forget,
    )


def is_sessionless(session_id: int, session_epoch: int) -> bool:
    return session_id == INVALID_SESSION_ID and session_epoch == FINAL_EPOCH


def error_response(version: int, correlation_id: int, error_code: int) -> ResponseParts:
    """A session error: no partitions, session id 0."""
    return encode_fetch_response(
        version=version, correlation_id=correlation_id, topics=(), error_code=error_code
    )


def encode_answer(
    version: int, correlation_id: int, answer: FetchContextResponse, session: FetchSession
) -> ResponseParts:
    """The answer's partitions, consecutive partitions of a topic under one topic entry (by
    its id from v13, as the session knows it)."""
    topics: list[FetchTopicResponse] = []
    current: TopicPartition | None = None
    partitions: list[FetchPartitionResponse] = []
    topic_ids: dict[str, bytes] = {}
    for tp, response in answer.partitions:
        cached = session.partitions.get(tp)
        if cached is not None and cached.topic_id is not None:
            topic_ids[tp.topic] = cached.topic_id.to_bytes()
        if current is not None and tp.topic != current.topic:
            topics.append(_topic(current.topic, topic_ids, partitions))
            partitions = []
        current = tp
        partitions.append(response)
    if current is not None:
        topics.append(_topic(current.topic, topic_ids, partitions))
    return encode_fetch_response(
        version=version,
        correlation_id=correlation_id,
        topics=topics,
        error_code=answer.error_code,
        session_id=answer.session_id,
    )


def _topic(
    name: str, topic_ids: dict[str, bytes], partitions: list[FetchPartitionResponse]
) -> FetchTopicResponse:
    return FetchTopicResponse(
        topic=name, topic_id=topic_ids.get(name, bytes(16)), partitions=tuple(partitions)
    )


async def answer_incremental(
    services: BrokerServices,
    context: IncrementalFetchContext,
    *,
    version: int,
    correlation_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    replica_id: int,
    authorized: bool,
    sent: Iterable[TopicPartition],
    isolation_level: int = 0,
) -> ResponseParts:
    """The answer to an incremental fetch: the session's partitions with something new,
    after waiting up to ``max_wait_ms`` for ``min_bytes`` (or an error) as any fetch does."""
    manager = services.replica_manager
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(max_wait_ms, 0), MAX_WAIT_MS_MAX) / 1000
    session = context.session
    watch = session.watch
    if not isinstance(watch, SessionWatch):
        watch = manager.delayed_fetch_purgatory.watch_session(session.partitions)
        session.watch = watch
    forced = set(sent)  # named by the request: read whatever their state
    candidates = forced | watch.pending
    while True:
        waiter = watch.park()
        try:
            candidates |= watch.take_moved()
            responses = await _read_session(
                services,
                context,
                forced,
                candidates,
                max_bytes=max_bytes,
                replica_id=replica_id,
                authorized=authorized,
                isolation_level=isolation_level,
            )
            # What had something to answer is looked at again (in this request's next look
            # and the next requests' until it is quiet: the fetcher may not take all records
            # it is sent, e.g. a batch larger than its partition max bytes); the rest once
            # it moves.
            watch.pending = set(responses)
            forced, candidates = set(), set(responses)
            remaining = deadline - loop.time()
            if (
                remaining <= 0
                or sum(len(r.records or b"") for r in responses.values()) >= min_bytes
                or any(_must_answer_now(r) for r in responses.values())
            ):
                answer = context.update_and_generate_response_data(responses)
                listed = {tp for tp, _ in answer.partitions}
                close_regions_of(r for tp, r in responses.items() if tp not in listed)
                try:
                    return encode_answer(version, correlation_id, answer, session)
                except BaseException:
                    close_regions_of(r for _, r in answer.partitions)
                    raise
            close_regions_of(responses.values())
            await until(waiter, remaining)
        finally:
            watch.unpark()


def _must_answer_now(response: FetchPartitionResponse) -> bool:
    return response.error_code != ErrorCode.none or (
        response.diverging_epoch is not None and response.diverging_epoch != (-1, -1)
    )


async def _read_session(
    services: BrokerServices,
    context: IncrementalFetchContext,
    forced: set[TopicPartition],
    candidates: set[TopicPartition],
    *,
    max_bytes: int,
    replica_id: int,
    authorized: bool,
    isolation_level: int = 0,
) -> dict[TopicPartition, FetchPartitionResponse]:
    """Each partition looked at that is not quiet, read now (no waiting here)."""
    session = context.session
    if not authorized:
        return {
            tp: partition_response(tp.partition, None, ErrorCode.topic_authorization_failed)
            for tp in session.partitions
        }
    wanted = active_partitions(services, context, forced, candidates, replica_id=replica_id)
    if not wanted:
        return {}
    results = await read_partitions(
        services,
        wanted,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        replica_id=replica_id,
        isolation_level=isolation_level,
    )
    responses: dict[TopicPartition, FetchPartitionResponse] = {}
    for tp, result in results.items():
        responses[tp] = partition_response(tp.partition, result, None)
        cached = session.partitions.get(tp)
        if cached is not None:
            cached.quiet = None  # its fetch was recorded: quiet again once looked at
    return responses


def active_partitions(
    services: BrokerServices,
    context: IncrementalFetchContext,
    forced: set[TopicPartition],
    candidates: set[TopicPartition],
    *,
    replica_id: int,
) -> dict[TopicPartition, FetchRequestPartition]:
    """The partitions to read: those ``forced`` and, of ``candidates`` (of all the session's
    partitions in a full scan, see the module docstring), those not quiet. A quiet partition
    whose leader has not yet taken the session's fetches as fetches at its log end
    (``Partition.note_quiet_follower``) is read when it cannot take them now."""
    manager = services.replica_manager
    hosted = manager.hosted_partition
    session = context.session
    partitions = session.partitions
    # The Partition objects looked up before are still the hosted ones while no partition
    # was added to or removed from this broker: no look-up by name per idle partition.
    generation = manager.partitions_generation
    resolved = session.partitions_generation == generation
    session.partitions_generation = generation
    looked_at: Iterable[TopicPartition] = partitions
    if resolved:
        # Those answered with records longest ago first (the session's round robin: the
        # first partitions read may exceed the response budget by one batch).
        looked_at = sorted(
            (tp for tp in candidates if tp in partitions),
            key=lambda tp: partitions[tp].answered_epoch,
        )
    wanted: dict[TopicPartition, FetchRequestPartition] = {}
    for tp in looked_at:
        cached = partitions[tp]
        if tp not in forced:
            partition = cached.partition
            if partition is None or not resolved:
                partition = hosted(tp)
                if partition is not cached.partition:
                    cached.partition, cached.quiet = partition, None
            if (
                isinstance(partition, Partition)
                and partition.leader_id == partition.local_broker_id
                and partition.leader_epoch == cached.leader_epoch
            ):
                log = partition.log
                if (
                    log.log_end_offset == cached.fetch_offset
                    and log.high_watermark == cached.high_watermark
                    and log.log_start_offset == cached.local_log_start_offset
                ):
                    if cached.quiet is not None:
                        continue
                    quiet = SessionQuietFetches(session, cached)
                    if partition.note_quiet_follower(
                        replica_id, quiet, fetch_offset=cached.fetch_offset
                    ):
                        cached.quiet = quiet
                        continue
        wanted[tp] = cached.request_data()
    return wanted


def close_regions_of(responses: Iterable[FetchPartitionResponse]) -> None:
    """Release the file regions of partition answers that will not be sent."""
    for response in responses:
        records: bytes | memoryview | FileRegion | None = response.records
        if records is not None and not isinstance(records, bytes | bytearray | memoryview):
            records.close()
