"""The client calls the stories make besides producing: IncrementalAlterConfigs with the
project's admin client, DeleteRecords with kafka-python's, one partition read to its end
with kafka-python's consumer, and ``storage-core tier`` run in-process (as a broker's
tiering job would run it)."""

from __future__ import annotations

import contextlib
import io
import time
from typing import Any

from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient as PythonAdmin
from kafka.consumer.fetcher import ConsumerRecord

from storage_core import cli
from storage_core.client import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResourceType,
    KafkaAdminClient,
    KafkaCluster,
)

READ_TIMEOUT_S = 20.0


def alter_topic(bootstrap: str, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of ``configs`` (``_`` for ``.``) on ``topic``."""
    ops = [
        AlterConfigOp(name=key.replace("_", "."), op=AlterConfigOpType.SET, value=value)
        for key, value in configs.items()
    ]
    with KafkaCluster(bootstrap) as cluster:
        KafkaAdminClient(cluster).incremental_alter_configs(ConfigResourceType.TOPIC, topic, ops)


def delete_records(
    bootstrap: str, topic: str, partition: int, before_offset: int, **admin_config: Any
) -> None:
    """DeleteRecords below ``before_offset`` (exclusive) with kafka-python's admin client
    (``admin_config`` for it)."""
    admin = PythonAdmin(bootstrap_servers=bootstrap, **admin_config)
    try:
        admin.delete_records({KTopicPartition(topic, partition): before_offset})
    finally:
        admin.close()


def read_to_end(
    bootstrap: str, topic: str, partition: int, *, start: int | None
) -> list[ConsumerRecord]:
    """Every record a kafka-python consumer reads from ``start`` (None: the log start) up to
    the end offset it saw first, or what it read in ``READ_TIMEOUT_S``."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=10_000,
    )
    try:
        tp = KTopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        end = int(consumer.end_offsets([tp])[tp])
        read: list[ConsumerRecord] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read += records
        return read
    finally:
        consumer.close()


def tier_in_process(
    bootstrap: str, broker_config: str, topic: str, *args: str
) -> tuple[int, list[str]]:
    """``storage-core tier --topic T ARGS`` in-process with a broker's config (its log dir,
    broker id and remote store): its exit code and stdout lines."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            [
                "tier",
                "--bootstrap-server",
                bootstrap,
                "--broker-config",
                broker_config,
                "--topic",
                topic,
                *args,
            ]
        )
    return code, out.getvalue().splitlines()
