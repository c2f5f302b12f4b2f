"""Hands out producer ids for InitProducerId (Kafka's ``ProducerIdManager``).

Ids must be unique in the whole cluster: each broker takes blocks of ``BLOCK_SIZE`` ids from
``/latest_producer_id_block`` in the metadata store (ZooKeeper, or the single-node store) by a
conditional write, before handing out any id of the block, so that no two brokers, and no
restart, ever hand out the same id. A single broker's older ``producer-id-block`` file (the end
of its last block) is honoured: blocks start after it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from storage_core.errors import CorruptCheckpointError
from storage_core.zk.kafka_zk_client import KafkaZkClient

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, broker_id: int, zk: KafkaZkClient, metadata_dir: Path) -> None:
        self._broker_id = broker_id
        self._zk = zk
        self._legacy_path = metadata_dir / PRODUCER_ID_BLOCK_FILE
        self._lock = threading.Lock()
        self._next = 0
        self._block_end = 0  # exclusive: no block yet

    def _legacy_block_end(self) -> int:
        if not self._legacy_path.exists():
            return 0
        text = self._legacy_path.read_text(encoding="ascii").strip()
        try:
            value = int(text)
        except ValueError:
            raise CorruptCheckpointError(
                f"{self._legacy_path} must hold one non-negative integer, found {text[:40]!r}"
            ) from None
        if value < 0:
            raise CorruptCheckpointError(
                f"{self._legacy_path} holds a negative producer id {value}"
            )
        return value

    def ensure_block_available(self) -> None:
        """Take the next block now if this one is used up, so that the next
        ``generate_producer_id`` does not wait for ZooKeeper (call it off the event loop)."""
        with self._lock:
            self._ensure_block_locked()

    def _ensure_block_locked(self) -> None:
        if self._next >= self._block_end:
            block = self._zk.allocate_producer_id_block(
                self._broker_id, BLOCK_SIZE, first_id_at_least=self._legacy_block_end()
            )
            self._next = block.block_start
            self._block_end = block.block_end + 1

    def generate_producer_id(self) -> int:
        with self._lock:
            self._ensure_block_locked()
            producer_id = self._next
            self._next += 1
            return producer_id
