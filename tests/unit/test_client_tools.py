"""Pure parts of the client and the CLI tools: batching, acks, line parsing, output format."""

from __future__ import annotations

import io
import json

import pytest
from kio.schema.errors import ErrorCode

from storage_core.cli import main
from storage_core.client.admin import ConfigEntry, TopicDescription
from storage_core.client.metadata import PartitionMetadata, TopicMetadata
from storage_core.client.producer import (
    estimate_record_bytes,
    parse_acks,
    split_into_batches,
)
from storage_core.common import Uuid
from storage_core.protocol.config_resource import ConfigSource
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import Header, Record, SimpleRecord
from storage_core.tools.consume import format_record
from storage_core.tools.key_values import parse_key_values
from storage_core.tools.produce import ProgressLine, generated_value, line_records
from storage_core.tools.topics import format_description


def test_estimate_is_an_upper_bound_of_the_encoded_size() -> None:
    records = [
        SimpleRecord(key=b"k" * i, value=b"v" * (i * 37), headers=(Header(key="h", value=b"x"),))
        for i in range(200)
    ]
    encoded = len(build_batch(records)) - 61
    assert sum(map(estimate_record_bytes, records)) >= encoded


def test_split_into_batches_respects_the_limit_and_keeps_order() -> None:
    records = [SimpleRecord(value=bytes([i % 256]) * 100) for i in range(1000)]
    batches = list(split_into_batches(records, max_batch_bytes=10_000))
    assert [r for batch in batches for r in batch] == records
    assert all(len(build_batch(b)) <= 10_000 for b in batches)
    assert len(batches) > 1
    huge = [SimpleRecord(value=b"x" * 50_000), SimpleRecord(value=b"y")]
    assert [len(b) for b in split_into_batches(huge, max_batch_bytes=10_000)] == [1, 1]


def test_parse_acks() -> None:
    assert [parse_acks(t) for t in ("all", "-1", "1", "0", "ALL")] == [-1, -1, 1, 0, -1]
    with pytest.raises(ValueError, match="acks"):
        parse_acks("2")


def test_line_records_split_keys_on_the_first_separator() -> None:
    records = list(line_records([b"a:1\n", b"b:2:3\r\n", b":\n"], b":"))
    assert [(r.key, r.value) for r in records] == [(b"a", b"1"), (b"b", b"2:3"), (b"", b"")]
    assert [r.key for r in line_records([b"plain\n"], None)] == [None]
    with pytest.raises(ValueError, match="line 2 has no key separator"):
        list(line_records([b"a:1\n", b"nothing\n"], b":"))


def test_generated_values_have_the_exact_size_and_sequence() -> None:
    assert generated_value(42, 20) == b"0000000042 xxxxxxxxx"
    assert generated_value(7, 4) == b"0000"
    assert generated_value(7, 0) == b""


def test_progress_line_only_when_enabled() -> None:
    quiet = io.StringIO()
    ProgressLine(quiet, total=10, enabled=False).finish(10)
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    bar = ProgressLine(shown, total=10, enabled=True)
    bar.update(5, force=True)
    bar.finish(10)
    assert shown.getvalue().startswith("\r[")
    assert "10/10 records 100%" in shown.getvalue()
    assert shown.getvalue().endswith("\n")


def test_parse_key_values() -> None:
    assert parse_key_values(["a=1", " b = x=y "], option="--config") == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="--set expects KEY=VALUE"):
        parse_key_values(["novalue"], option="--set")
    later_wins = parse_key_values(["a=1", "a=2", "empty="], option="--property")
    assert later_wins == {"a": "2", "empty": ""}


def test_broker_override_that_is_not_key_value_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["broker", "--override", "=5"]) == 2
    assert "--override expects KEY=VALUE, got '=5'" in capsys.readouterr().err


def test_describe_shows_topic_configs_and_partitions() -> None:
    partition = PartitionMetadata(
        partition=0,
        leader_id=1,
        leader_epoch=3,
        replicas=(1, 2),
        isr=(1,),
        offline_replicas=(),
        error=ErrorCode.none,
    )
    topic = TopicMetadata(
        name="orders",
        topic_id=Uuid(1, 2),
        is_internal=False,
        partitions=(partition,),
        error=ErrorCode.none,
    )
    configs = (
        ConfigEntry(
            name="retention.ms",
            value="1000",
            read_only=False,
            source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
            is_sensitive=False,
        ),
        ConfigEntry(
            name="segment.bytes",
            value="1",
            read_only=False,
            source=ConfigSource.DEFAULT_CONFIG,
            is_sensitive=False,
        ),
    )
    text = format_description(TopicDescription(metadata=topic, configs=configs))
    assert text.splitlines() == [
        f"Topic: orders\tTopicId: {Uuid(1, 2)}\tPartitionCount: 1\tReplicationFactor: 2"
        "\tConfigs: retention.ms=1000",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1",
    ]


def test_format_record() -> None:
    record = Record(
        offset=5,
        timestamp=99,
        key=b"k",
        value=b"\xffv",
        headers=(Header(key="h", value=None),),
    )
    assert format_record(record, topic="t", partition=0, print_offsets=True, as_json=False) == (
        "5\t\\xffv"
    )
    row = json.loads(
        format_record(record, topic="t", partition=0, print_offsets=False, as_json=True)
    )
    assert row == {
        "topic": "t",
        "partition": 0,
        "offset": 5,
        "timestamp": 99,
        "key": "k",
        "value": "\\xffv",
        "headers": [["h", None]],
    }
