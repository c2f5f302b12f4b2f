"""A leader SIGKILLed after discovery, before its partition's view is read (the planning of
the partition before it does the kill, so the order is fixed): that partition is skipped with
a reason naming the leader and the error, counted in ``partitions_skipped``; the partition
of the live leader is planned, and the run goes on::

    a-led-by-1 on [1, 2, 3]   planned (its plan SIGKILLs broker 2)
    b-led-by-2 on [2, 3, 1]   skipped: leader broker 2 did not answer
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from jobs.common.args import job_parser, parse_job_args
from jobs.common.discovery import plan_led_partitions
from jobs.common.summary import RunSummary
from storage_core.tiered.operations import LogView, PartitionTarget
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager
from tests.integration.jobs.test_cluster_jobs import create, job_args, values
from tests.scenarios.tiered_replication.stage import TieredStage

pytestmark = pytest.mark.timeout(600)
JOB = "copy_segments"


@pytest.fixture
def stage(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[TieredStage]:
    with TieredStage(zookeeper, tmp_path) as stage:
        yield stage


def test_a_leader_killed_during_planning_skips_its_partition_only(
    stage: TieredStage, tmp_path: Path
) -> None:
    create(stage, "a-led-by-1", (1, 2, 3))
    create(stage, "b-led-by-2", (2, 3, 1))
    for topic in ("a-led-by-1", "b-led-by-2"):
        stage.produce(topic, values(topic, 30))
    args = parse_job_args(
        job_parser(JOB, "planning"), job_args(stage, tmp_path, "summary.json"), job=JOB
    )
    summary = RunSummary(job=JOB, dry_run=False)
    killed: list[int] = []

    def plan(
        target: PartitionTarget, view: LogView, rlmm: RemoteLogMetadataManager
    ) -> list[tuple[str, int, int]]:
        if not killed:
            stage.kill(2)  # after discovery: Metadata still names broker 2 as b's leader
            killed.append(2)
        return [(str(target.topic_partition), target.leader_id, view.high_watermark)]

    planned = plan_led_partitions(args, summary, job=JOB, plan=plan)

    assert planned == [("a-led-by-1-0", 1, 30)]
    (entry,) = summary.partitions
    assert entry["partition"] == "b-led-by-2-0" and entry["status"] == "skipped", entry
    reason = entry["reason"]
    assert reason.startswith("leader broker 2 at 127.0.0.1 (leader epoch 0) did not"), reason
    assert "Error:" in entry["reason"], entry  # the error's name and message
    assert summary.counts["partitions_skipped"] == 1
