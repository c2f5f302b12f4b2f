"""A hanging transaction where operators look, on a real broker process: ``storage-core topics
describe``, the cluster status job's snapshot and the status page rendered from it.

Story (partition 0 of a remote-enabled topic)::

    0 plain   1 plain   2 O data (open, written 20 min ago)   3 plain      HW 4, LSO 2
    topics describe    -> HighWatermark: 4  LastStableOffset: 2  OpenTransactions: 1, and O
                          (producer id, epoch, start offset 2, last timestamp, age 20m)
    cluster_status     -> last_stable_offset 2, 1 open since offset 2, 20 min old; the page
                          says so and calls it possibly hanging (past 15 min)
    COMMIT O at 4                                               HW 5, LSO 5
    topics describe    -> the partition's line alone
    cluster_status     -> last_stable_offset 5, none open; the page says "none open"

The batches and the marker are sent as a transactional producer and its coordinator would
(``tests.integration.test_transaction_markers.Wire``), without a coordinator: the broker
does not verify transactions (``NO_VERIFICATION``).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.client import KafkaAdminClient, KafkaCluster
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_transaction_markers import NO_VERIFICATION, Wire

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
TOPIC = "hanging"
IDLE_MS = 20 * 60 * 1000  # past Kafka's default transaction.max.timeout.ms (15 min)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "auto.create.topics.enable": "false",
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(tmp_path / "remote-tier"),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "1",
            **NO_VERIFICATION,
        },
    ) as process:
        yield process


def describe(broker: BrokerProcess) -> tuple[str, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "topics",
            "--bootstrap-server",
            broker.bootstrap,
            "describe",
            "--topic",
            TOPIC,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout, done.stderr


def status_snapshot(broker: BrokerProcess, summary_path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cluster_status",
            "--bootstrap-server",
            broker.bootstrap,
            "--log-dir",
            str(broker.log_dir),
            "--broker-config",
            str(broker.config_path),
            "--topic",
            TOPIC,
            "--summary-path",
            str(summary_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary


def page_row(reports: Path) -> list[str]:
    """The cells of the status page's row of partition 0, as the page renders the job's run
    summaries under ``reports``."""
    sys.path.insert(0, str(REPO / "plugins"))
    from tiered_storage_plugin import status  # noqa: PLC0415 - on the path now

    page = status.status_page(status.read_summaries(reports), docs_href=None)
    (row,) = re.findall(rf"<tr><td>{TOPIC}-0</td>.*?</tr>", page)
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def test_an_open_transaction_shows_in_describe_the_status_job_and_the_page(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    raw_wire.create_topic(broker.port, TOPIC, configs={"remote.storage.enable": "true"})
    wire = Wire(broker.port, TOPIC)
    plain, open_ = wire.producer_id(), wire.producer_id()
    now_ms = int(time.time() * 1000)
    assert wire.produce(plain, b"p0", b"p1", transactional=False, timestamp_ms=now_ms) == 0
    idle_since = now_ms - IDLE_MS
    assert wire.produce(open_, b"o0", transactional=True, timestamp_ms=idle_since) == 2
    assert wire.produce(plain, b"p2", transactional=False, timestamp_ms=now_ms) == 3
    assert (wire.latest(0), wire.latest(1)) == (4, 2)

    # the admin client's DescribeProducers: both producers, only O with a transaction open
    with KafkaCluster(broker.bootstrap) as cluster:
        (answer,) = KafkaAdminClient(cluster).describe_producers(TOPIC, [0])
    assert answer.error == ErrorCode.none
    by_id = {p.producer_id: p for p in answer.producers}
    assert set(by_id) == {plain[0], open_[0]}
    assert (by_id[plain[0]].current_txn_start_offset, by_id[plain[0]].last_sequence) == (-1, 2)
    assert by_id[open_[0]].current_txn_start_offset == 2
    assert by_id[open_[0]].producer_epoch == open_[1]
    assert by_id[open_[0]].last_timestamp_ms == now_ms - IDLE_MS
    assert answer.open_transactions == (by_id[open_[0]],)

    out, err = describe(broker)
    assert err == ""
    lines = out.splitlines()
    assert lines[1].startswith(f"\tTopic: {TOPIC}\tPartition: 0\tLeader: 0")
    assert lines[2] == "\t\tHighWatermark: 4\tLastStableOffset: 2\tOpenTransactions: 1"
    assert re.fullmatch(
        rf"\t\tOpenTransaction: ProducerId: {open_[0]}\tProducerEpoch: {open_[1]}"
        r"\tStartOffset: 2\tLastTimestamp: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\tAge: 2[01]m \d+s",
        lines[3],
    ), lines[3]
    assert len(lines) == 4

    reports = tmp_path / "reports"
    first = status_snapshot(broker, reports / "runs" / "tiering" / "r1" / "status" / "summary.json")
    (entry,) = first["partitions"]
    assert entry["status"] == "ok" and entry["high_watermark"] == 4
    assert entry["last_stable_offset"] == 2
    assert entry["open_transactions"] == 1
    assert entry["oldest_open_transaction_start_offset"] == 2
    assert IDLE_MS <= entry["oldest_open_transaction_age_ms"] < IDLE_MS + 120_000
    (producer,) = entry["open_transaction_producers"]
    assert (producer["producer_id"], producer["producer_epoch"], producer["start_offset"]) == (
        open_[0],
        open_[1],
        2,
    )
    assert first["counts"]["open_transactions"] == 1
    cells = page_row(reports)
    assert (cells[0], cells[6]) == (f"{TOPIC}-0", "4")  # the HW
    assert re.fullmatch(
        r"LSO 2 \(HW 4\); 1 open since offset 2; its producer last wrote 2[01] min before"
        r" the snapshot; possibly hanging: idle longer than transaction.max.timeout.ms"
        r" \(15 min\); storage-core topics describe names its producer",
        cells[-1],
    ), cells

    # the coordinator's COMMIT: the LSO catches up with the HW and the lines are gone
    assert wire.end(open_, commit=True) == ErrorCode.none  # 4
    assert (wire.latest(0), wire.latest(1)) == (5, 5)
    wire.close()
    out, err = describe(broker)
    assert err == ""
    assert len(out.splitlines()) == 2
    assert "LastStableOffset" not in out and "OpenTransaction" not in out

    second = status_snapshot(
        broker, reports / "runs" / "tiering" / "r2" / "status" / "summary.json"
    )
    (entry,) = second["partitions"]
    assert (entry["high_watermark"], entry["last_stable_offset"]) == (5, 5)
    assert entry["open_transactions"] == 0
    assert entry["oldest_open_transaction_start_offset"] is None
    assert entry["open_transaction_producers"] == []
    assert second["counts"]["open_transactions"] == 0
    assert page_row(reports)[-1] == "none open"


def test_a_leader_that_cannot_be_asked_is_its_partitions_error(broker: BrokerProcess) -> None:
    raw_wire.create_topic(broker.port, TOPIC, partitions=2)
    with KafkaCluster(broker.bootstrap) as cluster:
        admin = KafkaAdminClient(cluster)
        assert [a.error for a in admin.describe_producers(TOPIC, [0, 1])] == [ErrorCode.none] * 2
        broker.kill()  # the metadata still names it the leader
        answers = admin.describe_producers(TOPIC, [1, 0])
    assert [a.partition.partition for a in answers] == [1, 0]  # in the order asked
    assert [a.error for a in answers] == [ErrorCode.network_exception] * 2
    assert all(str(a.error_message).startswith("broker 0: ") for a in answers), answers
