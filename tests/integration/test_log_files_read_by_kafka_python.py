"""Segment files written by the Log (offsets and epochs patched in place) read by kafka-python.

kafka-python's ``kafka.record`` is an independent implementation of the batch format: every
batch the engine stored, for every codec and both timestamp types, must parse there with a
valid CRC and carry the offsets, epochs and records the engine reports.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import CompressionType, Header, SimpleRecord, build_batch

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords


def kafka_python_batches(path: Path) -> list[object]:
    records = MemoryRecords(path.read_bytes())
    out = []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        out.append(batch)


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_every_stored_batch_parses_in_kafka_python(tmp_path: Path, timestamp_type: str) -> None:
    clock = ManualClock(1_750_000_000_000)
    config = LogConfig(segment_bytes=1500, message_timestamp_type=timestamp_type)
    log = Log(tmp_path / "interop-0", config, clock=clock)
    expected = []
    for n, codec in enumerate(list(CompressionType) * 3):
        records = [
            SimpleRecord(
                key=f"key-{n}-{i}".encode(),
                value=f"value-{n}-{i}".encode() * 10,
                headers=(Header(key="h", value=bytes([n, i])),),
                timestamp=1_700_000_000_000 + n * 10 + i,
            )
            for i in range(1 + n % 4)
        ]
        info = log.append_as_leader(build_batch(records, compression=codec), leader_epoch=n // 5)
        for i, record in enumerate(records):
            expected.append((info.first_offset + i, n // 5, record))
    log.close()
    assert len(list((tmp_path / "interop-0").glob("*.log"))) > 1

    seen = []
    for path in sorted((tmp_path / "interop-0").glob("*.log")):
        for batch in kafka_python_batches(path):
            assert batch.validate_crc()
            for record in batch:
                seen.append((record.offset, batch.leader_epoch, record, batch))
    assert len(seen) == len(expected)
    for (offset, epoch, record, batch), (want_offset, want_epoch, want) in zip(
        seen, expected, strict=True
    ):
        assert (offset, epoch) == (want_offset, want_epoch)
        assert record.key == want.key and record.value == want.value
        assert [(k, v) for k, v in record.headers] == [("h", want.headers[0].value)]
        if timestamp_type == "LogAppendTime":
            assert batch.timestamp_type == 1 and record.timestamp == clock.milliseconds()
        else:
            assert record.timestamp == want.timestamp
