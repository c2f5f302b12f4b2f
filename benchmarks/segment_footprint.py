"""What partitions and closed local segments cost a broker: descriptors and resident memory.

A real broker process (``storage-core broker``) on loopback, measured from outside through
``/proc/<pid>/fd`` (descriptors, what counts against ``ulimit -n``) and ``/proc/<pid>/status``
(VmRSS), at four points:

  start       the broker alone (its own topics: ``__consumer_offsets``)
  partitions  after creating ``--partitions`` partitions (one empty active segment each)
  segments    after producing ``--segments`` messages per partition with segment.bytes=1024,
              each message filling a segment: partitions * segments closed local segments
              (what a copy backlog leaves while the object store is down)
  restarted   the same broker restarted on those log dirs (every segment loaded, none read)

Per partition: (partitions - start) / P. Per closed segment: (segments - partitions) / (P * S),
and again after the restart. The summary turns them into how many partitions and closed
segments a broker holds per GiB of memory and per 10,000 descriptors (the start and
``--open-files-max`` idle files set aside); closed segments whose descriptors stay within that
cap print as unbounded (null).

    python benchmarks/segment_footprint.py [--partitions 200] [--segments 20]
        [--open-files-max 1000] [--dir bench-data/footprint]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.scale_support import open_descriptors, wait_for
from tests.broker_process import BrokerProcess

TOPIC = "footprint"
VALUE_BYTES = 900  # with the batch overhead, one message fills a 1024-byte segment
GIB = 1 << 30
SETTLE_S = 2.0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def sample(broker: BrokerProcess) -> dict[str, int]:
    time.sleep(SETTLE_S)  # let background work (checkpoints, group loads) settle
    assert broker.process is not None
    pid = broker.process.pid
    return {"descriptors": open_descriptors(pid), "rss_bytes": rss_bytes(pid)}


def local_segments(log_dir: Path) -> int:
    return sum(1 for _ in log_dir.glob(f"{TOPIC}-*/*.log"))


def fill(broker: BrokerProcess, partitions: int, segments: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 5,
            "batch.size": 1000,  # one 900-byte message per batch: one segment per message
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * VALUE_BYTES
    for _round in range(segments):
        for partition in range(partitions):
            producer.produce(TOPIC, value, partition=partition)
        producer.flush(120)  # one batch per partition per round


def per_unit(after: dict[str, int], before: dict[str, int], units: int) -> dict[str, float]:
    return {key: (after[key] - before[key]) / units for key in after}


def held(per: float, budget: float) -> float | None:
    """How many units fit ``budget`` at ``per`` each; None (unbounded) when they cost nothing."""
    return None if per <= 0 else budget / per


def measure(directory: Path, partitions: int, segments: int, open_files_max: int) -> dict[str, Any]:
    shutil.rmtree(directory, ignore_errors=True)
    overrides = {
        "log.segment.open.files.max": str(open_files_max),
        "auto.create.topics.enable": "false",
    }
    points: dict[str, dict[str, int]] = {}
    with BrokerProcess(directory, overrides=overrides, log_level="WARNING") as broker:
        points["start"] = sample(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1, config={"segment.bytes": "1024"})])[
            TOPIC
        ].result(120)
        wait_for(
            lambda: len(list(broker.log_dir.glob(f"{TOPIC}-*"))) == partitions,
            "every partition's log",
            120,
        )
        points["partitions"] = sample(broker)
        fill(broker, partitions, segments)
        closed = local_segments(broker.log_dir) - partitions
        points["segments"] = sample(broker)
        broker.restart()
        points["restarted"] = sample(broker)
    per_partition = per_unit(points["partitions"], points["start"], partitions)
    per_segment = per_unit(points["segments"], points["partitions"], closed)
    per_segment_loaded = per_unit(points["restarted"], points["start"], 1)
    loaded_extra = {
        key: (per_segment_loaded[key] - per_partition[key] * partitions) / closed
        for key in per_segment_loaded
    }
    return {
        "partitions": partitions,
        "closed_segments": closed,
        "log.segment.open.files.max": open_files_max,
        "points": points,
        "per_partition": per_partition,
        "per_closed_segment": per_segment,
        "per_closed_segment_after_restart": loaded_extra,
        "per_gib": {
            "partitions": held(per_partition["rss_bytes"], GIB),
            "closed_segments": held(per_segment["rss_bytes"], GIB),
            "closed_segments_after_restart": held(loaded_extra["rss_bytes"], GIB),
        },
        # Descriptors of closed segments are capped by log.segment.open.files.max, so 10,000
        # hold the start, that cap and as many partitions as the rest allows; closed segments
        # are unbounded when none of the points went past the cap.
        "per_10000_descriptors": {
            "partitions": held(
                per_partition["descriptors"],
                10_000 - points["start"]["descriptors"] - open_files_max,
            ),
            "closed_segments": None
            if max(points["segments"]["descriptors"], points["restarted"]["descriptors"])
            <= points["partitions"]["descriptors"] + open_files_max
            else held(per_segment["descriptors"], 10_000),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--segments", type=int, default=20, help="closed segments per partition")
    parser.add_argument("--open-files-max", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=Path("bench-data/footprint"))
    args = parser.parse_args(argv)
    result = measure(args.dir.resolve(), args.partitions, args.segments, args.open_files_max)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
