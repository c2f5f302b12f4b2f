"""Several partitions read from the remote tier at once, against one partition alone.

``--partitions`` topics of one partition each (the same records: 1 KiB random records in
64 KiB batches, 4 MiB segments, ``--mib-per-partition`` each) are copied in the chunked
format and fully offloaded, as in ``remote_read.py``, on one broker whose chunk cache holds
them all. Then, each the best of ``--rounds``:

  one         one client process consumes one partition (lean raw-socket Fetch requests of
              1 MiB, one at a time, from offset 0 to the end)
  all         one client process per partition, all started together; MiB/s is every
              partition's bytes over the time until the last one finished
  scaling     all / one (the aim: >= 3 with 8 partitions)

and, for each, the cores kept busy by the broker and by the clients (CPU seconds over the
wall seconds of its rounds: the broker's from /proc/<pid>/stat, the clients' from this
process and its finished children): what one partition already keeps busy bounds how far
several can scale on this machine's cores.

    python benchmarks/remote_read_parallel.py [--partitions 8] [--mib-per-partition 8]
        [--rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import lean_client
from benchmarks.remote_read import (
    CHUNKED,
    SEGMENT_BYTES,
    lean_consume,
    mib_s,
    offload,
    records_per_batch,
    remote_tier,
)
from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

FETCH_BYTES = 1 << 20
CHUNK_CACHE_BYTES = 1 << 30


def topic_of(index: int) -> str:
    return f"wide-{index}"


def produce(port: int, topics: list[str], mib: int) -> int:
    per_batch = records_per_batch()
    batch = build_batch(
        [SimpleRecord(value=b"x" * 1024, timestamp=int(time.time() * 1000))] * per_batch
    )
    batches = max(1, mib * 1024 * 1024 // len(batch))
    for topic in topics:
        lean_client.produce(
            port, lean_client.produce_frame(topic, batch, acks=1), batches, in_flight=5
        )
    return batches * per_batch


def consume_one(args: tuple[int, str, int]) -> float:
    port, topic, total_records = args
    return lean_consume(port, topic, total_records, FETCH_BYTES)


def consume_all(port: int, topics: list[str], total_records: int) -> float:
    """Wall time until every partition was read, one client process each."""
    context = multiprocessing.get_context("fork")
    with context.Pool(len(topics)) as pool:
        start = time.perf_counter()
        pool.map(consume_one, [(port, topic, total_records) for topic in topics])
        return time.perf_counter() - start


def _process_cpu_s(pid: int) -> float:
    """utime + stime of one process (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _clients_cpu_s() -> float:
    """CPU seconds of this process (the one-partition client) and of its children that have
    ended (the pool's clients; the broker runs until the end)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class CoresBusy:
    """Cores kept busy during a block: by the broker and by the clients."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.broker = self.clients = 0.0

    def __enter__(self) -> CoresBusy:
        self._start = (time.perf_counter(), _process_cpu_s(self.broker_pid), _clients_cpu_s())
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._start[0]
        self.broker = round((_process_cpu_s(self.broker_pid) - self._start[1]) / wall, 2)
        self.clients = round((_clients_cpu_s() - self._start[2]) / wall, 2)


def run(work_dir: Path, partitions: int, mib: int, rounds: int) -> dict[str, object]:
    topics = [topic_of(i) for i in range(partitions)]
    with remote_tier(work_dir, False) as (overrides, copiers):
        broker_overrides = {
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "rsm.config.fetch.chunk.cache.size": str(CHUNK_CACHE_BYTES),
            **overrides,
        }
        with BrokerProcess(work_dir / "broker", overrides=broker_overrides) as broker:
            for topic in topics:
                raw_wire.create_topic(
                    broker.port,
                    topic,
                    configs={
                        "segment.bytes": str(SEGMENT_BYTES),
                        "remote.storage.enable": "true",
                        "local.retention.ms": "1",
                    },
                )
            total_records = produce(broker.port, topics, mib)
            log_bytes = sum(
                p.stat().st_size for p in (broker.log_dir / f"{topics[0]}-0").glob("*.log")
            )
            for topic in topics:
                offload(broker, topic, copiers[CHUNKED], total_records)
            consume_all(broker.port, topics, total_records)  # warms the chunk cache
            assert broker.process is not None
            with CoresBusy(broker.process.pid) as one_busy:
                one = min(
                    lean_consume(broker.port, topics[0], total_records, FETCH_BYTES)
                    for _ in range(rounds)
                )
            with CoresBusy(broker.process.pid) as all_busy:
                together = min(
                    consume_all(broker.port, topics, total_records) for _ in range(rounds)
                )
    one_mib_s = mib_s(log_bytes, one)
    all_mib_s = mib_s(log_bytes * partitions, together)
    return {
        "partitions": partitions,
        "mib_per_partition": round(log_bytes / (1 << 20), 1),
        "one_mib_s": one_mib_s,
        "all_mib_s": all_mib_s,
        "scaling": round(all_mib_s / one_mib_s, 2),
        "cores": os.cpu_count(),
        "one_cores_busy": {"broker": one_busy.broker, "clients": one_busy.clients},
        "all_cores_busy": {"broker": all_busy.broker, "clients": all_busy.clients},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--mib-per-partition", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        result = run(args.dir.resolve(), args.partitions, args.mib_per_partition, args.rounds)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(
        f"remote tier: LocalTieredStorage, chunked format, warm chunk cache; {result['partitions']}"
        f" partitions of {result['mib_per_partition']} MiB"
    )
    one_busy, all_busy = result["one_cores_busy"], result["all_cores_busy"]
    print(f"                            MiB/s  cores busy: broker, clients (of {result['cores']})")
    print(
        f"one partition         {result['one_mib_s']:>9}  {one_busy['broker']:>14}"  # type: ignore[index]
        f"  {one_busy['clients']:>8}"  # type: ignore[index]
    )
    print(
        f"all at once           {result['all_mib_s']:>9}  {all_busy['broker']:>14}"  # type: ignore[index]
        f"  {all_busy['clients']:>8}"  # type: ignore[index]
    )
    print(f"scaling (all / one)   {result['scaling']:>9}")
    print(json.dumps({"benchmark": "remote_read_parallel", "command": command, "result": result}))


if __name__ == "__main__":
    main()
