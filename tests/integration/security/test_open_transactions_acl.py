"""The LSO and open transactions under Kafka's ACL authorizer: DescribeProducers needs Read on
the topic, ListOffsets only Describe. The pipeline's principal has only Describe (its least
ACLs, ``jobs.common.pipeline_acls``): ``topics describe`` still prints every partition and
warns that the open transactions are not shown, naming the ACL; the status job records the LSO
with the open transactions unknown and says why. Granted Read on the topic, both read them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.common.pipeline_acls import PIPELINE_ACLS, PipelineAcl
from tests.integration.security.secured_pipeline_support import SecuredBroker, secured_broker

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
LOGIN = "pipeline"
PASSWORD = "pipeline-Txn-5ee-4a1f"
PRINCIPAL = f"User:{LOGIN}"
TOPIC = "guarded"
RECORDS = 10


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def describe(secured: SecuredBroker, properties: Path) -> tuple[str, str]:
    done = run(
        [
            "storage_core.cli",
            "topics",
            "--bootstrap-server",
            secured.bootstrap,
            "--command-config",
            str(properties),
            "describe",
            "--topic",
            TOPIC,
        ]
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout, done.stderr


def status_entry(secured: SecuredBroker, properties: Path, summary_path: Path) -> dict[str, Any]:
    done = run(
        [
            "jobs.cluster_status",
            "--bootstrap-server",
            secured.bootstrap,
            "--command-config",
            str(properties),
            "--log-dir",
            str(secured.broker.log_dir),
            "--broker-config",
            str(secured.broker.config_path),
            "--remote-storage-manager",
            "LocalTieredStorage",
            "--rsm-config",
            f"local.storage.dir={secured.remote_dir}",
            "--topic",
            TOPIC,
            "--summary-path",
            str(summary_path),
        ]
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    (entry,) = json.loads(summary_path.read_text())["partitions"]
    return dict(entry)


def test_describe_producers_needs_read_and_its_absence_is_said(tmp_path: Path) -> None:
    with secured_broker(tmp_path) as secured:
        secured.add_scram_user(LOGIN, PASSWORD)
        secured.grant(PRINCIPAL, PIPELINE_ACLS)
        admin = AdminClient(secured.confluent())
        new = NewTopic(TOPIC, 1, 1, config={"remote.storage.enable": "true"})
        admin.create_topics([new])[TOPIC].result(timeout=30)
        producer = Producer(secured.confluent())
        for i in range(RECORDS):
            producer.produce(TOPIC, f"v{i}".encode(), partition=0)
        assert producer.flush(60) == 0
        properties = secured.client_properties(LOGIN, PASSWORD)

        out, err = describe(secured, properties)
        assert len(out.splitlines()) == 2  # the topic and its partition, nothing lost
        assert err == (
            f"warning: {TOPIC}-0: open transactions not shown: TOPIC_AUTHORIZATION_FAILED;"
            f" DescribeProducers needs Read on topic {TOPIC}\n"
        )
        entry = status_entry(secured, properties, tmp_path / "first.json")
        assert entry["status"] == "ok"
        assert (entry["high_watermark"], entry["last_stable_offset"]) == (RECORDS, RECORDS)
        assert entry["open_transactions"] is None
        assert "DescribeProducers needs Read on topic guarded" in entry["transactions_error"]

        secured.grant(
            PRINCIPAL, (PipelineAcl(operation="Read", resource_type="topic", name=TOPIC),)
        )
        out, err = describe(secured, properties)
        assert (len(out.splitlines()), err) == (2, "")
        entry = status_entry(secured, properties, tmp_path / "second.json")
        assert (entry["last_stable_offset"], entry["open_transactions"]) == (RECORDS, 0)
        assert "transactions_error" not in entry
