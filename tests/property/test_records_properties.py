"""Properties of the batch codec: round trips, bit-flip detection, decoder robustness."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptRecordError, UnsupportedCompressionError
from storage_core.records import (
    CompressionType,
    Header,
    Record,
    RecordBatch,
    SimpleRecord,
    build_batch,
    decompress,
)
from storage_core.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

small_bytes = st.binary(max_size=64)
headers = st.lists(
    st.builds(Header, key=st.text(max_size=8), value=st.none() | small_bytes), max_size=3
).map(tuple)
timestamps = st.just(-1) | st.integers(min_value=0, max_value=2**45)
simple_records = st.builds(
    SimpleRecord,
    value=st.none() | st.binary(max_size=300),
    key=st.none() | small_bytes,
    headers=headers,
    timestamp=timestamps,
)
record_lists = st.lists(simple_records, min_size=1, max_size=12)
codecs = st.sampled_from(list(CompressionType))


def _rechecksum(data: bytearray) -> None:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))


@SETTINGS
@given(
    records=record_lists,
    codec=codecs,
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=-1, max_value=2**31 - 1),
)
def test_any_records_round_trip_with_any_codec(
    records: list[SimpleRecord], codec: CompressionType, base_offset: int, epoch: int
) -> None:
    data = build_batch(
        records, base_offset=base_offset, compression=codec, partition_leader_epoch=epoch
    )
    batch = RecordBatch.from_buffer(data)
    batch.ensure_valid()
    assert batch.size_in_bytes == len(data)
    assert batch.partition_leader_epoch == epoch
    assert batch.compression is codec
    assert batch.records_count == len(records)
    assert batch.last_offset == base_offset + len(records) - 1
    assert batch.base_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert list(batch.records()) == [
        Record(
            offset=base_offset + i,
            timestamp=r.timestamp,
            key=r.key,
            value=r.value,
            headers=r.headers,
        )
        for i, r in enumerate(records)
    ]


@SETTINGS
@given(records=record_lists, codec=codecs, data=st.data())
def test_single_bit_flip(
    records: list[SimpleRecord], codec: CompressionType, data: st.DataObject
) -> None:
    """What a flipped bit does, by where it lands.

    * bytes 17..end (the CRC and everything it covers): ``ensure_valid`` raises; CRC-32C
      detects every single-bit error, and the framing fields are untouched so the batch
      still parses.
    * byte 16 (magic): ``from_buffer`` raises (magic is no longer 2).
    * bytes 8..11 (batch length): ``from_buffer`` raises, or it frames a batch of another
      size than the one built; nothing is claimed about that other batch's CRC.
    * bytes 0..7 (base offset) and 12..15 (leader epoch) are outside the CRC by design: the
      batch stays valid and reports exactly the flipped value, and record offsets follow it.
    """
    original = build_batch(records, base_offset=1_000, compression=codec, partition_leader_epoch=5)
    bit = data.draw(st.integers(min_value=0, max_value=len(original) * 8 - 1))
    index, mask = divmod(bit, 8)
    flipped = bytearray(original)
    flipped[index] ^= 1 << mask

    if index >= 17:
        batch = RecordBatch.from_buffer(flipped)
        assert not batch.is_valid()
        try:
            batch.ensure_valid()
        except CorruptRecordError as exc:
            assert "crc" in exc.reason
        else:
            raise AssertionError(f"flip of bit {mask} in byte {index} went unnoticed")
    elif index == 16:
        try:
            RecordBatch.from_buffer(flipped)
        except CorruptRecordError as exc:
            assert "unsupported magic" in exc.reason
        else:
            raise AssertionError("a changed magic byte was accepted")
    elif 8 <= index <= 11:
        try:
            batch = RecordBatch.from_buffer(flipped)
        except CorruptRecordError:
            pass
        else:
            assert batch.size_in_bytes != len(original)
    else:
        batch = RecordBatch.from_buffer(flipped)
        batch.ensure_valid()
        if index <= 7:
            expected_base = struct.unpack(">q", flipped[:8])[0]
            assert batch.base_offset == expected_base
            assert [r.offset for r in batch.records()] == [
                expected_base + i for i in range(len(records))
            ]
        else:
            assert batch.partition_leader_epoch == struct.unpack(">i", flipped[12:16])[0]
            assert batch.partition_leader_epoch != 5


@SETTINGS
@given(records=record_lists, codec=codecs, data=st.data())
def test_decoder_never_fails_with_anything_but_named_errors(
    records: list[SimpleRecord], codec: CompressionType, data: st.DataObject
) -> None:
    """Damage past the header with a freshly computed CRC: decoding succeeds or raises a named
    error; never an IndexError, UnicodeDecodeError, struct.error or a hang."""
    damaged = bytearray(build_batch(records, compression=codec))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        index = data.draw(st.integers(min_value=21, max_value=len(damaged) - 1))
        damaged[index] = data.draw(st.integers(min_value=0, max_value=255))
    _rechecksum(damaged)
    batch = RecordBatch.from_buffer(damaged)
    try:
        batch.ensure_valid()
    except CorruptRecordError as exc:
        assert "invalid" in exc.reason  # the CRC is fresh: only a count can be wrong
    try:
        decoded = list(batch.records(max_decompressed_bytes=1 << 20))
    except (CorruptRecordError, UnsupportedCompressionError):
        return
    assert len(decoded) == batch.records_count


@SETTINGS
@given(payload=st.binary(max_size=2_000), codec=codecs)
def test_decompress_of_garbage_raises_only_named_errors(
    payload: bytes, codec: CompressionType
) -> None:
    try:
        out = decompress(codec, payload, max_decompressed_bytes=1 << 20)
    except CorruptRecordError:
        return
    assert len(out) <= 1 << 20


@SETTINGS
@given(value=st.integers(min_value=-(2**31), max_value=2**31 - 1), prefix=st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(prefix + encoded, len(prefix)) == (value, len(prefix) + len(encoded))


@SETTINGS
@given(value=st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@SETTINGS
@given(raw=st.binary(min_size=1, max_size=12))
def test_varint_decoding_of_arbitrary_bytes(raw: bytes) -> None:
    try:
        value, end = decode_varint(raw, 0)
    except CorruptRecordError:
        return
    assert -(2**31) <= value <= 2**31 - 1
    assert 1 <= end <= 5
    assert encode_varint(value) == raw[:end] or raw[end - 1] == 0  # minimal, or zero-padded
