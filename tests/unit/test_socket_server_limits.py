"""MemoryPool: reservations within the bound, first-fit wake-ups, cancelled waits reserve
nothing; KafkaChannel: when a connection counts as idle or past its frame deadline;
SocketServerConfig: the derived bound and the values it refuses."""

from __future__ import annotations

import asyncio

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.server.kafka_channel import ExpiryReason, KafkaChannel
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.memory_pool import MemoryPool, MemoryPoolError
from storage_core.server.socket_server_config import SocketServerConfig

MS = 1_000_000


def pool(size: int = 100, single: int = 100) -> MemoryPool:
    return MemoryPool(size_bytes=size, max_single_allocation_bytes=single)


def test_a_pool_smaller_than_one_request_is_refused() -> None:
    with pytest.raises(MemoryPoolError, match="cannot grant single reservations of 200"):
        pool(100, 200)


async def _reservations_wait_for_room_and_small_ones_pass_large_ones() -> None:
    memory = pool()
    await memory.reserve(70)
    large = asyncio.create_task(memory.reserve(80))
    small = asyncio.create_task(memory.reserve(20))
    await asyncio.sleep(0)
    assert small.done() and not large.done()
    assert memory.available_bytes == 10
    memory.release(70)
    await asyncio.sleep(0)
    assert large.done()
    assert memory.available_bytes == 0


async def _a_cancelled_wait_reserves_nothing() -> None:
    memory = pool()
    await memory.reserve(100)
    waiting = asyncio.create_task(memory.reserve(50))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert memory.waiting == 0
    memory.release(100)
    assert memory.available_bytes == 100


async def _a_wait_cancelled_just_after_its_grant_gives_the_bytes_back() -> None:
    memory = pool()
    await memory.reserve(100)
    waiting = asyncio.create_task(memory.reserve(50))
    await asyncio.sleep(0)
    memory.release(100)  # grants the waiter, which has not resumed yet
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert memory.available_bytes == 100


async def _oversized_reservations_and_over_releases_are_errors() -> None:
    memory = pool(100, 60)
    with pytest.raises(MemoryPoolError, match="cannot reserve 61 bytes"):
        await memory.reserve(61)
    with pytest.raises(MemoryPoolError, match="only 0 are reserved"):
        memory.release(1)


def channel(**fields: int | bool) -> KafkaChannel:
    return KafkaChannel(client="127.0.0.1:1", host="127.0.0.1", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "now_ms", "expected"),
    [
        ({"last_active_ns": 0}, 999, None),
        ({"last_active_ns": 0}, 1001, ExpiryReason.IDLE),
        ({"last_active_ns": 0, "serving": True}, 5000, None),
        ({"last_active_ns": 1000 * MS, "frame_started_ns": 1}, 1002, ExpiryReason.REQUEST_DEADLINE),
        ({"last_active_ns": 1000 * MS, "frame_started_ns": 500 * MS}, 1002, None),
    ],
)
def test_expiry_reason(
    fields: dict[str, int | bool], now_ms: int, expected: ExpiryReason | None
) -> None:
    assert channel(**fields).expiry_reason(now_ns=now_ms * MS, max_idle_ns=1000 * MS) == expected


def test_a_negative_idle_time_disables_expiry() -> None:
    assert channel(last_active_ns=0).expiry_reason(now_ns=10**15, max_idle_ns=-1) is None


def test_reservations_wait_for_room_and_small_ones_pass_large_ones() -> None:
    asyncio.run(_reservations_wait_for_room_and_small_ones_pass_large_ones())


def test_a_cancelled_wait_reserves_nothing() -> None:
    asyncio.run(_a_cancelled_wait_reserves_nothing())


def test_a_wait_cancelled_just_after_its_grant_gives_the_bytes_back() -> None:
    asyncio.run(_a_wait_cancelled_just_after_its_grant_gives_the_bytes_back())


def test_oversized_reservations_and_over_releases_are_errors() -> None:
    asyncio.run(_oversized_reservations_and_over_releases_are_errors())


def socket_config(**props: str) -> SocketServerConfig:
    return SocketServerConfig.from_kafka_config(
        KafkaConfig.from_props({"log.dirs": "/tmp/unused", **props})
    )


def test_queued_max_request_bytes_defaults_to_the_largest_request_plus_headroom() -> None:
    assert socket_config().queued_max_request_bytes == 100 * 1024 * 1024 + 32 * 1024 * 1024
    assert (
        socket_config(**{"socket.request.max.bytes": "65536"}).queued_max_request_bytes
        == 65536 + 32 * 1024 * 1024
    )
    assert socket_config(**{"queued.max.request.bytes": "200000000"}).queued_max_request_bytes == (
        200_000_000
    )


def test_a_bound_below_the_largest_request_and_a_zero_idle_time_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"queued\.max\.request\.bytes=1000 is below"):
        socket_config(**{"queued.max.request.bytes": "1000"})
    with pytest.raises(InvalidConfigError, match=r"connections\.max\.idle\.ms=0"):
        socket_config(**{"connections.max.idle.ms": "0"})
