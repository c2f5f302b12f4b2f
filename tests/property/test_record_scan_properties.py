"""Properties of the record scan that guards every produce.

Oracles: the project's own record decoder (``RecordBatch.records``) and kafka-python's
independent one. The scan accepts every batch the builder writes, returns its max timestamp,
and on damaged records (CRC recomputed, so only the insides are wrong) it refuses exactly what
the decoder refuses (or holds records with attributes, which must be 0); whatever it accepts,
kafka-python reads.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.errors import CorruptRecordError as KafkaPythonCorruptRecordError
from kafka.record.default_records import DefaultRecordBatch

from storage_core.errors import CorruptRecordError, InvalidRecordError
from storage_core.records import (
    BATCH_HEADER_SIZE,
    CompressionType,
    Header,
    RecordBatch,
    SimpleRecord,
    build_batch,
    decompress,
)
from storage_core.records.record_scan import scan_records

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

small_bytes = st.binary(max_size=40)
headers = st.lists(
    st.builds(Header, key=st.text(max_size=6), value=st.none() | small_bytes), max_size=3
).map(tuple)
simple_records = st.builds(
    SimpleRecord,
    value=st.none() | st.binary(max_size=9000),  # lengths of 1, 2 and 3 varint bytes
    key=st.none() | small_bytes,
    headers=headers,
    # deltas of every varint size: near one another (1-2 bytes) and far apart
    timestamp=st.just(-1)
    | st.integers(min_value=1_700_000_000_000, max_value=1_700_000_010_000)
    | st.integers(min_value=0, max_value=2**45),
)
record_lists = st.lists(simple_records, min_size=1, max_size=140)  # offset deltas past 63


def _scan(batch: bytes) -> int:
    header = RecordBatch.from_buffer(batch)
    return scan_records(batch, BATCH_HEADER_SIZE, len(batch), header.records_count)


@SETTINGS
@given(records=record_lists)
def test_every_built_batch_passes_with_its_max_timestamp(records: list[SimpleRecord]) -> None:
    batch = build_batch(records)
    parsed = RecordBatch.from_buffer(batch)
    assert parsed.base_timestamp + _scan(batch) == max(r.timestamp for r in records)


def _decoder_accepts(batch: bytes) -> bool:
    try:
        decoded = list(RecordBatch.from_buffer(batch).records())
    except CorruptRecordError:
        return False
    base = RecordBatch.from_buffer(batch).base_offset
    return [r.offset for r in decoded] == list(range(base, base + len(decoded))) and not any(
        r.attributes for r in decoded
    )


def _kafka_python_reads(batch: bytes) -> bool:
    try:
        list(DefaultRecordBatch(bytearray(batch)))
    except KafkaPythonCorruptRecordError:
        return False
    return True


@SETTINGS
@given(
    records=st.lists(simple_records, min_size=1, max_size=6),
    damage=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
        min_size=1,
        max_size=4,
    ),
)
def test_damaged_records_are_refused_exactly_when_the_decoder_refuses(
    records: list[SimpleRecord], damage: list[tuple[int, int]]
) -> None:
    data = bytearray(build_batch(records))
    body = len(data) - BATCH_HEADER_SIZE
    for where, value in damage:
        data[BATCH_HEADER_SIZE + where % body] = value
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    batch = bytes(data)
    try:
        _scan(batch)
        accepted = True
    except InvalidRecordError as exc:
        accepted = False
        ((index, message),) = exc.record_errors
        assert 0 <= index < len(records)
        assert message.startswith(f"record {index} of {len(records)}")
    assert accepted == _decoder_accepts(batch)
    if accepted:
        assert _kafka_python_reads(batch)


@SETTINGS
@given(records=st.lists(simple_records, min_size=1, max_size=6), cut=st.integers(min_value=1))
def test_a_records_section_cut_short_or_extended_is_refused(
    records: list[SimpleRecord], cut: int
) -> None:
    batch = build_batch(records)
    body = len(batch) - BATCH_HEADER_SIZE
    count = len(records)
    with pytest.raises(InvalidRecordError):
        scan_records(batch, BATCH_HEADER_SIZE, len(batch) - 1 - cut % body, count)
    with pytest.raises(InvalidRecordError):
        scan_records(batch + b"\x00", BATCH_HEADER_SIZE, len(batch) + 1, count)
    with pytest.raises(InvalidRecordError):
        scan_records(batch, BATCH_HEADER_SIZE, len(batch), count + 1)
    if count > 1:
        with pytest.raises(InvalidRecordError):
            scan_records(batch, BATCH_HEADER_SIZE, len(batch), count - 1)


@SETTINGS
@given(records=record_lists, codec=st.sampled_from(list(CompressionType)))
def test_compressed_records_scan_like_plain_ones(
    records: list[SimpleRecord], codec: CompressionType
) -> None:
    plain = build_batch(records)
    compressed = RecordBatch.from_buffer(build_batch(records, compression=codec))
    data = bytes(
        compressed.buffer[BATCH_HEADER_SIZE:]
        if codec == CompressionType.NONE
        else _decompressed(compressed)
    )
    assert scan_records(data, 0, len(data), len(records)) == _scan(plain)


def _decompressed(batch: RecordBatch) -> bytes:
    return decompress(batch.compression, batch.buffer[BATCH_HEADER_SIZE:])
