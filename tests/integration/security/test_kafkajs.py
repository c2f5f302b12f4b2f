"""KafkaJS (``npm install kafkajs`` into a temporary directory) against the SASL_SSL listener of
the secured broker that librdkafka's security tests use (tests/librdkafka/security_suite.py):
it produces and consumes with SCRAM-SHA-256 and with PLAIN, and its admin client (User:admin, a
super user) creates, describes and deletes an ACL. Skipped, with the reason, where node or npm
is absent or the npm registry cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.librdkafka.security_suite import (
    ADMIN,
    PLAIN_USER,
    SCRAM_USER,
    SecuredCluster,
    secured_cluster,
)

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).with_name("kafkajs_client.js")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    with secured_cluster(tmp_path_factory.mktemp("kafkajs-cluster")) as secured:
        yield secured


def _login(mechanism: str, user: tuple[str, str]) -> dict[str, str]:
    return {"mechanism": mechanism, "username": user[0], "password": user[1]}


def _run_kafkajs(node_modules: Path, cluster: SecuredCluster, suffix: str) -> dict[str, Any]:
    settings = {
        "bootstrap": cluster.sasl_ssl_bootstrap,
        "ca": str(cluster.pki.ca_pem),
        "admin": _login("plain", ADMIN),
        "logins": [_login("scram-sha-256", SCRAM_USER), _login("plain", PLAIN_USER)],
        "suffix": suffix,
    }
    run = subprocess.run(
        ["node", str(SCRIPT), json.dumps(settings)],
        env={**os.environ, "NODE_PATH": str(node_modules)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, f"KafkaJS failed:\n{run.stderr[-3000:]}\n{cluster.process.output()}"
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def test_kafkajs_produces_consumes_and_manages_acls_over_sasl_ssl(
    kafkajs: Path, cluster: SecuredCluster
) -> None:
    suffix = uuid.uuid4().hex[:8]
    result = _run_kafkajs(kafkajs, cluster, suffix)

    assert result["roundTrips"] == {
        "scram-sha-256": ["from scram-sha-256"],
        "plain": ["from plain"],
    }
    acls = result["acls"]
    assert acls["created"] is True
    described = acls["described"]
    assert [
        (r["resourceName"], r["resourceType"], r["resourcePatternType"]) for r in described
    ] == [
        (f"kafkajs-acl-{suffix}", 2, 3)  # TOPIC, LITERAL
    ]
    assert described[0]["acls"] == [
        {"principal": "User:kafkajs-reader", "host": "*", "operation": 3, "permissionType": 3}
    ]  # READ, ALLOW
    [deleted] = acls["deleted"]
    assert deleted["errorCode"] == 0
    assert [m["principal"] for m in deleted["matchingAcls"]] == ["User:kafkajs-reader"]
    assert acls["after"] == []
