"""The hand-written FetchResponse encoder against kio's encoder, byte for byte, v4-v16.

kio (generated from Kafka's JSON schemas) is the oracle: every case is encoded by both and the
frames must be equal, with records inline or as a region of a file.
"""

from __future__ import annotations

import datetime
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build, response_module
from storage_core.records import FileRecords
from storage_core.records.file_region import FileRegion
from storage_core.server.fetch_response import (
    FetchPartitionResponse,
    FetchTopicResponse,
    encode_fetch_response,
)
from storage_core.server.protocol import encode_response

VERSIONS = range(4, 17)
TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def _kio_frame(version: int, correlation_id: int, topics: list[FetchTopicResponse]) -> bytes:
    module = response_module(1, version)
    responses = []
    for topic in topics:
        partitions = []
        for p in topic.partitions:
            values: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode(p.error_code),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "log_start_offset": p.log_start_offset,
                "aborted_transactions": None
                if p.aborted_transactions is None
                else tuple(
                    module.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in p.aborted_transactions
                ),
                "preferred_read_replica": p.preferred_read_replica,
                "records": p.records.read() if isinstance(p.records, FileRegion) else p.records,
            }
            if p.diverging_epoch is not None and hasattr(module, "EpochEndOffset"):
                values["diverging_epoch"] = module.EpochEndOffset(
                    epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
                )
            partitions.append(build(module.PartitionData, **values))
        responses.append(
            build(
                module.FetchableTopicResponse,
                topic=topic.topic,
                topic_id=uuid.UUID(bytes=topic.topic_id),
                partitions=tuple(partitions),
            )
        )
    body = build(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(responses),
    )
    return encode_response(1, version, correlation_id, body)


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[FileRecords]:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(os.urandom(300_000))
    with FileRecords.open(path, mutable=False) as file:
        yield file


def _cases(segment: FileRecords) -> dict[str, list[FetchTopicResponse]]:
    records = os.urandom(1000)
    return {
        "no topics": [],
        "one partition, inline records": [
            FetchTopicResponse(
                topic="orders",
                topic_id=TOPIC_ID.bytes,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=0,
                        error_code=0,
                        high_watermark=1234,
                        last_stable_offset=1234,
                        log_start_offset=7,
                        aborted_transactions=(),
                        records=records,
                    ),
                ),
            )
        ],
        "errors, null and empty records, aborted transactions, diverging epoch": [
            FetchTopicResponse(
                topic="t\u00e9",
                topic_id=TOPIC_ID.bytes,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=3, error_code=int(ErrorCode.offset_out_of_range)
                    ),
                    FetchPartitionResponse(partition_index=4, error_code=0, records=None),
                    FetchPartitionResponse(
                        partition_index=1,
                        error_code=0,
                        high_watermark=2**40,
                        last_stable_offset=2**40 - 1,
                        log_start_offset=0,
                        aborted_transactions=((77, 100), (78, 2**50)),
                        preferred_read_replica=2,
                        records=b"",
                    ),
                    FetchPartitionResponse(
                        partition_index=2,
                        error_code=0,
                        high_watermark=50,
                        last_stable_offset=50,
                        log_start_offset=0,
                        diverging_epoch=(4, 41),
                        aborted_transactions=(),
                        records=b"",
                    ),
                ),
            ),
            FetchTopicResponse(topic="empty", topic_id=bytes(16), partitions=()),
        ],
        "records from a file, several partitions and topics": [
            FetchTopicResponse(
                topic="a" * 200,
                topic_id=TOPIC_ID.bytes,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=0,
                        error_code=0,
                        high_watermark=9,
                        last_stable_offset=9,
                        log_start_offset=0,
                        aborted_transactions=(),
                        records=FileRegion.of(segment, 17, 200_000),
                    ),
                    FetchPartitionResponse(
                        partition_index=1,
                        error_code=0,
                        aborted_transactions=(),
                        records=records,
                    ),
                ),
            ),
            FetchTopicResponse(
                topic="b",
                topic_id=uuid.uuid4().bytes,
                partitions=(
                    FetchPartitionResponse(
                        partition_index=5,
                        error_code=0,
                        aborted_transactions=(),
                        records=FileRegion.of(segment, 0, 300_000),
                    ),
                ),
            ),
        ],
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "case",
    [
        "no topics",
        "one partition, inline records",
        "errors, null and empty records, aborted transactions, diverging epoch",
        "records from a file, several partitions and topics",
    ],
)
def test_frames_equal_kio(version: int, case: str, segment: FileRecords) -> None:
    topics = _cases(segment)[case]
    parts = encode_fetch_response(version=version, correlation_id=-559038737, topics=topics)
    try:
        ours = parts.to_bytes()
        assert ours == _kio_frame(version, -559038737, topics)
        assert int.from_bytes(ours[:4], "big") == len(ours) - 4 == parts.size_in_bytes - 4
    finally:
        parts.close()


def test_file_records_stay_in_the_file(segment: FileRecords) -> None:
    region = FileRegion.of(segment, 100, 250_000)
    topic = FetchTopicResponse(
        topic="t",
        partitions=(
            FetchPartitionResponse(
                partition_index=0, error_code=0, aborted_transactions=(), records=region
            ),
        ),
    )
    parts = encode_fetch_response(version=16, correlation_id=1, topics=[topic])
    try:
        assert parts.parts[1] is region
        assert sum(len(p) for p in parts.parts if isinstance(p, bytes)) < 100
    finally:
        parts.close()
    assert region.closed


def test_a_region_outlives_its_segment(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(5000)
    path.write_bytes(data)
    with FileRecords.open(path, mutable=False) as file:
        region = FileRegion.of(file, 1000, 3000)
    path.unlink()  # closed and deleted, as retention does
    try:
        assert region.read() == data[1000:4000]
    finally:
        region.close()


def test_versions_outside_4_to_16_are_refused() -> None:
    with pytest.raises(ValueError, match="v3"):
        encode_fetch_response(version=3, correlation_id=0, topics=[])
    with pytest.raises(ValueError, match="v17"):
        encode_fetch_response(version=17, correlation_id=0, topics=[])
