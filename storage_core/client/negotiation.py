"""API version negotiation (ApiVersions, KIP-511) and the negotiated ``BrokerSession``.

On a new connection the client sends ApiVersions at its highest implemented version. A
broker that does not know that version answers with an ApiVersions v0 body carrying
``UNSUPPORTED_VERSION`` (35) and its own ApiVersions range; the client then retries at the
highest version both support. For every other API the session uses the highest version
that both the broker announces and this client implements (``CLIENT_API_VERSIONS``), or
raises ``UnsupportedVersionError`` when the ranges do not meet.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.static.protocol import Payload

from storage_core.client.connection import (
    ConnectionConfig,
    KafkaConnection,
    ResponseT,
    encode_body,
)
from storage_core.client.errors import UnsupportedVersionError, raise_for_error

CLIENT_SOFTWARE_NAME = "storage-core"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class ApiKey(enum.IntEnum):
    """The APIs this client speaks (Kafka's ``ApiKeys``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TOPIC_PARTITIONS = 75


# The versions implemented by this client, per API: a flexible one (header v2) and an older
# non-flexible one (header v1) for older brokers.
CLIENT_API_VERSIONS: Mapping[ApiKey, tuple[int, ...]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (4, 12),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (4, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ELECT_LEADERS: (1, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # both flexible: there is no older one
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0,),
    ApiKey.DESCRIBE_PRODUCERS: (0,),  # flexible; there is no other
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0,),
    ApiKey.OFFSET_COMMIT: (8,),  # storage_core.client.group_offsets (a restore's commits)
    ApiKey.OFFSET_FETCH: (8,),  # groups in a batch (KIP-709); storage_core.client.group_offsets
    ApiKey.FIND_COORDINATOR: (4,),  # keys in a batch (KIP-699)
    ApiKey.LIST_GROUPS: (4,),
    ApiKey.OFFSET_DELETE: (0,),  # the only version; storage_core.client.group_offsets
}

_ERROR_CODE = struct.Struct(">h")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionRange:
    """Versions of one API a broker supports, ``min_version`` to ``max_version`` (inclusive)."""

    api_key: int
    min_version: int
    max_version: int

    def __post_init__(self) -> None:
        if not 0 <= self.min_version <= self.max_version:
            raise ValueError(
                f"invalid version range {self.min_version}..{self.max_version}"
                f" for api key {self.api_key}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerApiVersions:
    """The version ranges a broker announced, by api key."""

    ranges: Mapping[int, ApiVersionRange]

    def pick(self, api_key: ApiKey, implemented: tuple[int, ...] | None = None) -> int:
        """The highest version in ``implemented`` (default ``CLIENT_API_VERSIONS``) that the
        broker supports; ``UnsupportedVersionError`` if there is none."""
        versions = implemented if implemented is not None else CLIENT_API_VERSIONS[api_key]
        announced = self.ranges.get(int(api_key))
        if announced is not None:
            common = [v for v in versions if announced.min_version <= v <= announced.max_version]
            if common:
                return max(common)
        broker_side = (
            "does not support it"
            if announced is None
            else f"supports {announced.min_version}..{announced.max_version}"
        )
        raise UnsupportedVersionError(
            f"{api_key.name}: this client implements versions {list(versions)} but the broker"
            f" {broker_side}; use a matching broker or client version"
        )


def negotiate(connection: KafkaConnection) -> BrokerApiVersions:
    """Exchange ApiVersions on ``connection`` (with the KIP-511 fallback)."""
    request_v3 = ApiVersionsRequestV3(
        client_software_name=CLIENT_SOFTWARE_NAME,
        client_software_version=CLIENT_SOFTWARE_VERSION,
    )
    body = connection.send_raw(
        api_key=ApiKey.API_VERSIONS, api_version=3, flexible=True, body=encode_body(request_v3)
    )
    if len(body) >= _ERROR_CODE.size and (
        _ERROR_CODE.unpack_from(body)[0] == ErrorCode.unsupported_version
    ):
        # The broker answered in v0 with the ApiVersions range it supports.
        fallback = connection.decode_body(body, ApiVersionsResponseV0, api_key=ApiKey.API_VERSIONS)
        ranges = _ranges(fallback)
        version = BrokerApiVersions(ranges=ranges).pick(ApiKey.API_VERSIONS, (0,))
        if version != 0:  # pragma: no cover - only (0, 3) are implemented
            raise UnsupportedVersionError("no ApiVersions fallback version")
        response_v0 = connection.send(ApiVersionsRequestV0(), ApiVersionsResponseV0)
        raise_for_error(response_v0.error_code, resource=f"broker {connection.address}")
        return BrokerApiVersions(ranges=_ranges(response_v0))
    response = connection.decode_body(body, ApiVersionsResponseV3, api_key=ApiKey.API_VERSIONS)
    raise_for_error(response.error_code, resource=f"broker {connection.address}")
    return BrokerApiVersions(ranges=_ranges(response))


def _ranges(
    response: ApiVersionsResponseV0 | ApiVersionsResponseV3,
) -> dict[int, ApiVersionRange]:
    return {
        int(item.api_key): ApiVersionRange(
            api_key=int(item.api_key),
            min_version=int(item.min_version),
            max_version=int(item.max_version),
        )
        for item in response.api_keys
    }


class BrokerSession:
    """A connection to one broker together with the API versions negotiated on it.

    Not thread-safe, like the connection it wraps.
    """

    def __init__(self, connection: KafkaConnection, versions: BrokerApiVersions):
        self.connection = connection
        self.versions = versions

    @staticmethod
    def open(host: str, port: int, config: ConnectionConfig | None = None) -> BrokerSession:
        """Connect and negotiate; the connection is closed again if negotiation fails."""
        connection = KafkaConnection.connect(host, port, config)
        try:
            versions = negotiate(connection)
        except BaseException:
            connection.close()
            raise
        return BrokerSession(connection, versions)

    @property
    def address(self) -> str:
        return self.connection.address

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def version(self, api_key: ApiKey) -> int:
        """The version to use for ``api_key`` on this broker (within the config's
        ``allowed_api_versions``)."""
        implemented = CLIENT_API_VERSIONS[api_key]
        allowed = self.connection.config.allowed_api_versions.get(int(api_key))
        if allowed is not None:
            unknown = sorted(set(allowed) - set(implemented))
            if unknown:
                raise UnsupportedVersionError(
                    f"{api_key.name}: versions {unknown} are not implemented by this client"
                    f" (it implements {list(implemented)})"
                )
            implemented = tuple(allowed)
        return self.versions.pick(api_key, implemented)

    def send(self, request: Payload, response_type: type[ResponseT]) -> ResponseT:
        return self.connection.send(request, response_type)

    def send_no_response(self, request: Payload) -> None:
        self.connection.send_no_response(request)

    def close(self) -> None:
        self.connection.close()
