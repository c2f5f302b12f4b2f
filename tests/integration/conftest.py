"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from tests.cluster_support import zookeeper_ensemble
from tests.s3_server import AWS_TEST_ENV, BUCKET, S3Server


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """One ZooKeeper server for a test module (modules that use it call
    ``cluster_support.require_java()`` first); tests keep apart by chroot."""
    with zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server for a test module, over HTTP on 127.0.0.1 (``tests/s3_server.py``)."""
    with S3Server(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The running server with a fresh, empty bucket ``BUCKET``; credentials only in the
    environment. A server a test stopped is started again (empty)."""
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    if s3_server.process is None:
        s3_server.start()
    client = s3_server.client()
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if BUCKET in existing:
        for obj in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    else:
        client.create_bucket(Bucket=BUCKET)
    return s3_server
