"""A follower's requests to a partition leader (Kafka's ``RemoteLeaderEndPoint`` over
``BrokerBlockingSender``): Fetch v12, OffsetForLeaderEpoch v4 and ListOffsets v7, each
carrying this broker's id as the replica id, on one blocking connection. ListOffsets asks for
the leader's end (-1), start (-2) or local start (-4, KIP-405) offset.

The leader broker's address is looked up (``endpoint_of``: its endpoint of the inter-broker
listener) each time a connection is opened, so a leader restarted elsewhere is found again;
the connection speaks that listener's protocol (``security``: TLS with this broker's key
store as its client certificate when the listener is SSL). Any network or framing failure closes the
connection and raises a ``ClientError``; the next request reconnects. Fetches run in an
incremental fetch session (KIP-227) that survives reconnections; a failed request makes the
next Fetch a full one in a new session.

Thread-safety: one fetcher thread sends; ``initiate_close`` may be called from another thread
to unblock a request in flight (shutdown), as Kafka's ``initiateClose``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64
from kio.static.protocol import Payload

from storage_core.client import replica_fetch_codec
from storage_core.client.connection import ConnectionConfig, KafkaConnection, ResponseT
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ConnectionClosedError,
    ProtocolMismatchError,
)
from storage_core.common import TopicPartition
from storage_core.replication.fetch_session_handler import FetchSessionHandler
from storage_core.replication.offset_truncation import EpochEndOffset
from storage_core.replication.replica_fetcher_config import ReplicaFetcherConfig
from storage_core.security.client_transport import (
    PLAINTEXT_CLIENT,
    ClientSecurityConfig,
    TlsHandshakeError,
    open_socket,
)
from storage_core.tiered.operations.lineage import OffsetAndEpoch

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the leader's local log start offset
_READ_UNCOMMITTED = 0
_NO_EPOCH = -1
# Refusals of the fetch session itself: answered by a full fetch at once, not a back-off.
_SESSION_ERRORS = frozenset(
    {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}
)
# Room above replica.fetch.response.max.bytes: the leader may return one whole batch beyond
# it (the first non-empty partition), up to max.message.bytes-sized batches.
_RESPONSE_SLACK_BYTES = 64 * 1024 * 1024
_CONNECT_TIMEOUT_MS = 10_000

EndpointOf = Callable[[int], tuple[str, int] | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionRequest:
    """One partition of a replica Fetch; ``last_fetched_epoch`` None is sent as -1."""

    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionData:
    """One partition of a Fetch response; ``records`` may end with a partial batch."""

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview  # a view of the received response
    diverging_epoch: EpochEndOffset | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffsetResult:
    """One partition of an OffsetForLeaderEpoch response."""

    error: ErrorCode
    epoch_end_offset: EpochEndOffset


class RemoteLeaderEndPoint:
    """Requests of one fetcher thread to one source broker."""

    def __init__(
        self,
        *,
        source_broker_id: int,
        local_broker_id: int,
        endpoint_of: EndpointOf,
        config: ReplicaFetcherConfig,
        client_id: str,
        security: ClientSecurityConfig = PLAINTEXT_CLIENT,
    ) -> None:
        self.source_broker_id = source_broker_id
        self.local_broker_id = local_broker_id
        self._endpoint_of = endpoint_of
        self._config = config
        self._connection_config = ConnectionConfig(
            client_id=client_id,
            connect_timeout_ms=min(_CONNECT_TIMEOUT_MS, config.socket_timeout_ms),
            request_timeout_ms=config.socket_timeout_ms,
            max_response_bytes=config.fetch_response_max_bytes + _RESPONSE_SLACK_BYTES,
            security=security,
        )
        self._session: FetchSessionHandler[FetchPartitionRequest] = FetchSessionHandler(
            source_broker_id
        )
        # Kafka's FetcherStats, as counts: requests by kind and partitions sent in them.
        self.full_fetch_requests = 0
        self.incremental_fetch_requests = 0
        self.fetch_request_partitions = 0
        self._lock = threading.Lock()  # guards the socket between the sender and closers
        self._connection: KafkaConnection | None = None
        self._socket: socket.socket | None = None
        self._closing = False

    # ------------------------------------------------------------------ connection
    def _connect(self) -> KafkaConnection:
        with self._lock:
            if self._closing:
                raise ConnectionClosedError(
                    f"fetcher to broker {self.source_broker_id} is shutting down"
                )
            if self._connection is not None and not self._connection.closed:
                return self._connection
        address = self._endpoint_of(self.source_broker_id)
        if address is None:
            raise BrokerUnreachableError(
                f"broker {self.source_broker_id} is not among the live brokers; waiting for"
                " the metadata to name its endpoint"
            )
        host, port = address
        try:
            sock = open_socket(
                host,
                port,
                self._connection_config.security,
                timeout_s=self._connection_config.connect_timeout_ms / 1000,
            )
        except TlsHandshakeError as exc:
            raise BrokerUnreachableError(
                f"cannot connect to broker {self.source_broker_id}: {exc}"
            ) from None
        except OSError as exc:
            raise BrokerUnreachableError(
                f"cannot connect to broker {self.source_broker_id} at {host}:{port}:"
                f" {exc.strerror or exc}"
            ) from None
        connection = KafkaConnection(sock, host=host, port=port, config=self._connection_config)
        with self._lock:
            if self._closing:
                connection.close()
                raise ConnectionClosedError(
                    f"fetcher to broker {self.source_broker_id} is shutting down"
                )
            self._connection, self._socket = connection, sock
        return connection

    def disconnect(self) -> None:
        """Drop the connection (after an error); the next request opens a new one."""
        with self._lock:
            connection, self._connection, self._socket = self._connection, None, None
        if connection is not None:
            connection.close()

    def initiate_close(self) -> None:
        """From another thread: refuse new requests and unblock the one in flight."""
        with self._lock:
            self._closing = True
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the sender
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.initiate_close()
        self.disconnect()

    @property
    def address(self) -> str:
        connection = self._connection
        return connection.address if connection is not None else "not connected"

    # ------------------------------------------------------------------ Fetch
    def fetch(
        self, partitions: Mapping[TopicPartition, FetchPartitionRequest]
    ) -> dict[TopicPartition, FetchPartitionData]:
        """One replica Fetch (v12) in this fetcher's fetch session (KIP-227, the
        ``FetchSessionHandler``): the partitions that changed since the last request, or all
        of them when there is no session; the answer per partition that has something new
        (an idle partition has none). Empty when the leader refused the session (it is gone,
        or the epoch is not the one expected): the next request is a full one. Encoded by
        ``replica_fetch_codec``: this exchange runs once per replication round."""
        data = self._session.build(partitions)
        metadata = data.metadata
        body = replica_fetch_codec.encode_fetch_request(
            replica_id=self.local_broker_id,
            max_wait_ms=self._config.fetch_wait_max_ms,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=self._config.fetch_response_max_bytes,
            isolation_level=_READ_UNCOMMITTED,
            session_id=metadata.session_id,
            session_epoch=metadata.epoch,
            partitions=[
                replica_fetch_codec.PartitionFetch(
                    topic=tp.topic,
                    partition=tp.partition,
                    current_leader_epoch=p.current_leader_epoch,
                    fetch_offset=p.fetch_offset,
                    last_fetched_epoch=_NO_EPOCH
                    if p.last_fetched_epoch is None
                    else p.last_fetched_epoch,
                    log_start_offset=p.log_start_offset,
                    partition_max_bytes=self._config.fetch_max_bytes,
                )
                for tp, p in data.to_send.items()
            ],
            forgotten=[(tp.topic, tp.partition) for tp in data.to_forget],
        )
        self.fetch_request_partitions += len(data.to_send)
        if metadata.is_full:
            self.full_fetch_requests += 1
        else:
            self.incremental_fetch_requests += 1
        try:
            error_code, session_id, fetched = self._decode(
                self._send_raw(replica_fetch_codec.API_KEY, replica_fetch_codec.VERSION, body)
            )
        except BaseException:
            self._session.handle_error()
            raise
        if not self._session.handle_response(
            error_code, session_id, [TopicPartition(d.topic, d.partition) for d in fetched]
        ):
            if error_code in _SESSION_ERRORS or error_code == ErrorCode.none:
                return {}  # nothing to apply: the next request is a full one
            raise BrokerResponseError(
                error_code, resource=f"fetch from broker {self.source_broker_id}"
            )
        session_partitions = data.session_partitions
        results: dict[TopicPartition, FetchPartitionData] = {}
        for answer in fetched:
            tp = TopicPartition(answer.topic, answer.partition)
            if tp not in session_partitions:
                continue  # not asked: never applied
            diverging = None
            if answer.diverging_epoch is not None and answer.diverging_epoch != (-1, -1):
                epoch, end_offset = answer.diverging_epoch
                diverging = EpochEndOffset(epoch=epoch, end_offset=end_offset)
            results[tp] = FetchPartitionData(
                error=self._error_code(answer.error_code),
                high_watermark=answer.high_watermark,
                log_start_offset=answer.log_start_offset,
                records=answer.records or b"",
                diverging_epoch=diverging,
            )
        return results

    @property
    def fetch_session_id(self) -> int:
        """The session the next Fetch continues (0: the next one is full, asking for one)."""
        return self._session.session_id

    def _decode(
        self, body: memoryview
    ) -> tuple[ErrorCode, int, list[replica_fetch_codec.FetchedPartition]]:
        try:
            error_code, session_id, fetched = replica_fetch_codec.decode_fetch_session_response(
                body
            )
        except ProtocolMismatchError:
            self.disconnect()
            raise
        return self._error_code(error_code), session_id, fetched

    def _error_code(self, value: int) -> ErrorCode:
        try:
            return ErrorCode(value)
        except ValueError:
            self.disconnect()
            raise ProtocolMismatchError(
                f"broker {self.source_broker_id} answered a Fetch with unknown error code {value}"
            ) from None

    # ------------------------------------------------------------------ OffsetForLeaderEpoch
    def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffsetResult]:
        """``{tp: (current leader epoch, epoch to look up)}`` -> the leader's answers."""
        by_topic: dict[str, list[epoch_v4.OffsetForLeaderPartition]] = {}
        for tp, (current_leader_epoch, leader_epoch) in partitions.items():
            by_topic.setdefault(tp.topic, []).append(
                epoch_v4.OffsetForLeaderPartition(
                    partition=i32(tp.partition),
                    current_leader_epoch=i32(current_leader_epoch),
                    leader_epoch=i32(leader_epoch),
                )
            )
        request = epoch_v4.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.local_broker_id),
            topics=tuple(
                epoch_v4.OffsetForLeaderTopic(topic=TopicName(topic), partitions=tuple(ps))
                for topic, ps in by_topic.items()
            ),
        )
        response = self._send(request, OffsetForLeaderEpochResponse)
        results: dict[TopicPartition, EpochEndOffsetResult] = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(str(topic.topic), int(p.partition))
                if tp in partitions:
                    results[tp] = EpochEndOffsetResult(
                        error=p.error_code,
                        epoch_end_offset=EpochEndOffset(
                            epoch=int(p.leader_epoch), end_offset=int(p.end_offset)
                        ),
                    )
        return results

    # ------------------------------------------------------------------ ListOffsets
    def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        """The leader's log end offset (a replica's LATEST is not capped at the HW)."""
        return self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)

    def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        """The leader's log start offset."""
        return self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    def fetch_earliest_local_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> OffsetAndEpoch:
        """The leader's local log start offset and its leader epoch (Kafka's
        ``fetchEarliestLocalOffset``, ListOffsets timestamp -4); the epoch is -1 when the
        leader knows none for that offset."""
        return self._list_offset_and_epoch(tp, current_leader_epoch, EARLIEST_LOCAL_TIMESTAMP)

    def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        return self._list_offset_and_epoch(tp, current_leader_epoch, timestamp).offset

    def _list_offset_and_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, timestamp: int
    ) -> OffsetAndEpoch:
        request = list_offsets_v7.ListOffsetsRequest(
            replica_id=BrokerId(self.local_broker_id),
            isolation_level=i8(_READ_UNCOMMITTED),
            topics=(
                list_offsets_v7.ListOffsetsTopic(
                    name=TopicName(tp.topic),
                    partitions=(
                        list_offsets_v7.ListOffsetsPartition(
                            partition_index=i32(tp.partition),
                            current_leader_epoch=i32(current_leader_epoch),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
        response = self._send(request, ListOffsetsResponse)
        for topic in response.topics:
            for p in topic.partitions:
                if str(topic.name) == tp.topic and int(p.partition_index) == tp.partition:
                    if p.error_code != ErrorCode.none:
                        raise BrokerResponseError(p.error_code, resource=f"partition {tp}")
                    return OffsetAndEpoch(int(p.offset), int(p.leader_epoch))
        raise ProtocolMismatchError(
            f"broker {self.source_broker_id} answered ListOffsets without partition {tp}"
        )

    # ------------------------------------------------------------------ transport
    def _send(self, request: Payload, response_type: type[ResponseT]) -> ResponseT:
        connection = self._connect()
        try:
            return connection.send(request, response_type)
        except BaseException:
            self.disconnect()
            raise

    def _send_raw(self, api_key: int, api_version: int, body: bytes) -> memoryview:
        """Send an encoded body of a flexible version; a view of the response body."""
        connection = self._connect()
        try:
            return connection.send_raw_view(
                api_key=api_key, api_version=api_version, flexible=True, body=body
            )
        except BaseException:
            self.disconnect()
            raise
