"""``jobs.reconcile`` on a cluster of three brokers: one run, with no broker id and no broker
config, rolls back a copy that broker 2 started and never finished, and publishes the
rollback's events on behalf of broker 2 (the broker that copied it).

    p1 on [2, 3]           broker 2 tiers it (``storage-core tier`` with its config)
    a dead copy by 2       COPY_SEGMENT_STARTED an hour ago, one object written
    reconcile (one run)    DELETE_SEGMENT_STARTED/FINISHED by broker 2, its object gone,
                           the finished segments and their objects untouched
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs import reconcile
from storage_core.tiered.metadata.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tools.remote_log_metadata_dump import run_remote_log_metadata_dump
from tests.broker_process import BrokerProcess
from tests.integration.jobs.test_delete_partitions_cluster import (  # noqa: F401 (fixtures)
    brokers,
    cluster_run_args,
    create_topic,
    produce,
    remote_dir,
    stored_segments,
    tier,
)
from tests.tiered_broker_support import client_rlmm

pytestmark = pytest.mark.timeout(420)

COPIER = 2  # leads partition 1 ([2, 3])


def metadata_events(bootstrap: str) -> list[str]:
    out, err = io.StringIO(), io.StringIO()
    run_remote_log_metadata_dump(
        bootstrap_server=bootstrap,
        partitions=None,
        from_beginning=True,
        properties={"print.all.event.value.fields": "true"},
        max_messages=None,
        timeout_ms=2000,
        out=out,
        err=err,
    )
    return out.getvalue().splitlines()


def test_one_run_rolls_back_a_dead_copy_on_behalf_of_the_broker_that_started_it(
    spark: SparkSession,
    brokers: dict[int, BrokerProcess],  # noqa: F811
    remote_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    tip = create_topic(brokers)[1]
    produce(bootstrap)
    tier(brokers[COPIER], bootstrap)
    with client_rlmm(bootstrap) as rlmm:
        copied = list(rlmm.list_remote_log_segments(tip))
        assert copied and {m.broker_id for m in copied} == {COPIER}
        dead = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate_new(tip),
            start_offset=copied[-1].end_offset + 1,
            end_offset=copied[-1].end_offset + 5,
            max_timestamp_ms=0,
            broker_id=COPIER,
            event_timestamp_ms=int(time.time() * 1000) - 3_600_000,
            segment_size_in_bytes=5,
            segment_leader_epochs={0: copied[-1].end_offset + 1},
        )
        rlmm.add_remote_log_segment_metadata(dead)
    dead_file = remote_dir / segment_key("", RemoteSegmentRef.of(dead), RemoteObjectSuffix.LOG)
    dead_file.write_bytes(b"12345")
    finished_ids = {m.remote_log_segment_id.id for m in copied}

    summary_path = tmp_path / "reconcile.json"
    code = reconcile.main(
        [
            *cluster_run_args(bootstrap, remote_dir, tmp_path, summary_path),
            "--copy-deadline-s",
            "1",
        ]
    )
    summary = json.loads(summary_path.read_text())
    assert code == 0, summary
    assert summary["counts"]["copies_rolled_back"] == 1, summary

    assert not dead_file.exists()
    assert stored_segments(remote_dir, tip) == finished_ids
    dead_id = str(dead.remote_log_segment_id.id)
    rollback = [
        line
        for line in metadata_events(bootstrap)
        if dead_id in line and "RemoteLogSegmentMetadataUpdate" in line
    ]
    assert len(rollback) == 2, rollback
    assert all(f"broker-id:{COPIER}" in line for line in rollback), rollback
    assert "DELETE_SEGMENT_STARTED" in rollback[0] and "DELETE_SEGMENT_FINISHED" in rollback[1]
