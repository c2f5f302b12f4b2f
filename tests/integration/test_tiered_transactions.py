"""Transactions and the remote tier on a real broker process (Kafka's
TransactionsWithTieredStoreTest: one batch per segment).

Story (offsets; each batch its own segment)::

    0 C data   1 COMMIT C   2 X data   3 ABORT X   4 plain   5 O data (open)   6 plain
    tier (``storage-core tier``, the copy job's planning)  -> copies 0..4: the LSO is 5
    COMMIT O at 7, plain at 8                               -> LSO 9
    tier                                                    -> copies 5..7
    local retention deletes the copied segments             local: [8][active]
    read_committed consumer (confluent-kafka) from 0        -> C, plain, O, plain, plain; never X
    raw Fetch at isolation 1 of offset 2 (tiered)           -> aborted transactions [(X, 2)]

The batches and markers are sent as a producer and its coordinator would
(``tests.integration.test_transaction_markers.Wire``), without a coordinator: the broker
does not verify transactions (``NO_VERIFICATION``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from jobs.quality import read_partition_states
from storage_core.client import KafkaCluster
from storage_core.common import TopicPartition
from storage_core.log.log_config import LogConfig
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.integration import raw_wire
from tests.integration.test_transaction_markers import NO_VERIFICATION, Wire, consume
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    batch_offsets,
    list_offset,
    raw_fetch,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

TOPIC = "tiered-txn"
SEGMENT_BYTES = 150  # a data batch (137 bytes) or marker (78) fills a segment alone
VALUE = b"v" * 64


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
            "remote.log.metadata.topic.num.partitions": "3",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            **NO_VERIFICATION,
        },
    ) as process:
        yield process


def tier(broker: BrokerProcess) -> str:
    """One ``storage-core tier`` copy run (the copy job's planning: ``read_view``)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "tier",
            "--bootstrap-server",
            broker.bootstrap,
            "--log-dir",
            str(broker.log_dir),
            "--broker-config",
            str(broker.config_path),
            "--topic",
            TOPIC,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def tiered_up_to(broker: BrokerProcess, offset: int) -> None:
    wait_until(
        lambda: list_offset(broker.bootstrap, TOPIC, LATEST_TIERED)[0] == offset,
        f"the broker to learn the copies up to offset {offset}",
    )


def test_read_committed_consumers_read_tiered_transactions_correctly(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    raw_wire.create_topic(
        broker.port,
        TOPIC,
        configs={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": "1",
        },
    )
    wire = Wire(broker.port, TOPIC)
    committed, aborted, open_, plain = (wire.producer_id() for _ in range(4))
    assert wire.produce(committed, b"c0-" + VALUE, transactional=True) == 0
    assert wire.end(committed, commit=True) == ErrorCode.none  # 1
    assert wire.produce(aborted, b"x0-" + VALUE, transactional=True) == 2
    assert wire.end(aborted, commit=False) == ErrorCode.none  # 3
    assert wire.produce(plain, b"p0-" + VALUE, transactional=False) == 4
    assert wire.produce(open_, b"o0-" + VALUE, transactional=True) == 5
    assert wire.produce(plain, b"p1-" + VALUE, transactional=False) == 6
    assert (wire.latest(0), wire.latest(1)) == (7, 5)

    # The open transaction holds the copies below the LSO (5), not the HW (7).
    tier(broker)
    tiered_up_to(broker, 4)
    remote_dir = tmp_path / "remote-tier"
    assert len(list(remote_dir.rglob("*.log"))) == 5
    # Only the ABORT marker's segment has a transaction index, and it was uploaded.
    (txn_index,) = remote_dir.rglob("*.txnindex")
    assert txn_index.stat().st_size == 34
    tier(broker)  # nothing more while the transaction is open
    assert len(list(remote_dir.rglob("*.log"))) == 5

    assert wire.end(open_, commit=True) == ErrorCode.none  # 7
    assert wire.produce(plain, b"p2-" + VALUE, transactional=False) == 8
    assert (wire.latest(0), wire.latest(1)) == (9, 9)
    tier(broker)
    tiered_up_to(broker, 7)
    wait_until(
        lambda: list_offset(broker.bootstrap, TOPIC, EARLIEST_LOCAL)[0] == 8,
        "local retention to delete the copied segments",
    )
    assert list_offset(broker.bootstrap, TOPIC, LATEST)[0] == 9

    # A tiered offset read at isolation level 1: the aborted transaction of what it read
    # (its ABORT marker is in the next remote segment), and the LSO.
    answer = raw_fetch(broker.port, TOPIC, 2, isolation_level=1)
    assert answer.error_code == ErrorCode.none
    assert batch_offsets(answer.records) == [2]
    assert answer.aborted_transactions == ((aborted[0], 2),)
    assert (answer.last_stable_offset, answer.high_watermark) == (9, 9)
    committed_read = raw_fetch(broker.port, TOPIC, 0, isolation_level=1)
    assert committed_read.aborted_transactions == ()
    wire.close()

    assert consume(broker.bootstrap, TOPIC, "read_committed", 9) == [
        b"c0-" + VALUE,
        b"p0-" + VALUE,
        b"o0-" + VALUE,
        b"p1-" + VALUE,
        b"p2-" + VALUE,
    ]
    assert b"x0-" + VALUE in consume(broker.bootstrap, TOPIC, "read_uncommitted", 9)


def test_the_quality_job_reads_the_lso_of_a_partition_with_an_open_transaction(
    broker: BrokerProcess,
) -> None:
    """The quality suites' Ly rules (Lz >= Ly >= Lx, Ly >= Ry) check the leader's LSO, which
    an open transaction holds below the HW."""
    raw_wire.create_topic(broker.port, TOPIC, configs={"remote.storage.enable": "true"})
    wire = Wire(broker.port, TOPIC)
    plain, open_ = wire.producer_id(), wire.producer_id()
    wire.produce(plain, b"p0", transactional=False)  # 0
    wire.produce(open_, b"o0", transactional=True)  # 1
    wire.produce(plain, b"p1", transactional=False)  # 2
    wire.close()
    tp = TopicPartition(TOPIC, 0)
    # partition.metadata (the topic id the job checks) is flushed by the broker's scheduler
    # shortly after the log is created, as Kafka's flush-metadata-file does
    eventually(
        (broker.log_dir / tp.dir_name / "partition.metadata").exists,
        what="partition.metadata written",
    )
    with KafkaCluster(broker.bootstrap) as cluster:
        (state,) = read_partition_states(
            cluster, [(tp, broker.log_dir / tp.dir_name)], {TOPIC: LogConfig()}
        )
    assert (state.high_watermark, state.last_stable_offset, state.log_end_offset) == (3, 1, 3)
