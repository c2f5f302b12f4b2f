"""Soak of tiering and retention on one broker: RSS, descriptors and ``__remote_log_metadata``
stay flat while history comes and goes.

    python -m tests.metadata_soak --minutes 60 --partitions 300     # make soak
    python -m tests.metadata_soak --cycles 30 --partitions 24 --cycle-s 6 --sample-s 0

A broker process (remote tier in a local directory, the metadata topic's compaction every
``--compaction-interval-ms``) and a producer thread writing to every partition all along,
two segments per partition and cycle (it follows the cycles: a slow machine gets slower
cycles, not a growing backlog). Every cycle (at most every ``--cycle-s``): the segments a
tiering job would copy are copied, those past ``retention.ms`` (three cycle times) expire
(the operations library, as ``copy_segments`` and ``expire_remote`` do on executors), and
every ``--drop-every`` cycles one topic is deleted, its remote data removed
(``delete_partitions``' steps) and the topic created again (a new topic id). Every
``--sample-s`` (0: after each cycle) the broker's RSS and open descriptors (``/proc``), the
metadata topic's bytes on disk (``.log`` files) and records (log start to end), and the live
remote segments are sampled.

Flat means: for each series (RSS, descriptors, and the metadata topic's bytes and records per
live remote segment), the peak of the last third (its 90th percentile) is at
most ``FLAT_RATIO`` (1.2) times the peak of the second third, and the same for the means
(not medians: a series alternating between two levels has a median that jumps between them)
(the first third warms up: the first cycles fill the remote tier and the caches; the
workload is a sawtooth, segments piling up between expiries and topic drops). ``main``
prints the samples and exits 1 when a series is not flat.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.errors import BrokerResponseError
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.errors import StorageError
from storage_core.log.log_config import LogConfig
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.operations.copy import candidate_segments, copy_segment
from storage_core.tiered.operations.expiry import delete_expired_segments, plan_expiry
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.operations.partition_deletion import delete_partition
from storage_core.tiered.topic_based_rlmm import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    TopicBasedRemoteLogMetadataManager,
)
from tests.broker_process import BrokerProcess
from tests.tiered_broker_support import (
    LATEST,
    client_rlmm,
    list_offset,
    wait_until,
)

logger = logging.getLogger(__name__)

FLAT_RATIO = 1.2
METADATA_PARTITIONS = 3
SEGMENT_BYTES = 8 * 1024
RECORD_BYTES = 200
RECORDS_PER_PARTITION_PER_CYCLE = 2 * SEGMENT_BYTES // RECORD_BYTES
"""What the producer may write per partition and cycle: two segments (the producer follows
the cycles, so a slow machine gets slow cycles, not a growing backlog)."""
SERIES = (
    "rss_bytes",
    "open_fds",
    "metadata_bytes_per_live_segment",
    "metadata_records_per_live_segment",
)
"""The metadata topic is judged per live remote segment: it must stay bounded by the live
segments, whose number drifts with the workload (about 1,450 to 2,200 over an hour's run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakConfig:
    duration_s: float
    partitions: int
    cycle_s: float
    sample_s: float | None  # None: a sample after each cycle
    cycles: int | None = None  # stop after that many cycles (``duration_s`` still the most)
    partitions_per_topic: int = 10
    drop_every: int = 2
    compaction_interval_ms: int = 2_000
    compaction_min_lag_ms: int = 1_000

    @property
    def retention_ms(self) -> int:
        return int(3 * self.cycle_s * 1000)

    @property
    def topics(self) -> list[str]:
        count = max(1, -(-self.partitions // self.partitions_per_topic))
        return [f"soak-{i:03d}" for i in range(count)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    elapsed_s: float
    rss_bytes: int
    open_fds: int
    metadata_bytes: int
    metadata_records: int
    live_segments: int

    @property
    def metadata_bytes_per_live_segment(self) -> float:
        return round(self.metadata_bytes / max(self.live_segments, 1), 1)

    @property
    def metadata_records_per_live_segment(self) -> float:
        return round(self.metadata_records / max(self.live_segments, 1), 2)


@dataclass(slots=True)
class SoakResult:
    samples: list[Sample] = field(default_factory=list)
    cycles: int = 0
    copied: int = 0
    expired: int = 0
    dropped_partitions: int = 0
    records_produced: int = 0


def _peak(values: Sequence[float]) -> float:
    """The 90th percentile. A topic drop empties its partitions of live segments before the
    metadata of their segments is compacted away, so the metadata per live segment spikes for
    a sample or two; whether a third's samples catch a spike's top is chance (a CI run's
    thirds caught 973, 954 and 949 against 879 and 765, with means of 488 and 453, and 898 in
    the first third). The sawtooth's tops last several samples: a rising one moves this."""
    return statistics.quantiles(values, n=10)[-1]


def flat_problems(samples: Sequence[Sample], series: Sequence[str] = SERIES) -> list[str]:
    """What is not flat: per series, the last third's peak (``_peak``) against ``FLAT_RATIO``
    times the second third's (the workload is a sawtooth: segments pile up between expiries
    and topic drops; its peaks must not grow), and its mean against the second third's."""
    third = len(samples) // 3
    if third < 2:
        return [f"too few samples to judge ({len(samples)}; at least 6)"]
    problems = []
    for name in series:
        values = [getattr(s, name) for s in samples]
        second, last = values[third : 2 * third], values[2 * third :]
        for what, before, after in (
            ("peak", _peak(second), _peak(last)),
            ("mean", statistics.fmean(second), statistics.fmean(last)),
        ):
            if after > FLAT_RATIO * before:
                problems.append(
                    f"{name} grew: {what} {after} in the last third > {FLAT_RATIO} x {before}"
                    f" ({what} of the second third); samples {values}"
                )
    return problems


def broker_settings(directory: Path, config: SoakConfig) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(directory / "remote-tier"),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.compaction.interval.ms": str(config.compaction_interval_ms),
        "remote.log.metadata.compaction.min.lag.ms": str(config.compaction_min_lag_ms),
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "0",
        # a producer's metadata request must not create a dropped topic again
        "auto.create.topics.enable": "false",
        # the metadata topic's segments roll, so that records below its log start leave disk
        "log.segment.bytes": str(16 * 1024),
    }


def topic_configs(config: SoakConfig) -> dict[str, str]:
    return {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(2 * SEGMENT_BYTES),
        "retention.ms": str(config.retention_ms),
    }


class Workload:
    """The topics, their producer thread, and the cycle's tiering and retention."""

    def __init__(self, broker: BrokerProcess, config: SoakConfig) -> None:
        self.broker = broker
        self.config = config
        self.rsm = LocalTieredStorage(broker.directory / "remote-tier", fsync=False)
        self.partitions: dict[str, list[TopicIdPartition]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer_thread = threading.Thread(target=self._produce, daemon=True)
        self.records_produced = 0
        self.produce_errors = 0
        self._budget = 0  # records the producer may still send (guarded by _lock)
        self.cycle_errors = 0

    def allow(self, records: int) -> None:
        """Let the producer send ``records`` more (spread over about a cycle)."""
        with self._lock:
            self._budget += records

    # ------------------------------------------------------------------ topics
    def create(self, topic: str) -> None:
        per_topic = self.config.partitions_per_topic
        count = per_topic
        if topic == self.config.topics[-1]:
            count = self.config.partitions - per_topic * (len(self.config.topics) - 1)
        deadline = time.monotonic() + 60
        while True:  # a topic just deleted may still be going
            try:
                with KafkaCluster(self.broker.bootstrap) as cluster:
                    created = KafkaAdminClient(cluster).create_topic(
                        topic,
                        num_partitions=count,
                        replication_factor=1,
                        configs=topic_configs(self.config),
                    )
                break
            except BrokerResponseError as exc:
                if exc.error != ErrorCode.topic_already_exists or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert created.topic_id is not None
        tips = [TopicIdPartition(created.topic_id, TopicPartition(topic, p)) for p in range(count)]
        for tip in tips:  # leaders known: produce may start
            wait_until(lambda tip=tip: self._has_leader(tip), f"a leader of {tip}")
        with self._lock:
            self.partitions[topic] = tips

    def _has_leader(self, tip: TopicIdPartition) -> bool:
        try:
            list_offset(
                self.broker.bootstrap,
                tip.topic_partition.topic,
                LATEST,
                partition=tip.topic_partition.partition,
            )
        except Exception:
            return False
        return True

    def drop(self, topic: str, rlmm: TopicBasedRemoteLogMetadataManager) -> int:
        """Delete ``topic``, remove its remote data, create it again; partitions dropped."""
        with self._lock:
            tips = self.partitions.pop(topic)
        with KafkaCluster(self.broker.bootstrap) as cluster:
            KafkaAdminClient(cluster).delete_topics([topic])
        for tip in tips:
            wait_until(
                lambda tip=tip: (
                    _delete_state(rlmm, tip) is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
                ),
                f"{tip} marked for deletion",
                timeout_s=60,
            )
            result = delete_partition(tip, rsm=self.rsm, rlmm=rlmm, broker_id=0)
            assert result.finished, result
        rlmm.on_stop_partitions(set(tips))
        self.create(topic)
        return len(tips)

    def all_partitions(self) -> list[TopicIdPartition]:
        with self._lock:
            return [tip for tips in self.partitions.values() for tip in tips]

    # ------------------------------------------------------------------ producing
    def start_producing(self) -> None:
        self._producer_thread.start()

    def stop_producing(self) -> None:
        self._stop.set()
        self._producer_thread.join()

    def _produce(self) -> None:
        # a cycle's allowance over about a cycle
        per_second = max(
            10,
            int(self.config.partitions * RECORDS_PER_PARTITION_PER_CYCLE / self.config.cycle_s),
        )
        producer = KafkaProducer(
            bootstrap_servers=self.broker.bootstrap, acks=1, linger_ms=20, max_block_ms=2_000
        )
        value = b"x" * RECORD_BYTES
        rotation = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                tips = self.all_partitions()
                with self._lock:
                    count = min(self._budget, per_second // 10)
                    self._budget -= count
                for _ in range(count):
                    rotation += 1
                    tip = tips[rotation % len(tips)] if tips else None
                    if tip is None:
                        break
                    try:
                        producer.send(
                            tip.topic_partition.topic,
                            value=value,
                            partition=tip.topic_partition.partition,
                        ).add_errback(self._failed)
                        self.records_produced += 1
                    except Exception:
                        self.produce_errors += 1
                self._stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
        finally:
            try:
                producer.close(timeout=10)
            except Exception:  # records of a dropped topic never acknowledged
                self.produce_errors += 1

    def _failed(self, _error: Exception) -> None:
        self.produce_errors += 1  # a topic being dropped; its records do not matter

    # ------------------------------------------------------------------ a cycle
    def tier_and_expire(self, rlmm: TopicBasedRemoteLogMetadataManager) -> tuple[int, int]:
        """One cycle over every partition: copy, then expire; (copied, expired)."""
        copied = expired = 0
        now_ms = int(time.time() * 1000)
        config = LogConfig(remote_storage_enable=True, retention_ms=self.config.retention_ms)
        with KafkaCluster(self.broker.bootstrap) as cluster:
            offsets = KafkaConsumer(cluster)
            for tip in self.all_partitions():
                tp = tip.topic_partition
                partition_dir = self.broker.log_dir / tp.dir_name
                try:
                    high_watermark = offsets.latest_offset(tp.topic, tp.partition)
                    copied += copy_partition(partition_dir, high_watermark, self.rsm, rlmm)
                    view = LogView.read(partition_dir, high_watermark=high_watermark)
                    epoch = view.latest_epoch
                    if epoch is None:
                        continue
                    plan = plan_expiry(view, rlmm, config=config, now_ms=now_ms)
                    fence = LeaderEpochFence(
                        planned_leader_epoch=epoch, current_leader_epoch=lambda e=epoch: e
                    )
                    outcome = delete_expired_segments(
                        plan, rsm=self.rsm, rlmm=rlmm, fence=fence, broker_id=0
                    )
                    expired += len(outcome.deleted)
                except FileNotFoundError:
                    continue  # a segment deleted by local retention while read: next cycle
                except StorageError as exc:  # a broker slow to answer: a run retries it
                    self.cycle_errors += 1
                    logger.warning("cycle step failed partition=%s error=%s", tp, exc)
        return copied, expired


def copy_partition(
    partition_dir: Path,
    high_watermark: int,
    rsm: LocalTieredStorage,
    rlmm: TopicBasedRemoteLogMetadataManager,
) -> int:
    """Copy what a tiering job would copy now of a partition; how many segments."""
    view = LogView.read(partition_dir, high_watermark=high_watermark)
    epoch = view.latest_epoch
    if epoch is None:
        return 0
    fence = LeaderEpochFence(planned_leader_epoch=epoch, current_leader_epoch=lambda: epoch)
    config = LogConfig(remote_storage_enable=True)
    copied = 0
    for segment in candidate_segments(view, rlmm, config=config):
        copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
        copied += 1
    return copied


def _delete_state(
    rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition
) -> RemotePartitionDeleteState | None:
    metadata = rlmm.remote_partition_delete_metadata(tip)
    return None if metadata is None else metadata.state


# ---------------------------------------------------------------------- sampling
def process_sample(pid: int) -> tuple[int, int]:
    """(RSS bytes, open descriptors) of process ``pid``."""
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    return rss_kib * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def metadata_bytes(log_dir: Path) -> int:
    """Bytes of the metadata partitions' segment files (``.log``; the indexes are
    preallocated, 10 MiB each, whatever the records)."""
    return sum(f.stat().st_size for f in log_dir.glob(f"{REMOTE_LOG_METADATA_TOPIC_NAME}-*/*.log"))


def metadata_records(bootstrap: str) -> int:
    """Records from the log start to the end, summed over the metadata partitions."""
    with KafkaCluster(bootstrap) as cluster:
        consumer = KafkaConsumer(cluster)
        return sum(
            consumer.latest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, p)
            - consumer.earliest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, p)
            for p in range(METADATA_PARTITIONS)
        )


def take_sample(
    broker: BrokerProcess,
    workload: Workload,
    rlmm: TopicBasedRemoteLogMetadataManager,
    started: float,
) -> Sample:
    assert broker.process is not None
    rss, fds = process_sample(broker.process.pid)
    live = sum(len(list(rlmm.list_remote_log_segments(t))) for t in workload.all_partitions())
    return Sample(
        elapsed_s=round(time.monotonic() - started, 1),
        rss_bytes=rss,
        open_fds=fds,
        metadata_bytes=metadata_bytes(broker.log_dir),
        metadata_records=metadata_records(broker.bootstrap),
        live_segments=live,
    )


@contextmanager
def soak_broker(directory: Path, config: SoakConfig) -> Iterator[BrokerProcess]:
    with BrokerProcess(directory, overrides=broker_settings(directory, config)) as broker:
        yield broker


class Sampler:
    """Samples every ``config.sample_s`` on its own thread, whatever a cycle takes."""

    def __init__(
        self,
        broker: BrokerProcess,
        workload: Workload,
        rlmm: TopicBasedRemoteLogMetadataManager,
        result: SoakResult,
        config: SoakConfig,
        report: Callable[[str], None],
    ) -> None:
        self._args = (broker, workload, rlmm)
        self._result = result
        self._config = config
        self._report = report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()
        self.errors = 0

    def __enter__(self) -> Sampler:
        if self._config.sample_s is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        assert self._config.sample_s is not None
        next_sample = self.started
        while not self._stop.wait(max(0.0, next_sample - time.monotonic())):
            next_sample += self._config.sample_s
            self.sample()

    def sample(self) -> None:
        try:
            sample = take_sample(*self._args, self.started)
        except Exception as exc:  # a topic dropped under the listing: next time
            self.errors += 1
            self._report(f"sample failed error={exc!r}")
            return
        result = self._result
        result.samples.append(sample)
        self._report(
            f"sample t={sample.elapsed_s}s rss_mib={sample.rss_bytes / 2**20:.1f}"
            f" fds={sample.open_fds} metadata_bytes={sample.metadata_bytes}"
            f" metadata_records={sample.metadata_records}"
            f" live_segments={sample.live_segments} cycles={result.cycles}"
            f" copied={result.copied} expired={result.expired}"
            f" dropped={result.dropped_partitions}"
        )


def run_soak(
    broker: BrokerProcess,
    config: SoakConfig,
    *,
    report: Callable[[str], None] = print,
) -> tuple[SoakResult, Workload]:
    """Run the workload on ``broker`` for ``config.duration_s``; the samples and counts."""
    result = SoakResult()
    workload = Workload(broker, config)
    for topic in config.topics:
        workload.create(topic)
    workload.start_producing()
    dropped = 0
    records_per_cycle = config.partitions * RECORDS_PER_PARTITION_PER_CYCLE
    workload.allow(records_per_cycle)
    try:
        with (
            client_rlmm(broker.bootstrap) as rlmm,
            client_rlmm(broker.bootstrap) as sampler_rlmm,
            Sampler(broker, workload, sampler_rlmm, result, config, report) as sampler,
        ):
            while time.monotonic() - sampler.started < config.duration_s and (
                config.cycles is None or result.cycles < config.cycles
            ):
                cycle_started = time.monotonic()
                copied, expired = workload.tier_and_expire(rlmm)
                result.copied += copied
                result.expired += expired
                result.cycles += 1
                if result.cycles % config.drop_every == 0:
                    topic = config.topics[dropped % len(config.topics)]
                    dropped += 1
                    result.dropped_partitions += workload.drop(topic, rlmm)
                if config.sample_s is None:
                    sampler.sample()
                workload.allow(records_per_cycle)
                time.sleep(max(0.0, config.cycle_s - (time.monotonic() - cycle_started)))
    finally:
        workload.stop_producing()
    result.records_produced = workload.records_produced
    return result, workload


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--cycle-s", type=float, default=20.0)
    parser.add_argument(
        "--sample-s", type=float, default=60.0, help="0: a sample after each cycle instead"
    )
    parser.add_argument("--cycles", type=int, default=None, help="stop after that many cycles")
    parser.add_argument("--drop-every", type=int, default=4, help="cycles between topic drops")
    parser.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=2_000,
        help="remote.log.metadata.compaction.interval.ms (0: off, to see the topic grow)",
    )
    parser.add_argument("--dir", type=Path, default=Path("test-artifacts/soak"))
    args = parser.parse_args(argv)
    config = SoakConfig(
        duration_s=args.minutes * 60,
        partitions=args.partitions,
        cycle_s=args.cycle_s,
        sample_s=args.sample_s or None,
        cycles=args.cycles,
        drop_every=args.drop_every,
        compaction_interval_ms=args.compaction_interval_ms,
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    directory = Path(args.dir) / time.strftime("%Y%m%d-%H%M%S")
    with soak_broker(directory, config) as broker:
        result, _ = run_soak(broker, config)
    print(
        f"soak done cycles={result.cycles} copied={result.copied} expired={result.expired}"
        f" dropped_partitions={result.dropped_partitions} records={result.records_produced}"
    )
    problems = flat_problems(result.samples)
    for problem in problems:
        print(f"NOT FLAT: {problem}")
    if not problems:
        print(f"flat: every series' last third within {FLAT_RATIO}x of the second third")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
