"""A follower's Fetch of at most one partition, decoded by hand and answered by the same
``read_partitions`` (``ReplicaManager.fetch_messages`` within the broker's bounds) and fetch
sessions (``fetch_sessions``) as the general Fetch handler.

Under acks=all load a leader answers about one such fetch per follower for every two produce
requests, each carrying the batches the follower lacks, and each paid for on the leader's one
event loop thread: kio's generic decoding alone took 7 us of it against 2.6 us here, before
the general handler's per-topic layout. So the requests ``ReplicaFetcherThread`` sends most
(``replica_fetch_codec``: v12, a replica id, one topic of one partition or no topic at all:
an incremental fetch in a session where one partition or none changed, no forgotten topics, no
tagged fields) are decoded here; ``decode`` answers None for anything else, which the general
handler serves (and, when it is malformed, refuses). The answer is the general handler's, byte
for byte (tested): same reads, same follower state, same sessions, same encoder.
Layout (big-endian, compact strings and arrays: an unsigned varint of length + 1)::

    header v2   api_key int16, api_version int16, correlation_id int32,
                client_id int16 length + bytes (-1 null), tags (0)
    body v12    replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32,
                isolation_level int8, session_id int32, session_epoch int32,
                topics [0 or 1: topic string, partitions [1: partition int32,
                  current_leader_epoch int32, fetch_offset int64, last_fetched_epoch int32,
                  log_start_offset int64, partition_max_bytes int32, tags (0)], tags (0)],
                forgotten_topics_data [0], rack_id string, tags (0)
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, NamedTuple

from storage_core.client.replica_fetch_codec import PartitionFetch
from storage_core.common import TopicPartition
from storage_core.errors import CorruptRecordError
from storage_core.records.varint import decode_unsigned_varint
from storage_core.replication.delayed_fetch import FetchRequestPartition, close_regions
from storage_core.server.fetch_response import FetchTopicResponse, encode_fetch_response
from storage_core.server.fetch_session import (
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
)
from storage_core.server.handlers import fetch_sessions
from storage_core.server.handlers.fetch_reads import partition_response, read_partitions
from storage_core.server.response_parts import ResponseParts

if TYPE_CHECKING:
    from storage_core.server.broker_services import BrokerServices

API_KEY = 1
VERSION = 12
SESSIONLESS_ID = 0
FINAL_EPOCH = -1

_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_TOP = struct.Struct(">iiiibii")
_PARTITION = struct.Struct(">iiqiqi")
_ONE = 2  # a compact array of one element: count + 1
_NO_TAGS = 0
_EMPTY = 1  # a compact empty array


class FollowerFetch(NamedTuple):
    """The fields of a follower's Fetch of at most one partition that its answer depends on."""

    correlation_id: int
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition: PartitionFetch | None
    session_id: int = SESSIONLESS_ID
    session_epoch: int = FINAL_EPOCH


def decode(frame: bytes) -> FollowerFetch | None:
    """The follower fetch ``frame`` holds (header included), or None when it is anything
    else: another API or version, a consumer, several partitions, forgotten topics, tagged fields,
    or bytes that the general decoder would refuse (a client id length below -1, a string
    that is not UTF-8, a null rack id): the general handler then decodes it, and refuses it
    naming the fault. Whatever it returns, the general decoder reads the same (tested)."""
    try:
        return _decode(frame)
    except (struct.error, IndexError, UnicodeDecodeError, CorruptRecordError):
        return None


def _decode(frame: bytes) -> FollowerFetch | None:
    api_key, api_version, correlation_id, client_id_length = _HEAD.unpack_from(frame, 0)
    if api_key != API_KEY or api_version != VERSION or client_id_length < -1:
        return None
    pos = _HEAD.size + max(client_id_length, 0)
    if client_id_length > 0 and not _is_utf8(frame, _HEAD.size, pos):
        return None
    if frame[pos] != _NO_TAGS:
        return None
    replica_id, max_wait_ms, min_bytes, max_bytes, _isolation, session_id, session_epoch = (
        _TOP.unpack_from(frame, pos + 1)
    )
    if replica_id < 0:
        return None
    pos += 1 + _TOP.size
    partition: PartitionFetch | None = None
    if frame[pos] == _EMPTY:  # no topic: an incremental fetch where nothing changed
        pos += 1
    elif frame[pos] == _ONE:
        length, pos = decode_unsigned_varint(frame, pos + 1)
        if length < 1:  # a null topic name
            return None
        topic = frame[pos : pos + length - 1].decode()
        pos += length - 1
        if frame[pos] != _ONE:
            return None
        partition = PartitionFetch(topic, *_PARTITION.unpack_from(frame, pos + 1))
        pos += 1 + _PARTITION.size
        # partition tags, topic tags
        if frame[pos : pos + 2] != bytes((_NO_TAGS, _NO_TAGS)):
            return None
        pos += 2
    else:
        return None
    if frame[pos] != _EMPTY:  # forgotten_topics_data
        return None
    rack_length, pos = decode_unsigned_varint(frame, pos + 1)
    if rack_length < 1:  # a null rack id: the field is not nullable
        return None
    rack_end = pos + rack_length - 1
    if rack_end > pos and not _is_utf8(frame, pos, rack_end):
        return None
    pos = rack_end
    if frame[pos] != _NO_TAGS or pos + 1 != len(frame):
        return None
    return FollowerFetch(
        correlation_id=correlation_id,
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partition=partition,
        session_id=session_id,
        session_epoch=session_epoch,
    )


def _is_utf8(frame: bytes, start: int, end: int) -> bool:
    """Whether ``frame[start:end]`` is UTF-8, as the general decoder requires of a string it
    reads (and then ignores, for the client id and the rack id)."""
    try:
        frame[start:end].decode()
    except UnicodeDecodeError:
        return False
    return True


async def handle(services: BrokerServices, fetch: FollowerFetch) -> ResponseParts:
    """The FetchResponse v12 frame answering ``fetch``, as the general handler makes it."""
    wanted = fetch.partition
    requested: dict[TopicPartition, FetchRequestPartition] = {}
    if wanted is not None:
        requested[TopicPartition(wanted.topic, wanted.partition)] = FetchRequestPartition(
            fetch_offset=wanted.fetch_offset,
            max_bytes=wanted.partition_max_bytes,
            current_leader_epoch=wanted.current_leader_epoch,
            last_fetched_epoch=wanted.last_fetched_epoch,
            log_start_offset=wanted.log_start_offset,
            topic_id=None,
        )
    context = fetch_sessions.new_context(
        services,
        version=VERSION,
        session_id=fetch.session_id,
        session_epoch=fetch.session_epoch,
        replica_id=fetch.replica_id,
        fetch_data=requested,
        to_forget=(),
    )
    if isinstance(context, SessionErrorContext):
        return fetch_sessions.error_response(VERSION, fetch.correlation_id, context.error_code)
    if isinstance(context, IncrementalFetchContext):
        return await fetch_sessions.answer_incremental(
            services,
            context,
            version=VERSION,
            correlation_id=fetch.correlation_id,
            max_wait_ms=fetch.max_wait_ms,
            min_bytes=fetch.min_bytes,
            max_bytes=fetch.max_bytes,
            replica_id=fetch.replica_id,
            authorized=True,  # the fast path serves brokers without an authorizer only
            sent=requested,
        )
    results = await read_partitions(
        services,
        requested,
        max_wait_ms=fetch.max_wait_ms,
        min_bytes=fetch.min_bytes,
        max_bytes=fetch.max_bytes,
        replica_id=fetch.replica_id,
    )
    try:
        topics: tuple[FetchTopicResponse, ...] = ()
        if wanted is not None:
            tp = TopicPartition(wanted.topic, wanted.partition)
            topics = (
                FetchTopicResponse(
                    topic=wanted.topic,
                    partitions=(partition_response(wanted.partition, results[tp], None),),
                ),
            )
        session_id = SESSIONLESS_ID
        if isinstance(context, FullFetchContext):
            session_id = context.update_and_generate_response_data(
                {
                    TopicPartition(topic.topic, p.partition_index): p
                    for topic in topics
                    for p in topic.partitions
                }
            ).session_id
        return encode_fetch_response(
            version=VERSION,
            correlation_id=fetch.correlation_id,
            topics=topics,
            session_id=session_id,
        )
    except BaseException:
        close_regions(results.values())
        raise
