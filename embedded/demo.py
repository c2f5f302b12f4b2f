"""The main job on the embedded default, end to end:

    1. start the cluster        a broker on 127.0.0.1, the remote tier in <dir>/remote-tier
    2. produce                  kafka-python writes records to a remote-enabled topic whose
                                local retention keeps one segment; Airflow's database is
                                migrated meanwhile
    3. tiering DAG              ``airflow dags test tiering``: copy_segments -> quality; the
                                broker then deletes the local copies of tiered segments
    4. consume tiered offsets   kafka-python reads every partition from offset 0: the offsets
                                below the local log start come from the remote tier
    5. retention DAG            retention.bytes is lowered, then ``airflow dags test
                                retention_nightly``: reconcile -> expire_remote -> quality ->
                                report; the log start offset moves past the expired segments
    6. consume again            from the new log start, every record still checks
    7. reports                  where the Data Docs and the JSON summaries are

Every step is checked: a failed DAG run, a record that does not read back as written, or an
offset that does not move exits non-zero with the reason. The broker and every command the
demo started are stopped when it ends, fails or is interrupted.

    python -m embedded.demo [--dir demo-data] [--records-per-partition N]
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

from embedded import airflow_env
from embedded.cluster import EmbeddedCluster, prepare_directory
from embedded.partition_view import PartitionView, partition_views
from embedded.processes import ProcessGroup, run_to_completion
from embedded.workload import produce, read_back
from storage_core.client import (
    AlterConfigOp,
    AlterConfigOpType,
    KafkaAdminClient,
    KafkaCluster,
)
from storage_core.client.admin import ConfigResourceType

TOPIC = "events"
PARTITIONS = 3
SEGMENT_BYTES = 256 * 1024
LOCAL_RETENTION_BYTES = SEGMENT_BYTES  # keep about one closed segment locally
DAG_TIMEOUT_S = 20 * 60.0
MIGRATE_TIMEOUT_S = 5 * 60.0
BROKER_EFFECT_TIMEOUT_S = 60.0


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
        default=4000,
        help="records written to each of the 3 partitions (about 0.5 KiB each)",
    )
    args = parser.parse_args(argv)
    if args.records_per_partition < 2000:
        parser.error("--records-per-partition must be at least 2000 (a few segments each)")
    try:
        run_demo(args.dir, records_per_partition=args.records_per_partition)
    except (DemoFailedError, OSError, RuntimeError) as e:
        print(f"\nDemo FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nDemo interrupted; everything it started is stopped.", file=sys.stderr)
        return 130
    return 0


def run_demo(directory: Path, *, records_per_partition: int) -> None:
    directory = directory.resolve()
    _check_java()
    prepare_directory(directory, fresh=True)
    started = time.monotonic()
    say = _step_printer(started)
    logs = directory / "logs"

    with EmbeddedCluster(directory) as cluster:
        say(1, f"broker on {cluster.bootstrap_server}; remote tier {cluster.remote_dir}")
        env = airflow_env.airflow_environment(directory, cluster)
        migrate = ProcessGroup(
            "airflow db migrate",
            [_airflow(), "db", "migrate"],
            log_path=logs / "airflow-db-migrate.log",
            env=env,
        ).start()
        try:
            _create_topic(cluster)
            count = produce(
                cluster.bootstrap_server,
                TOPIC,
                partitions=PARTITIONS,
                records_per_partition=records_per_partition,
            )
            say(2, f"produced {count} records to {TOPIC} ({PARTITIONS} partitions) with acks=all")
            code = migrate.wait(MIGRATE_TIMEOUT_S)
        finally:
            migrate.stop()
        if code != 0:
            raise DemoFailedError(f"airflow db migrate exited {code}:\n{migrate.tail()}")

        _run_dag("tiering", env, logs)
        tiered = _wait_for(
            cluster,
            lambda v: v.earliest_local_offset > 0 and v.highest_tiered_offset >= 0,
            "the broker to delete the local copies of tiered segments",
        )
        say(3, "tiering DAG succeeded (copy_segments -> quality)")
        _print_job_lines(directory, "tiering", ("copy_segments", "quality"))
        _print_views(tiered)

        _check_read_back(cluster, tiered, records_per_partition)
        below_local = sum(v.earliest_local_offset - v.log_start_offset for v in tiered)
        say(4, f"read every record back from offset 0; {below_local} came from the remote tier")

        before = {v.partition: v.log_start_offset for v in tiered}
        retained_bytes = 4 * SEGMENT_BYTES
        _set_topic_config(cluster, "retention.bytes", str(retained_bytes))
        _run_dag("retention_nightly", env, logs)
        expired = _wait_for(
            cluster,
            lambda v: v.log_start_offset > before[v.partition],
            "the log start offset to move past the expired segments",
        )
        say(5, f"retention DAG succeeded with retention.bytes={retained_bytes}")
        _print_job_lines(directory, "retention_nightly", ("reconcile", "expire_remote", "quality"))
        _print_views(expired)
        _check_read_back(cluster, expired, records_per_partition)
        say(6, "read back from the new log start: every record matches")

        say(7, "reports")
        for line in _report_lines(directory):
            print(f"    {line}", flush=True)
        print(
            f"    browse them in the Airflow UI: python -m embedded.airflow_ui --dir {directory}",
            flush=True,
        )
    print(f"Demo succeeded in {time.monotonic() - started:.0f} s; the broker is stopped.")


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
        print(f"[{time.monotonic() - started:6.1f} s] {step}/7 {message}", flush=True)

    return say


def _create_topic(cluster: EmbeddedCluster) -> None:
    with KafkaCluster(cluster.bootstrap_server) as kafka:
        KafkaAdminClient(kafka).create_topic(
            TOPIC,
            num_partitions=PARTITIONS,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            },
        )


def _set_topic_config(cluster: EmbeddedCluster, name: str, value: str) -> None:
    with KafkaCluster(cluster.bootstrap_server) as kafka:
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
) -> None:
    for view in views:
        got = read_back(
            cluster.bootstrap_server, TOPIC, view.partition, end_offset=view.high_watermark
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
