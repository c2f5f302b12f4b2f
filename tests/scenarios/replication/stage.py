"""The stage of the replication stories: three broker processes on a real ZooKeeper, real
clients, process faults, and the picture of every replica's log after each step.

Broker 1 starts first and alone, so it is the controller; the stories' topics are assigned to
brokers 2 and 3 (``A`` and ``B`` of the stories), so killing them never moves the controller.
A story drives the stage step by step and after each step calls ``expect`` with the picture
(``picture.render``) it must reach: the stage reads ZooKeeper and every replica's partition
directory (``storage-core dump-log --json``) until they show it, and fails with both pictures
otherwise.

    stage.kill(2); stage.start_broker(2); stage.pause(3); stage.resume(3)
    stage.produce(topic, ["m0"], acks=-1)
    stage.expect(topic, '''
        zk: leader=2 leader_epoch=0 isr=[2,3]
        broker 2 (up): hw=1 epochs=[0@0]
          0: 0
        broker 3 (up): hw=1 epochs=[0@0]
          0: 0
    ''')

A SIGKILLed broker keeps its ZooKeeper registration until its session expires; the
controller acts on its death then, and ``start_broker`` waits for that (a live registration
refuses the broker id).
"""

from __future__ import annotations

import datetime
import os
import signal
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicPartition
from storage_core.controller.kafka_zk_client import KafkaZkClient
from storage_core.controller.zk_data import LeaderAndIsr
from storage_core.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.chaos.replica_logs import dump_replica
from tests.cluster_support import eventually
from tests.integration import raw_wire
from tests.scenarios.replication.picture import ReplicaView, picture, render

BROKER_IDS = (1, 2, 3)
CONTROLLER_ID = 1
SESSION_TIMEOUT_MS = 4000
PICTURE_WAIT_S = 20.0
CLIENT_TIMEOUT_S = 20.0
# Fast enough for stories of seconds; the HW checkpoint follows the HW within a tenth of a
# second unless a story says otherwise.
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "offsets.topic.replication.factor": "1",
    "auto.leader.rebalance.enable": "false",
    "auto.create.topics.enable": "false",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "100",
    "replica.lag.time.max.ms": "2000",
    "replica.high.watermark.checkpoint.interval.ms": "100",
    "log.retention.check.interval.ms": "200",
    "log.segment.delete.delay.ms": "0",
    "controlled.shutdown.enable": "false",
}


class ReplicationStage:
    """Brokers 1-3 under a fresh chroot of ``zookeeper`` (see the module docstring)."""

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        *,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.connect = f"{zookeeper.connect_string}/replication-{uuid.uuid4().hex[:8]}"
        self.brokers = {
            broker_id: BrokerProcess(
                directory / f"broker-{broker_id}",
                overrides={
                    **SETTINGS,
                    "broker.id": str(broker_id),
                    "zookeeper.connect": self.connect,
                    **(overrides or {}),
                },
            )
            for broker_id in BROKER_IDS
        }
        settings = {**SETTINGS, **(overrides or {})}
        self.session_timeout_ms = int(settings["zookeeper.session.timeout.ms"])
        self.paused: set[int] = set()
        self._zk: KafkaZkClient | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def zk(self) -> KafkaZkClient:
        if self._zk is None:
            self._zk = KafkaZkClient(
                self.connect,
                session_timeout_ms=self.session_timeout_ms,
                connection_timeout_ms=10_000,
            ).start()
        return self._zk

    def start(self) -> ReplicationStage:
        self.brokers[CONTROLLER_ID].start()
        eventually(
            lambda: (c := self.zk.get_controller()) is not None and c.broker_id == CONTROLLER_ID,
            what=f"broker {CONTROLLER_ID} is the controller",
        )
        for broker_id in BROKER_IDS:
            if broker_id != CONTROLLER_ID:
                self.brokers[broker_id].start()
        eventually(
            lambda: set(self.zk.get_all_brokers()) == set(BROKER_IDS),
            what="every broker registered",
        )
        return self

    def stop(self) -> None:
        for broker_id in BROKER_IDS:
            self.resume(broker_id)
            self.brokers[broker_id].kill()
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    def __enter__(self) -> ReplicationStage:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ faults
    def kill(self, broker_id: int) -> None:
        """SIGKILL: nothing is flushed or checkpointed on the way out."""
        self.brokers[broker_id].kill()
        self.paused.discard(broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process keeps its sockets and (for a while) its ZooKeeper session."""
        process = self.brokers[broker_id].process
        if process is not None:
            os.kill(process.pid, signal.SIGSTOP)
            self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        if process is not None and broker_id in self.paused:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    def wait_deregistered(self, broker_id: int) -> None:
        """Until ZooKeeper let the broker's session go (the controller then acts on it)."""
        eventually(
            lambda: broker_id not in self.zk.get_all_brokers(),
            timeout_s=3 * self.session_timeout_ms / 1000,
            what=f"broker {broker_id}'s registration expired",
        )

    def start_broker(self, broker_id: int) -> None:
        """Start a killed broker once its old registration is gone."""
        self.wait_deregistered(broker_id)
        self.brokers[broker_id].start()
        eventually(
            lambda: broker_id in self.zk.get_all_brokers(), what=f"broker {broker_id} registered"
        )

    # ------------------------------------------------------------------ topics and state
    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def bootstrap(self) -> str:
        """The brokers whose process runs and is not paused."""
        return ",".join(
            broker.bootstrap
            for broker_id, broker in self.brokers.items()
            if broker.process is not None and broker_id not in self.paused
        )

    def create_topic(self, topic: str, replicas: tuple[int, ...], **configs: str) -> None:
        """One partition on ``replicas`` (the first is the preferred leader)."""
        new = NewTopic(
            topic,
            num_partitions=1,
            replica_assignment=[list(replicas)],
            config={key.replace("_", "."): value for key, value in configs.items()},
        )
        admin = self.admin()  # kept alive until the answer: the futures need its handle
        admin.create_topics([new])[topic].result(timeout=CLIENT_TIMEOUT_S)
        self.wait_state(topic, leader=replicas[0], isr=replicas)

    def alter_topic(self, topic: str, **configs: str) -> None:
        """IncrementalAlterConfigs SET of ``configs`` (``_`` for ``.``) on ``topic``."""
        resource = ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(
                    key.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET
                )
                for key, value in configs.items()
            ],
        )
        admin = self.admin()
        admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)

    def state(self, topic: str) -> LeaderAndIsr | None:
        tp = TopicPartition(topic, 0)
        return self.zk.get_partition_states([tp]).get(tp)

    def wait_state(self, topic: str, *, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """Until ZooKeeper holds this leader and ISR and the leader serves the partition."""
        wanted = tuple(sorted(isr))

        def reached() -> LeaderAndIsr | None:
            state = self.state(topic)
            if state is None or state.leader != leader or tuple(sorted(state.isr)) != wanted:
                return None
            if leader >= 0 and self.metadata_leader(leader, topic) != (leader, 0):
                return None
            return state

        return eventually(
            reached, timeout_s=PICTURE_WAIT_S, what=f"{topic}: leader {leader}, ISR {wanted}"
        )

    def metadata_leader(self, broker_id: int, topic: str) -> tuple[int, int]:
        """(leader, error code) of partition 0 in ``broker_id``'s own Metadata answer."""
        (answer,) = metadata(self.brokers[broker_id].port, topic).topics
        (partition,) = answer.partitions
        return int(partition.leader_id), int(partition.error_code.value)

    def elect(self, topic: str, election: ElectionType) -> None:
        """ElectLeaders through the controller; raises what the election answered."""
        admin = self.admin()
        future = admin.elect_leaders(election, [CTopicPartition(topic, 0)])
        results = future.result(timeout=CLIENT_TIMEOUT_S)
        error = results[CTopicPartition(topic, 0)]
        if error is not None:
            raise RuntimeError(f"ElectLeaders {election.name} {topic}: {error}")

    # ------------------------------------------------------------------ clients
    def produce(self, topic: str, values: Iterable[str], *, acks: int | str = "all") -> list[int]:
        """One single-record batch per value, each acknowledged before the next; offsets."""
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks=acks,
            retries=10,
            retry_backoff_ms=200,
            linger_ms=0,
            enable_idempotence=False,
            request_timeout_ms=10_000,
        )
        try:
            return [
                producer.send(topic, value.encode(), partition=0).get(CLIENT_TIMEOUT_S).offset
                for value in values
            ]
        finally:
            producer.close(timeout=5)

    def produce_raw(
        self, broker_id: int, topic: str, value: str, *, acks: int = -1
    ) -> tuple[int, int]:
        """Produce v9 straight to one broker, no metadata, no retries (a client would ask a
        paused broker for metadata and wait): (error code, base offset)."""
        module = raw_wire.request_classes(0, 9)
        batch = build_batch([SimpleRecord(value=value.encode())])
        with raw_wire.connect(self.brokers[broker_id].port) as sock:
            body = raw_wire.call(
                sock,
                0,
                9,
                transactional_id=None,
                acks=acks,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    module.TopicProduceData(
                        name=topic,
                        partition_data=(module.PartitionProduceData(index=0, records=batch),),
                    ),
                ),
            )
        (topic_response,) = body.responses
        (partition,) = topic_response.partition_responses
        return int(partition.error_code.value), int(partition.base_offset)

    def consume(self, topic: str) -> list[tuple[int, str]]:
        """Every (offset, value) a consumer reads from the leader, up to the high watermark."""
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=10_000,
        )
        try:
            tp = KTopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = int(consumer.end_offsets([tp])[tp])
            read: list[tuple[int, str]] = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while consumer.position(tp) < end and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    read += [(r.offset, r.value.decode()) for r in records]
            return read
        finally:
            consumer.close()

    # ------------------------------------------------------------------ pictures
    def status(self, broker_id: int) -> str:
        if self.brokers[broker_id].process is None:
            return "down"
        return "paused" if broker_id in self.paused else "up"

    def replica_view(self, broker_id: int, topic: str) -> ReplicaView:
        log_dir = self.brokers[broker_id].log_dir
        partition_dir = log_dir / f"{topic}-0"
        hw_file = log_dir / REPLICATION_OFFSET_CHECKPOINT
        hws = OffsetCheckpointFile(hw_file).read() if hw_file.exists() else {}
        status = self.status(broker_id)
        if not partition_dir.is_dir():
            return ReplicaView(status=status, high_watermark=None, batches=(), epochs=())
        dumped = dump_replica(broker_id, partition_dir)
        return ReplicaView(
            status=status,
            high_watermark=hws.get(TopicPartition(topic, 0)),
            batches=dumped.batches,
            epochs=dumped.epochs,
            errors=tuple(e for e in dumped.errors if e != "no log files"),
        )

    def picture(self, topic: str, replicas: Iterable[int]) -> str:
        return render(self.state(topic), {b: self.replica_view(b, topic) for b in replicas})

    def expect(self, topic: str, expected: str, *, step: str = "") -> str:
        """Wait until the picture of ``topic``'s replicas is ``expected``; print it."""
        want = picture(expected)
        replicas = sorted(
            int(line.split()[1]) for line in want.splitlines() if line.startswith("broker ")
        )
        seen = ""
        deadline = time.monotonic() + PICTURE_WAIT_S
        while True:
            try:
                seen = self.picture(topic, replicas)
            except RuntimeError as error:  # retention deleted a segment while dump-log read
                seen = f"unreadable: {error}"
            if seen == want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        print(f"--- {topic}: {step}\n{seen}")
        assert seen == want, f"{topic} after {step!r}:\n{seen}\n--- expected:\n{want}"
        return seen

    def broker_log(self, broker_id: int) -> str:
        return self.brokers[broker_id].output_path.read_text(errors="replace")


def metadata(port: int, topic: str) -> Any:
    """One broker's own Metadata v12 answer for ``topic`` (no client-side caching)."""
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(port) as sock:
        return raw_wire.call(
            sock,
            3,
            12,
            topics=(raw_wire.build(module.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
