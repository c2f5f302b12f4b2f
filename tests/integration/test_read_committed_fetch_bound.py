"""A read_committed Fetch on a real broker process lists the aborted transactions of the
records it returns, as Kafka's ``LocalLog.addAbortedTransactions`` bounds them, not every
aborted transaction up to the LSO: a consumer far behind on a log with an abort in each of
many segments gets the first segment's abort with the first segment's records. What
read_committed consumers read stays the same. The transactions are written with ``Wire``
(no coordinator), on a broker that does not verify transactions (``NO_VERIFICATION``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.records.memory_records import iter_batches
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_transaction_markers import FETCH_V, NO_VERIFICATION, Wire, consume

pytestmark = pytest.mark.timeout(120)

TRANSACTIONS = 12  # every third one committed, the others aborted


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path, overrides={"auto.create.topics.enable": "false", **NO_VERIFICATION}
    ) as process:
        yield process


def fetch(wire: Wire, fetch_offset: int, partition_max_bytes: int) -> Any:
    module = raw_wire.request_classes(1, FETCH_V)
    body = raw_wire.call(
        wire.sock,
        1,
        FETCH_V,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            module.FetchTopic(
                topic=wire.topic,
                partitions=(
                    module.FetchPartition(
                        partition=0,
                        fetch_offset=fetch_offset,
                        partition_max_bytes=partition_max_bytes,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return body.responses[0].partitions[0]


def offsets(records: bytes) -> list[int]:
    return [
        offset
        for _position, batch in iter_batches(records)
        for offset in range(batch.base_offset, batch.last_offset + 1)
    ]


def test_a_fetch_far_behind_lists_only_the_aborts_of_what_it_returns(
    broker: BrokerProcess,
) -> None:
    # a segment of about one transaction (a batch and its marker)
    raw_wire.create_topic(broker.port, "behind", configs={"segment.bytes": "160"})
    wire = Wire(broker.port, "behind")
    aborted: list[tuple[int, int]] = []
    committed: list[bytes] = []
    for i in range(TRANSACTIONS):
        producer = wire.producer_id()
        value = b"t%d" % i
        first = wire.produce(producer, value, transactional=True)
        commit = i % 3 == 0
        assert wire.end(producer, commit=commit) == ErrorCode.none
        if commit:
            committed.append(value)
        else:
            aborted.append((producer[0], first))
    end = 2 * TRANSACTIONS
    assert wire.latest(1) == end

    # one batch, from a segment of the first aborted transaction only
    answer = fetch(wire, aborted[0][1], 1)
    assert answer.error_code == ErrorCode.none
    assert answer.last_stable_offset == end
    assert answer.records  # the first batch, whole
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == aborted[:1]
    # from the start with room for everything: a read ends at its segment's end, the
    # committed transaction 0 and its marker, and no abort of the later segments is listed
    answer = fetch(wire, 0, 1 << 20)
    assert offsets(answer.records) == [0, 1]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == []
    answer = fetch(wire, aborted[-1][1], 1 << 20)
    assert offsets(answer.records) == [aborted[-1][1], aborted[-1][1] + 1]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == aborted[-1:]
    wire.close()

    assert consume(broker.bootstrap, "behind", "read_committed", end) == committed
    assert len(consume(broker.bootstrap, "behind", "read_uncommitted", end)) == TRANSACTIONS
