"""A transaction aborted after its records were copied, whose ABORT marker was never copied,
stays aborted in a topic restored from the bucket (a chunked, encrypted tier on one broker)::

    source: plain 0..39 | txn T 40..44 | plain 45..194 | ABORT T (active segment)
    copy                 every closed segment; the last one's manifest lists T as aborted
                         past its end (its marker lies in the active segment, never copied)
    restore_topic        the plan counts T (aborted_past_end=1); the restored log ends with
                         that segment: marked abortsClosedAtEnd
    read_committed       every plain record of the restored range, none of T's
    read_uncommitted     T's records are there (the restored bytes are the source's)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from jobs import restore_topic, topic_manifests
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.broker_process import BrokerProcess
from tests.chunked_broker_support import (
    TOPIC,
    broker_overrides,
    create_topic,
    produce,
    tier_settings,
    value_of,
)
from tests.tiered_broker_support import client_rlmm, copy_eligible_segments

pytestmark = pytest.mark.timeout(240)

ABORTED = b"aborted-by-its-producer"


def read(bootstrap: str, topic: str, end: int, isolation: str) -> list[bytes]:
    """The values of ``topic``-0 from offset 0 up to (not including) ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while True:
            message = consumer.poll(20)
            assert message is not None, f"no record after {len(values)} from {topic}"
            assert message.error() is None, message.error()
            values.append(message.value())
            if message.offset() + 1 >= end:
                return values
    finally:
        consumer.close()


def test_an_abort_whose_marker_was_not_copied_stays_aborted_after_a_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tier_settings(tmp_path)
    with BrokerProcess(tmp_path / "broker", overrides=broker_overrides(settings)) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap)
        produce(bootstrap, 0, 40)
        writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "restore-abort"})
        writer.init_transactions(30)
        writer.begin_transaction()
        for _ in range(5):
            writer.produce(TOPIC, value=ABORTED, partition=0)
            writer.flush(30)
        produce(bootstrap, 45, 150)  # rolls segments past T's records
        writer.abort_transaction(30)  # the marker lands in the active segment
        del writer

        rsm = load_remote_storage_manager("LocalTieredStorage", settings)
        try:
            with client_rlmm(bootstrap) as rlmm:
                copied = copy_eligible_segments(
                    bootstrap, broker.log_dir / f"{TOPIC}-0", TOPIC, rsm, rlmm
                )
        finally:
            rsm.close()
        last = copied[-1]
        assert last.start_offset > 44 and last.end_offset < 195, copied

        def manifest(ref: RemoteSegmentRef) -> SegmentManifest:
            path = (
                tmp_path / "remote-tier" / segment_key("", ref, RemoteObjectSuffix.SEGMENT_MANIFEST)
            )
            return SegmentManifest.from_bytes(path.read_bytes(), where=str(path))

        described = manifest(RemoteSegmentRef.of(last)).segment
        assert described is not None and described.aborted_past_end is not None
        assert [
            (t.first_offset, t.last_offset > last.end_offset) for t in described.aborted_past_end
        ] == [(40, True)]
        assert not described.aborts_closed_at_end

        common = ["--bootstrap-server", bootstrap, "--broker-config", str(broker.config_path)]
        assert topic_manifests.main(common) == 0
        capsys.readouterr()
        code = restore_topic.main([*common, "--topic", TOPIC, "--target", "restored", "--dry-run"])
        out = capsys.readouterr().out
        assert code == 0 and "aborted_past_end=1" in out, out
        code = restore_topic.main([*common, "--topic", TOPIC, "--target", "restored"])
        assert code == 0, capsys.readouterr()

        end = last.end_offset + 1
        plain = [value_of(i) for i in range(40)] + [value_of(i) for i in range(45, end)]
        assert read(bootstrap, "restored", end, "read_committed") == plain
        uncommitted = read(bootstrap, "restored", end, "read_uncommitted")
        assert uncommitted[40:45] == [ABORTED] * 5
        # the source, whole: its last record is at 194, its ABORT marker at 195
        everything = [value_of(i) for i in range(40)] + [value_of(i) for i in range(45, 195)]
        assert read(bootstrap, TOPIC, 195, "read_committed") == everything
