"""``KafkaCluster``: bootstrap, one session per broker and routing by partition leader.

The cluster is discovered from the bootstrap servers (tried in order) through Metadata;
requests about a partition go to its leader, admin requests to the controller. Sessions are
opened lazily per broker node and kept until ``close``; a session whose connection broke
is replaced on next use. Metadata is refreshed on demand (``refresh_metadata``), e.g. after a
``NOT_LEADER_OR_FOLLOWER`` answer.

Not thread-safe: one thread uses a cluster object at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from storage_core.client.connection import ConnectionConfig, parse_host_port
from storage_core.client.errors import BrokerUnreachableError, ClientError
from storage_core.client.metadata import ClusterMetadata, fetch_metadata
from storage_core.client.negotiation import BrokerSession
from storage_core.common import TopicPartition

logger = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_SERVER = "127.0.0.1:9092"
MAX_BOOTSTRAP_SERVERS = 64


class KafkaCluster:
    """Sessions to the brokers of one cluster, found from ``bootstrap_servers``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = DEFAULT_BOOTSTRAP_SERVER,
        *,
        config: ConnectionConfig | None = None,
    ):
        servers = (
            [s for s in bootstrap_servers.split(",") if s.strip()]
            if isinstance(bootstrap_servers, str)
            else list(bootstrap_servers)
        )
        if not servers:
            raise ValueError("at least one bootstrap server (HOST:PORT) is needed")
        if len(servers) > MAX_BOOTSTRAP_SERVERS:
            raise ValueError(f"{len(servers)} bootstrap servers; at most {MAX_BOOTSTRAP_SERVERS}")
        self._bootstrap = [parse_host_port(s) for s in servers]
        self.config = config or ConnectionConfig()
        self._bootstrap_session: BrokerSession | None = None
        self._sessions: dict[int, BrokerSession] = {}
        self._metadata: ClusterMetadata | None = None

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        if self._bootstrap_session is not None:
            self._bootstrap_session.close()
            self._bootstrap_session = None

    # ------------------------------------------------------------------ sessions
    def any_session(self) -> BrokerSession:
        """A session to some broker: an open one, else the first reachable bootstrap server."""
        for session in self._sessions.values():
            if not session.closed:
                return session
        if self._bootstrap_session is not None and not self._bootstrap_session.closed:
            return self._bootstrap_session
        errors: list[str] = []
        for host, port in self._bootstrap:
            try:
                self._bootstrap_session = BrokerSession.open(host, port, self.config)
            except BrokerUnreachableError as exc:
                errors.append(str(exc))
                continue
            return self._bootstrap_session
        if len(errors) == 1:
            raise BrokerUnreachableError(errors[0])
        raise BrokerUnreachableError("no bootstrap server is reachable: " + "; ".join(errors))

    def session_for_node(self, node_id: int) -> BrokerSession:
        """A session to broker ``node_id`` as found in the metadata."""
        session = self._sessions.get(node_id)
        if session is not None and not session.closed:
            return session
        node = self.metadata().broker(node_id)
        if node is None:
            node = self.refresh_metadata().broker(node_id)
        if node is None:
            raise ClientError(f"broker {node_id} is not in the cluster metadata")
        bootstrap = self._bootstrap_session
        if bootstrap is not None and not bootstrap.closed and bootstrap.address == node.address:
            session, self._bootstrap_session = bootstrap, None
        else:
            session = BrokerSession.open(node.host, node.port, self.config)
        self._sessions[node_id] = session
        return session

    def leader_session(self, topic_partition: TopicPartition) -> BrokerSession:
        """A session to the leader of ``topic_partition`` (per the cached metadata)."""
        metadata = self.metadata([topic_partition.topic])
        topic = metadata.topic(topic_partition.topic)
        if topic is None or topic.error != ErrorCode.none:
            metadata = self.refresh_metadata([topic_partition.topic])
        leader = metadata.leader_of(topic_partition)
        return self.session_for_node(leader.node_id)

    def controller_session(self) -> BrokerSession:
        """A session to the controller; any broker when the metadata names none."""
        metadata = self.metadata()
        if metadata.broker(metadata.controller_id) is None:
            return self.any_session()
        return self.session_for_node(metadata.controller_id)

    # ------------------------------------------------------------------ metadata
    def metadata(self, topics: Sequence[str] = ()) -> ClusterMetadata:
        """The cached metadata, fetched if absent or missing one of ``topics``.

        Only the named topics are fetched (none: brokers and controller only); use
        ``refresh_metadata(None)`` for every topic of the cluster.
        """
        cached = self._metadata
        if cached is not None and all(cached.topic(t) is not None for t in topics):
            return cached
        return self.refresh_metadata(list(topics))

    def refresh_metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """Fetch metadata for ``topics`` (``None``: all) and cache it.

        When only some topics are asked for, the topics cached before are kept beside them.
        """
        metadata = fetch_metadata(self.any_session(), topics)
        if topics is not None and self._metadata is not None:
            fresh = {t.name for t in metadata.topics}
            kept = tuple(t for t in self._metadata.topics if t.name not in fresh)
            metadata = ClusterMetadata(
                cluster_id=metadata.cluster_id,
                controller_id=metadata.controller_id,
                brokers=metadata.brokers,
                topics=kept + metadata.topics,
            )
        self._metadata = metadata
        return metadata

    def invalidate_metadata(self) -> None:
        self._metadata = None
