"""A writer process for the crash test: appends and fsyncs until it is killed.

After each durable append it prints ``ACK <next offset>`` on stdout; every record's value
names its own offset, so the checker can tell exactly what must have survived.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.records import CompressionType, SimpleRecord, build_batch

CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=512)


def record_value(offset: int) -> bytes:
    return f"record-{offset}-".encode() * (1 + offset % 7)


def main() -> None:
    log_dir = Path(sys.argv[1])
    seed = int(sys.argv[2])
    rng = random.Random(seed)
    manager = LogManager([log_dir], CONFIG)
    manager.startup(background_tasks=False)
    log = manager.get_or_create_log(TopicPartition("crash", 0))
    print(f"START {log.log_end_offset}", flush=True)
    while True:
        first = log.log_end_offset
        count = rng.randint(1, 20)
        batch = build_batch(
            [
                SimpleRecord(value=record_value(first + i), timestamp=first + i)
                for i in range(count)
            ],
            compression=rng.choice(list(CompressionType)),
        )
        log.append_as_leader(batch, leader_epoch=seed)
        log.flush()
        print(f"ACK {log.log_end_offset}", flush=True)


if __name__ == "__main__":
    main()
