"""Helpers shared by the API handlers: error codes, topic ids, zero throttle time."""

from __future__ import annotations

import datetime
import logging
import uuid

from kio.schema.errors import ErrorCode

from storage_core.common import ZERO_UUID, Uuid
from storage_core.errors import StorageError
from storage_core.server.broker_services import BrokerServices
from storage_core.zk.zk_data import BrokerRegistration
from storage_core.zk.zk_data import EndPoint as ZkEndPoint

logger = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)


def error_code_of(error: BaseException | None) -> ErrorCode:
    """The Kafka error for an exception; anything unexpected is UNKNOWN_SERVER_ERROR."""
    if error is None:
        return ErrorCode.none
    if isinstance(error, StorageError):
        return ErrorCode[error.error_code]
    if isinstance(error, ValueError):
        return ErrorCode.invalid_request
    return ErrorCode.unknown_server_error


def to_kio_uuid(topic_id: Uuid | None) -> uuid.UUID:
    return uuid.UUID(bytes=(topic_id or ZERO_UUID).to_bytes())


def from_kio_uuid(value: uuid.UUID | None) -> Uuid:
    return ZERO_UUID if value is None else Uuid.from_bytes(value.bytes)


def error_message(error: BaseException | None) -> str | None:
    return None if error is None else str(error)


_ONE_MILLISECOND = datetime.timedelta(milliseconds=1)


def milliseconds(duration: datetime.timedelta) -> int:
    """A request's int32 milliseconds (kio hands them over as a ``timedelta``), exactly:
    ``int(total_seconds() * 1000)`` goes through a float and can come out 1 ms short."""
    return duration // _ONE_MILLISECOND


def to_kio_timestamp(timestamp_ms: int) -> datetime.datetime | None:
    """Milliseconds since the epoch as the aware datetime the codec writes back as int64
    milliseconds; -1 (no timestamp) is None."""
    if timestamp_ms < 0:
        return None
    seconds, millis = divmod(timestamp_ms, 1000)
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).replace(
        microsecond=millis * 1000
    )


def live_brokers(services: BrokerServices) -> list[BrokerRegistration]:
    """The registered brokers, this one always included (it is answering: a client must be able
    to reach it even in the moment before its own registration shows in its metadata)."""
    image = services.metadata_cache.image()
    brokers = dict(image.brokers)
    if services.broker_id not in brokers and services.endpoint.port > 0:
        own = services.current_endpoints() or {"PLAINTEXT": services.endpoint}
        brokers[services.broker_id] = BrokerRegistration(
            broker_id=services.broker_id,
            endpoints=tuple(
                ZkEndPoint(listener=name, host=e.host, port=e.port) for name, e in own.items()
            ),
        )
    return [brokers[b] for b in sorted(brokers)]


def brokers_on_listener(
    services: BrokerServices, listener_name: str
) -> list[tuple[BrokerRegistration, ZkEndPoint]]:
    """The live brokers that have an endpoint of ``listener_name``, with it: a client is told
    the addresses of the listener it connected through, and a broker without that listener is
    left out (Kafka's ``MetadataCache.getAliveBrokerNodes(listenerName)``)."""
    found = []
    for broker in live_brokers(services):
        endpoint = broker.endpoint(listener_name)
        if endpoint is not None:
            found.append((broker, endpoint))
    return found
