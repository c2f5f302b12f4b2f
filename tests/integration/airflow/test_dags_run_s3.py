"""The tiering DAG against S3 over HTTP (moto's server on 127.0.0.1): the jobs reach the
bucket with the credentials and endpoint of the ``aws`` connection named in the tiered-storage
connection's extras, and nothing else (this process has no AWS variables while the DAG runs).

    produce 600 records to clicks-0     local: [seg 0]...[seg k][active]    bucket: -
    tiering (copy -> quality, status)   bucket: every closed segment's objects
                                        status: remote bytes = the .log objects' sizes
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from kafka import KafkaProducer

from storage_core.client import KafkaAdminClient, KafkaCluster
from tests.broker_process import BrokerProcess
from tests.integration.airflow.test_dags_run import latest_summary, ok, run
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tiered_broker_support import LATEST_TIERED, list_offset
from tests.unit.airflow import airflow_env

pytestmark = pytest.mark.timeout(900)

TOPIC = "clicks"
BUCKET = "tiered"
PREFIX = "airflow-test"
RECORDS = 600


@pytest.fixture(scope="module")
def s3_cluster(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("s3-cluster")
    saved = {k: os.environ.get(k) for k in (*AWS_TEST_ENV, "AWS_ENDPOINT_URL", "AWS_REGION")}
    with S3Server(_mkdir(root / "moto")) as s3:
        s3.create_bucket(BUCKET)
        os.environ.update(AWS_TEST_ENV)  # the broker's own remote reads use the AWS chain
        broker = BrokerProcess(
            root,
            overrides={
                "remote.log.storage.system.enable": "true",
                "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
                "rsm.config.s3.bucket.name": BUCKET,
                "rsm.config.s3.key.prefix": PREFIX,
                "rsm.config.s3.endpoint.url": s3.endpoint_url,
                "rsm.config.s3.path.style.access.enabled": "true",
                "remote.log.metadata.topic.num.partitions": "3",
                "remote.log.manager.task.interval.ms": "200",
            },
        )
        broker.start()
        try:
            for name in saved:  # from here on, credentials come only from the connection
                os.environ.pop(name, None)
            with KafkaCluster(broker.bootstrap) as kafka:
                KafkaAdminClient(kafka).create_topic(
                    TOPIC,
                    num_partitions=1,
                    replication_factor=1,
                    configs={"remote.storage.enable": "true", "segment.bytes": str(16 * 1024)},
                )
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
            for i in range(RECORDS):
                producer.send(TOPIC, value=f"click-{i:05d}-".encode() * 8, partition=0)
            producer.flush()
            producer.close()
            endpoint = quote(s3.endpoint_url, safe="")
            os.environ["AIRFLOW_CONN_AWS_TIER"] = (
                f"aws://{AWS_TEST_ENV['AWS_ACCESS_KEY_ID']}:{AWS_TEST_ENV['AWS_SECRET_ACCESS_KEY']}"
                f"@/?region_name={AWS_TEST_ENV['AWS_DEFAULT_REGION']}&endpoint_url={endpoint}"
            )
            os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"] = json.dumps(
                {
                    "conn_type": "generic",
                    "host": "127.0.0.1",
                    "port": broker.port,
                    "extra": {
                        "log_dirs": [str(broker.log_dir)],
                        "broker_config": str(broker.config_path),
                        "remote_storage_manager": "S3RemoteStorageManager",
                        "aws_conn_id": "aws_tier",
                    },
                }
            )
            broker.s3 = s3  # type: ignore[attr-defined]
            yield broker
        finally:
            broker.stop()
            for name in ("AIRFLOW_CONN_AWS_TIER", "AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"):
                os.environ.pop(name, None)
            for name, value in saved.items():
                if value is not None:
                    os.environ[name] = value


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def dags(airflow_home: Path) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(airflow_env.DAGS)).dags


def test_tiering_to_s3_with_the_aws_connection(s3_cluster: Any, dags: Any) -> None:
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    state, states = run(dags["tiering"])
    assert (state, ok(states)) == ("success", True), states
    objects = s3_cluster.s3.client().list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]
    logs = [o for o in objects if o["Key"].endswith(".log")]
    assert len(logs) >= 3
    tiered, _ = list_offset(s3_cluster.bootstrap, TOPIC, LATEST_TIERED)
    assert tiered > 0
    (status,) = latest_summary("tiering", "status")["partitions"]
    assert status["partition"] == f"{TOPIC}-0"
    assert status["highest_tiered_offset"] == tiered
    assert status["remote_bytes"] == sum(o["Size"] for o in logs)
    assert latest_summary("tiering", "quality")["status"] == "ok"
