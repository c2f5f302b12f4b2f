"""The hand-written ProduceResponse encoder against kio's encoder, byte for byte, v3-v12.

kio (generated from Kafka's JSON schemas) is the oracle: every case is encoded by both and the
frames must be equal.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from storage_core.protocol.messages import build, response_module
from storage_core.server.handlers.common import to_kio_timestamp
from storage_core.server.produce_response import (
    ProducePartitionResponse,
    ProduceTopicResponse,
    encode_produce_response,
)
from storage_core.server.protocol import encode_response

VERSIONS = range(3, 13)


def _kio_frame(
    version: int, correlation_id: int, topics: list[ProduceTopicResponse], throttle_ms: int
) -> bytes:
    module = response_module(0, version)
    responses = []
    for topic in topics:
        partitions = []
        for p in topic.partitions:
            values: dict[str, Any] = {
                "index": p.index,
                "error_code": ErrorCode(p.error_code),
                "base_offset": p.base_offset,
                "log_append_time": to_kio_timestamp(p.log_append_time_ms),
                "log_start_offset": p.log_start_offset,
                "record_errors": tuple(
                    module.BatchIndexAndErrorMessage(
                        batch_index=index, batch_index_error_message=message
                    )
                    for index, message in p.record_errors
                )
                if hasattr(module, "BatchIndexAndErrorMessage")
                else (),
                "error_message": p.error_message,
            }
            if p.current_leader is not None and hasattr(module, "LeaderIdAndEpoch"):
                values["current_leader"] = module.LeaderIdAndEpoch(
                    leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                )
            partitions.append(build(module.PartitionProduceResponse, **values))
        responses.append(
            build(
                module.TopicProduceResponse, name=topic.name, partition_responses=tuple(partitions)
            )
        )
    body = build(
        module.ProduceResponse,
        responses=tuple(responses),
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
    )
    return encode_response(0, version, correlation_id, body)


CASES: dict[str, list[ProduceTopicResponse]] = {
    "no topics": [],
    "one partition appended": [
        ProduceTopicResponse(
            name="orders",
            partitions=(
                ProducePartitionResponse(
                    index=0, error_code=0, base_offset=1234, log_start_offset=7
                ),
            ),
        )
    ],
    "log append time": [
        ProduceTopicResponse(
            name="stamped",
            partitions=(
                ProducePartitionResponse(
                    index=2,
                    error_code=0,
                    base_offset=2**40,
                    log_append_time_ms=1_700_000_000_123,
                    log_start_offset=2**39,
                ),
            ),
        )
    ],
    "errors with messages, record errors, several topics": [
        ProduceTopicResponse(
            name="t\u00e9" * 70,  # 140 characters, 210 bytes: a two-byte compact length
            partitions=(
                ProducePartitionResponse(
                    index=3,
                    error_code=int(ErrorCode.corrupt_message),
                    error_message="batch 0 has a bad CRC \u2013 resend it",
                    record_errors=((0, "bad CRC"), (5, None), (2**31 - 1, "")),
                ),
                ProducePartitionResponse(
                    index=1,
                    error_code=int(ErrorCode.unknown_topic_or_partition),
                    error_message="x" * 300,
                ),
                ProducePartitionResponse(index=0, error_code=0, base_offset=0, error_message=""),
            ),
        ),
        ProduceTopicResponse(name="empty", partitions=()),
        ProduceTopicResponse(
            name="b",
            partitions=tuple(
                ProducePartitionResponse(index=i, error_code=0, base_offset=i * 10)
                for i in range(130)  # a two-byte compact array count
            ),
        ),
    ],
    "current leader (v10+ tagged field)": [
        ProduceTopicResponse(
            name="moved",
            partitions=(
                ProducePartitionResponse(
                    index=0,
                    error_code=int(ErrorCode.not_leader_or_follower),
                    error_message="not the leader",
                    current_leader=(4, 17),
                ),
                ProducePartitionResponse(
                    index=1, error_code=0, base_offset=5, current_leader=(-1, -1)
                ),
            ),
        )
    ],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("throttle_ms", [0, 1500])
def test_frames_equal_kio(version: int, case: str, throttle_ms: int) -> None:
    topics = CASES[case]
    ours = encode_produce_response(
        version=version, correlation_id=-559038737, topics=topics, throttle_time_ms=throttle_ms
    )
    assert ours == _kio_frame(version, -559038737, topics, throttle_ms)
    assert int.from_bytes(ours[:4], "big") == len(ours) - 4


def test_versions_outside_3_to_12_are_refused() -> None:
    with pytest.raises(ValueError, match="v2"):
        encode_produce_response(version=2, correlation_id=0, topics=[])
    with pytest.raises(ValueError, match="v13"):
        encode_produce_response(version=13, correlation_id=0, topics=[])
