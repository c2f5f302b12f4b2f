"""restore_cluster onto a new broker that shares nothing with the lost one but the bucket
(``tests/chunked_broker_support``: chunked, encrypted, the local store):

    lost broker: records 0..299, segs 0..k copied, topic manifest, "readers" at 120 backed up
    the broker is stopped; a new broker with a new log dir and metadata, same remote settings
    restore_cluster --dry-run       the plan, nothing created
    restore_cluster                 chunked-tier restored under its name: offsets 0..E read
                                    back from the remote tier; "readers" resumes at 120; an
                                    idempotent producer (producer id 0 again, as the lost
                                    broker's first) writes at E + 1
    restore_cluster again           the topic exists: skipped, nothing changed
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from jobs import backup_consumer_offsets, restore_cluster, topic_manifests
from storage_core.client import KafkaCluster
from tests.broker_process import BrokerProcess
from tests.chunked_broker_support import TOPIC, broker_overrides, chunked_tier, value_of
from tests.integration.jobs.test_restore_topic import read_all

pytestmark = pytest.mark.timeout(240)


def job(broker: BrokerProcess, module: object, *extra: str) -> int:
    main = module.main  # type: ignore[attr-defined]
    argv = [
        "--bootstrap-server", broker.bootstrap,
        "--broker-config", str(broker.config_path),
        *extra,
    ]  # fmt: skip
    return int(main(argv))


def test_every_topic_of_the_bucket_comes_back_on_a_new_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        end = tier.copied[-1].end_offset
        rsm_config = tier.rsm_config
        consumer = Consumer({"bootstrap.servers": tier.broker.bootstrap, "group.id": "readers"})
        consumer.commit(offsets=[ConfluentTopicPartition(TOPIC, 0, 120)], asynchronous=False)
        consumer.close()
        assert job(tier.broker, topic_manifests) == 0
        assert job(tier.broker, backup_consumer_offsets) == 0
        source_id = tier.topic_id_partition.topic_id

    with BrokerProcess(tmp_path / "new", overrides=broker_overrides(rsm_config)) as broker:
        capsys.readouterr()
        assert job(broker, restore_cluster, "--dry-run") == 0
        out = capsys.readouterr().out
        assert f"partition={TOPIC}-0" in out and f"end_offset={end}" in out
        assert f"topic_id={source_id}" in out
        with KafkaCluster(broker.bootstrap) as cluster:  # the dry run created nothing
            assert TOPIC not in {t.name for t in cluster.refresh_metadata(None).topics}

        summary_path = tmp_path / "restore-cluster.json"
        code = job(broker, restore_cluster, "--summary-path", str(summary_path))
        out = capsys.readouterr().out
        assert code == 0, out
        counts = json.loads(summary_path.read_text())["counts"]
        assert counts["topics"] == counts["topics_restored"] == 1
        assert counts["groups_restored"] == 1
        restored = read_all(broker.bootstrap, TOPIC, end + 1)
        assert [value for _, value in restored] == [value_of(i) for i in range(end + 1)]
        resumed = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "readers",
                "enable.auto.commit": False,
            }
        )
        resumed.subscribe([TOPIC])
        first = resumed.poll(30)
        resumed.close()
        assert first is not None and first.error() is None
        assert (first.offset(), first.value()) == (120, value_of(120))

        # The new cluster's producer ids start again at 0, as the lost cluster's did: an
        # idempotent producer's first record must not meet the restored producers' state.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        delivered: list[tuple[object, int]] = []
        producer.produce(
            TOPIC, b"after", partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset()))
        )
        producer.flush(30)
        assert delivered == [(None, end + 1)]

        assert job(broker, restore_cluster, "--summary-path", str(summary_path)) == 0
        counts = json.loads(summary_path.read_text())["counts"]
        assert counts.get("topics_skipped") == 1 and counts.get("topics_restored", 0) == 0
