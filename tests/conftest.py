"""Shared test helpers: building batches and opening logs on a temp dir."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import CompressionType, SimpleRecord, build_batch

BASE_TIMESTAMP_MS = 1_700_000_000_000

# Test files that run for minutes, slowest first. They are collected first, so that the
# workers of ``pytest -n 2 --dist loadfile`` (which take files in collection order) start them
# early and finish together, instead of one worker running the last of them alone.
LONG_RUNNING_FILES = (
    "test_remote_log_metadata_growth.py",
    "test_demo.py",
    "test_exactly_once_nemesis.py",
    "test_replication_jepsen.py",
    "test_compose_topology.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONG_RUNNING_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files keep order


def make_batch(
    count: int = 1,
    *,
    value_size: int = 16,
    timestamp: int = BASE_TIMESTAMP_MS,
    compression: CompressionType = CompressionType.NONE,
    tag: str = "v",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """A batch of ``count`` records with distinct, recognisable values.

    ``producer_id``/``producer_epoch``/``base_sequence`` make it an idempotent producer's batch.
    """
    records = [
        SimpleRecord(
            key=f"k{i}".encode(),
            value=(f"{tag}{i}-".encode() * value_size)[:value_size],
            timestamp=timestamp + i,
        )
        for i in range(count)
    ]
    return build_batch(
        records,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(BASE_TIMESTAMP_MS)


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., Log]]:
    """Opens ``<tmp>/topic-0`` with the given config; closes every log at the end."""
    opened: list[Log] = []

    def _open(config: LogConfig | None = None, **kwargs: object) -> Log:
        log = Log(tmp_path / "topic-0", config or LogConfig(), clock=clock, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
