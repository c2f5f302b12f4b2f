"""One broker process per remote store (a local directory, S3 served by moto), shared by
the stories; each story works on topics of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.scenarios.tiered import RemoteStore, TieredStage, stage_of

BROKER_SETTINGS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.metadata.topic.num.partitions": "3",
    "remote.log.metadata.topic.replication.factor": "1",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "log.segment.delete.delay.ms": "0",
}
BUCKET = "tiered-scenarios"


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """Credentials for the standard AWS chain (the broker process inherits them)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in AWS_TEST_ENV.items():
            patch.setenv(key, value)
        yield


@pytest.fixture(scope="session", params=["local", "s3"])
def remote_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, aws_env: None
) -> Iterator[RemoteStore]:
    if request.param == "local":
        directory = tmp_path_factory.mktemp("remote-tier")
        yield RemoteStore(
            name="local",
            broker_settings={
                "remote.log.storage.manager.class.name": "LocalTieredStorage",
                "rsm.config.local.storage.dir": str(directory),
                "rsm.config.local.fsync": "false",
            },
        )
        return
    with S3Server(tmp_path_factory.mktemp("moto")) as s3:
        s3.create_bucket(BUCKET)
        yield RemoteStore(
            name="s3",
            broker_settings={
                "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
                "rsm.config.s3.bucket.name": BUCKET,
                "rsm.config.s3.key.prefix": "stories",
                "rsm.config.s3.endpoint.url": s3.endpoint_url,
                "rsm.config.s3.path.style.access.enabled": "true",
                "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
            },
        )


@pytest.fixture(scope="session")
def broker(
    remote_store: RemoteStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp(f"broker-{remote_store.name}")
    with BrokerProcess(
        directory, overrides={**BROKER_SETTINGS, **remote_store.broker_settings}
    ) as process:
        yield process


@pytest.fixture
def stage(broker: BrokerProcess, remote_store: RemoteStore) -> Iterator[TieredStage]:
    with stage_of(broker, remote_store) as tiered_stage:
        yield tiered_stage
