"""The last stable offset and the open transactions of partitions, where operators look
(``storage-core topics describe``, the cluster status job).

Per partition, read from its leader: the high watermark (ListOffsets latest), the LSO
(ListOffsets latest at isolation level 1) and the producers with an open transaction
(DescribeProducers, ``current_txn_start_offset`` >= 0). The LSO is below the HW while a
transaction is open or its marker is not yet replicated; a transaction that stays open (its
producer gone, its coordinator never ending it) holds every read_committed consumer and every
copy to the remote tier at its first offset: the "hanging transaction" of KIP-664.

``topics describe`` prints, after a partition's line, only what differs from the quiet case
(tab-separated, as ``kafka-topics.sh``; shown here with spaces)::

    Topic: t  Partition: 0  Leader: 1  Replicas: 1  Isr: 1
      HighWatermark: 7  LastStableOffset: 3  OpenTransactions: 1
      OpenTransaction: ProducerId: 4000  ProducerEpoch: 0  StartOffset: 3
        LastTimestamp: 2026-11-29T13:20:05Z  Age: 2m 5s      (one line)

The age is now minus the producer's last timestamp (its last batch's max timestamp, by the
producer's clock), as ``kafka-transactions.sh find-hanging`` measures it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.client.admin import KafkaAdminClient
from storage_core.client.admin_producers import PartitionProducers, ProducerState
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import ClientError
from storage_core.common import TopicPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionTransactions:
    """A partition's HW and LSO (both exclusive) and its open transactions, oldest first
    (None: unknown, the producers could not be described; DescribeProducers needs Read on
    the topic, ListOffsets only Describe)."""

    partition: TopicPartition
    high_watermark: int
    last_stable_offset: int
    open_transactions: tuple[ProducerState, ...] | None

    def __post_init__(self) -> None:
        if self.last_stable_offset > self.high_watermark:
            raise ValueError(
                f"{self.partition}: LSO {self.last_stable_offset} above the HW"
                f" {self.high_watermark}"
            )

    @property
    def is_quiet(self) -> bool:
        """Nothing to show: the LSO is the HW (an open transaction would hold it below)."""
        return self.last_stable_offset == self.high_watermark and not self.open_transactions


def partition_transactions(
    admin: KafkaAdminClient, topic: str, partitions: Sequence[int]
) -> tuple[list[PartitionTransactions], list[str]]:
    """The transactions of ``topic``'s ``partitions`` and one warning for each partition
    whose producers (DescribeProducers: an error, a broker without it) or offsets could not be
    read; a partition without offsets is left out, one without producers has them unknown."""
    consumer = KafkaConsumer(admin.cluster)
    warnings: list[str] = []
    described = {p.partition.partition: p for p in admin.describe_producers(topic, partitions)}
    results: list[PartitionTransactions] = []
    for index in partitions:
        tp = TopicPartition(topic, index)
        answer = described.get(index)
        if answer is not None and answer.error != ErrorCode.none:
            warnings.append(f"{tp}: open transactions not shown: {_error_text(answer)}")
            answer = None
        try:
            high_watermark = consumer.latest_offset(topic, index)
            last_stable = consumer.last_stable_offset(topic, index)
        except ClientError as exc:
            warnings.append(f"{tp}: last stable offset not shown: {exc}")
            continue
        results.append(
            PartitionTransactions(
                partition=tp,
                high_watermark=high_watermark,
                # read one after the other: a transaction decided in between moves the LSO
                # up to a HW read before it
                last_stable_offset=min(last_stable, high_watermark),
                open_transactions=None if answer is None else answer.open_transactions,
            )
        )
    return results, warnings


def _error_text(answer: PartitionProducers) -> str:
    text = answer.error.name.upper()
    if answer.error_message:
        text += f" ({answer.error_message})"
    if answer.error == ErrorCode.topic_authorization_failed:
        text += f"; DescribeProducers needs Read on topic {answer.partition.topic}"
    return text


def format_transactions(t: PartitionTransactions, now_ms: int) -> list[str]:
    """The lines ``topics describe`` prints under a partition (none when quiet)."""
    if t.is_quiet:
        return []
    count = "unknown" if t.open_transactions is None else len(t.open_transactions)
    lines = [
        f"\t\tHighWatermark: {t.high_watermark}\tLastStableOffset: {t.last_stable_offset}"
        f"\tOpenTransactions: {count}"
    ]
    lines += [
        f"\t\tOpenTransaction: ProducerId: {p.producer_id}\tProducerEpoch: {p.producer_epoch}"
        f"\tStartOffset: {p.current_txn_start_offset}"
        f"\tLastTimestamp: {timestamp_text(p.last_timestamp_ms)}"
        f"\tAge: {age_text(p.last_timestamp_ms, now_ms)}"
        for p in t.open_transactions or ()
    ]
    return lines


def status_fields(t: PartitionTransactions, now_ms: int) -> dict[str, Any]:
    """What the cluster status job records of a partition's transactions (JSON values):
    the LSO, the count of open transactions (None: unknown), the oldest one's start offset
    and age (ms, at ``now_ms``; None without one) and each open transaction."""
    oldest = t.open_transactions[0] if t.open_transactions else None
    return {
        "last_stable_offset": t.last_stable_offset,
        "open_transactions": None if t.open_transactions is None else len(t.open_transactions),
        "oldest_open_transaction_start_offset": (
            None if oldest is None else oldest.current_txn_start_offset
        ),
        "oldest_open_transaction_age_ms": (
            None if oldest is None else age_ms(oldest.last_timestamp_ms, now_ms)
        ),
        "open_transaction_producers": [
            {
                "producer_id": p.producer_id,
                "producer_epoch": p.producer_epoch,
                "start_offset": p.current_txn_start_offset,
                "last_timestamp_ms": p.last_timestamp_ms,
                "age_ms": age_ms(p.last_timestamp_ms, now_ms),
            }
            for p in t.open_transactions or ()
        ],
    }


def age_ms(last_timestamp_ms: int, now_ms: int) -> int | None:
    """How long ago the producer last wrote (None: no timestamp; never negative, as a
    producer's clock may run ahead of this one)."""
    if last_timestamp_ms < 0:
        return None
    return max(0, now_ms - last_timestamp_ms)


def age_text(last_timestamp_ms: int, now_ms: int) -> str:
    age = age_ms(last_timestamp_ms, now_ms)
    return "unknown" if age is None else duration_text(age)


def duration_text(ms: int) -> str:
    """``45s``, ``2m 5s``, ``3h 10m``, ``2d 4h``."""
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def timestamp_text(timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "unknown"
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
