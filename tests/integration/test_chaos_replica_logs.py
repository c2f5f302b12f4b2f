"""The replica-log comparison on copies of a real broker's partition dir: identical copies
agree, and a batch with another epoch, another content (its CRC recomputed), a corrupt byte, a
missing tail or another epoch checkpoint is each reported with its offsets."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c

from tests.broker_process import BrokerProcess
from tests.chaos.replica_logs import compare_partition

pytestmark = pytest.mark.timeout(120)
PARTITION = "replicated-0"
BATCHES = 12


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A real partition dir (two segments, one batch per record) and its high watermark."""
    with BrokerProcess(tmp_path_factory.mktemp("source")) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = NewTopic("replicated", 1, 1, config={"segment.bytes": "1024"})
        admin.create_topics([topic])["replicated"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for n in range(BATCHES):
            producer.produce("replicated", b"record %d " % n * 20, partition=0)
            assert producer.flush(10) == 0  # one batch each
        _, high = _watermarks(broker)
    source = broker.log_dir / PARTITION
    assert len(list(source.glob("*.log"))) >= 2
    return source, high


def _watermarks(broker: BrokerProcess) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hw"})
    try:
        low, high = consumer.get_watermark_offsets(CTopicPartition("replicated", 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _replicas(source: Path, root: Path) -> dict[int, Path]:
    """Three brokers' log dirs, each holding a copy of the partition."""
    log_dirs = {b: root / f"broker-{b}" / "kafka-logs" for b in (1, 2, 3)}
    for log_dir in log_dirs.values():
        shutil.copytree(source, log_dir / PARTITION)
    return log_dirs


def _batches(log_path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch, read from the raw bytes."""
    data = log_path.read_bytes()
    found = []
    position = 0
    while position + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        found.append((position, base_offset, 12 + length))
        position += 12 + length
    return found


def _rewrite(log_dirs: dict[int, Path], broker: int, index: int, edit: object) -> int:
    """Apply ``edit(bytearray, position, size)`` to batch ``index`` of the first segment of
    ``broker``'s copy; returns that batch's base offset."""
    log_path = sorted((log_dirs[broker] / PARTITION).glob("*.log"))[0]
    data = bytearray(log_path.read_bytes())
    position, base_offset, size = _batches(log_path)[index]
    edit(data, position, size)  # type: ignore[operator]
    log_path.write_bytes(bytes(data))
    return base_offset


def test_identical_copies_agree(partition_dir: tuple[Path, int], tmp_path: Path) -> None:
    source, high = partition_dir
    comparison = compare_partition(PARTITION, _replicas(source, tmp_path), high)
    assert comparison.ok, [str(d) for d in comparison.differences]
    assert high == BATCHES and comparison.batches_compared == 3 * BATCHES


def test_another_epoch_and_another_content_are_reported(
    partition_dir: tuple[Path, int], tmp_path: Path
) -> None:
    source, high = partition_dir
    log_dirs = _replicas(source, tmp_path)

    def new_epoch(data: bytearray, position: int, _size: int) -> None:
        struct.pack_into(">i", data, position + 12, 7)  # not covered by the CRC

    def new_content(data: bytearray, position: int, size: int) -> None:
        data[position + size - 3] ^= 0x20  # a byte of the last record's value...
        crc = crc32c(bytes(data[position + 21 : position + size]))  # ...with a valid CRC
        struct.pack_into(">I", data, position + 17, crc)

    epoch_at = _rewrite(log_dirs, 2, 1, new_epoch)
    content_at = _rewrite(log_dirs, 3, 2, new_content)

    comparison = compare_partition(PARTITION, log_dirs, high)

    details = [(d.broker_id, d.reference_id, d.detail) for d in comparison.differences]
    assert len(details) == 2, details
    (broker, reference, detail) = details[0]
    assert (broker, reference) == (2, 1)
    assert detail.startswith(f"batch [{epoch_at}..{epoch_at}] epoch 7 crc ")
    assert f"!= [{epoch_at}..{epoch_at}] epoch 0 crc " in detail
    (broker, _, detail) = details[1]
    assert broker == 3 and detail.startswith(f"batch [{content_at}..{content_at}] epoch 0 crc ")
    left, right = detail.split(" != ")
    assert left.split("crc ")[1] != right.split("crc ")[1]  # same offsets and epoch, other CRC


def test_a_corrupt_batch_a_short_log_and_another_checkpoint_are_reported(
    partition_dir: tuple[Path, int], tmp_path: Path
) -> None:
    source, high = partition_dir
    log_dirs = _replicas(source, tmp_path)

    def flip(data: bytearray, position: int, size: int) -> None:
        data[position + size - 1] ^= 0xFF

    corrupt_at = _rewrite(log_dirs, 2, 0, flip)
    last_segment = sorted((log_dirs[3] / PARTITION).glob("*.log"))[-1]
    position, last_base, _ = _batches(last_segment)[-1]
    with last_segment.open("r+b") as file:
        file.truncate(position)  # broker 3 lacks the newest batch
    checkpoint = log_dirs[2] / PARTITION / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n2\n0 0\n1 5\n")

    comparison = compare_partition(PARTITION, log_dirs, high)

    text = [str(d) for d in comparison.differences]
    assert any(
        t.startswith(f"{PARTITION}: broker 2 vs 1: corrupt batch [{corrupt_at}..") for t in text
    ), text
    assert (
        f"{PARTITION}: broker 3 vs 1: log ends at offset {last_base}, below the HW {high}" in text
    )
    assert any(f"broker 3 vs 1: missing batch [{last_base}..{last_base}]" in t for t in text)
    assert (
        f"{PARTITION}: broker 2 vs 1: leader-epoch-checkpoint below the HW"
        " [epoch 0 at 0, epoch 1 at 5] != [epoch 0 at 0]"
    ) in text
