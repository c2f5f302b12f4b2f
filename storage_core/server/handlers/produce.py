"""Produce (key 0): append record batches to partition leaders (acks 0, 1 or -1).

Each partition answers on its own: a bad batch or an unknown partition fails that partition
only. Batches are validated record by record before anything is stored (``log_validator``);
a refused one answers CORRUPT_MESSAGE, INVALID_RECORD or INVALID_TIMESTAMP, with the records
at fault in ``record_errors`` (v8+). ``acks=0`` gets no response at all, as in Kafka. An
``acks=-1`` produce whose records are appended returns a ``DeferredResponse`` that completes
once the ISR has them (the connection meanwhile reads its next produce: ``response_pipeline``).
The internal ``__consumer_offsets`` topic is written by the group coordinator only.

With an authorizer: WRITE on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions,
checked before the topic's existence so that a denied principal learns nothing of it), and a
transactional produce WRITE on its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
for every partition). Nothing of a denied partition is appended.

A transactional produce for a partition where the producer has no transaction ongoing is
verified with the transaction coordinator first (KIP-890 part 1, ``produce_verification``):
a partition not added to the transaction answers INVALID_TXN_STATE, one the coordinator
could not vouch for NOT_ENOUGH_REPLICAS (retriable), and nothing of it is appended.

The response is encoded by ``produce_response`` (not the codec), which costs a small fraction
of the codec's time for these few dozen bytes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from storage_core.common import TopicPartition, validate_topic_name
from storage_core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storage_core.protocol.acl import AclOperation, ResourceType
from storage_core.replication.delayed_produce import ProduceResult
from storage_core.server.handlers.auth_helper import (
    TopicAuthorizationFailedError,
    authorize,
    filter_by_authorized,
)
from storage_core.server.handlers.common import error_code_of, error_message, milliseconds
from storage_core.server.produce_response import (
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_produce_response,
)
from storage_core.server.produce_verification import NOT_VERIFIED, verify_produce
from storage_core.server.request_context import RequestContext
from storage_core.server.response_pipeline import DeferredResponse

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 12

PROTECTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


async def handle(ctx: RequestContext, request: Any) -> bytes | DeferredResponse | None:
    services = ctx.services
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is not None and not authorize(
        ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return _refused(ctx, request, TransactionalIdAuthorizationFailedError(transactional_id))
    authorized = filter_by_authorized(
        ctx,
        AclOperation.WRITE,
        ResourceType.TOPIC,
        (t.name for t in request.topic_data for _p in t.partition_data),
    )
    entries: dict[TopicPartition, bytes] = {}
    results: dict[TopicPartition, ProduceResult] = {}
    order: list[tuple[str, list[int]]] = []
    for topic_data in request.topic_data:
        name = topic_data.name
        indexes = [p.index for p in topic_data.partition_data]
        order.append((name, indexes))
        error: StorageError | None = None
        try:
            if name not in authorized:
                raise TopicAuthorizationFailedError(name)
            validate_topic_name(name)
            if name in PROTECTED_INTERNAL_TOPICS:
                raise InvalidTopicError(f"Producing to the internal topic {name} is not allowed.")
            if not services.topic_store.exists(name):
                raise UnknownTopicOrPartitionError(f"This server does not host topic '{name}'.")
        except StorageError as exc:
            error = exc
        for partition_data in topic_data.partition_data:
            tp = TopicPartition(name, partition_data.index)
            if error is not None:
                results[tp] = ProduceResult(error=error)
            elif partition_data.records is None:
                results[tp] = ProduceResult(error=CorruptRecordError("the record set is null"))
            else:
                entries[tp] = partition_data.records
    appended = None
    verification = NOT_VERIFIED
    if entries:
        verification = await verify_produce(
            services, transactional_id, entries, api_version=ctx.api_version
        )
        for tp, refused in verification.errors.items():
            results[tp] = ProduceResult(error=refused)
            del entries[tp]
    if entries:
        appended = await services.replica_manager.append_to_leaders(
            entries,
            required_acks=int(request.acks),
            timeout_ms=milliseconds(request.timeout),
            verification_guards=verification.guards,
        )
        results.update(appended.results)
    if request.acks == 0:
        return None
    version, correlation_id = ctx.api_version, ctx.correlation_id
    if appended is not None and appended.replication is not None:
        # Holds the outcome, not the request: its records are released as this returns.
        replicated = appended.results

        def encode_replicated() -> bytes:
            results.update(replicated)
            return _encode(version, correlation_id, order, results)

        return DeferredResponse(appended.replication, encode_replicated)
    return _encode(version, correlation_id, order, results)


class TransactionalIdAuthorizationFailedError(StorageError):
    error_code: ClassVar[str] = "transactional_id_authorization_failed"


def _refused(ctx: RequestContext, request: Any, error: StorageError) -> bytes | None:
    """Every partition answered with ``error``, nothing appended."""
    if request.acks == 0:
        return None
    order = [(t.name, [p.index for p in t.partition_data]) for t in request.topic_data]
    results = {
        TopicPartition(name, index): ProduceResult(error=error)
        for name, indexes in order
        for index in indexes
    }
    return _encode(ctx.api_version, ctx.correlation_id, order, results)


def _encode(
    version: int,
    correlation_id: int,
    order: list[tuple[str, list[int]]],
    results: dict[TopicPartition, ProduceResult],
) -> bytes:
    topics = []
    for name, indexes in order:
        partitions = []
        for index in indexes:
            result = results[TopicPartition(name, index)]
            info = result.info
            append_time_ms = info.log_append_time_ms if info is not None else -1
            partitions.append(
                ProducePartitionResponse(
                    index=index,
                    error_code=int(error_code_of(result.error)),
                    base_offset=info.first_offset if info is not None else -1,
                    log_append_time_ms=append_time_ms if append_time_ms >= 0 else -1,
                    log_start_offset=result.log_start_offset,
                    record_errors=result.error.record_errors
                    if isinstance(result.error, InvalidRecordError)
                    else (),
                    error_message=error_message(result.error),
                )
            )
        topics.append(ProduceTopicResponse(name=name, partitions=tuple(partitions)))
    return encode_produce_response(version=version, correlation_id=correlation_id, topics=topics)
