"""``ClusterMembership``: a broker's place in the cluster. It owns the broker's session with the
metadata store (ZooKeeper when ``zookeeper.connect`` is set, else the single-node store in the
first log dir: one code path), the broker's registration (``/brokers/ids/<id>``, registered
again after a lost session), the controller that runs on every broker and is active on one,
and the listener that keeps the ``MetadataCache`` and tells the broker what changed.

Start-up order, as Kafka's: connect (bounded by ``zookeeper.connection.timeout.ms``, one clear
error naming ``zookeeper.connect`` when it fails), move a single broker's old
``topic-metadata.json`` in, agree on the cluster id, register (a live duplicate ``broker.id``
is refused naming its holder; one at this broker's own endpoints, with log dirs that were this
broker's before the start, is its previous run's, left by a crash: waited for until ZooKeeper
expires that session), read the cluster (the broker hosts its partitions), then start
the controller. Stop: the controller resigns (another broker takes over at once), the session
closes (the registration goes, and the controller moves this broker's leaderships).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.controller.kafka_controller import ControllerConfig, KafkaController
from storage_core.controller.legacy_topic_metadata import migrate_legacy_topic_metadata
from storage_core.errors import InvalidConfigError
from storage_core.log.meta_properties import (
    CorruptMetaPropertiesError,
    ZkMetaProperties,
    read_meta_properties,
)
from storage_core.metrics import KafkaMetricsRegistry
from storage_core.metrics.registry import MetricName
from storage_core.replication.metadata_cache import MetadataCache, PartitionMetadata
from storage_core.replication.zk_metadata_listener import (
    DeletionCallback,
    PartitionsCallback,
    ZkMetadataListener,
)
from storage_core.security.zookeeper_login import zookeeper_sasl_login
from storage_core.server.kafka_config import KafkaConfig, new_cluster_id
from storage_core.zk.kafka_zk_client import BrokerIdInUseError, KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import BrokerRegistration, EndPoint

logger = logging.getLogger(__name__)

REREGISTER_RETRY_S = 1.0
CONTROLLED_SHUTDOWN_POLL_S = 0.05
LOGGED_PARTITIONS_MAX = 20  # partitions named in a log line (the count is always given)
# waited beyond zookeeper.session.timeout.ms for a previous run's session to expire: ZooKeeper
# expires sessions on its tick (2 s by default), and raises a timeout asked below two ticks
# to two ticks
PREVIOUS_SESSION_EXPIRY_MARGIN_MS = 5_000


def ran_on_log_dirs(log_dirs: Sequence[Path], *, broker_id: int, cluster_id: str) -> bool:
    """Every log dir already holds this broker's ``meta.properties`` of this cluster: this
    broker ran on them before (read before the start writes the file where it lacks)."""
    wanted = ZkMetaProperties(broker_id=broker_id, cluster_id=cluster_id)
    try:
        return all(read_meta_properties(log_dir) == wanted for log_dir in log_dirs)
    except CorruptMetaPropertiesError:
        return False  # the start refuses it next, naming the file


def metadata_store_client(
    config: KafkaConfig, log_dir: Path, environ: Mapping[str, str] = os.environ
) -> KafkaZkClient:
    """The broker's session on ZooKeeper (logged in as ``KAFKA_OPTS``' JAAS file says, creating
    znodes with secure ACLs when ``zookeeper.set.acl``), or on the single-node store."""
    connect = config.get_string("zookeeper.connect")
    set_acl = config.get_bool("zookeeper.set.acl")
    if not connect:
        if set_acl:
            raise InvalidConfigError(
                "zookeeper.set.acl=true needs zookeeper.connect: the single-node store has no"
                " ZooKeeper ACLs (its file is protected by the log dir's permissions)"
            )
        return KafkaZkClient.single_node(LocalZNodeTree(log_dir))
    login = zookeeper_sasl_login(environ)
    if set_acl and login is None:
        raise InvalidConfigError(
            "zookeeper.set.acl=true, but no ZooKeeper SASL login is configured: set KAFKA_OPTS"
            " to -Djava.security.auth.login.config=<JAAS file> whose Client section holds"
            " org.apache.zookeeper.server.auth.DigestLoginModule with username and password"
        )
    session_ms = config.get_int("zookeeper.session.timeout.ms")
    connection_ms = config.get_int("zookeeper.connection.timeout.ms")
    return KafkaZkClient(
        connect,
        session_timeout_ms=session_ms,
        connection_timeout_ms=connection_ms if connection_ms > 0 else session_ms,
        sasl_login=login,
        set_acl=set_acl,
    )


class ClusterMembership:
    def __init__(
        self,
        config: KafkaConfig,
        *,
        log_dir: Path,
        cache: MetadataCache,
        unclean_leader_election_enable: Callable[[str], bool],
        on_partitions: PartitionsCallback,
        on_deletion_marked: DeletionCallback,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_dir = log_dir
        self.cache = cache
        self.uses_zookeeper = bool(config.get_string("zookeeper.connect"))
        self.zk = metadata_store_client(config, log_dir)
        self.controller = KafkaController(
            self.broker_id,
            self.zk,
            unclean_leader_election_enable=unclean_leader_election_enable,
            config=ControllerConfig(
                auto_leader_rebalance_enable=config.get_bool("auto.leader.rebalance.enable"),
                leader_imbalance_check_interval_s=float(
                    config.get_int("leader.imbalance.check.interval.seconds")
                ),
                leader_imbalance_per_broker_percentage=config.get_int(
                    "leader.imbalance.per.broker.percentage"
                ),
            ),
        )
        self.listener = ZkMetadataListener(
            self.broker_id,
            self.zk,
            cache,
            on_partitions=on_partitions,
            on_deletion_marked=on_deletion_marked,
        )
        self._registration: BrokerRegistration | None = None
        self._broker_epoch = -1
        self._session_lost = False
        self._closed = False

    def connect(self) -> str:
        """Open the session, move old metadata in, agree on the cluster id (returned)."""
        self.zk.start()
        migrated = None
        if not self.uses_zookeeper and not self.zk.get_all_topics():
            migrated = migrate_legacy_topic_metadata(self.log_dir, self.zk)
        proposed = self.config.cluster_id() or migrated or new_cluster_id()
        cluster_id = self.zk.get_or_create_cluster_id(proposed)
        self.cache.set_image(replace(self.cache.image(), cluster_id=cluster_id))
        return cluster_id

    def read_topic_configs(self) -> dict[str, dict[str, str]]:
        """Every topic's configs, read once before the logs load."""
        return {topic: self.zk.get_topic_config(topic) for topic in self.zk.get_all_topics()}

    def register_and_start(
        self, endpoints: EndPoint | tuple[EndPoint, ...], *, ran_here_before: bool = False
    ) -> int:
        """Register with ``endpoints`` (every advertised listener), host the partitions
        (synchronously: they are hosted when this returns), start the controller; returns the
        broker epoch. ``ran_here_before``: the log dirs were this broker's before this start
        (``ran_on_log_dirs``), so a registration at these endpoints is taken for this
        broker's previous run, killed before it could close its session, and waited for
        (``zookeeper.session.timeout.ms`` plus ``PREVIOUS_SESSION_EXPIRY_MARGIN_MS`` at most)
        instead of refused."""
        rack = self.config.get_string("broker.rack") or None
        if isinstance(endpoints, EndPoint):
            endpoints = (endpoints,)
        self._registration = BrokerRegistration(
            broker_id=self.broker_id,
            endpoints=endpoints,
            rack=rack,
            timestamp_ms=int(time.time() * 1000),
        )
        wait_ms = 0
        if ran_here_before and self.uses_zookeeper:
            wait_ms = self.zk.session_timeout_ms + PREVIOUS_SESSION_EXPIRY_MARGIN_MS
        try:
            epoch = self.zk.register_broker(self._registration, previous_run_wait_ms=wait_ms)
        except BrokerIdInUseError as error:
            if wait_ms or set(error.holder.endpoints) != set(endpoints):
                raise
            raise BrokerIdInUseError(
                f"{error}. It is registered at this broker's endpoint, but the log dirs were not"
                f" this broker's before this start (no meta.properties of broker.id"
                f" {self.broker_id} in this cluster in every log dir), so it is not taken for"
                " this broker's previous run, whose registration ZooKeeper would remove within"
                " zookeeper.session.timeout.ms",
                holder=error.holder,
            ) from None
        self._broker_epoch = epoch
        self.zk.add_session_listener(self._on_session_state)
        self.listener.start()
        self.controller.start()
        logger.info(
            "registered in the cluster broker_id=%d broker_epoch=%d session=0x%x store=%s",
            self.broker_id,
            epoch,
            self.zk.session_id,
            self.zk.connect,
        )
        return epoch

    @property
    def controlled_shutdown_enabled(self) -> bool:
        """Registered in a cluster with ``controlled.shutdown.enable``."""
        return self.config.get_bool("controlled.shutdown.enable") and self._broker_epoch >= 0

    def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships to other in-sync replicas and
        wait until this broker's metadata shows them moved (Kafka's controlled shutdown): up to
        ``controlled.shutdown.max.retries`` requests, each waited for
        ``controlled.shutdown.retry.backoff.ms`` at most before the next one is sent (a
        controller that moved, or partitions whose state moved under it, are asked again).
        Partitions with no other in-sync replica stay (they go offline when the broker does)."""
        if not self.controlled_shutdown_enabled:
            return
        attempts = max(1, self.config.get_int("controlled.shutdown.max.retries"))
        wait_s = self.config.get_int("controlled.shutdown.retry.backoff.ms") / 1000
        started = time.monotonic()
        movable = self._movable_leaderships()
        for attempt in range(1, attempts + 1):
            try:
                self.zk.request_controlled_shutdown(self.broker_id, self._broker_epoch)
            except Exception as exc:
                logger.warning(
                    "controlled shutdown not requested broker_id=%d: %s", self.broker_id, exc
                )
                return
            deadline = time.monotonic() + wait_s
            while movable and time.monotonic() < deadline:
                time.sleep(CONTROLLED_SHUTDOWN_POLL_S)
                # polled among those still to move (cheap at thousands of partitions: a
                # leadership that moved does not come back to a broker shutting down); once
                # they have, all again, for one whose follower came back in sync meanwhile
                movable = self._movable_leaderships(among=movable) or self._movable_leaderships()
            if not movable or not (movable := self._movable_leaderships()):
                logger.info(
                    "controlled shutdown complete broker_id=%d after_s=%.2f attempts=%d",
                    self.broker_id,
                    time.monotonic() - started,
                    attempt,
                )
                return
            if attempt < attempts:
                logger.info(
                    "controlled shutdown attempt %d of %d incomplete, asking again"
                    " broker_id=%d still_leading=%d",
                    attempt,
                    attempts,
                    self.broker_id,
                    len(movable),
                )
        logger.warning(
            "controlled shutdown incomplete after %.0f s broker_id=%d still_leading=%d %s",
            time.monotonic() - started,
            self.broker_id,
            len(movable),
            [str(tp) for tp in movable[:LOGGED_PARTITIONS_MAX]],
        )

    def _movable_leaderships(
        self, among: Sequence[TopicPartition] | None = None
    ) -> list[TopicPartition]:
        """Partitions this broker leads that another live in-sync replica could lead (of
        ``among``, or of all)."""
        image = self.cache.image()
        candidates: list[tuple[TopicPartition, PartitionMetadata | None]]
        if among is None:
            candidates = [
                (TopicPartition(topic.name, p.partition), p)
                for topic in image.topics.values()
                for p in topic.partitions
            ]
        else:
            candidates = [(tp, image.partition(tp)) for tp in among]
        return [
            tp
            for tp, p in candidates
            if p is not None
            and p.leader == self.broker_id
            and any(r != self.broker_id and r in image.brokers for r in p.isr)
        ]

    def close(self) -> None:
        """Resign, stop following, close the session; safe after a failed start."""
        self._closed = True
        self.controller.shutdown()
        self.listener.stop()
        if self.uses_zookeeper:
            pings = self.zk.session_health.stats()
            logger.info(
                "closing zookeeper session broker_id=%d session=0x%x pings=%d"
                " ping_latency_ms_max=%.0f session_timeout_ms=%d",
                self.broker_id,
                self.zk.session_id,
                pings.count,
                pings.max_ms,
                self.zk.session_timeout_ms,
            )
        try:
            self.zk.close()
        except Exception as exc:  # never opened, or already gone
            logger.debug("metadata store session close: %s", exc)

    def register_metrics(self, registry: KafkaMetricsRegistry) -> None:
        """The ZooKeeper session's heartbeat (``kafka.server:type=ZooKeeperClientMetrics``):
        the last ping's round trip and the largest of the last minute, in ms."""
        health = self.zk.session_health
        for name, sample in (
            ("ZooKeeperPingLatencyMs", lambda: health.stats().last_ms),
            ("ZooKeeperPingLatencyMsMax", lambda: health.stats().window_max_ms),
        ):
            registry.gauge(
                MetricName(group="kafka.server", type="ZooKeeperClientMetrics", name=name), sample
            )

    def _on_session_state(self, state: str) -> None:
        """A lost session took the registration with it: register again once reconnected
        (on a thread of its own: this runs on the ZooKeeper client's thread)."""
        if state == "LOST" and self._closed:
            logger.info("zookeeper session closed broker_id=%d", self.broker_id)
        elif state == "LOST":
            self._session_lost = True
            logger.warning("zookeeper session expired broker_id=%d", self.broker_id)
        elif state == "CONNECTED" and self._session_lost and not self._closed:
            self._session_lost = False
            threading.Thread(target=self._register_again, daemon=True).start()

    def _register_again(self) -> None:
        while not self._closed and self._registration is not None:
            try:
                epoch = self.zk.register_broker(self._registration)
                logger.info(
                    "registered again after a lost session broker_id=%d broker_epoch=%d",
                    self.broker_id,
                    epoch,
                )
                return
            except Exception as exc:
                logger.warning(
                    "registration failed, retrying broker_id=%d: %s", self.broker_id, exc
                )
                time.sleep(REREGISTER_RETRY_S)
