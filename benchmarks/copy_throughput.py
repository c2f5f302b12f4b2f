"""Tiering throughput of ``jobs.copy_segments`` against a plain boto3 upload of the same files.

A moto S3 server and broker processes on loopback, in two forms (``--brokers``, both by
default, one after the other on the same S3 server):

  1 broker       one broker process (no ZooKeeper); the job reads its log dir
                 (``--broker-config``)
  3 brokers      three broker processes on a real ZooKeeper (the jars pyspark ships), the
                 topic's partitions led round robin by brokers 1, 2, 3 with replication
                 factor 1; the job reads each partition from its leader's log dir
                 (``--broker-log-dirs`` of all three). Replication factor 1 because the
                 job reads leaders only: follower copies would add the fill's replication
                 to the machine's load and change nothing the job does, and with one replica
                 a partition's files exist only in its leader's log dir, so a job that read
                 anywhere else would find nothing to copy

Each broker's remote tier is ``S3RemoteStorageManager`` on that server. Each round creates a
fresh remote-enabled topic (``--partitions`` partitions, ``segment.bytes`` of about
``--segment-mib``) and fills it with at least ``--total-mib`` of closed segments (lean
Produce requests of ~1 MiB batches of random 1 KiB records, to each partition's leader:
nothing compresses, sizes are real). Then, on the same segment files and the same endpoint:

  plain upload   boto3's ``upload_file`` (``upload_fileobj`` for the generated
                 leader-epoch checkpoint) of every file the job uploads (.log, .index,
                 .timeindex, producer snapshot, leader-epoch checkpoint) to another bucket,
                 the default ``TransferConfig`` (multipart above 8 MiB, 8 MiB parts, 10
                 threads per file), ``--parallelism`` partitions at a time, one client
                 each: the job's Spark task slots (``local[P]``)
  copy job       ``python -m jobs.copy_segments --spark-master local[P]`` as a subprocess,
                 end to end: interpreter start, planning, Spark start-up, the copies
                 (COPY_SEGMENT_STARTED -> upload -> verify -> COPY_SEGMENT_FINISHED), exit.
                 From its JSON summary: ``spark_start_s`` (until the session is up) and
                 ``copy_s`` (the Spark job: workers, clients, copies, verification)

Figures are MiB/s over the bytes both sides upload (every object, not only the .log files);
ratios are job/plain for the copy phase (``copy_s``) and for the whole run (wall time of the
subprocess). The aim is a copy-phase ratio >= 0.8. "of which segment copies" is the sum of
the per-segment seconds the executors report, divided by P: the task slots' time in the
copies themselves, without Python worker start-up, imports and client set-up, which are
what the rest of the copy phase is. Before each side the page cache is written back
(``os.sync``, untimed) and the store holds no object of the round. A round counts only if
the job's summary says every planned segment was copied (none skipped or failed), the
metadata shows each one COPY_SEGMENT_FINISHED, and both buckets held the same number of
objects of the same sizes. On the cluster also: each segment was published as its
partition's leader (the metadata's broker id) and the three brokers each led some.
Each figure is the best of ``--rounds``; the order of the two sides alternates by round.
The two forms print side by side: their copy-phase ratios are what to compare (each against
its own plain upload of the same files).

moto is a Python process on the same CPUs as the uploaders, the JVM and the broker: its
figures bound nothing about real S3, and other load on the machine moves them.

    python benchmarks/copy_throughput.py [--total-mib 1024] [--rounds 1] [--partitions 4]
        [--segment-mib 64] [--parallelism 2] [--brokers 1 3] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from boto3.s3.transfer import TransferConfig
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from benchmarks import lean_client
from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.client.cluster import KafkaCluster
from storage_core.client.consumer import KafkaConsumer
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.protocol.messages import build
from storage_core.records import SimpleRecord, build_batch
from storage_core.server.protocol import encode_request
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.copy import build_log_segment_data, is_eligible_for_upload
from storage_core.tiered.operations.log_view import LogView
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually, partition_leaders, three_brokers
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tiered_broker_support import client_rlmm

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
RECORD_BYTES = 1024
BATCH_BYTES_MAX = MIB  # the broker's message.max.bytes is 1 MiB + 12
IN_FLIGHT = 5
JOB_TIMEOUT_S = 1800.0
STOP_TIMEOUT_S = 10.0
LEADERS_TIMEOUT_S = 60.0
FORMS = {1: "1 broker", 3: "3 brokers"}
JOB_BUCKET = "bench-tiered"
PLAIN_BUCKET = "bench-plain"
BROKER_SETTINGS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.metadata.topic.num.partitions": "1",
    "remote.log.metadata.topic.replication.factor": "1",
    "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
    "rsm.config.s3.bucket.name": JOB_BUCKET,
    "rsm.config.s3.path.style.access.enabled": "true",
    "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
}


# ---------------------------------------------------------------------- the brokers
@dataclass(frozen=True, slots=True, kw_only=True)
class Brokers:
    """The broker processes of one form, by broker id: one (id 0) or three on ZooKeeper."""

    processes: dict[int, BrokerProcess]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for _id, b in sorted(self.processes.items()))

    def leader_of(self, partition: int) -> int:
        """Round robin over the broker ids: every broker leads some once there are as many
        partitions as brokers."""
        ids = sorted(self.processes)
        return ids[partition % len(ids)]

    def job_options(self) -> list[str]:
        """The copy job's broker options: the first broker's config names the store; with
        more than one broker, every broker's log dir (read from each partition's leader)."""
        first = self.processes[min(self.processes)]
        options = ["--broker-config", str(first.config_path)]
        if len(self.processes) > 1:
            for broker_id, broker in sorted(self.processes.items()):
                options += ["--broker-log-dirs", f"{broker_id}={broker.log_dir}"]
        return options


@contextmanager
def started_brokers(count: int, directory: Path, overrides: dict[str, str]) -> Iterator[Brokers]:
    """One broker process, or three on a real ZooKeeper (``tests.cluster_support``); all
    stopped at the end."""
    if count == 1:
        with BrokerProcess(directory / "broker", overrides=overrides) as broker:
            yield Brokers(processes={0: broker})
        return
    with (
        ZooKeeperEnsemble(directory / "zk", size=1) as zookeeper,
        three_brokers(zookeeper, directory, overrides) as (processes, _connect),
    ):
        yield Brokers(processes=processes)


# ---------------------------------------------------------------------- filling a topic
@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Batches of ``batch_bytes``; ``segment_bytes`` holds exactly ``batches_per_segment``;
    each partition gets ``segments_per_partition`` closed segments and one batch more (the
    one that rolls the last of them)."""

    partitions: int
    batch_bytes: int
    batches_per_segment: int
    segments_per_partition: int

    @property
    def segment_bytes(self) -> int:
        return self.batch_bytes * self.batches_per_segment

    @property
    def batches_per_partition(self) -> int:
        return self.batches_per_segment * self.segments_per_partition + 1

    @property
    def closed_bytes(self) -> int:
        return self.segment_bytes * self.segments_per_partition * self.partitions


def random_batch() -> bytes:
    """One batch of random 1 KiB records of at most ``BATCH_BYTES_MAX`` bytes."""
    per_batch = (BATCH_BYTES_MAX - 61) // (RECORD_BYTES + 16)
    now_ms = int(time.time() * 1000)
    records = [
        SimpleRecord(value=os.urandom(RECORD_BYTES), timestamp=now_ms) for _ in range(per_batch)
    ]
    batch = build_batch(records)
    if len(batch) > BATCH_BYTES_MAX:
        raise SystemExit(f"a batch of {len(batch)} bytes is above {BATCH_BYTES_MAX}")
    return batch


def plan_layout(total_mib: int, partitions: int, segment_mib: int, batch_bytes: int) -> Layout:
    """The smallest layout whose closed segments hold >= ``total_mib``: segments of about
    ``segment_mib`` (smaller if one per partition is already enough)."""
    share_bytes = math.ceil(total_mib * MIB / partitions)
    segment_target = min(segment_mib * MIB, share_bytes)
    batches_per_segment = max(1, math.ceil(segment_target / batch_bytes))
    segment_bytes = batches_per_segment * batch_bytes
    return Layout(
        partitions=partitions,
        batch_bytes=batch_bytes,
        batches_per_segment=batches_per_segment,
        segments_per_partition=max(1, math.ceil(share_bytes / segment_bytes)),
    )


def produce_frame(topic: str, batches: Mapping[int, bytes]) -> lean_client.ProduceFrame:
    """One Produce v9 request (acks=1) with ``batches[p]`` for each partition ``p``."""
    schema = load_request_schema(lean_client.PRODUCE_KEY, lean_client.PRODUCE_VERSION)
    module = sys.modules[schema.__module__]
    body = build(
        module.ProduceRequest,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            module.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    module.PartitionProduceData(index=p, records=batch)
                    for p, batch in sorted(batches.items())
                ),
            ),
        ),
    )
    frame = encode_request(
        lean_client.PRODUCE_KEY, lean_client.PRODUCE_VERSION, 0, "copy-bench", body
    )
    return lean_client.ProduceFrame(head=frame[:8], rest=frame[12:])


def create_and_fill(brokers: Brokers, topic: str, layout: Layout) -> list[TopicIdPartition]:
    """The topic, replication factor 1, partition ``p`` on ``brokers.leader_of(p)``; once
    every broker's Metadata shows those leaders, each leader gets its partitions' batches."""
    assignment = [[brokers.leader_of(p)] for p in range(layout.partitions)]
    new = NewTopic(
        topic,
        layout.partitions,  # confluent-kafka wants it with an assignment too (same count)
        replica_assignment=assignment,
        config={"remote.storage.enable": "true", "segment.bytes": str(layout.segment_bytes)},
    )
    admin = AdminClient({"bootstrap.servers": brokers.bootstrap, "log_level": 4})  # kept till done
    admin.create_topics([new])[topic].result(30)
    del admin
    wanted = {p: leaders[0] for p, leaders in enumerate(assignment)}

    def leaders_seen_by(broker: BrokerProcess) -> bool:
        seen = partition_leaders(broker.bootstrap, topic)
        return {p: leader for p, (leader, _epoch) in seen.items()} == wanted

    for broker in brokers.processes.values():
        eventually(
            partial(leaders_seen_by, broker),
            timeout_s=LEADERS_TIMEOUT_S,
            what=f"{topic}: the broker at {broker.bootstrap} shows leaders {wanted}",
        )
    with KafkaCluster(brokers.bootstrap) as cluster:
        described = cluster.metadata([topic]).topic(topic)
    topic_id = None if described is None else described.topic_id
    if topic_id is None:
        raise SystemExit(f"{topic}: created without a topic id")

    def fill(leader_id: int) -> None:
        mine = {p: random_batch() for p, lead in wanted.items() if lead == leader_id}
        if {len(b) for b in mine.values()} != {layout.batch_bytes}:
            raise SystemExit(f"batches of {sorted({len(b) for b in mine.values()})} bytes")
        frame = produce_frame(topic, mine)
        port = brokers.processes[leader_id].port
        lean_client.produce(port, frame, layout.batches_per_partition, in_flight=IN_FLIGHT)

    leader_ids = sorted(set(wanted.values()))
    with ThreadPoolExecutor(max_workers=len(leader_ids)) as pool:
        for future in [pool.submit(fill, leader_id) for leader_id in leader_ids]:
            future.result()
    return [TopicIdPartition(topic_id, TopicPartition(topic, p)) for p in range(layout.partitions)]


# ---------------------------------------------------------------------- the files
@dataclass(frozen=True, slots=True, kw_only=True)
class UploadItem:
    key: str
    path: Path | None  # a file, or
    data: bytes | None  # the generated leader-epoch checkpoint

    @property
    def size_bytes(self) -> int:
        return len(self.data) if self.data is not None else os.path.getsize(self.path or "")


def closed_segment_files(
    brokers: Brokers, tips: Sequence[TopicIdPartition]
) -> tuple[dict[str, list[UploadItem]], int]:
    """Per partition, what the job uploads for every closed segment (the job's own
    ``build_log_segment_data``, in the leader's log dir); and how many segments that is."""
    out: dict[str, list[UploadItem]] = {}
    segments = 0
    with KafkaCluster(brokers.bootstrap) as cluster:
        consumer = KafkaConsumer(cluster)
        for tip in tips:
            tp = tip.topic_partition
            leader = brokers.processes[brokers.leader_of(tp.partition)]
            view = LogView.read(
                leader.log_dir / tp.dir_name,
                high_watermark=consumer.latest_offset(tp.topic, tp.partition),
                log_start_offset=consumer.earliest_offset(tp.topic, tp.partition),
            )
            items: list[UploadItem] = []
            for segment in view.segments:
                if not is_eligible_for_upload(segment, last_stable_offset=view.high_watermark):
                    continue
                segments += 1
                data = build_log_segment_data(view, segment)
                prefix = f"{tp}/{segment.base_offset:020d}"
                paths = [
                    data.log_segment,
                    data.offset_index,
                    data.time_index,
                    data.producer_snapshot,
                    data.transaction_index,
                ]
                items += [
                    UploadItem(key=f"{prefix}{p.suffix}", path=p, data=None)
                    for p in paths
                    if p is not None
                ]
                items.append(
                    UploadItem(key=f"{prefix}.epochs", path=None, data=data.leader_epoch_index)
                )
            out[str(tp)] = items
    return out, segments


# ---------------------------------------------------------------------- the two sides
def plain_upload(endpoint_url: str, files: dict[str, list[UploadItem]], parallelism: int) -> float:
    """Seconds to upload every item with boto3's defaults, ``parallelism`` partitions at a
    time (one client per partition, its files one after another)."""
    transfer = TransferConfig()

    def upload_partition(items: list[UploadItem]) -> None:
        client = boto3.client("s3", endpoint_url=endpoint_url)
        try:
            for item in items:
                if item.path is not None:
                    client.upload_file(str(item.path), PLAIN_BUCKET, item.key, Config=transfer)
                else:
                    body = io.BytesIO(item.data or b"")
                    client.upload_fileobj(body, PLAIN_BUCKET, item.key, Config=transfer)
        finally:
            client.close()

    started = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=parallelism)
    try:
        for future in [pool.submit(upload_partition, items) for items in files.values()]:
            future.result()
    finally:
        pool.shutdown(cancel_futures=True)  # on Ctrl-C, only the uploads under way finish
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRun:
    wall_s: float
    spark_start_s: float
    copy_s: float
    summary: dict[str, Any]

    @property
    def segments_s(self) -> float:
        """The seconds of every segment's copy (the executors' own clocks), summed."""
        return float(sum(p["seconds"] for p in self.summary["partitions"]))


def run_job(brokers: Brokers, topic: str, work_dir: Path, parallelism: int) -> JobRun:
    summary_path = work_dir / f"{topic}-summary.json"
    command = [
        sys.executable,
        "-m",
        "jobs.copy_segments",
        "--bootstrap-server",
        brokers.bootstrap,
        *brokers.job_options(),
        "--topic",
        topic,
        "--spark-master",
        f"local[{parallelism}]",
        "--lock-dir",
        str(work_dir / "locks"),
        "--summary-path",
        str(summary_path),
    ]
    spark_dir = work_dir / "spark-local"
    spark_dir.mkdir(exist_ok=True)
    env = {**os.environ, **AWS_TEST_ENV, "SPARK_LOCAL_DIRS": str(spark_dir)}
    output_path = work_dir / f"{topic}-job.log"
    with open(output_path, "wb") as output:
        started = time.perf_counter()
        # Its own process group: the JVM and the Python workers go with it (stop_group).
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(JOB_TIMEOUT_S)
            wall_s = time.perf_counter() - started
        finally:
            stop_group(process)
    if code != 0 or not summary_path.exists():
        tail = output_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"copy_segments exited with {code}:\n{tail}")
    summary = json.loads(summary_path.read_text())
    details = summary.get("details", {})
    if "spark_start_s" not in details or "copy_s" not in details:
        raise SystemExit("the job's summary has no details.spark_start_s / details.copy_s")
    return JobRun(
        wall_s=wall_s,
        spark_start_s=float(details["spark_start_s"]),
        copy_s=float(details["copy_s"]),
        summary=summary,
    )


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group this benchmark started (then SIGKILL), and reap it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; give its group a moment, then make sure
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and group_alive(process.pid):
            time.sleep(0.1)
    if process.returncode is None:
        process.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------------- checks
def check_job(
    job: JobRun, brokers: Brokers, tips: Sequence[TopicIdPartition], segments: int
) -> None:
    """Every planned segment copied, none skipped or failed; all COPY_SEGMENT_FINISHED, each
    published as its partition's leader, and every broker led some."""
    counts = job.summary["counts"]
    want = {"segments_planned": segments, "segments_copied": segments}
    got = {k: counts.get(k, 0) for k in want}
    if job.summary["status"] != "ok" or got != want:
        raise SystemExit(f"copy job: status {job.summary['status']}, {counts}, expected {want}")
    if counts.get("segments_skipped", 0) or counts.get("segments_failed", 0):
        raise SystemExit(f"copy job skipped or failed segments: {counts}")
    finished = 0
    published_by: set[int] = set()
    with client_rlmm(brokers.bootstrap) as rlmm:
        for tip in tips:
            leader_id = brokers.leader_of(tip.topic_partition.partition)
            for metadata in rlmm.list_remote_log_segments(tip):
                if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    raise SystemExit(f"{tip}: segment {metadata.start_offset} {metadata.state}")
                if metadata.broker_id != leader_id:
                    raise SystemExit(
                        f"{tip}: segment {metadata.start_offset} published by broker"
                        f" {metadata.broker_id}, its leader is {leader_id}"
                    )
                published_by.add(metadata.broker_id)
                finished += 1
    if finished != segments:
        raise SystemExit(f"{finished} segments are COPY_SEGMENT_FINISHED, expected {segments}")
    if published_by != set(brokers.processes):
        raise SystemExit(
            f"segments published by brokers {sorted(published_by)}, expected every one of"
            f" {sorted(brokers.processes)} (are there fewer partitions than brokers?)"
        )


def emptied(client: Any, bucket: str) -> list[int]:
    """The sizes of every object in ``bucket``, sorted; then delete them (untimed: moto keeps
    objects in memory and temp files, and the next side should find the store as this one
    did). The job's metadata then names objects that are gone: nothing reads them here."""
    objects = [
        item
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for item in page.get("Contents", [])
    ]
    for start in range(0, len(objects), 1000):
        keys = [{"Key": item["Key"]} for item in objects[start : start + 1000]]
        client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    return sorted(int(item["Size"]) for item in objects)


# ---------------------------------------------------------------------- the run
@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    upload_bytes: int
    log_bytes: int
    segments: int
    plain_s: float
    job: JobRun


def run_round(
    index: int,
    brokers: Brokers,
    s3: S3Server,
    work_dir: Path,
    layout: Layout,
    parallelism: int,
) -> Round:
    topic = f"copy-bench-{len(brokers.processes)}-{index}"
    tips = create_and_fill(brokers, topic, layout)
    files, segments = closed_segment_files(brokers, tips)
    items = [item for partition in files.values() for item in partition]
    upload_bytes = sum(item.size_bytes for item in items)
    log_bytes = sum(item.size_bytes for item in items if item.key.endswith(".log"))
    if log_bytes < layout.closed_bytes:
        raise SystemExit(f"{topic}: {log_bytes} bytes of closed segments, expected more")
    client = s3.client()

    def plain_side() -> tuple[float, list[int]]:
        seconds = plain_upload(s3.endpoint_url, files, parallelism)
        return seconds, emptied(client, PLAIN_BUCKET)

    def job_side() -> tuple[JobRun, list[int]]:
        job = run_job(brokers, topic, work_dir, parallelism)
        check_job(job, brokers, tips, segments)
        return job, emptied(client, JOB_BUCKET)

    # Each side starts with the writeback of the fill and of the other side done (untimed)
    # and with no object of this round in the store.
    os.sync()
    if index % 2 == 0:
        plain_s, plain_sizes = plain_side()
        os.sync()
        job, job_sizes = job_side()
    else:
        job, job_sizes = job_side()
        os.sync()
        plain_s, plain_sizes = plain_side()
    if plain_sizes != job_sizes or sum(job_sizes) != upload_bytes:
        raise SystemExit(
            f"{topic}: the buckets differ: plain {len(plain_sizes)} objects of"
            f" {sum(plain_sizes)} bytes, job {len(job_sizes)} of {sum(job_sizes)}"
            f" (expected {len(items)} of {upload_bytes})"
        )
    if job.summary["bytes"].get("copied") != log_bytes:
        raise SystemExit(f"{topic}: the job copied {job.summary['bytes']} of {log_bytes} bytes")
    return Round(
        upload_bytes=upload_bytes,
        log_bytes=log_bytes,
        segments=segments,
        plain_s=plain_s,
        job=job,
    )


@contextmanager
def interrupted_on_sigterm() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so every ``finally`` below stops what it started."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(work_dir: Path, args: argparse.Namespace) -> tuple[Layout, dict[int, list[Round]]]:
    """``--rounds`` rounds of each form in ``--brokers``, one form after the other (only one
    form's brokers run at a time), on one S3 server."""
    os.environ.update(AWS_TEST_ENV)  # the broker, the job and boto3 read the standard chain
    layout = plan_layout(args.total_mib, args.partitions, args.segment_mib, len(random_batch()))
    rounds: dict[int, list[Round]] = {}
    with S3Server(work_dir / "moto", min_part_size_bytes=5 * MIB) as s3:
        s3.create_bucket(JOB_BUCKET)
        s3.create_bucket(PLAIN_BUCKET)
        overrides = {**BROKER_SETTINGS, "rsm.config.s3.endpoint.url": s3.endpoint_url}
        for count in args.brokers:
            form_dir = work_dir / f"brokers-{count}"
            form_dir.mkdir()
            with started_brokers(count, form_dir, overrides) as brokers:
                for index in range(args.rounds):
                    done = run_round(index, brokers, s3, form_dir, layout, args.parallelism)
                    rounds.setdefault(count, []).append(done)
                    print(f"{FORMS[count]}, round {index}: {describe(done)}", flush=True)
    return layout, rounds


def mib_s(size_bytes: int, seconds: float) -> float:
    return round(size_bytes / MIB / seconds, 1)


def describe(r: Round) -> str:
    return (
        f"plain {r.plain_s:.2f}s, job {r.job.wall_s:.2f}s"
        f" (spark start {r.job.spark_start_s:.2f}s, copy {r.job.copy_s:.2f}s)"
    )


def figures(layout: Layout, rounds: list[Round], parallelism: int) -> dict[str, Any]:
    """The best of the rounds of one form, in seconds, MiB/s and job/plain ratios."""
    best_plain = min(r.plain_s for r in rounds)
    best_copy = min(r.job.copy_s for r in rounds)
    best_wall = min(r.job.wall_s for r in rounds)
    best_segments = min(r.job.segments_s for r in rounds) / parallelism
    size = rounds[0].upload_bytes
    return {
        "partitions": layout.partitions,
        "segments": rounds[0].segments,
        "segment_bytes": layout.segment_bytes,
        "log_mib": round(rounds[0].log_bytes / MIB, 1),
        "upload_mib": round(size / MIB, 1),
        "parallelism": parallelism,
        "plain_s": round(best_plain, 2),
        "plain_mib_s": mib_s(size, best_plain),
        "job_wall_s": round(best_wall, 2),
        "job_spark_start_s": round(min(r.job.spark_start_s for r in rounds), 2),
        "job_copy_s": round(best_copy, 2),
        "job_copy_mib_s": mib_s(size, best_copy),
        "job_segments_s": round(best_segments, 2),
        "job_segments_mib_s": mib_s(size, best_segments),
        "job_wall_mib_s": mib_s(size, best_wall),
        "copy_ratio": round(best_plain / best_copy, 3),
        "wall_ratio": round(best_plain / best_wall, 3),
        "segments_ratio": round(best_plain / best_segments, 3),
    }


# (row label, seconds key, MiB/s key, ratio key) of the table
ROWS = (
    ("plain boto3 upload_file", "plain_s", "plain_mib_s", None),
    ("copy job: Spark start-up", "job_spark_start_s", None, None),
    ("copy job: copy phase", "job_copy_s", "job_copy_mib_s", "copy_ratio"),
    ("  of which segment copies (sum/P)", "job_segments_s", "job_segments_mib_s", "segments_ratio"),
    ("copy job: whole run", "job_wall_s", "job_wall_mib_s", "wall_ratio"),
)


def print_table(results: dict[int, dict[str, Any]]) -> None:
    """One column group per form, side by side."""
    forms = sorted(results)
    print(f"{'':<34}" + "".join(f" | {FORMS[c]:<24}" for c in forms))
    print(f"{'case':<34}" + f" | {'seconds':>8} {'MiB/s':>8} {'ratio':>6}" * len(forms))
    for label, seconds, speed, ratio in ROWS:
        cells = ""
        for count in forms:
            result = results[count]
            cells += f" | {result[seconds]:>8}"
            cells += f" {result[speed] if speed else '':>8} {result[ratio] if ratio else '':>6}"
        print(f"{label:<34}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=1024, help="closed segment bytes")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument(
        "--parallelism",
        type=int,
        default=os.cpu_count() or 2,
        help="the job's Spark task slots (local[P]) = partitions uploaded at once by boto3",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        nargs="+",
        choices=sorted(FORMS),
        default=sorted(FORMS),
        help="the forms to run: 1 (one broker) and/or 3 (a cluster on ZooKeeper); default both",
    )
    parser.add_argument("--dir", type=Path, default=Path("bench-data"))
    args = parser.parse_args()
    if 3 in args.brokers and args.partitions < 3:
        parser.error("--partitions must be >= 3 for the cluster form (each broker leads some)")
    args.brokers = sorted(set(args.brokers))
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    print(f"$ {command}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        with interrupted_on_sigterm():
            layout, rounds = run(args.dir.resolve(), args)
    except KeyboardInterrupt:
        raise SystemExit("interrupted; every process this run started is stopped") from None
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)

    results = {count: figures(layout, rounds[count], args.parallelism) for count in rounds}
    first = results[min(results)]
    print(
        f"{first['segments']} segments of {layout.segment_bytes} bytes in"
        f" {layout.partitions} partitions: {first['log_mib']} MiB of .log,"
        f" {first['upload_mib']} MiB uploaded by each side; moto S3 on 127.0.0.1"
    )
    if 3 in results:
        print(
            "3 brokers: partition p led by broker p % 3 + 1 (replication factor 1), the job"
            " reading every leader's log dir (--broker-log-dirs)"
        )
    transfer = TransferConfig()
    print(
        f"concurrency: the job on local[{args.parallelism}] ({args.parallelism} Spark tasks"
        f" at once, one file at a time each); plain: {args.parallelism} partitions at once,"
        f" upload_file with boto3's default TransferConfig (multipart above"
        f" {transfer.multipart_threshold // MIB} MiB, {transfer.multipart_chunksize // MIB} MiB"
        f" parts, {transfer.max_concurrency} threads per file)"
    )
    print_table(results)
    out: dict[str, Any] = {"benchmark": "copy_throughput", "command": command}
    if 1 in results:
        out["results"] = results[1]
    if 3 in results:
        out["cluster_results"] = results[3]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
