"""What the API handlers see of the broker: the managers Kafka's ``KafkaApis`` is built with
(replica manager, metadata cache, group coordinator, admin manager, configs...), and nothing
of the broker's lifecycle. Every ``RequestContext`` carries the one ``BrokerServices`` of its
broker.

The group coordinator and the broker's advertised endpoint exist only once the broker has
started (the endpoint names the port bound then): they are read through the broker at each
use, as the handlers read them before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from storage_core.clock import Clock
from storage_core.controller.kafka_controller import KafkaController
from storage_core.controller.producer_id_manager import ProducerIdManager
from storage_core.coordinator.group.group_coordinator import GroupCoordinator
from storage_core.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from storage_core.log.log_manager import LogManager
from storage_core.replication.metadata_cache import MetadataCache
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.security.authorizer.acl_authorizer import AclAuthorizer
from storage_core.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from storage_core.server.admin_manager import AdminManager
from storage_core.server.dynamic_broker_config import DynamicBrokerConfigStore
from storage_core.server.fetch_session import FetchManager
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.topic_store import TopicStore
from storage_core.zk.config_entity import ConfigEntityZkStore


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int


class SupportedApi(Protocol):
    """An API this broker serves and its version range (inclusive at both ends)."""

    @property
    def api_key(self) -> int: ...
    @property
    def min_version(self) -> int: ...
    @property
    def max_version(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerServices:
    """The broker's managers, as the handlers use them (one instance per broker)."""

    broker_id: int
    config: KafkaConfig
    clock: Clock
    replica_manager: ReplicaManager
    log_manager: LogManager
    metadata_cache: MetadataCache
    topic_store: TopicStore
    controller: KafkaController
    producer_id_manager: ProducerIdManager
    dynamic_broker_config: DynamicBrokerConfigStore
    admin_manager: AdminManager
    api_versions: Mapping[int, SupportedApi]
    current_endpoint: Callable[[], BrokerEndpoint]
    current_group_coordinator: Callable[[], GroupCoordinator | None]
    current_endpoints: Callable[[], Mapping[str, BrokerEndpoint]] = lambda: {}
    """Every advertised endpoint of this broker by listener name (empty until it listens)."""
    authorizer: AclAuthorizer | None = None
    """``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``; None: every request
    is allowed and the ACL APIs answer SECURITY_DISABLED."""
    config_entities: ConfigEntityZkStore | None = None
    """The users' config entities (their SCRAM credentials) in ZooKeeper or the single-node
    store, for Describe/AlterUserScramCredentials."""
    fetch_manager: FetchManager | None = None
    """Incremental fetch sessions (KIP-227) of followers; None: every fetch is answered
    sessionless."""
    current_transaction_coordinator: Callable[[], TransactionCoordinator | None] = lambda: None
    add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
    """Verifies transactional produces with their coordinator (KIP-890 part 1); None when
    ``transaction.partition.verification.enable=false``."""

    @property
    def endpoint(self) -> BrokerEndpoint:
        """This broker's advertised listener (port -1 until it listens)."""
        return self.current_endpoint()

    def endpoint_for(self, listener_name: str) -> BrokerEndpoint | None:
        """This broker's advertised endpoint of ``listener_name`` (None if it has none, or
        before it listens)."""
        return self.current_endpoints().get(listener_name)

    @property
    def group_coordinator(self) -> GroupCoordinator | None:
        """The group coordinator, None until the broker has started it."""
        return self.current_group_coordinator()

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None:
        """The transaction coordinator, None until the broker has started it."""
        return self.current_transaction_coordinator()

    @property
    def cluster_id(self) -> str:
        return self.topic_store.cluster_id
