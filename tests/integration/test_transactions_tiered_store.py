"""Kafka's ``TransactionsWithTieredStoreTest`` (storage/src/test/java/org/apache/kafka/tiered/
storage/integration/): the ``TransactionsTest`` cases of ``test_transactions_kafka_cases``, run
on the same three brokers with tiered storage on (``LocalTieredStorage``, the topic-based RLMM
with 3 metadata partitions on RF 3) and topics with ``remote.storage.enable=true``, one
append per segment (Kafka's way: ``segment.index.bytes=12`` leaves the time index one entry,
kept for the final entry at a roll, so the index is full at once and every append rolls a
non-empty segment; ``segment.bytes`` would refuse a larger append) and
``local.retention.bytes=1`` (a local segment goes as soon as a remote copy covers it).

The cases call TransactionsTest's hooks, which ``TieredTxnCluster`` overrides:

- ``maybe_verify_local_log_start_offsets``: copy what the pipeline would copy now (one
  ``storage-core tier`` run, ``run_tier``, on each partition's leader: its planning stops at the
  leader's LSO), until the remote tier holds exactly the offsets below the expected local log
  start offset and every replica's first local segment starts there; anything tiered at or past
  it fails at once. In Kafka the broker's RLM copies by itself; here copies are the pipeline's,
  so the hook runs them: a check that nothing is tiered past the LSO must have tried;
- ``maybe_wait_for_at_least_one_segment_upload``: the same copy runs, until every replica's
  local log starts past offset 0.

What the consumers then read comes from the remote tier: they start at offset 0 (the log start
offset, which tiering leaves alone: ``verify_log_start_offsets``), below every replica's local
log start. basic, for one of its two partitions (``topic1-1`` and ``topic2-2`` alike)::

    0 "4" (aborted)  1 ABORT  2 "1"  3 COMMIT (active)
    remote: [0] [1] [2]          local on every replica: [3]
    read_committed from 0 -> "1" (remote), not "4" (remote, aborted by the remote ABORT's
    transaction index); read_uncommitted -> "4", "1"

read_committed never sees undecided data reads producer2's first records from the remote tier
(the open transaction holds the LSO, and the copies, at 1); the delayed fetch reads "x1" and
"x2" from it past the aborted "y1", "y2" (offsets 0..4 tiered). The other TransactionsTest
cases run unchanged, as the Java test inherits them. Three cases of ours: aborted records
tiered while their ABORT marker is still local; three producers' interleaved transactions
over multi-batch remote segments, read whole and one batch per fetch; an ABORT marker written
in a later leader epoch than its records.
"""

from __future__ import annotations

import io
import random
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import ElectionType
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.tools.tier import run_tier
from tests import cluster_support
from tests.cluster_support import eventually
from tests.integration import test_transactions_kafka_cases as cases
from tests.integration.transactions_support import (
    TIMEOUT_S,
    PartitionOffsets,
    TxnCluster,
    consume,
    nothing_more,
    partition,
    txn_cluster,
    values,
)
from tests.tiered_broker_support import EARLIEST_LOCAL, batch_offsets, list_offset, raw_fetch

cluster_support.require_java()
pytestmark = pytest.mark.timeout(300)

SEGMENT_INDEX_BYTES = 12  # one time index entry: every append rolls (see above)
POLL_S = 0.2
INTERLEAVED_ROUNDS = 6
RECORDS_PER_ROUND = 8
_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_POSITION = 43  # of a record batch v2: the producer id after the max timestamp


def tiered_settings(remote_dir: Path) -> dict[str, str]:
    """TieredStorageTestUtils.createPropsForRemoteStorage, for three brokers."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(remote_dir),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": "3",
        "remote.log.metadata.topic.replication.factor": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "replica.fetch.backoff.ms": "200",
    }


@dataclass
class TieredTxnCluster(TxnCluster):
    remote_dir: Path = Path()

    def topic_config(self) -> dict[str, str]:
        """TieredStorageTestUtils.createTopicConfigForRemoteStorage(true, 1 batch)."""
        return {
            **super().topic_config(),
            "remote.storage.enable": "true",
            "index.interval.bytes": "1",
            "segment.index.bytes": str(SEGMENT_INDEX_BYTES),
            "local.retention.bytes": "1",
        }

    def tier(self, partitions: list[tuple[str, int]]) -> None:
        """One ``storage-core tier`` copy run per topic on each leader of ``partitions``."""
        runs: set[tuple[int, str]] = set()
        for topic, index in partitions:
            leader, _epoch = cluster_support.partition_leaders(self.bootstrap, topic)[index]
            runs.add((leader, topic))
        for leader, topic in sorted(runs):
            broker = self.brokers[leader]
            out, err = io.StringIO(), io.StringIO()
            code = run_tier(
                bootstrap_server=broker.bootstrap,
                log_dir=broker.log_dir,
                topic=topic,
                dry_run=False,
                expire=False,
                delete_partitions_marked=False,
                broker_config_path=broker.config_path,
                broker_id=leader,
                remote_storage_manager=None,
                rsm_config=(),
                progress=False,
                out=out,
                err=err,
            )
            assert code == 0, (out.getvalue(), err.getvalue())

    def remote_offsets(self, topic: str, index: int) -> list[int]:
        """Every offset the remote tier holds for ``topic-index``, read from its objects."""
        offsets: list[int] = []
        for path in self.remote_dir.glob(f"**/{topic}-{'?' * 22}/{index}/*.log"):
            offsets.extend(batch_offsets(path.read_bytes()))
        return sorted(offsets)

    def local_log_start_offsets(self, topic: str, index: int) -> dict[int, int | None]:
        """Each replica's first local segment's base offset (None: no segment)."""
        starts: dict[int, int | None] = {}
        for broker_id, broker in self.brokers.items():
            bases = [int(p.stem) for p in (broker.log_dir / f"{topic}-{index}").glob("*.log")]
            starts[broker_id] = min(bases, default=None)
        return starts

    def tier_until(
        self, partitions: list[tuple[str, int]], done: Callable[[], bool], what: str
    ) -> None:
        """Copy runs on the leaders of ``partitions`` until ``done()``, at most TIMEOUT_S."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            self.tier(partitions)
            if done():
                return
            if time.monotonic() > deadline:
                picture = {
                    tp: (self.remote_offsets(*tp), self.local_log_start_offsets(*tp))
                    for tp in partitions
                }
                raise AssertionError(f"not within {TIMEOUT_S} s: {what}; (remote, local) {picture}")
            time.sleep(POLL_S)

    def maybe_wait_for_at_least_one_segment_upload(self, partitions: list[tuple[str, int]]) -> None:
        self.tier_until(
            partitions,
            lambda: all(
                (start or 0) >= 1
                for tp in partitions
                for start in self.local_log_start_offsets(*tp).values()
            ),
            "every replica's local log to start past offset 0",
        )

    def maybe_verify_local_log_start_offsets(self, expected: PartitionOffsets) -> None:
        partitions = list(expected)

        def done() -> bool:
            for (topic, index), offset in expected.items():
                remote = self.remote_offsets(topic, index)
                if remote and remote[-1] >= offset:
                    raise AssertionError(
                        f"{topic}-{index}: offsets {remote} tiered, at or past {offset}"
                    )
            return all(
                self.remote_offsets(topic, index) == list(range(offset))
                and set(self.local_log_start_offsets(topic, index).values()) == {offset}
                for (topic, index), offset in expected.items()
            )

        self.tier_until(partitions, done, f"local log start offsets {dict(expected)}")


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TieredTxnCluster]:
    directory = tmp_path_factory.mktemp("tiered-txn-cluster")
    remote_dir = directory / "remote-tier"
    with txn_cluster(zookeeper, directory, tiered_settings(remote_dir)) as plain:
        yield TieredTxnCluster(plain.brokers, plain.admin, remote_dir=remote_dir)


def test_basic_transactions(cluster: TieredTxnCluster) -> None:
    cases.test_basic_transactions(cluster)


def test_read_committed_consumer_should_not_see_undecided_data(cluster: TieredTxnCluster) -> None:
    cases.test_read_committed_consumer_should_not_see_undecided_data(cluster)


def test_delayed_fetch_includes_aborted_transaction(cluster: TieredTxnCluster) -> None:
    cases.test_delayed_fetch_includes_aborted_transaction(cluster)


def test_tiered_aborted_records_whose_abort_marker_is_still_local(
    cluster: TieredTxnCluster,
) -> None:
    """Not one of TransactionsTest's cases: the aborted transactions of a read of tiered
    offsets come from the local log when the ABORT marker is not tiered yet, then from the
    remote tier once it is (for ``topic-0``; one append per segment)::

        0 "a1" (aborted)  1 ABORT (active)      remote: [0]         local: [1]
        2 "c1"  3 COMMIT (active)               remote: [0] [1] [2] local: [3]

    read_committed from offset 0 sees nothing, then "c1"; a raw Fetch of offset 0 at
    isolation level 1 returns the tiered "a1" with its aborted transaction both times."""
    (topic,) = cluster.topics("marker-local", partitions=1)
    tp = (topic, 0)
    aborting, committing = cluster.producer(), cluster.producer()
    aborting.init_transactions(TIMEOUT_S)
    committing.init_transactions(TIMEOUT_S)
    aborting.begin_transaction()
    aborting.produce(topic, partition=0, key="a", value="a1")
    aborting.flush(TIMEOUT_S)  # written: an abort purges what is not sent yet
    aborting.abort_transaction(TIMEOUT_S)
    cluster.maybe_wait_for_at_least_one_segment_upload([tp])
    cluster.maybe_verify_local_log_start_offsets({tp: 1})
    leader = cluster.brokers[cluster_support.partition_leaders(cluster.bootstrap, topic)[0][0]]

    def check_fetch_of_tiered_aborted_record() -> None:
        read = raw_fetch(leader.port, topic, 0, isolation_level=1)
        assert read.error_code == ErrorCode.none
        assert batch_offsets(read.records)[:1] == [0]
        (producer_id,) = _PRODUCER_ID.unpack_from(read.records, _PRODUCER_ID_POSITION)
        assert read.aborted_transactions == ((producer_id, 0),)

    check_fetch_of_tiered_aborted_record()
    consumer = cluster.consumer("read_committed")
    consumer.assign([partition(topic, 0, 0)])
    assert nothing_more(consumer)
    uncommitted = cluster.consumer("read_uncommitted")
    uncommitted.assign([partition(topic, 0, 0)])
    assert [(m.value(), m.offset()) for m in consume(uncommitted, 1)] == [(b"a1", 0)]
    uncommitted.close()

    committing.begin_transaction()
    committing.produce(topic, partition=0, key="c", value="c1")
    committing.commit_transaction(TIMEOUT_S)
    cluster.maybe_verify_local_log_start_offsets({tp: 3})
    check_fetch_of_tiered_aborted_record()
    assert [(m.value(), m.offset()) for m in consume(consumer, 1)] == [(b"c1", 2)]
    assert nothing_more(consumer)
    consumer.close()
    reader = cluster.consumer("read_committed")  # a new consumer, from offset 0
    reader.assign([partition(topic, 0, 0)])
    assert values(consume(reader, 1)) == ["c1"]
    assert nothing_more(reader)
    reader.close()


def test_interleaved_transactions_read_from_multi_batch_remote_segments(
    cluster: TieredTxnCluster,
) -> None:
    """Not one of TransactionsTest's cases: three producers' transactions overlap in one
    partition (each record its own append), a seeded mix of commits and aborts, several appends
    per segment (``segment.index.bytes=48``), so that aborted transactions span segments and
    their markers land in later ones. Once everything below the leader's active segment is
    tiered and deleted locally, read_committed consumers from offset 0 (one whose fetches stop
    after a batch, cutting reads inside remote segments) read exactly the committed records in
    offset order; read_uncommitted reads every record."""
    (topic,) = cluster.topics("interleaved", partitions=1, config={"segment.index.bytes": "48"})
    rng = random.Random(31)
    producers = [cluster.producer() for _ in range(3)]
    for producer in producers:
        producer.init_transactions(TIMEOUT_S)
    written: list[str] = []
    committed: set[str] = set()
    for round_ in range(INTERLEAVED_ROUNDS):
        pending: dict[int, list[str]] = {i: [] for i in range(len(producers))}
        for producer in producers:
            producer.begin_transaction()
        for step in range(RECORDS_PER_ROUND):
            i = rng.randrange(len(producers))
            value = f"r{round_}-p{i}-{step}"
            producers[i].produce(topic, partition=0, value=value)
            producers[i].flush(TIMEOUT_S)  # one append each: the transactions interleave
            pending[i].append(value)
            written.append(value)
        for i in rng.sample(range(len(producers)), len(producers)):
            if rng.random() < 0.5:
                producers[i].commit_transaction(TIMEOUT_S)
                committed.update(pending[i])
            else:
                producers[i].abort_transaction(TIMEOUT_S)
    expected = [value for value in written if value in committed]
    assert 0 < len(expected) < len(written)

    leader = cluster.brokers[cluster_support.partition_leaders(cluster.bootstrap, topic)[0][0]]

    def all_but_the_active_segment_tiered() -> bool:
        bases = [int(p.stem) for p in (leader.log_dir / f"{topic}-0").glob("*.log")]
        return len(bases) == 1 and cluster.remote_offsets(topic, 0) == list(range(bases[0]))

    cluster.tier_until([(topic, 0)], all_but_the_active_segment_tiered, "all but one tiered")
    assert len(list(cluster.remote_dir.glob(f"**/{topic}-*/0/*.txnindex"))) > 1

    one_batch = {"max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000, "message.max.bytes": 1000}
    for extra in ({}, one_batch):
        consumer = cluster.consumer("read_committed", **extra)
        consumer.assign([partition(topic, 0, 0)])
        records = consume(consumer, len(expected))
        assert [m.value().decode() for m in records] == expected, extra
        assert nothing_more(consumer)
        consumer.close()
    uncommitted = cluster.consumer("read_uncommitted")
    uncommitted.assign([partition(topic, 0, 0)])
    assert [m.value().decode() for m in consume(uncommitted, len(written))] == written
    uncommitted.close()


def move_leadership(cluster: TieredTxnCluster, topic: str) -> tuple[int, int]:
    """The second replica of ``topic-0`` made preferred and elected: ``(leader, epoch)``."""
    before, _epoch = cluster_support.partition_leaders(cluster.bootstrap, topic)[0]
    (answer,) = cluster_support.metadata(cluster.bootstrap, topic).topics
    others = [r for r in answer.partitions[0].replica_nodes if r != before]
    order = [others[0], before, *others[1:]]
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10_000)
    try:
        tp = KpTopicPartition(topic, 0)
        assert kafka_admin.alter_partition_reassignments({tp: order}) == {tp: None}
        eventually(lambda: kafka_admin.list_partition_reassignments() == {}, what="reassigned")
    finally:
        kafka_admin.close()
    elected = cluster.admin.elect_leaders(ElectionType.PREFERRED, [partition(topic, 0)])
    assert all(error is None for error in elected.result(TIMEOUT_S).values())

    def leading() -> tuple[int, int] | None:
        leader_and_epoch = cluster_support.partition_leaders(cluster.bootstrap, topic)[0]
        return leader_and_epoch if leader_and_epoch[0] == order[0] else None

    return eventually(
        leading,
        what=f"broker {order[0]} leading {topic}-0",
    )


def test_aborted_transaction_whose_marker_a_later_leader_epoch_wrote(
    cluster: TieredTxnCluster,
) -> None:
    """Not one of TransactionsTest's cases: the leadership moves while a transaction is open,
    so its ABORT marker is in a later leader epoch than its records. The search for the
    aborted transactions of a tiered read walks the remote segments epoch by epoch (KIP-1058's
    ``findNextSegmentWithTxnIndex``), past segments with empty transaction indexes; the
    segments the new leader tiers hold what it replicated as a follower, with the transaction
    index it built from the replicated ABORT marker::

        epoch e:   0 "a0"  1 ABORT  2 "a1" (open)  3 "c1"  4 COMMIT
        epoch e+1: 5 ABORT  6 "c2"  7 COMMIT (active)
        tiered by the new leader up to its active segment, deleted locally

    read_committed from 0 -> "c1", "c2"; a raw Fetch at isolation level 1 from the new leader
    of offset 0 returns the first aborted transaction, of offset 2 the second."""
    (topic,) = cluster.topics("epochs", partitions=1)
    aborting, committing = cluster.producer(), cluster.producer()
    aborting.init_transactions(TIMEOUT_S)
    committing.init_transactions(TIMEOUT_S)
    aborting.begin_transaction()
    aborting.produce(topic, partition=0, value="a0")
    aborting.flush(TIMEOUT_S)
    aborting.abort_transaction(TIMEOUT_S)
    aborting.begin_transaction()
    aborting.produce(topic, partition=0, value="a1")
    aborting.flush(TIMEOUT_S)
    committing.begin_transaction()
    committing.produce(topic, partition=0, value="c1")
    committing.commit_transaction(TIMEOUT_S)
    _before, first_epoch = cluster_support.partition_leaders(cluster.bootstrap, topic)[0]
    leader_id, epoch = move_leadership(cluster, topic)
    assert epoch > first_epoch
    aborting.abort_transaction(TIMEOUT_S)
    committing.begin_transaction()
    committing.produce(topic, partition=0, value="c2")
    committing.commit_transaction(TIMEOUT_S)
    leader = cluster.brokers[leader_id]

    def all_but_the_active_segment_tiered() -> bool:
        bases = [int(p.stem) for p in (leader.log_dir / f"{topic}-0").glob("*.log")]
        return len(bases) == 1 and cluster.remote_offsets(topic, 0) == list(range(bases[0]))

    cluster.tier_until([(topic, 0)], all_but_the_active_segment_tiered, "all but one tiered")
    assert list_offset(leader.bootstrap, topic, EARLIEST_LOCAL)[0] >= 6

    for offset in (0, 2):
        read = raw_fetch(leader.port, topic, offset, isolation_level=1)
        assert read.error_code == ErrorCode.none
        assert batch_offsets(read.records)[:1] == [offset]
        (producer_id,) = _PRODUCER_ID.unpack_from(read.records, _PRODUCER_ID_POSITION)
        assert read.aborted_transactions == ((producer_id, offset),)
    consumer = cluster.consumer("read_committed")
    consumer.assign([partition(topic, 0, 0)])
    assert [(m.value(), m.offset()) for m in consume(consumer, 2)] == [(b"c1", 3), (b"c2", 6)]
    assert nothing_more(consumer)
    consumer.close()


REMAINING_CASES = (
    cases.test_send_offsets_with_group_metadata,
    cases.test_offset_metadata_in_send_offsets_to_transaction,
    cases.test_fencing_on_commit,
    cases.test_fencing_on_send_offsets,
    cases.test_fencing_on_send,
    cases.test_fencing_on_add_partitions,
    cases.test_fencing_on_transaction_expiration,
    cases.test_multiple_markers_one_leader,
    cases.test_consecutively_run_init_transactions,
    cases.test_bump_transactional_epoch,
)


@pytest.mark.parametrize("case", REMAINING_CASES, ids=lambda case: case.__name__[len("test_") :])
def test_transactions_test_case(
    cluster: TieredTxnCluster, case: Callable[[TxnCluster], None]
) -> None:
    """TransactionsTest's other cases, as TransactionsWithTieredStoreTest inherits them."""
    case(cluster)
