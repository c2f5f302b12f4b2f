"""Transactions through a real transactional client (confluent-kafka / librdkafka) against one
broker process: commit, abort, abort then retry, fencing by a newer producer of the same
transactional id, the coordinator's abort of a timed-out transaction, and what
DescribeTransactions / ListTransactions show meanwhile."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.raw_wire import call, connect
from tests.integration.txn_wire import await_coordinator, describe_transactions

pytestmark = pytest.mark.timeout(180)

TOPIC = "payments"
TIMEOUT_S = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "auto.create.topics.enable": "false",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
            "transaction.max.timeout.ms": "60000",
        },
    ) as process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT_S)
        yield process


def producer(broker: BrokerProcess, transactional_id: str, **extra: str | int) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **extra,
        }
    )
    p.init_transactions(TIMEOUT_S)
    return p


def consume_all(broker: BrokerProcess, isolation: str, expected: int) -> list[str]:
    """Every value of the topic under ``isolation``, once ``expected`` arrived and the end of
    every partition was reached (or the time is up)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([TOPIC])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(message.partition())
                    if len(values) >= expected and len(at_end) == 2:
                        break
                continue
            at_end.discard(message.partition())
            values.append(message.value().decode())
    finally:
        consumer.close()
    return sorted(values)


def test_committed_and_aborted_transactions_as_consumers_see_them(
    broker: BrokerProcess,
) -> None:
    p = producer(broker, "payments-writer")
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPIC, key=str(i), value=f"committed-{i}")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, key=str(i), value=f"aborted-{i}")
    p.flush(TIMEOUT_S)  # on the broker before the abort (else the client drops them)
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()  # the same producer goes on after an abort
    p.produce(TOPIC, key="r", value="retried")
    p.commit_transaction(TIMEOUT_S)

    committed = sorted([f"committed-{i}" for i in range(10)] + ["retried"])
    assert consume_all(broker, "read_committed", 11) == committed
    assert consume_all(broker, "read_uncommitted", 16) == sorted(
        committed + [f"aborted-{i}" for i in range(5)]
    )


def test_a_new_producer_of_the_same_transactional_id_fences_the_old_one(
    broker: BrokerProcess,
) -> None:
    old = producer(broker, "fenced-writer")
    old.begin_transaction()
    old.produce(TOPIC, key="k", value="from-the-zombie")
    old.flush(TIMEOUT_S)

    new = producer(broker, "fenced-writer")  # bumps the epoch: the old transaction is aborted
    new.begin_transaction()
    new.produce(TOPIC, key="k", value="from-the-new-producer")
    new.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal(), raised.value  # fenced: the client must stop
    assert consume_all(broker, "read_committed", 1) == ["from-the-new-producer"]


def test_a_hanging_transaction_is_aborted_by_its_timeout(broker: BrokerProcess) -> None:
    hanging = producer(broker, "hanging-writer", **{"transaction.timeout.ms": 1500})
    hanging.begin_transaction()
    hanging.produce(TOPIC, key="k", value="never-committed")
    hanging.flush(TIMEOUT_S)
    with connect(broker.port) as sock:
        (ongoing,) = describe_transactions(sock, ("hanging-writer",))
    assert (ongoing.state, ongoing.timeout_ms) == ("Ongoing", 1500)
    assert sum(len(p) for p in ongoing.topics.values()) == 1

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        with connect(broker.port) as sock:
            (described,) = describe_transactions(sock, ("hanging-writer",))
        if described.state == "CompleteAbort":
            break
        time.sleep(0.2)
    assert described.state == "CompleteAbort", described
    assert described.producer_epoch == ongoing.producer_epoch + 1  # fenced, then aborted

    # the abort marker moved the last stable offset past the record: a committed
    # transaction written after it is readable, the hanging one's record is not
    after = producer(broker, "after-the-hang")
    after.begin_transaction()
    after.produce(TOPIC, key="k", value="after")
    after.commit_transaction(TIMEOUT_S)
    assert consume_all(broker, "read_committed", 1) == ["after"]
    with pytest.raises(KafkaException):
        hanging.commit_transaction(TIMEOUT_S)


def test_list_and_describe_transactions_show_the_coordinators_state(
    broker: BrokerProcess,
) -> None:
    p = producer(broker, "listed-writer")
    p.begin_transaction()
    p.produce(TOPIC, partition=1, key="k", value="v")
    p.flush(TIMEOUT_S)
    with connect(broker.port) as sock:
        listed = call(sock, 66, 1, state_filters=("Ongoing",), producer_id_filters=())
        unknown = call(sock, 66, 1, state_filters=("Sleeping",), producer_id_filters=())
        (described,) = describe_transactions(sock, ("listed-writer",))
        (missing,) = describe_transactions(sock, ("never-seen",))
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
        ("listed-writer", "Ongoing")
    ]
    assert unknown.unknown_state_filters == ("Sleeping",) and unknown.transaction_states == ()
    assert described.topics == {TOPIC: [1]} and described.start_time_ms > 0
    assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    p.commit_transaction(TIMEOUT_S)
    with connect(broker.port) as sock:
        (done,) = describe_transactions(sock, ("listed-writer",))
    assert done.state in ("PrepareCommit", "CompleteCommit")


def test_init_producer_id_refuses_a_timeout_above_the_brokers_maximum(
    broker: BrokerProcess,
) -> None:
    with connect(broker.port) as sock:
        answer = call(
            sock,
            22,
            4,
            transactional_id="too-patient",
            transaction_timeout=datetime.timedelta(minutes=5),
            producer_id=-1,
            producer_epoch=-1,
        )
    assert answer.error_code == 50, answer  # INVALID_TRANSACTION_TIMEOUT
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)


def test_the_next_transaction_starts_at_once_after_a_commit(broker: BrokerProcess) -> None:
    """AddPartitionsToTxn sent right behind EndTxn (pipelined on one connection) waits for the
    previous transaction's markers and final record, written within moments here, instead of
    bouncing with CONCURRENT_TRANSACTIONS, which costs a client a retry backoff (about 20 ms
    for librdkafka)."""
    m = raw_wire.request_classes(24, 3)
    with connect(broker.port) as sock:
        await_coordinator(sock, "back-to-back")
        init = call(
            sock,
            22,
            4,
            transactional_id="back-to-back",
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        assert init.error_code == 0, init
        ids = {
            "v3_and_below_transactional_id": "back-to-back",
            "v3_and_below_producer_id": int(init.producer_id),
            "v3_and_below_producer_epoch": int(init.producer_epoch),
        }
        end = {
            "transactional_id": "back-to-back",
            "producer_id": int(init.producer_id),
            "producer_epoch": int(init.producer_epoch),
            "committed": True,
        }
        for round_ in range(10):
            topics = (m.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0, 1)),)
            added = call(sock, 24, 3, **ids, v3_and_below_topics=topics)
            assert {
                int(p.partition_error_code)
                for t in added.results_by_topic_v3_and_below
                for p in t.results_by_partition
            } == {0}, f"round {round_}: {added}"
            sock.sendall(
                raw_wire.request_bytes(26, 3, 1, **end)
                + raw_wire.request_bytes(24, 3, 2, **ids, v3_and_below_topics=topics)
            )
            assert raw_wire.read_response(sock, 26, 3)[1].error_code == 0
            _, next_added = raw_wire.read_response(sock, 24, 3)
            assert {
                int(p.partition_error_code)
                for t in next_added.results_by_topic_v3_and_below
                for p in t.results_by_partition
            } == {0}, f"round {round_}: {next_added}"
            end_again = call(sock, 26, 3, **end)  # the transaction just begun, ended empty
            assert end_again.error_code == 0, end_again


def test_an_idle_transactional_id_expires_and_stays_forgotten_after_a_restart(
    tmp_path: Path,
) -> None:
    with BrokerProcess(
        tmp_path,
        overrides={
            "transactional.id.expiration.ms": "1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
        },
    ) as process:
        first = producer(process, "short-lived")
        first.begin_transaction()
        first.produce(TOPIC, value="kept")
        first.commit_transaction(TIMEOUT_S)
        with connect(process.port) as sock:
            (known,) = describe_transactions(sock, ("short-lived",))
        assert known.error_code == 0 and known.state in ("PrepareCommit", "CompleteCommit")

        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            with connect(process.port) as sock:
                (described,) = describe_transactions(sock, ("short-lived",))
            if described.error_code == 105:  # TRANSACTIONAL_ID_NOT_FOUND: its tombstone written
                break
            time.sleep(0.2)
        assert described.error_code == 105, described

        process.restart()  # the tombstone is replayed: still forgotten
        with connect(process.port) as sock:
            (after,) = describe_transactions(sock, ("short-lived",))
        assert after.error_code == 105, after
        again = producer(process, "short-lived")  # a new producer id, epoch 0
        with connect(process.port) as sock:
            (fresh,) = describe_transactions(sock, ("short-lived",))
        assert (fresh.state, fresh.producer_epoch) == ("Empty", 0)
        assert fresh.producer_id != known.producer_id
        again.begin_transaction()
        again.produce(TOPIC, value="after")
        again.commit_transaction(TIMEOUT_S)
