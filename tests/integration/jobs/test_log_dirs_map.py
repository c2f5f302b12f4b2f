"""The broker id -> log dirs map of ``jobs.copy_segments`` checked against a cluster of three
brokers::

    swapped    the map gives broker 1 broker 2's log dir and broker 2 broker 1's: the run
               stops at once, exit 2, naming the dir, the broker id given and the one its
               meta.properties holds; nothing is copied
    two dirs   broker 1 has two log dirs and the map gives one: the partitions it leads from
               the other are left out, the summary naming that dir as broker 1 reports it;
               the rest is copied
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import copy_segments
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from tests.integration.jobs.test_cluster_jobs import create, job_args, values
from tests.scenarios.tiered_replication.stage import TieredStage

pytestmark = pytest.mark.timeout(600)


def copied_spans(stage: TieredStage, topic: str) -> list[tuple[int, int]]:
    return sorted(
        (s.start_offset, s.end_offset)
        for s in stage.remote_segments(topic)
        if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )


@pytest.fixture
def stage(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[TieredStage]:
    with TieredStage(zookeeper, tmp_path) as stage:
        yield stage


def test_a_map_that_swaps_two_brokers_log_dirs_stops_the_run(
    spark: SparkSession,
    stage: TieredStage,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create(stage, "swapped", (1, 2, 3))
    stage.produce("swapped", values("swapped", 30))
    args = job_args(stage, tmp_path, "swapped.json")
    first, second = stage.brokers[1].log_dir, stage.brokers[2].log_dir
    args = [
        a.replace(f"=1={first}", f"=1={second}").replace(f"=2={second}", f"=2={first}")
        for a in args
    ]
    assert f"--broker-log-dirs=1={second}" in args and f"--broker-log-dirs=2={first}" in args
    capsys.readouterr()

    assert copy_segments.main(args) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert f"log dir {second} is given as broker 1's" in line, line
    assert "meta.properties names broker.id 2" in line, line
    summary = json.loads((tmp_path / "swapped.json").read_text())
    assert summary["status"] == "failed"
    assert copied_spans(stage, "swapped") == []


def test_partitions_in_a_log_dir_the_map_does_not_give_are_left_out(
    spark: SparkSession, zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    staged = TieredStage(zookeeper, tmp_path)
    broker = staged.brokers[1]
    other_dir = broker.directory / "kafka-logs-2"
    config = broker.config_path.read_text()
    assert f"log.dirs={broker.log_dir}\n" in config
    broker.config_path.write_text(
        config.replace(f"log.dirs={broker.log_dir}\n", f"log.dirs={broker.log_dir},{other_dir}\n")
    )
    topics = [f"two-dirs-{i}" for i in range(4)]
    with staged as stage:
        for topic in topics:
            create(stage, topic, (1, 2, 3))
            stage.produce(topic, values(topic, 30))  # two closed segments, an active one
        in_other = {t for t in topics if (other_dir / f"{t}-0").is_dir()}
        in_given = {t for t in topics if (broker.log_dir / f"{t}-0").is_dir()}
        # the broker spreads new partitions over its dirs (the fewest partitions first)
        assert in_other and in_given and in_other | in_given == set(topics), (in_other, in_given)

        assert copy_segments.main(job_args(stage, tmp_path, "copy.json")) == 0
        summary = json.loads((tmp_path / "copy.json").read_text())
        by_partition = {p["partition"]: p for p in summary["partitions"]}
        for topic in in_other:
            entry = by_partition[f"{topic}-0"]
            assert entry["status"] == "skipped", entry
            assert entry["reason"] == (
                f"broker 1 holds the partition in its log dir {other_dir.resolve()}, which the"
                " map does not give (add it to broker 1's log dirs)"
            )
            assert copied_spans(stage, topic) == []
        for topic in in_given:
            assert by_partition[f"{topic}-0"]["status"] == "ok", by_partition
            spans = copied_spans(stage, topic)  # every closed segment, from offset 0
            assert len(spans) == 2 and spans[0][0] == 0 and spans[1][0] == spans[0][1] + 1
        assert summary["counts"]["partitions_skipped"] == len(in_other)
