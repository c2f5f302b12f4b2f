"""``storage-core consume``: print the records of one partition from an offset on.

``--offset`` is ``earliest``, ``latest`` or a number. Without ``--count`` or
``--timeout-ms`` the partition is followed until interrupted. Output: the value per line
(UTF-8, undecodable bytes as ``\\xNN``); ``--print-offsets`` prefixes ``offset<TAB>``;
``--json`` prints one object per record with offset, timestamp, key, value and headers.
Ends with ``Processed a total of N messages`` on stderr, like kafka-console-consumer.
"""

from __future__ import annotations

import json
from typing import TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.consumer import KafkaConsumer
from storage_core.records.record import Record


def resolve_offset(consumer: KafkaConsumer, topic: str, partition: int, spec: str) -> int:
    """``earliest``, ``latest`` or a non-negative offset."""
    text = spec.strip().lower()
    if text == "earliest":
        return consumer.earliest_offset(topic, partition)
    if text == "latest":
        return consumer.latest_offset(topic, partition)
    if text.isdigit():
        return int(text)
    raise ValueError(f"--offset must be earliest, latest or a non-negative number, got {spec!r}")


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def format_record(
    record: Record, *, topic: str, partition: int, print_offsets: bool, as_json: bool
) -> str:
    if as_json:
        return json.dumps(
            {
                "topic": topic,
                "partition": partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _text(record.key),
                "value": _text(record.value),
                "headers": [[h.key, _text(h.value)] for h in record.headers],
            }
        )
    value = _text(record.value)
    line = "null" if value is None else value
    return f"{record.offset}\t{line}" if print_offsets else line


def run_consume(
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    topic: str,
    partition: int,
    offset: str,
    count: int | None,
    timeout_ms: int | None,
    print_offsets: bool,
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    if partition < 0:
        raise ValueError(f"--partition must not be negative, got {partition}")
    if count is not None and count < 0:
        raise ValueError(f"--count must not be negative, got {count}")
    if timeout_ms is not None and timeout_ms < 0:
        raise ValueError(f"--timeout-ms must not be negative, got {timeout_ms}")
    processed = 0
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        consumer = KafkaConsumer(cluster)
        start = resolve_offset(consumer, topic, partition, offset)
        try:
            for record in consumer.consume(
                topic, partition, start, max_records=count, idle_timeout_ms=timeout_ms
            ):
                print(
                    format_record(
                        record,
                        topic=topic,
                        partition=partition,
                        print_offsets=print_offsets,
                        as_json=as_json,
                    ),
                    file=out,
                )
                processed += 1
        except KeyboardInterrupt:
            pass
        finally:
            out.flush()
            print(f"Processed a total of {processed} messages", file=err)
    return 0
