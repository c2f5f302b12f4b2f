"""The main job on the embedded default, a replicated cluster, end to end:

    1. start the cluster        ZooKeeper and brokers 1-3 on 127.0.0.1 (replication factor 3,
                                min.insync.replicas 2), the remote tier in <dir>/remote-tier;
                                secured (embedded/cluster_security.py): ZooKeeper requires
                                SASL, clients SCRAM-SHA-512 over TLS, brokers TLS with
                                certificates, ACLs (certificates and passwords made into
                                <dir>/security on first use, users and ACLs created through
                                the brokers)
    2. produce                  kafka-python, as User:demo, writes records to a remote-enabled
                                topic whose partitions the three brokers lead and whose local
                                retention keeps one segment; Airflow's database is migrated
                                meanwhile. A client without credentials is refused and
                                User:stranger (authenticated, no ACL) is denied
    3. tiering DAG              ``airflow dags test tiering``: copy_segments -> quality, each
                                partition read from its leader's log dir; the leaders then
                                delete the local copies of tiered segments
    4. consume tiered offsets   kafka-python reads every partition from offset 0: the offsets
                                below the local log start come from the remote tier
    5. leader kill              the leader of events-0 is SIGKILLed while a producer goes on
                                (acks=all); another replica leads at a higher leader epoch
                                (leaders, epochs and ISR printed before and after)
    6. tiering DAG again        copy_segments reads the new leader's log dir: the partition's
                                remote chain goes on without a gap, in the new epoch
    7. restart                  the killed broker's replica of events-0 is removed (a replaced
                                disk); the broker starts again, builds that replica from the
                                remote tier (its local log starts where the leader's does,
                                with the leader's epochs) and rejoins every ISR
    8. retention DAG            retention.bytes is lowered, then ``airflow dags test
                                retention_nightly``: reconcile -> expire_remote -> quality ->
                                report; the log start offset moves past the expired segments
    9. consume again            from the new log start, every acknowledged record (those
                                written around the kill too) reads back as written
   10. a self-describing bucket the topic manifest the tiering DAG wrote is there; the
                                consumer group demo-readers reads part of each partition and
                                commits; backup_consumer_offsets and topic_manifests (the
                                nightly's and the tiering DAG's jobs) run as User:pipeline:
                                the bucket holds the group's offsets and the topic's configs
   11. restore drill DAG        ``airflow dags test restore_drill``: a sample of the
                                partitions restored from the bucket into a scratch topic and
                                checked by Great Expectations (every record batch's offsets,
                                leader epoch and CRC equal the source's, offsets contiguous,
                                the restored group offsets in range), then the scratch topic
                                and its remote data deleted
   12. what the bucket holds    per partition, read from the bucket's manifests as a restore
                                reads them: the remote log start, the highest tiered offset,
                                the acknowledged records in the bucket and those only on the
                                brokers' disks (the active segments: KIP-405 copies closed
                                segments, so the remote tier's recovery point is the last copy)
   13. disaster                 the cluster is stopped; ZooKeeper's data and every broker's
                                log dir are removed (the remote tier, the security material
                                and Airflow's directory stay)
   14. whole-cluster restore    a new ZooKeeper and new brokers on the same directory, empty;
                                ``python -m jobs.restore_cluster`` as User:pipeline restores
                                every topic of the bucket with its groups' offsets
   15. read the restore back    every record the bucket held reads back as written (from the
                                remote tier), demo-readers resumes from its restored offsets,
                                and a producer's next record lands at the restored next offset
   16. reports                  where the Data Docs, the JSON summaries and the demo's own
                                summary (reports/demo-summary.json: the failover, the drill,
                                the restore) are

The pipeline runs as User:pipeline with its least ACLs (the Airflow connection's Login and
Password); no password reaches a log, summary or report.

Every step is checked: a failed DAG run or job, a leader that does not move, a gap in the
remote chain, a bucket that disagrees with the brokers, a record that does not read back as
written, or an offset that does not move or is not restored exits non-zero with the reason.
ZooKeeper, the brokers (of both clusters) and every command the demo started are stopped
when it ends, fails or is interrupted.

    python -m embedded.demo [--dir demo-data] [--records-per-partition N]
                            [--records-after-kill N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kafka import KafkaProducer
from kafka.errors import KafkaError

from embedded import airflow_env, disaster
from embedded.cluster import REPLICATION_FACTOR, EmbeddedCluster, prepare_directory
from embedded.cluster_security import (
    DEMO_CLIENT,
    DEMO_GROUP,
    PIPELINE,
    SASL_MECHANISM,
    STRANGER,
    USERS,
)
from embedded.leadership import TopicLeadership, topic_leadership
from embedded.local_replica import read_local_replica, remove_local_replica
from embedded.partition_view import PartitionView, partition_views
from embedded.processes import ProcessGroup, run_to_completion
from embedded.remote_chain import RemoteChain, remote_chain
from embedded.workload import BackgroundProducer, produce, read_back
from storage_core.client import (
    AlterConfigOp,
    AlterConfigOpType,
    KafkaAdminClient,
    KafkaCluster,
)
from storage_core.client.metadata import NO_LEADER
from storage_core.common import Uuid
from storage_core.protocol.config_resource import ConfigResourceType

TOPIC = "events"
PARTITIONS = 3
SEGMENT_BYTES = 256 * 1024
LOCAL_RETENTION_BYTES = SEGMENT_BYTES  # keep about one closed segment locally
FAILOVER_PARTITION = 0
STEPS = 16
GROUP_RECORDS = 200  # what the demo's group reads of each partition before the disaster
DAG_TIMEOUT_S = 20 * 60.0
PRODUCE_TIMEOUT_S = 120.0
MIGRATE_TIMEOUT_S = 5 * 60.0
BROKER_EFFECT_TIMEOUT_S = 60.0
REFUSAL_TIMEOUT_MS = 3000
KAFKA_PYTHON_API_VERSION = (2, 8, 0)


T = TypeVar("T")


class DemoFailedError(RuntimeError):
    """A step of the demo did not do what it should; the message says which and why."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m embedded.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory")
    parser.add_argument(
        "--records-per-partition",
        type=int,
        default=3000,
        help="records written to each of the 3 partitions (about 0.5 KiB each)",
    )
    parser.add_argument(
        "--records-after-kill",
        type=int,
        default=1200,
        help="records written to each partition while and after a leader is killed",
    )
    args = parser.parse_args(argv)
    if args.records_per_partition < 2000:
        parser.error("--records-per-partition must be at least 2000 (a few segments each)")
    if args.records_after_kill < 1000:
        parser.error("--records-after-kill must be at least 1000 (a segment for the new leader)")
    try:
        run_demo(
            args.dir,
            records_per_partition=args.records_per_partition,
            records_after_kill=args.records_after_kill,
        )
    except (DemoFailedError, OSError, RuntimeError, KafkaError) as e:  # DisasterCheckError too
        print(f"\nDemo FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nDemo interrupted; everything it started is stopped.", file=sys.stderr)
        return 130
    return 0


def run_demo(directory: Path, *, records_per_partition: int, records_after_kill: int) -> None:
    directory = directory.resolve()
    _check_java()
    prepare_directory(directory, fresh=True)
    started = time.monotonic()
    say = _step_printer(started)
    logs = directory / "logs"
    summary: dict[str, Any] = {"topic": TOPIC, "partitions": PARTITIONS}

    with EmbeddedCluster(directory) as cluster:
        say(
            1,
            f"ZooKeeper and brokers {[b.broker_id for b in cluster.brokers]} on"
            f" {cluster.bootstrap_server}; remote tier {cluster.remote_dir}",
        )
        _print_security(cluster)
        env = airflow_env.airflow_environment(directory, cluster)
        migrate = ProcessGroup(
            "airflow db migrate",
            [_airflow(), "db", "migrate"],
            log_path=logs / "airflow-db-migrate.log",
            env=env,
        ).start()
        try:
            _create_topic(cluster)
            _print_leadership(
                "leaders",
                _wait_until(
                    lambda: _led_on_every_broker(cluster),
                    f"every broker's Metadata to give {TOPIC} a leader for each partition",
                ),
            )
            count = produce(
                cluster.bootstrap_server,
                TOPIC,
                partitions=PARTITIONS,
                records_per_partition=records_per_partition,
                security=cluster.security.kafka_python(DEMO_CLIENT),
            )
            say(
                2,
                f"produced {count} records to {TOPIC} ({PARTITIONS} partitions, replication"
                f" factor {REPLICATION_FACTOR}) with acks=all as User:{DEMO_CLIENT}",
            )
            _show_refusals(cluster)
            code = migrate.wait(MIGRATE_TIMEOUT_S)
        finally:
            migrate.stop()
        if code != 0:
            raise DemoFailedError(f"airflow db migrate exited {code}:\n{migrate.tail()}")

        _run_dag("tiering", env, logs)
        tiered = _wait_for(
            cluster,
            lambda v: v.earliest_local_offset > 0 and v.highest_tiered_offset >= 0,
            "the leaders to delete the local copies of tiered segments",
        )
        say(3, "tiering DAG succeeded (copy_segments -> quality)")
        _print_job_lines(directory, "tiering", ("copy_segments", "quality"))
        _print_views(tiered)

        _check_read_back(cluster, tiered, records_per_partition)
        below_local = sum(v.earliest_local_offset - v.log_start_offset for v in tiered)
        say(4, f"read every record back from offset 0; {below_local} came from the remote tier")

        total = records_per_partition + records_after_kill
        summary["failover"] = _kill_leader(
            cluster, say, first_index=records_per_partition, records=records_after_kill
        )
        summary["records_per_partition"] = total

        _run_dag("tiering", env, logs)
        chain = _check_chain_after_failover(cluster, summary["failover"])
        say(6, f"tiering DAG succeeded again; {chain.line()}")
        _print_job_lines(directory, "tiering", ("copy_segments", "quality"))
        summary["remote_chain"] = {
            "segments": len(chain.segments),
            "end_offset": chain.end_offset(),
            "gaps": chain.gaps(),
            "copied_by": {str(b): list(e) for b, e in chain.copied_by().items()},
        }

        summary["rejoined"] = _restart_killed(cluster, summary["failover"]["killed_broker"])
        say(
            7,
            f"broker {summary['failover']['killed_broker']} restarted without its replica of"
            f" {TOPIC}-{FAILOVER_PARTITION}, rebuilt it from the remote tier (local log start"
            f" {summary['rejoined']['rebuilt_local_log_start']}) and is back in every ISR",
        )

        views = partition_views(cluster, TOPIC, PARTITIONS)
        before = {v.partition: v.log_start_offset for v in views}
        retained_bytes = 4 * SEGMENT_BYTES
        _set_topic_config(cluster, "retention.bytes", str(retained_bytes))
        _run_dag("retention_nightly", env, logs)
        expired = _wait_for(
            cluster,
            lambda v: v.log_start_offset > before[v.partition],
            "the log start offset to move past the expired segments",
        )
        say(8, f"retention DAG succeeded with retention.bytes={retained_bytes}")
        _print_job_lines(directory, "retention_nightly", ("reconcile", "expire_remote", "quality"))
        _print_views(expired)
        summary["read_back"] = _check_read_back(cluster, expired, total)
        say(9, "read back from the new log start: every acknowledged record matches")

        topic_id = _leadership(cluster).topic_id
        if topic_id is None:
            raise DemoFailedError(f"Metadata gave {TOPIC} no topic id")
        committed = _make_bucket_ready(cluster, expired, topic_id, retained_bytes, say)
        summary["drill"] = _restore_drill(directory, env, logs, say)
        holdings = _record_bucket(cluster, topic_id, say)
        _wipe_cluster(cluster, say)

    with EmbeddedCluster(directory) as cluster:
        summary["restore"] = _restore_cluster(cluster, holdings, committed, say)
        summary["restore"]["group_committed_before"] = {
            f"{TOPIC}-{p}": offset for p, offset in committed.items()
        }

    say(STEPS, "reports")
    summary_path = airflow_env.reports_dir(directory) / "demo-summary.json"
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        *_report_lines(directory),
        f"restore_cluster summary:   {_restore_summary_path(directory)}",
        f"demo summary:              {summary_path}",
    ]
    for line in lines:
        print(f"    {line}", flush=True)
    print(
        f"    browse them in the Airflow UI: python -m embedded.airflow_ui --dir {directory}",
        flush=True,
    )
    print(
        f"Demo succeeded in {time.monotonic() - started:.0f} s; the brokers and ZooKeeper"
        " are stopped."
    )


def _kill_leader(
    cluster: EmbeddedCluster, say: Callable[[int, str], None], *, first_index: int, records: int
) -> dict[str, Any]:
    """SIGKILL the leader of partition ``FAILOVER_PARTITION`` while a producer goes on; wait
    until another replica leads at a higher epoch and every record is acknowledged."""
    before = _leadership(cluster)
    _print_leadership("before the kill", before)
    old = before.partition(FAILOVER_PARTITION)
    producer = BackgroundProducer(
        cluster.bootstrap_server,
        TOPIC,
        partitions=PARTITIONS,
        first_index=first_index,
        records_per_partition=records,
        security=cluster.security.kafka_python(DEMO_CLIENT),
    ).start()
    try:
        _wait_until(lambda: producer.acknowledged > 0 or producer.done(), "the producer to start")
        cluster.kill_broker(old.leader_id)
        print(
            f"    SIGKILLed broker {old.leader_id}, leader of {TOPIC}-{FAILOVER_PARTITION} at"
            f" epoch {old.leader_epoch}, with {producer.acknowledged} of {records} more records"
            " per partition acknowledged",
            flush=True,
        )
        _print_leadership(
            "right after the kill (Metadata changes once its ZooKeeper session expires)",
            _leadership_or_none(cluster),
        )

        def new_leader() -> TopicLeadership | None:
            now = _leadership_or_none(cluster)
            if now is None:
                return None
            p = now.partition(FAILOVER_PARTITION)
            moved = p.leader_id not in (old.leader_id, NO_LEADER)
            return now if moved and p.leader_epoch > old.leader_epoch else None

        after = _wait_until(new_leader, "another replica to lead at a higher epoch")
        acknowledged = producer.join(PRODUCE_TIMEOUT_S)
    finally:
        producer.stop()
    _print_leadership("after the kill", after)
    new = after.partition(FAILOVER_PARTITION)
    # consumers go on too: every record, through the new leader for events-0
    read = _check_read_back(
        cluster, partition_views(cluster, TOPIC, PARTITIONS), first_index + acknowledged
    )
    say(
        5,
        f"leader of {TOPIC}-{FAILOVER_PARTITION}: broker {old.leader_id} at epoch"
        f" {old.leader_epoch} -> broker {new.leader_id} at epoch {new.leader_epoch};"
        f" {acknowledged * PARTITIONS} more records acknowledged meanwhile (acks=all) and"
        f" {sum(r['records'] for r in read.values())} read back from offset 0",
    )
    return {
        "partition": FAILOVER_PARTITION,
        "killed_broker": old.leader_id,
        "leader_before": old.leader_id,
        "leader_epoch_before": old.leader_epoch,
        "leader_after": new.leader_id,
        "leader_epoch_after": new.leader_epoch,
        "isr_after": list(new.isr),
        "records_acknowledged_during": acknowledged * PARTITIONS,
        "topic_id": str(after.topic_id),
        "tiered_end_before": _tiered_end(cluster, after),
    }


def _tiered_end(cluster: EmbeddedCluster, leadership: TopicLeadership) -> int:
    if leadership.topic_id is None:
        raise DemoFailedError(f"Metadata gave {TOPIC} no topic id")
    chain = _remote_chain(cluster, leadership.topic_id)
    return chain.end_offset()


def _check_chain_after_failover(cluster: EmbeddedCluster, failover: dict[str, Any]) -> RemoteChain:
    """The second tiering run copied from the new leader and the chain goes on without a gap."""
    leadership = _leadership(cluster)
    if leadership.topic_id is None:
        raise DemoFailedError(f"Metadata gave {TOPIC} no topic id")
    chain = _remote_chain(cluster, leadership.topic_id)
    where = f"{TOPIC}-{FAILOVER_PARTITION}'s remote segments"
    if chain.gaps():
        raise DemoFailedError(f"{where} have gaps {chain.gaps()}: {chain.line()}")
    if chain.end_offset() <= failover["tiered_end_before"]:
        raise DemoFailedError(
            f"{where} end at {chain.end_offset()}, as before the kill: the new leader copied"
            f" nothing; {chain.line()}"
        )
    new_epochs = chain.copied_by().get(failover["leader_after"], ())
    if not any(e >= failover["leader_epoch_after"] for e in new_epochs):
        raise DemoFailedError(
            f"{where}: nothing copied by the new leader, broker {failover['leader_after']}, in"
            f" epoch {failover['leader_epoch_after']} or later; {chain.line()}"
        )
    return chain


def _restart_killed(cluster: EmbeddedCluster, broker_id: int) -> dict[str, Any]:
    """Remove the killed broker's replica of ``FAILOVER_PARTITION`` (a replaced disk), start
    it again and wait until it is back in every ISR: that replica is rebuilt from the remote
    tier (its local log starts at the leader's local log start, not at 0) and has the
    leader's epochs."""
    log_dir = cluster.broker(broker_id).log_dir
    removed = remove_local_replica(log_dir, TOPIC, FAILOVER_PARTITION)
    print(f"    broker {broker_id} is down: its replica {removed} is removed", flush=True)
    cluster.restart_broker(broker_id)

    def rejoined() -> TopicLeadership | None:
        now = _leadership_or_none(cluster)
        if now is None or not all(broker_id in p.isr for p in now.partitions):
            return None
        return now

    back = _wait_until(rejoined, f"broker {broker_id} to rejoin the ISR of every partition")
    _print_leadership("after the restart", back)
    p = back.partition(FAILOVER_PARTITION)
    rebuilt = read_local_replica(broker_id, log_dir, TOPIC, FAILOVER_PARTITION)
    leader = read_local_replica(
        p.leader_id, cluster.broker(p.leader_id).log_dir, TOPIC, FAILOVER_PARTITION
    )
    print(f"    {TOPIC}-{FAILOVER_PARTITION} replicas:", flush=True)
    for replica in (rebuilt, leader):
        print(f"      {replica.line()}", flush=True)
    where = f"broker {broker_id}'s rebuilt replica of {TOPIC}-{FAILOVER_PARTITION}"
    if not rebuilt.local_log_start:
        raise DemoFailedError(
            f"{where} starts at offset {rebuilt.local_log_start}: it was copied from the leader"
            " from the start, not built from the remote tier"
        )
    if rebuilt.epochs != leader.epochs:
        raise DemoFailedError(
            f"{where} has leader epochs {rebuilt.epochs}, its leader {leader.epochs}"
        )
    return {
        "broker": broker_id,
        "isr": list(p.isr),
        "leader": p.leader_id,
        "removed_replica": str(removed),
        "rebuilt_local_log_start": rebuilt.local_log_start,
        "rebuilt_epochs": [list(e) for e in rebuilt.epochs],
        "leader_epochs": [list(e) for e in leader.epochs],
    }


def _make_bucket_ready(
    cluster: EmbeddedCluster,
    views: list[PartitionView],
    topic_id: Uuid,
    retained_bytes: int,
    say: Callable[[int, str], None],
) -> dict[int, int]:
    """The bucket made self-describing as the pipeline keeps it: the topic manifest the
    tiering DAG wrote is there; ``DEMO_GROUP`` reads part of each partition and commits; the
    jobs of the nightly and tiering DAGs (backup_consumer_offsets, topic_manifests) run now as
    User:pipeline rather than at their next schedule, so the bucket holds the group's offsets
    and the topic's configs since retention.bytes changed. Returns the committed offsets."""
    manifest = disaster.read_topic_manifest(cluster, TOPIC, topic_id)
    if manifest.partition_count != PARTITIONS:
        raise DemoFailedError(
            f"the topic manifest of {TOPIC} says {manifest.partition_count} partitions,"
            f" not {PARTITIONS}"
        )
    print(
        f"    {TOPIC}'s topic manifest, written by the tiering DAG at"
        f" {_utc(manifest.written_at_ms)}: topic id {manifest.topic_id},"
        f" {manifest.partition_count} partitions, replication factor"
        f" {manifest.replication_factor}, retention.bytes"
        f" {manifest.configs.get('retention.bytes', 'not set')}",
        flush=True,
    )
    starts = {v.partition: v.log_start_offset for v in views}
    committed = disaster.commit_group_offsets(cluster, TOPIC, starts, GROUP_RECORDS)
    print(
        f"    group {DEMO_GROUP} (User:{DEMO_CLIENT}) read {GROUP_RECORDS} records of each"
        f" partition and committed {_offsets_text(committed)}",
        flush=True,
    )
    reports = airflow_env.reports_dir(cluster.directory) / "disaster"
    for job in ("backup_consumer_offsets", "topic_manifests"):
        job_summary, _ = disaster.run_job(
            disaster.job_command(cluster, job, reports / f"{job}.json"),
            cluster.directory / "logs" / f"{job}.log",
            reports / f"{job}.json",
            airflow_env.REPO,
        )
        _print_summary_line(job, job_summary)
    backed_up = disaster.backed_up_offsets(cluster, DEMO_GROUP, TOPIC)
    if backed_up != committed:
        raise DemoFailedError(
            f"the newest offsets backup holds {_offsets_text(backed_up)} for group"
            f" {DEMO_GROUP}, not the committed {_offsets_text(committed)}"
        )
    rewritten = disaster.read_topic_manifest(cluster, TOPIC, topic_id)
    if rewritten.configs.get("retention.bytes") != str(retained_bytes):
        raise DemoFailedError(
            f"the rewritten topic manifest of {TOPIC} has retention.bytes"
            f" {rewritten.configs.get('retention.bytes')}, not {retained_bytes}"
        )
    say(
        10,
        f"the bucket describes itself: {TOPIC}'s topic manifest (now with retention.bytes="
        f"{retained_bytes}) and an offsets backup holding group {DEMO_GROUP}",
    )
    return committed


def _restore_drill(
    directory: Path, env: dict[str, str], logs: Path, say: Callable[[int, str], None]
) -> dict[str, Any]:
    """The nightly restore drill, once: a sample of the partitions restored from the bucket
    into a scratch topic, checked batch by batch against the source by the Great Expectations
    suite, then the scratch topic and its remote data deleted."""
    _run_dag("restore_drill", env, logs)
    _print_job_lines(directory, "restore_drill", ("restore_drill",))
    runs = airflow_env.reports_dir(directory) / "runs" / "restore_drill"
    paths = sorted(runs.glob("*/restore_drill/summary.json"), key=lambda p: p.stat().st_mtime)
    details = json.loads(paths[-1].read_text()).get("details", {})
    if not details.get("success"):
        raise DemoFailedError(f"the restore drill did not pass: {details}")
    drilled = sorted(f"{row['topic']}-{row['partition']}" for row in details.get("drilled", []))
    say(
        11,
        f"restore drill DAG succeeded: {', '.join(drilled)} restored from the bucket into a"
        " scratch topic, every record batch's offsets, leader epoch and CRC equal the"
        " source's, the scratch topic and its remote data deleted",
    )
    return {"drilled": drilled, "data_docs": details.get("data_docs")}


def _record_bucket(
    cluster: EmbeddedCluster, topic_id: Uuid, say: Callable[[int, str], None]
) -> list[disaster.PartitionHolding]:
    """Per partition, which acknowledged records the bucket holds (read back from its
    manifests as a restore reads them) and which only the brokers' disks."""
    views = partition_views(cluster, TOPIC, PARTITIONS)
    holdings = disaster.bucket_holdings(cluster, TOPIC, topic_id, views)
    for holding in holdings:
        print(f"    {holding.line(TOPIC)}", flush=True)
    in_bucket = sum(h.in_bucket for h in holdings)
    on_disks = sum(h.only_on_disks for h in holdings)
    say(
        12,
        f"the bucket holds {in_bucket} acknowledged records; {on_disks} sit in the active"
        " segments, only on the brokers' disks (KIP-405 copies closed segments): the remote"
        " tier's recovery point is the last copy",
    )
    return holdings


def _wipe_cluster(cluster: EmbeddedCluster, say: Callable[[int, str], None]) -> None:
    """Stop the cluster and remove what losing it loses: ZooKeeper's data and every broker's
    log dir. The remote tier, the security material, Airflow's directory, the logs and the
    reports stay."""
    cluster.stop()
    for path, files, size in disaster.wipe(cluster):
        print(f"    removed {path} ({files} files, {size} bytes)", flush=True)
    files, size = disaster.directory_size(cluster.remote_dir)
    kept = [
        cluster.remote_dir,
        cluster.security.directory,
        airflow_env.airflow_home(cluster.directory),
    ]
    print(f"    kept {', '.join(str(p) for p in kept)}", flush=True)
    say(
        13,
        "disaster: the cluster is stopped, ZooKeeper's data and the brokers' log dirs are"
        f" gone; the remote tier ({files} files, {size} bytes) is all that is left of {TOPIC}",
    )


def _restore_cluster(
    cluster: EmbeddedCluster,
    holdings: list[disaster.PartitionHolding],
    committed: dict[int, int],
    say: Callable[[int, str], None],
) -> dict[str, Any]:
    """On the new, empty cluster: ``jobs.restore_cluster`` as User:pipeline, then every
    restored record read back, the group's resumption and a producer's next offset checked."""
    with KafkaCluster(cluster.bootstrap_server, config=cluster.admin_config()) as kafka:
        names = sorted(t.name for t in kafka.refresh_metadata(None).topics)
    if TOPIC in names:
        raise DemoFailedError(f"the new cluster already has {TOPIC}: it was not wiped")
    print(
        f"    new ZooKeeper and brokers {[b.broker_id for b in cluster.brokers]} on"
        f" {cluster.bootstrap_server}; topics: {', '.join(names) or 'none'}",
        flush=True,
    )
    summary_path = _restore_summary_path(cluster.directory)
    command = disaster.job_command(cluster, "restore_cluster", summary_path)
    print(f"    python -m jobs.restore_cluster as User:{PIPELINE} ...", flush=True)
    job_summary, seconds = disaster.run_job(
        command, cluster.directory / "logs" / "restore_cluster.log", summary_path, airflow_env.REPO
    )
    _print_summary_line("restore_cluster", job_summary)
    counts = job_summary.get("counts", {})
    if counts.get("topics_restored") != 1 or counts.get("topics_failed"):
        raise DemoFailedError(f"restore_cluster restored {counts}, not {TOPIC} alone")
    say(
        14,
        f"restore_cluster restored {counts.get('topics_restored')} topic from the bucket in"
        f" {seconds:.1f} s (the command, from its start): {counts.get('segments_restored', 0)}"
        " segments,"
        f" {job_summary.get('bytes', {}).get('restored', 0)} bytes,"
        f" {counts.get('offsets_restored', 0)} group offsets",
    )

    views = partition_views(cluster, TOPIC, PARTITIONS)
    read_back_records = 0
    for holding, view in zip(holdings, views, strict=True):
        where = f"restored {TOPIC}-{view.partition}"
        if (view.log_start_offset, view.high_watermark) != (
            holding.bucket_start,
            holding.bucket_next,
        ):
            raise DemoFailedError(
                f"{where}: log start {view.log_start_offset} and high watermark"
                f" {view.high_watermark}, expected {holding.bucket_start} and"
                f" {holding.bucket_next} (the bucket's)"
            )
        got = read_back(
            cluster.bootstrap_server,
            TOPIC,
            view.partition,
            end_offset=view.high_watermark,
            security=cluster.security.kafka_python(DEMO_CLIENT),
        )
        if got.records != holding.in_bucket or got.mismatches:
            raise DemoFailedError(
                f"{where}: read {got.records} records from {got.first_offset}"
                f" ({got.mismatches} differ), expected {holding.in_bucket} from"
                f" {holding.bucket_start} as written"
            )
        read_back_records += got.records
        print(f"    {view.line()}", flush=True)

    resumed = disaster.group_resumes(cluster, TOPIC, PARTITIONS)
    for holding in holdings:
        expected = min(max(committed[holding.partition], holding.bucket_start), holding.bucket_next)
        got_resumed = resumed[holding.partition]
        if got_resumed["committed"] != expected or got_resumed["first_offset"] != expected:
            raise DemoFailedError(
                f"group {DEMO_GROUP} on restored {TOPIC}-{holding.partition}: committed"
                f" {got_resumed['committed']}, first record at {got_resumed['first_offset']};"
                f" expected {expected} (committed {committed[holding.partition]} before)"
            )
    resumed_at = {p: r["committed"] for p, r in resumed.items()}
    print(f"    group {DEMO_GROUP} resumes at {_offsets_text(resumed_at)}", flush=True)
    next_offsets = {h.partition: h.bucket_next for h in holdings}
    landed = disaster.produce_next(cluster, TOPIC, next_offsets)
    if landed != next_offsets:
        raise DemoFailedError(
            f"a producer's next records landed at {_offsets_text(landed)}, not at the restored"
            f" next offsets {_offsets_text(next_offsets)}"
        )
    lost = sum(h.only_on_disks for h in holdings)
    say(
        15,
        f"read back all {read_back_records} records the bucket held, as written (the"
        f" {lost} records only on the disks are lost); group {DEMO_GROUP} resumes from its"
        f" restored offsets; the next records land at {_offsets_text(landed)}",
    )
    return {
        "topics_restored": counts.get("topics_restored", 0),
        "segments": counts.get("segments_restored", 0),
        "bytes": job_summary.get("bytes", {}).get("restored", 0),
        "seconds": round(seconds, 1),
        "groups_restored": counts.get("groups_restored", 0),
        "offsets_restored": counts.get("offsets_restored", 0),
        "records_read_back": read_back_records,
        "records_lost_with_disks": lost,
        "partitions": {f"{TOPIC}-{h.partition}": h.as_json() for h in holdings},
        "group": DEMO_GROUP,
        "group_resumed_at": {f"{TOPIC}-{p}": r["committed"] for p, r in resumed.items()},
        "next_offsets": {f"{TOPIC}-{p}": o for p, o in landed.items()},
    }


def _restore_summary_path(directory: Path) -> Path:
    return airflow_env.reports_dir(directory) / "disaster" / "restore_cluster.json"


def _print_summary_line(job: str, summary: dict[str, Any]) -> None:
    figures = [f"{k}={v}" for k, v in summary.get("counts", {}).items() if v]
    figures += [f"bytes_{k}={v}" for k, v in summary.get("bytes", {}).items() if v]
    print(
        f"    {job}: {summary['status']} in {summary.get('duration_s', 0):.1f} s;"
        f" {' '.join(figures)}",
        flush=True,
    )


def _offsets_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{TOPIC}-{p}@{o}" for p, o in sorted(offsets.items()))


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _leadership(cluster: EmbeddedCluster, bootstrap: str | None = None) -> TopicLeadership:
    """The topic's leadership from ``bootstrap`` (every broker by default), as the admin."""
    return topic_leadership(
        bootstrap or cluster.bootstrap_server, TOPIC, security=cluster.security.client_security()
    )


def _remote_chain(cluster: EmbeddedCluster, topic_id: Uuid) -> RemoteChain:
    return remote_chain(
        cluster.bootstrap_server,
        TOPIC,
        topic_id,
        FAILOVER_PARTITION,
        connection_config=cluster.admin_config(),
    )


def _print_security(cluster: EmbeddedCluster) -> None:
    security = cluster.security
    lines = [
        "ZooKeeper requires SASL; the brokers log in to it and set its znode ACLs",
        f"clients: SASL_SSL with {SASL_MECHANISM} (CA {security.ca_pem});"
        " between brokers: TLS with certificates",
        f"users {', '.join(USERS)}; ACLs: storage-core acls as admin"
        f" ({cluster.directory / 'logs' / 'security-setup.log'})",
        f"the pipeline runs as User:{PIPELINE}; client settings in {security.directory}",
    ]
    for line in lines:
        print(f"    {line}", flush=True)


def _show_refusals(cluster: EmbeddedCluster) -> None:
    """What a client without credentials and an authenticated one without ACLs get."""
    tls_only = {"security_protocol": "SSL", "ssl_cafile": str(cluster.security.ca_pem)}
    refused = _produce_error(cluster, tls_only)
    denied = _produce_error(cluster, cluster.security.kafka_python(STRANGER))
    if refused is None:
        raise DemoFailedError("a client without credentials produced to the SASL_SSL listener")
    if denied is None or "TopicAuthorizationFailed" not in denied:
        raise DemoFailedError(
            f"User:{STRANGER}, without ACLs, was not denied TOPIC_AUTHORIZATION_FAILED: {denied}"
        )
    print(f"    a client without credentials is refused: {refused}", flush=True)
    reason = _last_failed_authentication(cluster)
    if reason:
        print(f"      the broker: {reason}", flush=True)
    print(f"    User:{STRANGER} (authenticated, no ACL) is denied: {denied}", flush=True)


def _last_failed_authentication(cluster: EmbeddedCluster) -> str | None:
    """The latest 'Failed authentication' line of the brokers' output, without its time."""
    lines = []
    for node in cluster.brokers:
        text = node.output_path.read_text(errors="replace")
        lines += [line for line in text.splitlines() if "Failed authentication with" in line]
    if not lines:
        return None
    latest = max(lines)  # each starts with its time stamp
    return latest[latest.index("Failed authentication") :]


def _produce_error(cluster: EmbeddedCluster, security: dict[str, Any]) -> str | None:
    """The error kafka-python shows when producing one record with ``security``; None when
    the record was written."""
    # api_version given: the producer does not connect until it sends, so a refusal is the
    # send's error and close() stops its connection attempts
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_server,
        max_block_ms=REFUSAL_TIMEOUT_MS,
        request_timeout_ms=REFUSAL_TIMEOUT_MS,
        api_version=KAFKA_PYTHON_API_VERSION,
        **security,
    )
    try:
        producer.send(TOPIC, b"refused", partition=0).get(REFUSAL_TIMEOUT_MS / 1000)
    except KafkaError as error:
        text = str(error)
        return text if text.startswith(type(error).__name__) else f"{type(error).__name__}: {text}"
    finally:
        producer.close(timeout=2)
    return None


def _led_on_every_broker(cluster: EmbeddedCluster) -> TopicLeadership | None:
    """The topic's leadership once every broker's Metadata has a leader for each partition
    (a new topic reaches each broker's metadata cache in its own time)."""
    answers = []
    for node in cluster.brokers:
        try:
            answers.append(_leadership(cluster, node.bootstrap))
        except (OSError, RuntimeError):
            return None
    led = all(
        len(a.partitions) == PARTITIONS and all(p.leader_id != NO_LEADER for p in a.partitions)
        for a in answers
    )
    return answers[0] if led else None


def _leadership_or_none(cluster: EmbeddedCluster) -> TopicLeadership | None:
    """None while no broker answers (a controller may be moving)."""
    try:
        return _leadership(cluster)
    except (OSError, RuntimeError):
        return None


def _wait_until(check: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + BROKER_EFFECT_TIMEOUT_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailedError(f"waited {BROKER_EFFECT_TIMEOUT_S:.0f} s for {what}")
        time.sleep(0.2)


def _print_leadership(when: str, leadership: TopicLeadership | None) -> None:
    print(f"    {when}:", flush=True)
    if leadership is None:
        print("      (no broker answered Metadata)", flush=True)
        return
    for line in leadership.lines():
        print(f"      {line}", flush=True)


def _check_java() -> None:
    """Spark's driver is a JVM: say so before anything starts rather than deep in a job."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return
    if shutil.which("java") is None:
        raise DemoFailedError("Spark needs Java 17 or later: install it or set JAVA_HOME")


def _airflow() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def _step_printer(started: float) -> Callable[[int, str], None]:
    def say(step: int, message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {step}/{STEPS} {message}", flush=True)

    return say


def _create_topic(cluster: EmbeddedCluster) -> None:
    with KafkaCluster(cluster.bootstrap_server, config=cluster.admin_config()) as kafka:
        KafkaAdminClient(kafka).create_topic(
            TOPIC,
            num_partitions=PARTITIONS,
            replication_factor=REPLICATION_FACTOR,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            },
        )


def _set_topic_config(cluster: EmbeddedCluster, name: str, value: str) -> None:
    with KafkaCluster(cluster.bootstrap_server, config=cluster.admin_config()) as kafka:
        KafkaAdminClient(kafka).incremental_alter_configs(
            ConfigResourceType.TOPIC,
            TOPIC,
            [AlterConfigOp(name=name, op=AlterConfigOpType.SET, value=value)],
        )


def _run_dag(dag_id: str, env: dict[str, str], logs: Path) -> None:
    log_path = logs / f"airflow-dags-test-{dag_id}.log"
    print(f"    running DAG {dag_id} through Airflow (output: {log_path}) ...", flush=True)
    code = run_to_completion(
        f"airflow dags test {dag_id}",
        [_airflow(), "dags", "test", dag_id],
        log_path=log_path,
        env=env,
        timeout_s=DAG_TIMEOUT_S,
    )
    if code != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise DemoFailedError(f"DAG {dag_id} failed (exit {code}); end of {log_path}:\n{tail}")


def _wait_for(
    cluster: EmbeddedCluster, done: Callable[[PartitionView], bool], what: str
) -> list[PartitionView]:
    deadline = time.monotonic() + BROKER_EFFECT_TIMEOUT_S
    while True:
        views = partition_views(cluster, TOPIC, PARTITIONS)
        if all(done(v) for v in views):
            return views
        if time.monotonic() > deadline:
            table = "\n".join(v.line() for v in views)
            raise DemoFailedError(f"waited {BROKER_EFFECT_TIMEOUT_S:.0f} s for {what}:\n{table}")
        time.sleep(0.5)


def _print_views(views: list[PartitionView]) -> None:
    for view in views:
        print(f"    {view.line()}", flush=True)


def _check_read_back(
    cluster: EmbeddedCluster, views: list[PartitionView], records_per_partition: int
) -> dict[str, dict[str, int]]:
    """Every partition holds ``records_per_partition`` acknowledged records, and each one
    from its log start on reads back as written; returns, per partition, the first offset
    read and the records read."""
    read = {}
    for view in views:
        got = read_back(
            cluster.bootstrap_server,
            TOPIC,
            view.partition,
            end_offset=view.high_watermark,
            security=cluster.security.kafka_python(DEMO_CLIENT),
        )
        expected = view.high_watermark - view.log_start_offset
        if view.high_watermark != records_per_partition:
            raise DemoFailedError(
                f"{TOPIC}-{view.partition}: high watermark {view.high_watermark},"
                f" expected {records_per_partition} acknowledged records"
            )
        if got.first_offset != view.log_start_offset or got.records != expected:
            raise DemoFailedError(
                f"{TOPIC}-{view.partition}: read {got.records} records from offset"
                f" {got.first_offset}; expected {expected} from {view.log_start_offset}"
            )
        if got.mismatches:
            raise DemoFailedError(
                f"{TOPIC}-{view.partition}: {got.mismatches} records differ from what was written"
            )
        read[f"{TOPIC}-{view.partition}"] = {
            "first_offset": got.first_offset,
            "records": got.records,
        }
    return read


def _print_job_lines(directory: Path, dag_id: str, tasks: tuple[str, ...]) -> None:
    """One line per job of the run: status, time, and the counts and bytes that are not 0."""
    runs = airflow_env.reports_dir(directory) / "runs" / dag_id
    for task_id in tasks:
        paths = sorted(runs.glob(f"*/{task_id}/summary.json"), key=lambda p: p.stat().st_mtime)
        if not paths:
            raise DemoFailedError(f"the {dag_id} run left no summary of {task_id} under {runs}")
        summary = json.loads(paths[-1].read_text())
        figures = [f"{k}={v}" for k, v in summary.get("counts", {}).items() if v]
        figures += [f"bytes_{k}={v}" for k, v in summary.get("bytes", {}).items() if v]
        print(
            f"    {task_id}: {summary['status']} in {summary.get('duration_s', 0):.1f} s;"
            f" {' '.join(figures)}",
            flush=True,
        )


def _report_lines(directory: Path) -> list[str]:
    runs = airflow_env.reports_dir(directory) / "runs"
    lines = []
    for dag_id in ("tiering", "retention_nightly"):
        docs = sorted(runs.glob(f"{dag_id}/*/quality/report/gx/uncommitted/data_docs/*/index.html"))
        summaries = sorted(runs.glob(f"{dag_id}/*/quality/summary.json"))
        if not docs or not summaries:
            raise DemoFailedError(f"the {dag_id} run left no data-quality report under {runs}")
        lines.append(f"{dag_id} data quality: {docs[-1]}")
        lines.append(f"{dag_id} summary:      {summaries[-1]}")
    reports = sorted(runs.glob("retention_nightly/*/report.json"))
    if not reports:
        raise DemoFailedError(f"the retention_nightly run left no report.json under {runs}")
    lines.append(f"retention report:          {reports[-1]}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
