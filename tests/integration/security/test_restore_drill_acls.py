"""The restore drill as the pipeline's principal on a secured broker with the least ACLs:
the scheduled DAGs' (``PIPELINE_ACLS``) and the drill's (``RESTORE_DRILL_ACLS``: Create,
AlterConfigs and Delete on ``restore-drill-`` topics only, PREFIXED; Delete and Read on groups,
Read on topics), nothing else (no Create or Delete on other topics).

    orders: 600 records, 16 KiB segments, chunked tier    copy_segments, topic_manifests,
    group "billing" at 450 (the administrator commits)     backup_consumer_offsets as pipeline
    restore_drill                    green; nothing of the drill left
    without Create on restore-drill- red, the ACL named; nothing created
    without Delete on restore-drill- red, the ACL named (the scratch topic cannot be deleted);
                                     granted again, the next drill removes the leftover first
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.common.pipeline_acls import (
    CREATE_DRILL_TOPICS,
    DELETE_DRILL_TOPICS,
    PIPELINE_ACLS,
    RESTORE_DRILL_ACLS,
)
from tests.integration.security.secured_pipeline_support import SecuredBroker, secured_broker

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[3]
LOGIN = "pipeline"
PASSWORD = "pipeline-Dr1ll-9e3a"
PRINCIPAL = f"User:{LOGIN}"
TOPIC = "orders"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    with secured_broker(tmp_path_factory.mktemp("drill-acls"), chunk_bytes=4096) as broker:
        broker.add_scram_user(LOGIN, PASSWORD)
        broker.grant(PRINCIPAL, PIPELINE_ACLS + RESTORE_DRILL_ACLS)
        admin = AdminClient(broker.confluent())
        config = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)}
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(timeout=30)
        producer = Producer({**broker.confluent(), "linger.ms": 5, "batch.size": 8000})
        for i in range(RECORDS):
            producer.produce(TOPIC, f"record-{i:05d}-".encode() * 8, partition=0)
        assert producer.flush(60) == 0
        assert job(broker, "copy_segments", "--spark-master", "local[1]")[0] == 0
        assert job(broker, "topic_manifests")[0] == 0
        consumer = Consumer({**broker.confluent(), "group.id": "billing"})
        consumer.commit(offsets=[ConfluentTopicPartition(TOPIC, 0, 450)], asynchronous=False)
        consumer.close()
        assert job(broker, "backup_consumer_offsets")[0] == 0
        yield broker


def job(secured: SecuredBroker, name: str, *args: str) -> tuple[int, dict[str, object], str]:
    """``python -m jobs.<name>`` as the pipeline (``--command-config``): exit code, summary
    and output."""
    summary_path = secured.directory / f"{name}-{uuid.uuid4().hex[:6]}.json"
    command = [
        sys.executable,
        "-m",
        f"jobs.{name}",
        "--bootstrap-server",
        secured.bootstrap,
        "--command-config",
        str(secured.client_properties(LOGIN, PASSWORD)),
        "--log-dir",
        str(secured.broker.log_dir),
        "--broker-config",
        str(secured.broker.config_path),
        "--remote-storage-manager",
        "LocalTieredStorage",
        *(arg for k, v in secured.rsm_config.items() for arg in ("--rsm-config", f"{k}={v}")),
        "--summary-path",
        str(summary_path),
        *args,
    ]  # fmt: skip
    result = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return result.returncode, summary, result.stdout + result.stderr


def drill_topics(secured: SecuredBroker) -> list[str]:
    topics = AdminClient(secured.confluent()).list_topics(timeout=30).topics
    return sorted(t for t in topics if t.startswith("restore-drill-"))


def errors(summary: dict[str, object]) -> str:
    return " ".join(str(e["error"]) for e in summary.get("errors", []))  # type: ignore[attr-defined]


def test_the_drill_runs_with_its_least_acls_and_names_a_missing_one(
    secured: SecuredBroker, tmp_path: Path
) -> None:
    report = ["--report-dir", str(tmp_path / "report")]
    code, summary, output = job(secured, "restore_drill", "--night", "2026-11-30", *report)
    assert code == 0, output
    assert summary["counts"]["partitions_drilled"] == 1  # type: ignore[index]
    assert summary["counts"]["scratch_offsets_deleted"] == 1  # type: ignore[index]
    assert drill_topics(secured) == []

    secured.revoke(PRINCIPAL, CREATE_DRILL_TOPICS)
    code, summary, output = job(secured, "restore_drill", "--night", "2026-12-01", *report)
    secured.grant(PRINCIPAL, (CREATE_DRILL_TOPICS,))
    assert code == 1, output
    assert "--operation Create --topic" in errors(summary), errors(summary)
    assert "expect_sampled_partition_restored" in errors(summary)
    assert drill_topics(secured) == []

    secured.revoke(PRINCIPAL, DELETE_DRILL_TOPICS)
    code, summary, output = job(secured, "restore_drill", "--night", "2026-12-02", *report)
    secured.grant(PRINCIPAL, (DELETE_DRILL_TOPICS,))
    assert code == 1, output
    assert "--operation Delete --topic" in errors(summary), errors(summary)
    assert drill_topics(secured) == [f"restore-drill-20261202-{TOPIC}"]
    code, summary, output = job(secured, "restore_drill", "--night", "2026-12-03", *report)
    assert code == 0, output
    assert summary["counts"]["scratch_topics_deleted"] == 2  # type: ignore[index]
    assert drill_topics(secured) == []
