"""The ledger on one real broker: idempotent acks=all producers pass the checker, and records
really removed, copied or written out of order by real clients are reported with offsets."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.chaos.ledger import (
    Ledger,
    LedgerProducer,
    LedgerReport,
    check,
    read_partitions,
    value_of,
)

pytestmark = pytest.mark.timeout(120)
TOPIC = "ledger"
PARTITIONS = 3


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Ledger]]:
    """A broker and the ledger of two producers that wrote to it for a second and a half."""
    with BrokerProcess(tmp_path_factory.mktemp("ledger")) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
        ledger = Ledger()
        producers = [
            LedgerProducer(
                producer_id=n,
                bootstrap=broker.bootstrap,
                topic=TOPIC,
                partitions=PARTITIONS,
                ledger=ledger,
            )
            for n in range(2)
        ]
        for producer in producers:
            producer.start()
        time.sleep(1.5)
        assert [producer.stop() for producer in producers] == [0, 0]
        yield broker, ledger


def _check(broker: BrokerProcess, ledger: Ledger) -> LedgerReport:
    consumed = read_partitions(broker.bootstrap, TOPIC, PARTITIONS)
    return check(ledger.acks(), consumed, failed=len(ledger.failures()))


def _plain_write(broker: BrokerProcess, partition: int, *values: bytes) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "plain"})
    for value in values:
        producer.produce(TOPIC, value, partition=partition)
    assert producer.flush(10) == 0


def test_idempotent_producers_on_one_broker_pass(written: tuple[BrokerProcess, Ledger]) -> None:
    broker, ledger = written
    report = _check(broker, ledger)
    assert report.ok, report.summary()
    assert report.acknowledged > 100 and report.failed == 0
    assert report.consumed == report.acknowledged
    assert {a.partition for a in ledger.acks()} == set(range(PARTITIONS))


def test_a_copy_and_an_out_of_order_write_are_reported(
    written: tuple[BrokerProcess, Ledger],
) -> None:
    broker, ledger = written
    last = max((a for a in ledger.acks() if a.partition == 1), key=lambda a: a.offset)
    _plain_write(broker, 1, value_of(last.producer, last.seq))  # the newest record, again
    _plain_write(broker, 2, value_of(9, 5), value_of(9, 2))  # producer 9: seq 5, then 2

    report = _check(broker, ledger)

    assert report.counts["duplicated"] == 1 and report.counts["reordered"] == 1
    assert report.counts["lost"] == 0
    (value, spots) = report.duplicated[0]
    assert value == value_of(last.producer, last.seq)
    assert spots == [(1, last.offset), (1, last.offset + 1)]
    assert report.reordered[0][:3] == (9, 2, 2)


def test_records_deleted_below_an_offset_are_reported_lost(
    written: tuple[BrokerProcess, Ledger],
) -> None:
    broker, ledger = written
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.delete_records([CTopicPartition(TOPIC, 0, 10)]).values()
    future.result(10)

    report = _check(broker, ledger)

    expected = sorted(a.offset for a in ledger.acks() if a.partition == 0 and a.offset < 10)
    assert report.counts["lost"] == 10
    assert sorted(a.offset for a in report.lost) == expected == list(range(10))
    assert "lost p" in report.summary()
