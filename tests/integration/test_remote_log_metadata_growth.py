"""The soak's short variant (``tests.metadata_soak``, ``make soak`` runs it for an hour on 300
partitions): 21 cycles (about 2 minutes) of tiering, retention and topic drops on 24
partitions (6 topics, one deleted and created again every other cycle) with a producer
writing two segments per partition and cycle, a cycle every 6 s, and a sample every second
(about 120: a third of them catches every phase of the cycle, so its peak is the cycle's peak,
where a sample after each cycle gave seven per third and one compaction that lagged under the
suite's load could make a third's peak 1.26x the other's).

Then, on what the history left: the broker's RSS, its descriptors and ``__remote_log_metadata``
(bytes on disk, records from the log start) are flat after the first cycles; the jobs' readers
of the topic (reconcile's replay, the quality job's segment rows, the deletion sweep's marked
partitions) agree with the brokers' state; and the broker restarted without its snapshots and
committed offsets rebuilds the same state from the compacted topic.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.quality import read_metadata_records
from jobs.reconcile import listing_of, read_remote_log_metadata
from jobs.tables.remote_segments import segment_base_rows
from jobs.tables.states import replay_segment_states
from storage_core.client import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.tiered.operations.marked_partitions import marked_partitions
from storage_core.tiered.topic_based_rlmm import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.metadata_soak import (
    METADATA_PARTITIONS,
    SoakConfig,
    flat_problems,
    run_soak,
    soak_broker,
)
from tests.tiered_broker_support import (
    EARLIEST,
    LATEST_TIERED,
    client_rlmm,
    list_offset,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

CONFIG = SoakConfig(
    duration_s=780,  # at most; 21 cycles take about 2 minutes on an idle machine
    cycles=21,
    partitions=24,
    partitions_per_topic=4,
    cycle_s=6,
    sample_s=1.0,
    drop_every=2,
)


def test_history_comes_and_goes_and_everything_stays_flat(tmp_path: Path) -> None:
    lines: list[str] = []
    with soak_broker(tmp_path, CONFIG) as broker:
        result, workload = run_soak(broker, CONFIG, report=lines.append)
        print("\n".join(lines))
        assert result.cycles == 21, result
        assert result.copied > 100 and result.expired > 50, result
        assert result.dropped_partitions >= 24, result
        assert flat_problems(result.samples) == []
        # the compaction did move the metadata partitions' log start offsets
        with KafkaCluster(broker.bootstrap) as cluster:
            consumer = KafkaConsumer(cluster)
            starts = [
                consumer.earliest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, p)
                for p in range(METADATA_PARTITIONS)
            ]
        assert min(starts) > 0, starts
        tips = workload.all_partitions()

        # the jobs read the compacted topic and find what the brokers hold
        with client_rlmm(broker.bootstrap) as rlmm:
            listing = {t: list(rlmm.list_remote_log_segments(t)) for t in tips}
        with KafkaCluster(broker.bootstrap) as cluster:
            replayed = listing_of(read_remote_log_metadata(cluster))
            records = read_metadata_records(cluster)
            assert marked_partitions(cluster, None) == []
        assert {t: replayed.get(t, []) for t in tips} == listing
        assert sum(len(v) for v in listing.values()) > 0
        rows = segment_base_rows(records, [])
        refused = [
            (row["segment_id"], replay.invalid_transition)
            for row in rows
            if (replay := replay_segment_states(row["state_history"])).invalid_transition
        ]
        assert refused == []

        # restarted without snapshots or committed offsets: the same answers
        def answers() -> dict[object, tuple[int, int]]:
            return {
                t: (
                    list_offset(
                        broker.bootstrap,
                        t.topic_partition.topic,
                        EARLIEST,
                        partition=t.topic_partition.partition,
                    )[0],
                    list_offset(
                        broker.bootstrap,
                        t.topic_partition.topic,
                        LATEST_TIERED,
                        partition=t.topic_partition.partition,
                    )[0],
                )
                for t in tips
            }

        before = answers()
        broker.stop()
        removed = list(broker.log_dir.glob("*/remote_log_snapshot"))
        assert removed
        for path in [*removed, *broker.log_dir.glob("_rlmm_committed_offsets")]:
            path.unlink()
        broker.start()
        wait_until(lambda: answers() == before, "the restarted broker's tiered offsets", 60)
        with client_rlmm(broker.bootstrap) as rlmm:
            assert {t: list(rlmm.list_remote_log_segments(t)) for t in tips} == listing
