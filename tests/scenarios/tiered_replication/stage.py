"""The stage of the tiered replication stories: the replication stage (three broker processes
on a real ZooKeeper, ``tests.scenarios.replication.stage``) with KIP-405 tiered storage on
every broker (``LocalTieredStorage`` in one directory all brokers share, topic-based remote
log metadata on ``__remote_log_metadata``, one partition, replication factor 3), copies and
expiry run from outside by the ``storage-core tier`` command, and a picture that adds the
remote tier to each replica's log::

    zk: leader=3 leader_epoch=1 isr=[3]
    broker 2 (down): hw=6 epochs=[0@0]
      5: 0
    broker 3 (up): hw=5 epochs=[0@0 1@2]
      4: 1
    remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
    remote 2-2: epochs=[1@2] COPY_SEGMENT_FINISHED

A ``remote`` line per segment the remote log metadata holds (not DELETE_SEGMENT_FINISHED), by
start offset: its offsets (both inclusive), its leader epochs as ``epoch@start offset`` and
its state, as a client-mode metadata manager reads them from ``__remote_log_metadata``.


The picture's ``remote`` lines are ``tests.scenarios.harness.replica_picture.remote_lines``.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from tests import cluster_support
from tests.scenarios.harness.replica_picture import remote_lines
from tests.scenarios.replication.stage import ReplicationStage
from tests.tiered_broker_support import client_rlmm

TIER_TIMEOUT_S = 60.0


def tiered_settings(remote_dir: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(remote_dir),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "3",
        "remote.log.manager.task.interval.ms": "200",
    }


class TieredStage(ReplicationStage):
    """Brokers 1-3 with tiered storage (see the module docstring)."""

    picture_poll_s = 0.3

    def __init__(
        self,
        zookeeper: ZooKeeperEnsemble,
        directory: Path,
        *,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.remote_dir = directory / "remote-tier"
        super().__init__(
            zookeeper,
            directory,
            overrides={**tiered_settings(self.remote_dir), **(overrides or {})},
        )
        self.topic_ids: dict[str, Uuid] = {}

    def tier_command(self, broker_id: int, *args: str) -> list[str]:
        """``storage-core tier`` for ``broker_id``'s log dir and broker config."""
        broker = self.brokers[broker_id]
        return [
            sys.executable,
            "-m",
            "storage_core.cli",
            "tier",
            "--bootstrap-server",
            self.bootstrap,
            "--log-dir",
            str(broker.log_dir),
            "--broker-config",
            str(broker.config_path),
            *args,
        ]

    def tier(self, broker_id: int, *args: str) -> str:
        """Run ``tier_command`` (copy, or ``--expire``); its stdout. Fails the story on a
        non-zero exit."""
        done = subprocess.run(
            self.tier_command(broker_id, *args),
            capture_output=True,
            text=True,
            timeout=TIER_TIMEOUT_S,
            check=False,
        )
        print(f"--- tier {broker_id} {' '.join(args)}: exit {done.returncode}\n{done.stdout}")
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout

    def topic_id_partition(self, topic: str) -> TopicIdPartition:
        if topic not in self.topic_ids:
            broker_id = next(b for b in self.brokers if self.status(b) == "up")
            (answer,) = cluster_support.metadata(self.brokers[broker_id].bootstrap, topic).topics
            self.topic_ids[topic] = Uuid.from_bytes(uuid.UUID(str(answer.topic_id)).bytes)
        return TopicIdPartition(self.topic_ids[topic], TopicPartition(topic, 0))

    def remote_segments(self, topic: str) -> list[RemoteLogSegmentMetadata]:
        with client_rlmm(self.bootstrap) as rlmm:
            return list(rlmm.list_remote_log_segments(self.topic_id_partition(topic)))

    def full_picture(self, topic: str, replicas: list[int]) -> str:
        """The replicas' picture and the remote segments' lines (see the module docstring)."""
        lines = [self.picture(topic, replicas), *remote_lines(self.remote_segments(topic))]
        return "\n".join(lines)
