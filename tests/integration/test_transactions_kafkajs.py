"""Transactions through KafkaJS (a client written apart from librdkafka and the JVM) against one
broker process: ``producer.transaction()``, ``send``, ``commit`` and ``abort``, ``sendOffsets``
committing the group's offset with the transaction and an aborted one leaving it, and a
read_committed consumer (``readUncommitted: false``) that never sees the aborted records a
read_uncommitted one reads (kafkajs_transactions.js does the client's part).

KafkaJS is installed by npm into test-artifacts/kafkajs/ once; the test is skipped, with the
reason, where node or npm is absent or the npm registry cannot be reached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
INSTALL_DIR = REPO / "test-artifacts" / "kafkajs"
SCRIPT = Path(__file__).with_name("kafkajs_transactions.js")
NPM_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def kafkajs() -> Path:
    """The node_modules directory holding kafkajs 2, installed once into INSTALL_DIR."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("KafkaJS needs node and npm, and this machine lacks them")
    modules = INSTALL_DIR / "node_modules"
    if (modules / "kafkajs" / "package.json").is_file():
        return modules
    INSTALL_DIR.mkdir(parents=True, exist_ok=True)
    try:
        install = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "kafkajs@2"],
            cwd=INSTALL_DIR,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm install kafkajs did not finish in {NPM_TIMEOUT_S} s (registry unreachable?)"
        )
    if install.returncode != 0:
        pytest.skip(f"npm install kafkajs failed (registry unreachable?): {install.stderr[-500:]}")
    return modules


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "auto.create.topics.enable": "false",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        },
    ) as process:
        yield process


def run_kafkajs(kafkajs: Path, broker: BrokerProcess) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    settings = {
        "bootstrap": broker.bootstrap,
        "topic": f"ledger-{suffix}",
        "source": f"source-{suffix}",
        "group": f"transformer-{suffix}",
        "transactionalId": f"kafkajs-{suffix}",
    }
    run = subprocess.run(
        ["node", str(SCRIPT), json.dumps(settings)],
        env={**os.environ, "NODE_PATH": str(kafkajs)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, f"KafkaJS failed:\n{run.stderr[-3000:]}\n{broker.output()}"
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def test_kafkajs_transactions_commit_abort_and_send_offsets(
    kafkajs: Path, broker: BrokerProcess
) -> None:
    result = run_kafkajs(kafkajs, broker)

    committed = ["committed-0", "committed-1", "committed-2", "with-offsets-0", "with-offsets-1"]
    assert result["readCommitted"] == [*committed, "end"]
    # the aborted records are on the log: a read_uncommitted consumer reads them in order
    assert result["readUncommitted"] == [
        "committed-0",
        "committed-1",
        "committed-2",
        "aborted-0",
        "aborted-1",
        "with-offsets-0",
        "with-offsets-1",
        "aborted-with-offsets-0",
        "aborted-with-offsets-1",
        "end",
    ]
    assert result["offsetAfterCommit"] == "5"
    assert result["offsetAfterAbort"] == "5"
