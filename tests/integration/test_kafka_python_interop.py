"""Interoperability with kafka-python, an independent implementation of record batch v2.

(a) batches built by kafka-python's ``DefaultRecordBatchBuilder`` are read by ``RecordBatch``;
(b) batches built by ``build_batch`` are read and CRC-checked by kafka-python's
``MemoryRecords`` / ``DefaultRecordBatch``. Every codec, both directions.
"""

from __future__ import annotations

import struct
import warnings

import pytest

from storage_core.records import (
    CompressionType,
    Header,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    compress,
    decompress,
    iter_batches,
    patch_log_append_time,
    patch_offset_and_epoch,
)

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through deprecated importlib.resources calls.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

ALL_CODECS = list(CompressionType)
CODEC_IDS = [c.display_name for c in ALL_CODECS]


def sample_records() -> list[SimpleRecord]:
    """Compressible records covering nulls, empties, headers, large values and timestamps."""
    big = b"0123456789abcdef" * 8192  # 128 KiB: several snappy (32 KiB) and lz4 (64 KiB) blocks
    return [
        SimpleRecord(key=b"key-0", value=b"value-0", timestamp=1_700_000_000_000),
        SimpleRecord(key=None, value=b"value without key", timestamp=1_700_000_000_007),
        SimpleRecord(key=b"tombstone", value=None, timestamp=1_700_000_000_003),
        SimpleRecord(key=b"", value=b"", timestamp=1_700_000_000_001),
        SimpleRecord(
            key=b"headers",
            value=b"value-4",
            headers=(
                Header(key="content-type", value=b"application/json"),
                Header(key="null-header", value=None),
                Header(key="ünïcødé", value=b""),
            ),
            timestamp=1_700_000_000_002,
        ),
        SimpleRecord(key=b"big", value=big, timestamp=1_700_000_000_005),
    ] + [
        SimpleRecord(
            key=b"k%d" % i,
            value=b"repeated value %d " % (i % 3) * 20,
            timestamp=1_700_000_001_000 + i,
        )
        for i in range(50)
    ]


def kafka_python_batch(
    records: list[SimpleRecord],
    codec: CompressionType,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=16 * 1024 * 1024,
    )
    for offset, record in enumerate(records):
        metadata = builder.append(
            offset,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=[(h.key, h.value) for h in record.headers],
        )
        assert metadata is not None
    return bytes(builder.build())


def as_kafka_python_tuples(
    records: list[SimpleRecord], base_offset: int
) -> list[tuple[object, ...]]:
    return [
        (base_offset + i, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for i, r in enumerate(records)
    ]


# ---------------------------------------------------------------- (a) kafka-python -> ours
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_kafka_python_batches_are_read_by_record_batch(codec: CompressionType) -> None:
    records = sample_records()
    data = kafka_python_batch(
        records, codec, producer_id=4_000_000_000, producer_epoch=7, base_sequence=123
    )
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    assert batch.size_in_bytes == len(data)
    assert batch.compression is codec
    assert batch.base_offset == 0
    assert batch.partition_leader_epoch == 0  # kafka-python leaves it to the broker
    assert batch.last_offset_delta == len(records) - 1
    assert batch.records_count == len(records)
    assert batch.base_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert batch.producer_id == 4_000_000_000
    assert batch.producer_epoch == 7
    assert batch.base_sequence == 123
    assert not batch.is_transactional and not batch.is_control
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    decoded = list(batch.records())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_kafka_python_transactional_batch_flags(codec: CompressionType) -> None:
    records = sample_records()[:5]
    data = kafka_python_batch(
        records, codec, producer_id=9, producer_epoch=1, base_sequence=0, is_transactional=True
    )
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    assert batch.is_transactional
    assert [r.key for r in batch.records()] == [r.key for r in records]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_stamped_kafka_python_batches_stay_valid_for_both(codec: CompressionType) -> None:
    """A leader stamps offsets/epoch (and append time) on a client batch; both sides agree."""
    records = sample_records()[:8]
    buffer = bytearray(kafka_python_batch(records, codec) + kafka_python_batch(records, codec))
    positions = [p for p, _ in iter_batches(buffer)]
    for i, position in enumerate(positions):
        patch_offset_and_epoch(
            buffer, position, base_offset=500 + i * len(records), partition_leader_epoch=3
        )
    patch_log_append_time(buffer, positions[1], 1_800_000_000_000)
    reader = MemoryRecords(bytes(buffer))
    first = reader.next_batch()
    second = reader.next_batch()
    assert first.validate_crc() and second.validate_crc()
    assert first.leader_epoch == second.leader_epoch == 3
    assert [r.offset for r in first] == list(range(500, 508))
    assert second.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in second] == [
        (508 + i, 1_800_000_000_000) for i in range(8)
    ]


# ---------------------------------------------------------------- (b) ours -> kafka-python
@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_our_batches_are_read_by_kafka_python(codec: CompressionType) -> None:
    records = sample_records()
    data = build_batch(
        records,
        base_offset=1_000_000,
        compression=codec,
        partition_leader_epoch=12,
        producer_id=77,
        producer_epoch=2,
        base_sequence=40,
    )
    reader = MemoryRecords(data)
    batch = reader.next_batch()
    assert isinstance(batch, DefaultRecordBatch)
    assert reader.next_batch() is None
    assert batch.validate_crc()
    assert batch.magic == 2
    assert batch.compression_type == int(codec)
    assert batch.base_offset == 1_000_000
    assert batch.size_in_bytes == len(data)
    assert batch.leader_epoch == 12
    assert batch.last_offset_delta == len(records) - 1
    assert batch.records_count == len(records)
    assert batch.first_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 40)
    assert batch.timestamp_type == 0
    assert not batch.is_transactional and not batch.is_control_batch
    decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert decoded == as_kafka_python_tuples(records, 1_000_000)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
def test_our_log_append_time_batches_are_read_by_kafka_python(codec: CompressionType) -> None:
    records = sample_records()[:4]
    data = build_batch(
        records,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=1_800_000_000_000,
    )
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [1_800_000_000_000] * 4


def test_our_control_batch_is_a_kafka_python_control_record() -> None:
    commit_marker = SimpleRecord(
        key=struct.pack(">hh", 0, 1), value=struct.pack(">hi", 0, 5), timestamp=1_700_000_000_000
    )
    data = build_batch(
        [commit_marker],
        base_offset=30,
        producer_id=8,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.commit and record.offset == 30


def test_uncompressed_batches_are_byte_identical() -> None:
    """Without compression there is one correct encoding: both builders must agree exactly."""
    records = sample_records()
    ours = build_batch(
        records, partition_leader_epoch=0, producer_id=5, producer_epoch=1, base_sequence=9
    )
    theirs = kafka_python_batch(
        records, CompressionType.NONE, producer_id=5, producer_epoch=1, base_sequence=9
    )
    assert ours == theirs


def test_several_of_our_batches_in_one_buffer() -> None:
    buffer = b"".join(
        build_batch(sample_records()[:3], base_offset=3 * i, compression=codec)
        for i, codec in enumerate(ALL_CODECS)
    )
    reader = MemoryRecords(buffer)
    offsets = []
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        offsets.extend(r.offset for r in batch)
    assert offsets == list(range(3 * len(ALL_CODECS)))


# ---------------------------------------------------------------- raw codec streams
@pytest.mark.parametrize(
    ("codec", "encode", "decode"),
    [
        (CompressionType.GZIP, kafka_codec.gzip_encode, kafka_codec.gzip_decode),
        (CompressionType.SNAPPY, kafka_codec.snappy_encode, kafka_codec.snappy_decode),
        (CompressionType.LZ4, kafka_codec.lz4_encode, kafka_codec.lz4_decode),
        (CompressionType.ZSTD, kafka_codec.zstd_encode, kafka_codec.zstd_decode),
    ],
    ids=["gzip", "snappy", "lz4", "zstd"],
)
def test_codec_streams_interoperate(codec: CompressionType, encode: object, decode: object) -> None:
    payload = b"".join(b"payload %d; " % i for i in range(20_000))
    assert decode(compress(codec, payload)) == payload  # type: ignore[operator]
    assert decompress(codec, encode(payload)) == payload  # type: ignore[operator]


def test_raw_snappy_from_kafka_python_is_read() -> None:
    payload = b"not xerial framed " * 1000
    raw = kafka_codec.snappy_encode(payload, xerial_compatible=False)
    assert not raw.startswith(b"\x82SNAPPY")
    assert decompress(CompressionType.SNAPPY, raw) == payload
