"""Record batch v2 encoding and decoding: round trips, header fields and every rejection path."""

from __future__ import annotations

import gzip
import random
import struct

import crc32c
import lz4.frame
import pytest
import snappy
import zstandard

from storage_core.errors import (
    CorruptRecordError,
    DecompressedSizeLimitError,
    RecordBatchTooLargeError,
    UnsupportedCompressionError,
)
from storage_core.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    CompressionType,
    Header,
    Record,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    compress,
    decompress,
    iter_batches,
    memory_records_builder,
    patch_log_append_time,
    patch_offset_and_epoch,
)
from storage_core.records.varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

ALL_CODECS = list(CompressionType)
MIB = 1024 * 1024
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def rechecksum(batch: bytearray, position: int = 0) -> None:
    """Recompute the stored CRC of a deliberately altered batch (independently of the code)."""
    (length,) = struct.unpack_from(">i", batch, position + 8)
    end = position + LOG_OVERHEAD + length
    struct.pack_into(">I", batch, position + 17, crc32c.crc32c(bytes(batch[position + 21 : end])))


def mixed_records() -> list[SimpleRecord]:
    return [
        SimpleRecord(key=b"k0", value=b"v0", timestamp=1_000),
        SimpleRecord(key=None, value=b"no key", timestamp=1_005),
        SimpleRecord(key=b"tombstone", value=None, timestamp=999),
        SimpleRecord(key=b"", value=b"", timestamp=1_010),
        SimpleRecord(
            key=b"h",
            value=b"with headers",
            headers=(
                Header(key="trace", value=b"\x00\x01"),
                Header(key="null", value=None),
                Header(key="", value=b""),
                Header(key="ünïcødé", value=b"x" * 300),
            ),
            timestamp=1_001,
        ),
    ]


def expected_records(records: list[SimpleRecord], base_offset: int) -> list[Record]:
    return [
        Record(
            offset=base_offset + i,
            timestamp=r.timestamp,
            key=r.key,
            value=r.value,
            headers=r.headers,
        )
        for i, r in enumerate(records)
    ]


# ------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.display_name)
def test_round_trip_keys_values_headers_and_nulls(codec: CompressionType) -> None:
    records = mixed_records()
    data = build_batch(records, base_offset=42, compression=codec)
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    assert batch.compression is codec
    assert list(batch.records()) == expected_records(records, 42)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.display_name)
def test_round_trip_one_mib_value(codec: CompressionType) -> None:
    value = bytes(range(256)) * (MIB // 256)
    records = [SimpleRecord(key=b"big", value=value, timestamp=5), SimpleRecord(value=b"small")]
    data = build_batch(records, compression=codec)
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    decoded = list(batch.records())
    assert decoded[0].value == value
    assert decoded[1].value == b"small"
    assert [r.offset for r in decoded] == [0, 1]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.display_name)
def test_round_trip_many_records(codec: CompressionType) -> None:
    records = [
        SimpleRecord(key=str(i).encode(), value=b"%05d" % i * 3, timestamp=10_000 + i % 7)
        for i in range(2_000)
    ]
    batch = RecordBatch.from_buffer(build_batch(records, compression=codec, base_offset=1_000))
    batch.ensure_valid()
    assert batch.records_count == 2_000
    assert batch.last_offset == 2_999
    assert list(batch.records()) == expected_records(records, 1_000)


def test_header_fields() -> None:
    records = mixed_records()
    data = build_batch(
        records,
        base_offset=1_234_567_890_123,
        compression=CompressionType.ZSTD,
        partition_leader_epoch=7,
        producer_id=99_999_999_999,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    batch = RecordBatch.from_buffer(data, file="00000.log")
    assert batch.base_offset == 1_234_567_890_123
    assert batch.size_in_bytes == len(data) == batch.batch_length + LOG_OVERHEAD
    assert batch.partition_leader_epoch == 7
    assert batch.magic == MAGIC_V2
    assert batch.compression is CompressionType.ZSTD
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.is_transactional
    assert not batch.is_control
    assert not batch.has_delete_horizon
    assert batch.attributes == 0x04 | 0x10
    assert batch.last_offset_delta == len(records) - 1
    assert batch.last_offset == 1_234_567_890_123 + len(records) - 1
    assert batch.next_offset == batch.last_offset + 1
    assert batch.base_timestamp == 1_000  # the first record's timestamp, not the smallest
    assert batch.max_timestamp == 1_010
    assert batch.producer_id == 99_999_999_999
    assert batch.producer_epoch == 3
    assert batch.base_sequence == 17
    assert batch.records_count == len(records)
    assert batch.crc == struct.unpack_from(">I", data, 17)[0] == batch.compute_checksum()
    assert bytes(batch.buffer) == data
    assert batch.file == "00000.log"
    assert "base_offset=1234567890123" in repr(batch)


def test_defaults_are_kafka_sentinels() -> None:
    batch = RecordBatch.from_buffer(build_batch([SimpleRecord(value=b"v")]))
    assert batch.base_offset == 0
    assert batch.partition_leader_epoch == -1
    assert batch.producer_id == -1
    assert batch.producer_epoch == -1
    assert batch.base_sequence == -1
    assert batch.base_timestamp == -1
    assert batch.max_timestamp == -1
    assert batch.attributes == 0


def test_missing_timestamps_keep_kafka_semantics() -> None:
    # Kafka's MemoryRecordsBuilder: base timestamp = first record's, even when it is -1.
    records = [SimpleRecord(value=b"a"), SimpleRecord(value=b"b", timestamp=50)]
    batch = RecordBatch.from_buffer(build_batch(records))
    assert batch.base_timestamp == -1
    assert batch.max_timestamp == 50
    assert [r.timestamp for r in batch.records()] == [-1, 50]


def test_control_batch_attribute() -> None:
    key = struct.pack(">hh", 0, 1)  # version 0, COMMIT
    data = build_batch(
        [SimpleRecord(key=key, value=b"\x00\x00\x00\x00\x00\x00", timestamp=1)],
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    batch = RecordBatch.from_buffer(data)
    assert batch.is_control and batch.is_transactional
    assert batch.base_sequence == -1
    assert next(batch.records()).key == key


def test_log_append_time_batch() -> None:
    records = [SimpleRecord(value=b"a", timestamp=10), SimpleRecord(value=b"b", timestamp=20)]
    data = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=777)
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 777
    assert [r.timestamp for r in batch.records()] == [777, 777]


def test_build_batch_rejects_invalid_input() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="producer id"):
        build_batch([SimpleRecord(value=b"v")], is_transactional=True)
    with pytest.raises(ValueError, match="producer epoch"):
        build_batch([SimpleRecord(value=b"v")], producer_id=1, base_sequence=0)
    with pytest.raises(ValueError, match="base sequence"):
        build_batch([SimpleRecord(value=b"v")], producer_id=1, producer_epoch=0)
    with pytest.raises(ValueError, match="log_append_time"):
        build_batch([SimpleRecord(value=b"v")], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(ValueError, match="out of range"):
        build_batch([SimpleRecord(value=b"v")], base_offset=2**63)
    with pytest.raises(ValueError, match="timestamp"):
        SimpleRecord(value=b"v", timestamp=-2)


# ------------------------------------------------------------------------------ corruption
def test_bit_flip_in_records_is_detected_by_crc() -> None:
    data = bytearray(build_batch(mixed_records(), base_offset=10))
    data[BATCH_HEADER_SIZE + 5] ^= 0x10
    batch = RecordBatch.from_buffer(data, file="x.log")
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc") as info:
        batch.ensure_valid()
    assert (info.value.file, info.value.position, info.value.offset) == ("x.log", 0, 10)


@pytest.mark.parametrize("index", [17, 20, 21, 22, 30, 50, 60])
def test_bit_flip_in_crc_covered_header_bytes_is_detected(index: int) -> None:
    data = bytearray(build_batch(mixed_records()))
    data[index] ^= 0x01
    assert not RecordBatch.from_buffer(data).is_valid()


def test_every_truncation_is_rejected_with_the_present_byte_count() -> None:
    data = build_batch(mixed_records(), base_offset=3)
    for size in range(len(data)):
        with pytest.raises(CorruptRecordError, match="truncated") as info:
            RecordBatch.from_buffer(data[:size], file="f.log")
        assert info.value.position == 0
        assert info.value.file == "f.log"
        assert info.value.offset == (3 if size >= 8 else None)
    with pytest.raises(CorruptRecordError, match=f"truncated batch: 100 of {len(data)} bytes"):
        RecordBatch.from_buffer(data[:100])


def test_wrong_magic_is_rejected() -> None:
    data = bytearray(build_batch(mixed_records()))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="unsupported magic 1"):
        RecordBatch.from_buffer(data)


def test_garbage_is_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="batch length 0 is smaller than the minimum 49"):
        RecordBatch.from_buffer(bytes(4096))
    garbage = bytes.fromhex("00000000000000ff7fffffff") + bytes(100)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        RecordBatch.from_buffer(garbage)
    negative_length = bytes(8) + struct.pack(">i", -5) + bytes(100)
    with pytest.raises(CorruptRecordError, match="batch length -5"):
        RecordBatch.from_buffer(negative_length)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id(codec_id: int) -> None:
    data = bytearray(build_batch(mixed_records()))
    struct.pack_into(">h", data, 21, codec_id)
    rechecksum(data)
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()  # the CRC is fine; only the codec is unknown
    with pytest.raises(UnsupportedCompressionError, match=f"codec id {codec_id}"):
        _ = batch.compression
    with pytest.raises(UnsupportedCompressionError):
        list(batch.records())
    assert f"unknown({codec_id})" in repr(batch)
    with pytest.raises(UnsupportedCompressionError):
        CompressionType.from_id(codec_id)


def test_negative_counts_fail_ensure_valid() -> None:
    data = bytearray(build_batch(mixed_records()))
    struct.pack_into(">i", data, 57, -1)
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="invalid record count -1"):
        RecordBatch.from_buffer(data).ensure_valid()
    data = bytearray(build_batch(mixed_records()))
    struct.pack_into(">i", data, 23, -2)
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="invalid last offset delta -2"):
        RecordBatch.from_buffer(data).ensure_valid()


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.display_name)
def test_record_count_must_match_the_records(codec: CompressionType) -> None:
    records = [SimpleRecord(value=b"a"), SimpleRecord(value=b"b"), SimpleRecord(value=b"c")]
    more = bytearray(build_batch(records, compression=codec))
    struct.pack_into(">i", more, 57, 4)
    rechecksum(more)
    with pytest.raises(CorruptRecordError, match="declares 4 records but its data ends after 3"):
        list(RecordBatch.from_buffer(more).records())
    fewer = bytearray(build_batch(records, compression=codec))
    struct.pack_into(">i", fewer, 57, 2)
    rechecksum(fewer)
    with pytest.raises(CorruptRecordError, match="bytes left after the last of 2 records"):
        list(RecordBatch.from_buffer(fewer).records())


def test_record_length_must_match_its_fields() -> None:
    data = bytearray(build_batch([SimpleRecord(key=b"k", value=b"value")]))
    # First record: length varint at 61; fields take 12 bytes -> zigzag 24.
    assert data[BATCH_HEADER_SIZE] == 24
    data[BATCH_HEADER_SIZE] = 26  # claims 13 bytes; the batch holds only 12 after it
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="record 0 of 1: record at byte 0 has length 13"):
        list(RecordBatch.from_buffer(data).records())
    # A record claiming fewer bytes than its fields take, with spare bytes after it.
    base = build_batch([SimpleRecord(key=b"k", value=b"value")])
    data = bytearray(base + b"\x00")
    struct.pack_into(">i", data, 8, len(data) - LOG_OVERHEAD)
    data[BATCH_HEADER_SIZE] = 22  # 11 bytes
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="declares 11 bytes but its fields take 12"):
        list(RecordBatch.from_buffer(data).records())


def test_bad_key_length_and_header_key_are_rejected() -> None:
    data = bytearray(build_batch([SimpleRecord(key=b"k", value=b"v")]))
    key_length_at = BATCH_HEADER_SIZE + 4  # length, attributes, ts delta, offset delta
    assert data[key_length_at] == 2  # zigzag(1)
    data[key_length_at] = 3  # zigzag(-2)
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="invalid key length -2"):
        list(RecordBatch.from_buffer(data).records())

    data = bytearray(
        build_batch([SimpleRecord(value=b"v", headers=(Header(key="ab", value=None),))])
    )
    header_key_at = data.index(b"ab")
    data[header_key_at] = 0xFF  # not UTF-8
    rechecksum(data)
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        list(RecordBatch.from_buffer(data).records())


@pytest.mark.parametrize(
    "codec",
    [c for c in ALL_CODECS if c is not CompressionType.NONE],
    ids=lambda c: c.display_name,
)
def test_undecodable_compressed_payload(codec: CompressionType) -> None:
    data = bytearray(build_batch(mixed_records(), compression=codec, base_offset=8))
    payload_end = len(data)
    for i in range(BATCH_HEADER_SIZE, payload_end):
        data[i] = 0x5A
    rechecksum(data)
    batch = RecordBatch.from_buffer(data, file="c.log")
    batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match=codec.display_name) as info:
        list(batch.records())
    assert info.value.offset == 8
    assert info.value.file == "c.log"


# ------------------------------------------------------------------------------ codecs
@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.display_name)
def test_codec_round_trip_including_empty_and_memoryview(codec: CompressionType) -> None:
    for payload in (b"", b"x", bytes(range(256)) * 1000):
        assert decompress(codec, compress(codec, payload)) == payload
        assert decompress(codec, memoryview(compress(codec, memoryview(payload)))) == payload


@pytest.mark.parametrize(
    "codec",
    [c for c in ALL_CODECS if c is not CompressionType.NONE],
    ids=lambda c: c.display_name,
)
def test_decompression_bomb_raises_named_error(codec: CompressionType) -> None:
    bomb = compress(codec, bytes(8 * MIB))
    assert len(bomb) < MIB
    with pytest.raises(DecompressedSizeLimitError, match="beyond the limit of 1048576"):
        decompress(codec, bomb, max_decompressed_bytes=MIB)
    assert decompress(codec, bomb, max_decompressed_bytes=8 * MIB) == bytes(8 * MIB)
    batch = RecordBatch.from_buffer(
        build_batch([SimpleRecord(value=bytes(2 * MIB))], compression=codec)
    )
    with pytest.raises(DecompressedSizeLimitError):
        list(batch.records(max_decompressed_bytes=MIB))


def test_uncompressed_limit_and_bad_limit() -> None:
    with pytest.raises(DecompressedSizeLimitError):
        decompress(CompressionType.NONE, b"abc", max_decompressed_bytes=2)
    with pytest.raises(ValueError, match="max_decompressed_bytes"):
        decompress(CompressionType.GZIP, b"", max_decompressed_bytes=-1)


def test_snappy_writes_xerial_framing_with_32_kib_blocks() -> None:
    payload = bytes(range(256)) * 400  # 102400 bytes -> 4 blocks
    framed = compress(CompressionType.SNAPPY, payload)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(framed):
        (size,) = struct.unpack_from(">i", framed, pos)
        blocks.append(snappy.decompress(framed[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 4096]
    assert b"".join(blocks) == payload


def test_snappy_reads_raw_blocks_and_rejects_bad_framing() -> None:
    payload = b"hello snappy " * 100
    assert decompress(CompressionType.SNAPPY, snappy.compress(payload)) == payload
    framed = compress(CompressionType.SNAPPY, payload)
    with pytest.raises(CorruptRecordError, match="xerial snappy block"):
        decompress(CompressionType.SNAPPY, framed[:-3])
    with pytest.raises(CorruptRecordError, match="truncated xerial snappy block length"):
        decompress(CompressionType.SNAPPY, framed + b"\x00\x00")
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\xff\xff")


def test_lz4_writes_kafka_frame_readable_by_lz4_frame() -> None:
    payload = bytes(range(256)) * 1000 + bytes(200_000)
    frame = compress(CompressionType.LZ4, payload)
    assert frame[:7] == bytes.fromhex("04224d18604082")  # KafkaLZ4BlockOutputStream's header
    assert frame[-4:] == bytes(4)
    assert lz4.frame.decompress(frame) == payload
    incompressible = random.Random(0).randbytes(70_000)
    frame = compress(CompressionType.LZ4, incompressible)
    assert lz4.frame.decompress(frame) == incompressible
    (first_block,) = struct.unpack_from("<I", frame, 7)
    assert first_block == 0x80000000 | 65536  # stored uncompressed, flagged


def test_codecs_read_other_implementations() -> None:
    payload = b"interop " * 5000
    assert decompress(CompressionType.GZIP, gzip.compress(payload)) == payload
    assert (
        decompress(CompressionType.GZIP, gzip.compress(payload[:9]) + gzip.compress(payload[9:]))
        == payload
    )
    assert decompress(CompressionType.LZ4, lz4.frame.compress(payload)) == payload
    assert decompress(CompressionType.ZSTD, zstandard.ZstdCompressor().compress(payload)) == payload
    assert gzip.decompress(compress(CompressionType.GZIP, payload)) == payload
    assert (
        zstandard.ZstdDecompressor().decompress(compress(CompressionType.ZSTD, payload)) == payload
    )


def test_compression_type_names() -> None:
    assert [c.display_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert CompressionType.from_name("LZ4") is CompressionType.LZ4
    with pytest.raises(UnsupportedCompressionError, match="brotli"):
        CompressionType.from_name("brotli")


# ------------------------------------------------------------------------------ iter_batches
def test_iter_batches_yields_positions_then_stops_at_damage() -> None:
    first = build_batch([SimpleRecord(value=b"a")], base_offset=0)
    second = build_batch([SimpleRecord(value=b"b"), SimpleRecord(value=b"c")], base_offset=1)
    buffer = first + second
    assert [(p, b.base_offset) for p, b in iter_batches(buffer)] == [(0, 0), (len(first), 1)]
    assert [p for p, _ in iter_batches(buffer, position=len(first))] == [len(first)]
    seen = []
    with pytest.raises(CorruptRecordError, match="truncated batch") as info:
        for position, _batch in iter_batches(buffer + second[:30], file="seg.log"):
            seen.append(position)
    assert seen == [0, len(first)]
    assert info.value.position == len(buffer)
    assert info.value.file == "seg.log"
    assert list(iter_batches(b"")) == []


# ------------------------------------------------------------------------------ patching
def test_patch_offset_and_epoch_keeps_the_crc_valid() -> None:
    first = build_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")])
    second = build_batch([SimpleRecord(value=b"c")], compression=CompressionType.GZIP)
    buffer = bytearray(first + second)
    patch_offset_and_epoch(buffer, 0, base_offset=100, partition_leader_epoch=4)
    patch_offset_and_epoch(buffer, len(first), base_offset=102, partition_leader_epoch=4)
    batches = [b for _, b in iter_batches(buffer)]
    for batch in batches:
        batch.ensure_valid()
        assert batch.partition_leader_epoch == 4
    assert [r.offset for b in batches for r in b.records()] == [100, 101, 102]
    with pytest.raises(ValueError, match="no batch header"):
        patch_offset_and_epoch(buffer, len(buffer) - 4, base_offset=0, partition_leader_epoch=0)


def test_patch_log_append_time_rechecksums() -> None:
    buffer = bytearray(
        build_batch([SimpleRecord(value=b"a", timestamp=5)], compression=CompressionType.LZ4)
    )
    patch_log_append_time(buffer, 0, 9_000)
    batch = RecordBatch.from_buffer(buffer)
    batch.ensure_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.compression is CompressionType.LZ4
    assert batch.max_timestamp == 9_000
    assert [r.timestamp for r in batch.records()] == [9_000]
    before = bytes(buffer)
    patch_log_append_time(buffer, 0, 9_000)
    assert bytes(buffer) == before


def test_patch_log_append_time_refuses_a_corrupt_batch() -> None:
    buffer = bytearray(build_batch([SimpleRecord(value=b"abc", timestamp=5)]))
    buffer[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="stored crc"):
        patch_log_append_time(buffer, 0, 9_000)


def test_batch_too_large_for_int32_length_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_records_builder, "MIN_BATCH_LENGTH", 2**31 - 10)
    with pytest.raises(RecordBatchTooLargeError, match="Split the records"):
        build_batch([SimpleRecord(value=b"0123456789")])


# ------------------------------------------------------------------------------ varints
@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (-65, "8101"),
        (INT32_MAX, "feffffff0f"),
        (INT32_MIN, "ffffffff0f"),
    ],
)
def test_varint_vectors(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert encode_varint(value) == raw
    assert size_of_varint(value) == len(raw)
    assert decode_varint(raw + b"\xaa", 0) == (value, len(raw))
    assert decode_varint(b"\xaa" + raw, 1) == (value, len(raw) + 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (INT32_MAX + 1, "8080808010"),
        (INT64_MAX, "feffffffffffffffff01"),
        (INT64_MIN, "ffffffffffffffffff01"),
    ],
)
def test_varlong_vectors(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert encode_varlong(value) == raw
    assert size_of_varlong(value) == len(raw)
    assert decode_varlong(memoryview(raw), 0) == (value, len(raw))


def test_unsigned_varint() -> None:
    assert encode_unsigned_varint(300) == b"\xac\x02"
    assert encode_unsigned_varint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    assert decode_unsigned_varint(bytearray(b"\xac\x02"), 0) == (300, 2)
    assert size_of_unsigned_varint(2**32 - 1) == 5
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1)
    with pytest.raises(ValueError):
        encode_unsigned_varint(2**32)


def test_out_of_range_values_cannot_be_encoded() -> None:
    for encode, value in [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
        (size_of_varint, INT32_MAX + 1),
        (size_of_varlong, INT64_MIN - 1),
    ]:
        with pytest.raises(ValueError):
            encode(value)


def test_overlong_and_truncated_varints_are_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="varint at byte 0 is longer than 5 bytes"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_unsigned_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(CorruptRecordError, match="varlong at byte 2 is longer than 10 bytes"):
        decode_varlong(b"\x00\x00" + b"\x80" * 10 + b"\x00", 2)
    with pytest.raises(CorruptRecordError, match="does not fit 32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(CorruptRecordError, match="does not fit 64 bits"):
        decode_varlong(b"\xff" * 9 + b"\x03", 0)
    with pytest.raises(CorruptRecordError, match="truncated varint at byte 1"):
        decode_varint(b"\x00\x80\x80", 1)
    with pytest.raises(CorruptRecordError, match="truncated varlong at byte 3"):
        decode_varlong(b"\x00", 3)
    # A non-minimal but short enough encoding is accepted, as Kafka does.
    assert decode_varint(b"\x80\x00", 0) == (0, 2)
