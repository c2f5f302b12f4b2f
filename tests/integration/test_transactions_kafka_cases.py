"""Kafka's ``TransactionsTest`` cases (core/src/test/scala/integration/kafka/api/), with
confluent-kafka on three brokers and Kafka's settings for the test (see
``transactions_support``): basic, read_committed never sees undecided data, a delayed fetch
includes the aborted transactions, send offsets with group metadata, fencing on commit / send
offsets / send / add partitions / expiration, multiple markers on one leader, consecutive
init, epoch bump after an abortable error (KIP-360)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC_NAME,
    partition_for,
)
from tests import cluster_support
from tests.cluster_support import eventually
from tests.integration.raw_wire import connect
from tests.integration.transactions_support import (
    CLUSTER_SETTINGS,
    TIMEOUT_S,
    TxnCluster,
    consume,
    nothing_more,
    partition,
    txn_cluster,
    values,
)
from tests.integration.txn_wire import DescribedTransaction, describe_transactions

cluster_support.require_java()
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TxnCluster]:
    with txn_cluster(zookeeper, tmp_path_factory.mktemp("txn-cluster")) as c:
        yield c


def fatal(raised: pytest.ExceptionInfo[KafkaException]) -> bool:
    error: KafkaError = raised.value.args[0]
    return bool(error.fatal())


def described_by_coordinator(cluster: TxnCluster, transactional_id: str) -> DescribedTransaction:
    """The id as the one broker that coordinates it describes it."""
    answers = []
    for broker in cluster.brokers.values():
        with connect(broker.port) as sock:
            (described,) = describe_transactions(sock, (transactional_id,))
        if described.error_code == 0:
            answers.append(described)
    (answer,) = answers
    return answer


def test_basic_transactions(cluster: TxnCluster) -> None:
    topic1, topic2 = cluster.topics("topic1", "topic2")
    producer = cluster.producer()
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic2, partition=2, key="2", value="2")
    producer.produce(topic1, partition=1, key="4", value="4")
    producer.flush(TIMEOUT_S)
    tp11, tp22 = (topic1, 1), (topic2, 2)
    # nothing decided yet: the LSO is 0, nothing is tiered
    cluster.verify_log_start_offsets({tp11: 0, tp22: 0})
    cluster.maybe_verify_local_log_start_offsets({tp11: 0, tp22: 0})
    producer.abort_transaction(TIMEOUT_S)
    cluster.maybe_wait_for_at_least_one_segment_upload([tp11, tp22])
    # a record and the ABORT marker, one segment each: the record's is tiered
    cluster.verify_log_start_offsets({tp11: 0, tp22: 0})
    cluster.maybe_verify_local_log_start_offsets({tp11: 1, tp22: 1})
    producer.begin_transaction()
    producer.produce(topic1, partition=1, key="1", value="1")
    producer.produce(topic2, partition=2, key="3", value="3")
    producer.flush(TIMEOUT_S)
    # the ABORT marker's segment is below the LSO (2) and tiered; the open transaction's
    # records are not (Kafka checks 1 here, before its sends have necessarily arrived)
    cluster.verify_log_start_offsets({tp11: 0, tp22: 0})
    cluster.maybe_verify_local_log_start_offsets({tp11: 2, tp22: 2})
    producer.commit_transaction(TIMEOUT_S)
    # 2 records and 2 markers: all but the active segment (the COMMIT marker's) tiered
    cluster.verify_log_start_offsets({tp11: 0, tp22: 0})
    cluster.maybe_verify_local_log_start_offsets({tp11: 3, tp22: 3})

    committed = cluster.consumer("read_committed")
    committed.subscribe([topic1, topic2])
    assert values(consume(committed, 2)) == ["1", "3"]
    assert nothing_more(committed)
    uncommitted = cluster.consumer("read_uncommitted")
    uncommitted.subscribe([topic1, topic2])
    assert values(consume(uncommitted, 4)) == ["1", "2", "3", "4"]
    committed.close()
    uncommitted.close()


def test_read_committed_consumer_should_not_see_undecided_data(cluster: TxnCluster) -> None:
    topic1, topic2 = cluster.topics("topic1", "topic2")
    producer1, producer2 = cluster.producer(), cluster.producer("other")
    producer1.init_transactions(TIMEOUT_S)
    producer2.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer2.begin_transaction()
    visible = int(time.time() * 1000)
    written = visible + 1
    for topic in (topic1, topic2):
        producer2.produce(topic, partition=0, key="x", value="1", timestamp=visible)
    producer2.flush(TIMEOUT_S)
    for key, value, topic in (("a", "1", topic1), ("b", "2", topic1), ("c", "3", topic2)):
        producer1.produce(topic, partition=0, key=key, value=value, timestamp=written)
    producer1.produce(topic2, partition=0, key="d", value="4", timestamp=written)
    producer1.flush(TIMEOUT_S)
    for topic in (topic1, topic2):
        producer2.produce(topic, partition=0, key="x", value="2", timestamp=written)
    producer2.commit_transaction(TIMEOUT_S)
    # producer1's transaction holds the LSO at 1: only producer2's first record is tiered
    cluster.maybe_verify_local_log_start_offsets({(topic1, 0): 1, (topic2, 0): 1})

    tps = [partition(topic1, 0, 0), partition(topic2, 0, 0)]
    uncommitted = cluster.consumer("read_uncommitted")
    uncommitted.assign(tps)
    assert len(consume(uncommitted, 8)) == 8
    by_time = uncommitted.offsets_for_times(
        [partition(topic1, 0, written), partition(topic2, 0, written)], TIMEOUT_S
    )
    assert [tp.offset for tp in by_time] == [1, 1]
    uncommitted.close()

    committed = cluster.consumer("read_committed")
    committed.assign(tps)
    records = consume(committed, 2)
    assert [(m.key(), m.value()) for m in records] == [(b"x", b"1"), (b"x", b"1")]
    assert nothing_more(committed)
    # the end of the partition for a read_committed consumer is the last stable offset
    for tp in tps:
        assert committed.get_watermark_offsets(tp, TIMEOUT_S, cached=False)[1] == 1
    # undecided timestamps are not searchable either
    by_time = committed.offsets_for_times(
        [partition(topic1, 0, written), partition(topic2, 0, written)], TIMEOUT_S
    )
    assert [tp.offset for tp in by_time] == [-1, -1]
    committed.close()
    producer1.abort_transaction(TIMEOUT_S)


def test_delayed_fetch_includes_aborted_transaction(cluster: TxnCluster) -> None:
    (topic1,) = cluster.topics("topic1")
    producer1, producer2 = cluster.producer(), cluster.producer("other")
    producer1.init_transactions(TIMEOUT_S)
    producer2.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer2.begin_transaction()
    producer2.produce(topic1, partition=0, key="x", value="1")
    producer2.flush(TIMEOUT_S)
    producer1.produce(topic1, partition=0, key="y", value="1")
    producer1.produce(topic1, partition=0, key="y", value="2")
    producer1.flush(TIMEOUT_S)
    producer2.produce(topic1, partition=0, key="x", value="2")
    producer2.flush(TIMEOUT_S)
    tp10 = (topic1, 0)
    # nothing decided yet: the LSO is 0, nothing is tiered
    cluster.verify_log_start_offsets({tp10: 0})
    cluster.maybe_verify_local_log_start_offsets({tp10: 0})
    producer1.abort_transaction(TIMEOUT_S)
    producer2.commit_transaction(TIMEOUT_S)
    cluster.maybe_wait_for_at_least_one_segment_upload([tp10])
    # 4 records and 2 markers: all but the active segment (the COMMIT marker's) tiered
    cluster.verify_log_start_offsets({tp10: 0})
    cluster.maybe_verify_local_log_start_offsets({tp10: 5})

    # a fetch that waits for more bytes than there are: answered by the delayed fetch
    consumer = cluster.consumer(
        "read_committed", **{"fetch.min.bytes": 1_000_000, "fetch.wait.max.ms": 1000}
    )
    consumer.assign([partition(topic1, 0, 0)])
    records = consume(consumer, 2)
    assert [(m.key(), m.value(), m.offset()) for m in records] == [(b"x", b"1", 0), (b"x", b"2", 3)]
    assert nothing_more(consumer)
    consumer.close()


def test_send_offsets_with_group_metadata(cluster: TxnCluster) -> None:
    source, sink = cluster.topics("source", "sink", partitions=1)
    seed = cluster.producer()
    seed.init_transactions(TIMEOUT_S)
    seed.begin_transaction()
    for i in range(500):
        seed.produce(source, key=str(i), value=str(i))
    seed.commit_transaction(TIMEOUT_S)

    group = "copier"
    consumer = cluster.consumer("read_committed", group=group)
    consumer.subscribe([source])
    producer = cluster.producer("copier-txn")
    producer.init_transactions(TIMEOUT_S)
    copied = 0
    deadline = time.monotonic() + TIMEOUT_S * 2
    while copied < 500 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(100, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for message in batch:
            producer.produce(sink, key=message.key(), value=message.value())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()),
            consumer.consumer_group_metadata(),
            TIMEOUT_S,
        )
        producer.commit_transaction(TIMEOUT_S)
        copied += len(batch)
    consumer.close()
    assert copied == 500

    checker = cluster.consumer("read_committed", group=group)
    committed = checker.committed([TopicPartition(source, 0)], TIMEOUT_S)
    # after the last record, or after the seed's commit marker too
    assert committed[0].offset in (500, 501)
    checker.close()
    cluster.maybe_wait_for_at_least_one_segment_upload([(sink, 0)])
    reader = cluster.consumer("read_committed")
    reader.subscribe([sink])
    assert values(consume(reader, 500)) == sorted(str(i) for i in range(500))
    assert nothing_more(reader)
    reader.close()


def test_offset_metadata_in_send_offsets_to_transaction(cluster: TxnCluster) -> None:
    (topic1,) = cluster.topics("topic1", partitions=1)
    producer = cluster.producer()
    producer.init_transactions(TIMEOUT_S)
    consumer = cluster.consumer("read_committed", group="metadata-group")
    consumer.subscribe([topic1])
    consumer.poll(1.0)
    producer.begin_transaction()
    offset = TopicPartition(topic1, 0, 42, metadata="checkpoint-42")
    producer.send_offsets_to_transaction([offset], consumer.consumer_group_metadata(), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    (committed,) = consumer.committed([TopicPartition(topic1, 0)], TIMEOUT_S)
    assert (committed.offset, committed.metadata) == (42, "checkpoint-42")
    consumer.close()


def test_fencing_on_commit(cluster: TxnCluster) -> None:
    topic1, topic2 = cluster.topics("topic1", "topic2")
    producer1 = cluster.producer("fenced-on-commit")
    producer1.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer1.produce(topic1, partition=0, value="1")
    producer1.produce(topic2, partition=0, value="3")
    producer1.flush(TIMEOUT_S)

    producer2 = cluster.producer("fenced-on-commit")
    producer2.init_transactions(TIMEOUT_S)  # fences producer1
    producer2.begin_transaction()
    producer2.produce(topic1, partition=0, value="2")
    producer2.produce(topic2, partition=0, value="4")
    producer2.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:
        producer1.commit_transaction(TIMEOUT_S)
    assert fatal(raised)
    consumer = cluster.consumer("read_committed")
    consumer.subscribe([topic1, topic2])
    assert values(consume(consumer, 2)) == ["2", "4"]
    assert nothing_more(consumer)
    consumer.close()


def test_fencing_on_send_offsets(cluster: TxnCluster) -> None:
    (topic1,) = cluster.topics("topic1")
    producer1 = cluster.producer("fenced-on-send-offsets")
    producer1.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer1.produce(topic1, partition=0, value="1")
    producer1.flush(TIMEOUT_S)
    producer2 = cluster.producer("fenced-on-send-offsets")
    producer2.init_transactions(TIMEOUT_S)
    consumer = cluster.consumer("read_committed", group="fenced-offsets")
    with pytest.raises(KafkaException) as raised:
        producer1.send_offsets_to_transaction(
            [TopicPartition(topic1, 0, 1)], consumer.consumer_group_metadata(), TIMEOUT_S
        )
        producer1.commit_transaction(TIMEOUT_S)
    assert fatal(raised)
    consumer.close()


def test_fencing_on_send(cluster: TxnCluster) -> None:
    (topic1,) = cluster.topics("topic1")
    producer1 = cluster.producer("fenced-on-send")
    producer1.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer1.produce(topic1, partition=0, value="1")
    producer1.flush(TIMEOUT_S)
    producer2 = cluster.producer("fenced-on-send")
    producer2.init_transactions(TIMEOUT_S)
    producer2.begin_transaction()
    producer2.produce(topic1, partition=0, value="2")
    producer2.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:  # the zombie's write is refused
        producer1.produce(topic1, partition=0, value="zombie")
        producer1.flush(TIMEOUT_S)
        producer1.commit_transaction(TIMEOUT_S)
    assert fatal(raised)
    assert "fenced" in str(raised.value)
    consumer = cluster.consumer("read_committed")
    consumer.assign([partition(topic1, 0, 0)])
    assert values(consume(consumer, 1)) == ["2"]
    assert nothing_more(consumer)
    consumer.close()


def test_fencing_on_add_partitions(cluster: TxnCluster) -> None:
    topic1, topic2 = cluster.topics("topic1", "topic2")
    producer1 = cluster.producer("fenced-on-add")
    producer1.init_transactions(TIMEOUT_S)
    producer1.begin_transaction()
    producer1.produce(topic1, partition=0, value="1")
    producer1.flush(TIMEOUT_S)
    producer2 = cluster.producer("fenced-on-add")
    producer2.init_transactions(TIMEOUT_S)
    producer2.begin_transaction()
    producer2.produce(topic2, partition=0, value="2")
    producer2.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:
        producer1.produce(topic2, partition=1, value="zombie")  # a new partition: AddPartitions
        producer1.flush(TIMEOUT_S)
        producer1.commit_transaction(TIMEOUT_S)
    assert fatal(raised)
    consumer = cluster.consumer("read_committed")
    consumer.subscribe([topic1, topic2])
    assert values(consume(consumer, 1)) == ["2"]
    assert nothing_more(consumer)
    consumer.close()


def test_fencing_on_transaction_expiration(cluster: TxnCluster) -> None:
    (topic1,) = cluster.topics("topic1")
    producer = cluster.producer("expiring", **{"transaction.timeout.ms": 1000})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic1, partition=0, value="1")
    producer.flush(TIMEOUT_S)
    time.sleep(3)  # the coordinator aborts it (fencing the producer's epoch)
    with pytest.raises(KafkaException):
        producer.produce(topic1, partition=0, value="2")
        producer.commit_transaction(TIMEOUT_S)
    consumer = cluster.consumer("read_committed")
    consumer.assign([partition(topic1, 0, 0)])
    assert nothing_more(consumer, 3.0)
    consumer.close()


def test_multiple_markers_one_leader(cluster: TxnCluster) -> None:
    topic1, topic2 = cluster.topics("topic1", "topic2", partitions=8)
    producer = cluster.producer()
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for topic in (topic1, topic2):
        for p in range(8):  # every broker leads several of them: one request per leader
            producer.produce(topic, partition=p, value=f"{topic}-{p}")
    producer.commit_transaction(TIMEOUT_S)
    consumer = cluster.consumer("read_committed")
    consumer.subscribe([topic1, topic2])
    assert len(consume(consumer, 16)) == 16
    consumer.close()


def test_consecutively_run_init_transactions(cluster: TxnCluster) -> None:
    producer = cluster.producer()
    producer.init_transactions(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError._STATE, raised.value


def completed(described: DescribedTransaction) -> DescribedTransaction | None:
    return described if described.state == "CompleteCommit" else None


def test_bump_transactional_epoch(cluster: TxnCluster) -> None:
    """KIP-360: after an abortable error the producer aborts, then keeps its producer id with
    the next epoch (InitProducerId naming its current id and epoch).

    The leader is stopped once the first transaction is complete, and it hosts no replica of
    the transaction's ``__transaction_state`` partition: otherwise the second transaction's
    AddPartitionsToTxn would wait for it past the record's timeout, and the client's abort
    would race the registration it never heard back from (fenced or refused, as on
    Kafka)."""
    producer = cluster.producer("bumped", **{"message.timeout.ms": 3000})
    producer.init_transactions(TIMEOUT_S)
    state_partition = partition_for(
        "bumped", int(CLUSTER_SETTINGS["transaction.state.log.num.partitions"])
    )
    _leader, _epoch, isr = cluster_support.partition_states(
        cluster.bootstrap, TRANSACTION_STATE_TOPIC_NAME
    )[state_partition]
    (outside,) = set(cluster.brokers) - set(isr)
    (topic1,) = cluster.topics("topic1", partitions=1, leader=outside)
    producer.begin_transaction()
    producer.produce(topic1, value="1")
    producer.commit_transaction(TIMEOUT_S)
    # The commit answers once PrepareCommit is written; its markers follow. Stopped before
    # they are written, the leader would keep the transaction in PrepareCommit, and the next
    # transaction's AddPartitionsToTxn would be refused CONCURRENT_TRANSACTIONS throughout.
    before = eventually(
        lambda: completed(described_by_coordinator(cluster, "bumped")),
        what="the first transaction's markers written",
    )
    assert before is not None

    leader = cluster_support.partition_leaders(cluster.bootstrap, topic1)[0][0]
    assert leader == outside
    stopped = cluster.brokers[leader].process
    assert stopped is not None
    producer.begin_transaction()
    os.kill(stopped.pid, signal.SIGSTOP)  # the write is sent and never answered: it times out
    try:
        producer.produce(topic1, value="lost")
        with pytest.raises(KafkaException) as raised:
            producer.commit_transaction(TIMEOUT_S)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert raised.value.args[0].txn_requires_abort(), raised.value
    producer.abort_transaction(TIMEOUT_S)  # bumps the epoch, keeping the producer id
    producer.begin_transaction()
    producer.produce(topic1, value="2")
    producer.commit_transaction(TIMEOUT_S)

    after = described_by_coordinator(cluster, "bumped")
    assert after.producer_id == before.producer_id
    assert after.producer_epoch > before.producer_epoch
    consumer = cluster.consumer("read_committed")
    consumer.assign([partition(topic1, 0, 0)])
    assert values(consume(consumer, 2)) == ["1", "2"]
    consumer.close()
