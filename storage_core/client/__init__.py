"""A small blocking Kafka protocol client: admin, producer and consumer over kio schemas.

Layers, bottom up: ``framing`` (size prefix and headers), ``connection`` (one socket,
correlation ids, limits), ``negotiation`` (ApiVersions and the per-broker session),
``metadata`` and ``cluster`` (brokers, leaders, routing), then ``admin``, ``producer`` and
``consumer`` (the admin's requests in ``admin_requests``). Requests of any version are built
through ``storage_core.protocol``, the layer the broker answers through too. Errors are in
``errors``; all subclass ``storage_core.errors.StorageError``.
"""

from storage_core.client.admin import (
    ConfigEntry,
    CreatedTopic,
    KafkaAdminClient,
    TopicDescription,
)
from storage_core.client.admin_requests import AlterConfigOp, NewTopic
from storage_core.client.cluster import DEFAULT_BOOTSTRAP_SERVER, KafkaCluster
from storage_core.client.connection import ConnectionConfig, KafkaConnection
from storage_core.client.consumer import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedRecords,
    KafkaConsumer,
    OffsetAndTimestamp,
)
from storage_core.client.errors import (
    BrokerResponseError,
    BrokerUnreachableError,
    ClientError,
    ConnectionClosedError,
    ProtocolMismatchError,
    RequestTimeoutError,
    ResponseTooLargeError,
    UnsupportedVersionError,
)
from storage_core.client.metadata import (
    BrokerNode,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.client.negotiation import ApiKey, BrokerApiVersions, BrokerSession
from storage_core.client.producer import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    KafkaProducer,
    ProduceResult,
)
from storage_core.protocol.config_resource import (
    AlterConfigOpType,
    ConfigResourceType,
    ConfigSource,
)

__all__ = [
    "ACKS_ALL",
    "ACKS_LEADER",
    "ACKS_NONE",
    "DEFAULT_BOOTSTRAP_SERVER",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ApiKey",
    "BrokerApiVersions",
    "BrokerNode",
    "BrokerResponseError",
    "BrokerSession",
    "BrokerUnreachableError",
    "ClientError",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigResourceType",
    "ConfigSource",
    "ConnectionClosedError",
    "ConnectionConfig",
    "CreatedTopic",
    "FetchedRecords",
    "KafkaAdminClient",
    "KafkaCluster",
    "KafkaConnection",
    "KafkaConsumer",
    "KafkaProducer",
    "NewTopic",
    "OffsetAndTimestamp",
    "PartitionMetadata",
    "ProduceResult",
    "ProtocolMismatchError",
    "RequestTimeoutError",
    "ResponseTooLargeError",
    "TopicDescription",
    "TopicMetadata",
    "UnsupportedVersionError",
]
