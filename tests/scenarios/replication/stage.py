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

The brokers, their faults and the wait for a killed broker's registration to expire are the
harness's ``BrokerSet`` (``tests.scenarios.harness.brokers``), the picture is
``tests.scenarios.harness.replica_picture``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

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
from kafka import KafkaProducer

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.records import SimpleRecord, build_batch
from storage_core.zk.zk_data import LeaderAndIsr
from tests.cluster_support import eventually
from tests.integration import raw_wire
from tests.scenarios.harness import clients, partitions
from tests.scenarios.harness.brokers import BrokerSet
from tests.scenarios.harness.replica_picture import picture, render, replica_view
from tests.scenarios.harness.waiting import settle

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


class ReplicationStage(BrokerSet):
    """Brokers 1-3 under a fresh chroot of ``zookeeper`` (see the module docstring)."""

    picture_poll_s = 0.2

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        *,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            zookeeper,
            directory,
            BROKER_IDS,
            {**SETTINGS, **(overrides or {})},
            chroot="replication",
        )

    def start(self) -> Self:
        self.brokers[CONTROLLER_ID].start()
        self.wait_controller(CONTROLLER_ID)
        for broker_id in BROKER_IDS:
            if broker_id != CONTROLLER_ID:
                self.brokers[broker_id].start()
        self.wait_registered()
        return self

    # ------------------------------------------------------------------ topics and state
    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

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
        return self.partition_state(topic, 0)

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
        return partitions.metadata_leader(self.brokers[broker_id].bootstrap, topic)

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
        read = clients.read_to_end(self.bootstrap, topic, 0, start=None)
        return [(r.offset, r.value.decode()) for r in read]

    # ------------------------------------------------------------------ pictures
    def picture(self, topic: str, replicas: Iterable[int]) -> str:
        views = {
            b: replica_view(b, self.log_dir(b), topic, status=self.status(b)) for b in replicas
        }
        return render(self.state(topic), views)

    def full_picture(self, topic: str, replicas: list[int]) -> str:
        """What ``expect`` compares: the replicas' picture (a stage may add to it)."""
        return self.picture(topic, replicas)

    def expect(self, topic: str, expected: str, *, step: str = "") -> str:
        """Wait until the picture of ``topic``'s replicas is ``expected``; print it."""
        want = picture(expected)
        replicas = sorted(
            int(line.split()[1]) for line in want.splitlines() if line.startswith("broker ")
        )
        seen = settle(
            lambda: self.full_picture(topic, replicas),
            want,
            timeout_s=PICTURE_WAIT_S,
            poll_s=self.picture_poll_s,
            # retention deleted a segment while dump-log read
            unreadable=(RuntimeError,),
        )
        print(f"--- {topic}: {step}\n{seen}")
        assert seen == want, f"{topic} after {step!r}:\n{seen}\n--- expected:\n{want}"
        return seen
