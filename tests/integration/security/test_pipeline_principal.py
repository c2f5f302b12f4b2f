# Airflow reads its configuration once, at import: airflow and the plugin (which imports it) are
# imported only after the module's fixture has set the environment (as tests/*/airflow do).
# ruff: noqa: PLC0415
"""The pipeline as a principal of its own on a secured broker, with the least ACLs it needs.

One broker process with a SASL_SSL listener (SCRAM-SHA-512 for the pipeline, PLAIN for the
brokers and the administrator, a super user), Kafka's ACL authorizer with
``allow.everyone.if.no.acl.found=false``, and the remote tier in a local directory. The
pipeline's SCRAM credential is made with ``storage-core user-scram`` and its ACLs
(``jobs.common.pipeline_acls.ALL_PIPELINE_ACLS``) with ``storage-core acls``, both over the
secured listener. The tiered-storage connection carries the login and password in Airflow's
own fields and security_protocol, sasl_mechanism and ssl_ca_location in its extra.

Story::

    orders (2 partitions), doomed (1): 600 records each, 16 KiB segments, remote-enabled,
                                 a chunked remote tier (each copy writes its manifest)
    tiering                      copy_segments -> quality -> status: segments remote, and
                                 the topic manifests
    group "billing" on orders    committed at 450 and 600 (the administrator commits)
    retention_nightly            orders' retention.bytes shrunk: remote segments deleted;
                                 backup_consumer_offsets backs billing up (Describe on groups)
    data_quality                 green, with its Data Docs
    partition_deletion (doomed)  DeleteTopics, then delete_partitions: nothing of doomed left
    preferred_leader_election    ElectLeaders (ALTER on the cluster): already preferred
    restore_topic orders         --dry-run, then restored into orders-restored with
                                 --restore-offsets: every record the bucket holds reads back,
                                 billing's offsets committed there (Create and AlterConfigs
                                 on topics, Read on groups and topics)
    each ACL revoked in turn     the job (or the DAG's task function) that needs it fails
                                 naming that ACL as storage-core acls takes it
    no Describe on topics        copy_segments sees none: it skips the partitions of the log
                                 dirs, the reason naming the Describe ACL
    every log, summary, report, Data Docs page and the Airflow database grepped for the
    password: not one holds it
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from jobs.common.pipeline_acls import (
    ALL_PIPELINE_ACLS,
    ALTER_TOPIC_CONFIGS,
    CREATE_TOPICS,
    DESCRIBE_GROUPS,
    DESCRIBE_TOPICS,
    IMPLIED_BY,
    READ_GROUPS,
    READ_REMOTE_LOG_METADATA,
    READ_TOPICS,
    PipelineAcl,
)
from storage_core.client.errors import BrokerResponseError
from tests.integration.security.secured_pipeline_support import (
    ADMIN,
    MECHANISM,
    SecuredBroker,
    secured_broker,
)
from tests.unit.airflow import airflow_env

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[3]
LOGIN = "pipeline"
PASSWORD = "pipeline-Pa55-c0ffee-7d41e2"  # unique, so that the grep cannot miss it
PRINCIPAL = f"User:{LOGIN}"
ORDERS, DOOMED = "orders", "doomed"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024
CHUNK_BYTES = 4096
JOB_TIMEOUT_S = 600
GROUP = "billing"
COMMITTED = {0: 450, 1: RECORDS}  # billing's offsets in orders, per partition


def value_of(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 8


def produce(secured: SecuredBroker, topic: str, partitions: int, records: int = RECORDS) -> None:
    # small batches: a batch larger than segment.bytes is refused
    producer = Producer({**secured.confluent(), "linger.ms": 5, "batch.size": 8000})
    for partition in range(partitions):
        for i in range(records):
            producer.produce(topic, value_of(i), partition=partition)
    assert producer.flush(60) == 0


def create_remote_topic(secured: SecuredBroker, topic: str, partitions: int) -> None:
    admin = AdminClient(secured.confluent())
    new = NewTopic(
        topic,
        partitions,
        1,
        config={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
    )
    admin.create_topics([new])[topic].result(timeout=30)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = airflow_env.configure(tmp_path_factory.mktemp("airflow"))
    from airflow.utils import db

    db.resetdb()
    return home


@pytest.fixture(scope="module")
def secured(airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("secured-pipeline")
    with secured_broker(root, chunk_bytes=CHUNK_BYTES) as broker:
        broker.add_scram_user(LOGIN, PASSWORD)
        broker.grant(PRINCIPAL, ALL_PIPELINE_ACLS)
        for topic, partitions in ((ORDERS, 2), (DOOMED, 1)):
            create_remote_topic(broker, topic, partitions)
            produce(broker, topic, partitions)
        os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"] = json.dumps(
            {
                "conn_type": "generic",
                "host": "127.0.0.1",
                "port": broker.broker.port,
                "login": LOGIN,
                "password": PASSWORD,
                "extra": {
                    "log_dirs": [str(broker.broker.log_dir)],
                    "broker_config": str(broker.broker.config_path),
                    "remote_storage_manager": "LocalTieredStorage",
                    "rsm_config": broker.rsm_config,
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": MECHANISM,
                    "ssl_ca_location": str(broker.pki.ca_pem),
                },
            }
        )
        (root / "outputs").mkdir()
        try:
            yield broker
        finally:
            os.environ.pop("AIRFLOW_CONN_TIERED_STORAGE_DEFAULT", None)


@pytest.fixture(scope="module")
def dags(airflow_home: Path) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(airflow_env.DAGS))
    assert bag.import_errors == {}
    return bag.dags


def keep_output(secured: SecuredBroker, name: str, text: str) -> None:
    """What a run printed, kept for the secrets test."""
    (secured.directory / "outputs" / f"{name}-{uuid.uuid4().hex[:6]}.txt").write_text(text)


def run_dag(
    secured: SecuredBroker,
    capfd: pytest.CaptureFixture[str],
    dag: Any,
    conf: dict[str, Any] | None = None,
) -> tuple[str, dict[str, str]]:
    dag_run = dag.test(run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    captured = capfd.readouterr()
    keep_output(secured, dag.dag_id, captured.out + captured.err)
    return str(dag_run.state), states


def remote_logs(secured: SecuredBroker, topic: str) -> list[Path]:
    return sorted(secured.remote_dir.glob(f"{topic}-*/*/*.log"))


def latest_summary(dag_id: str, task_id: str) -> dict[str, Any]:
    paths = sorted(
        (airflow_env.reports_dir() / "runs" / dag_id).glob(f"*/{task_id}/summary.json"),
        key=lambda p: p.stat().st_mtime,
    )
    assert paths, f"no summary of {dag_id}.{task_id}"
    return dict(json.loads(paths[-1].read_text()))


def pipeline_security() -> Any:
    from tiered_storage_plugin.client_security import ClientSecurity

    hook_extra = json.loads(os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"])["extra"]
    return ClientSecurity.from_connection(login=LOGIN, password=PASSWORD, extra=hook_extra)


def run_job(secured: SecuredBroker, job: str, *args: str) -> tuple[int, str]:
    """``python -m jobs.<job>`` as the operator runs it (the connection's security settings in
    the client.properties file named by STORAGE_CORE_CLIENT_CONFIG, nothing on the command
    line); returns its exit code and the message its task would fail with (the operator's
    ``failure_message``: the summary's errors and the job's error lines)."""
    from tiered_storage_plugin.client_security import client_config_environment
    from tiered_storage_plugin.operators import failure_message

    summary_path = secured.directory / "outputs" / f"{job}-{uuid.uuid4().hex[:6]}.json"
    command = [
        sys.executable,
        "-m",
        f"jobs.{job}",
        "--bootstrap-server",
        secured.bootstrap,
        "--log-dir",
        str(secured.broker.log_dir),
        "--broker-config",
        str(secured.broker.config_path),
        "--remote-storage-manager",
        "LocalTieredStorage",
        *(arg for k, v in secured.rsm_config.items() for arg in ("--rsm-config", f"{k}={v}")),
        "--summary-path",
        str(summary_path),
        "--spark-master",
        "local[2]",
        *args,
    ]
    with client_config_environment(pipeline_security()) as client_env:
        assert set(client_env) == {"STORAGE_CORE_CLIENT_CONFIG"}
        result = subprocess.run(
            command,
            env={**os.environ, **client_env},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
            check=False,
        )
    keep_output(secured, job, result.stdout + result.stderr)
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    message = failure_message(job, result.returncode, result.stderr.splitlines(), summary)
    return result.returncode, message


def commit_group(secured: SecuredBroker, group: str, topic: str, offsets: dict[int, int]) -> None:
    """The group's offsets in ``topic``, committed by the administrator (no member left)."""
    consumer = Consumer({**secured.confluent(), "group.id": group})
    try:
        consumer.commit(
            offsets=[ConfluentTopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def committed_offsets(secured: SecuredBroker, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({**secured.confluent(), "group.id": group})
    try:
        answers = consumer.committed(
            [ConfluentTopicPartition(topic, p) for p in range(partitions)], timeout=30
        )
        return [int(a.offset) for a in answers]
    finally:
        consumer.close()


def read_back(
    secured: SecuredBroker, topic: str, partition: int, start: int, end: int
) -> list[Any]:
    """Records ``start..end - 1`` of a partition as (offset, value), as the administrator."""
    consumer = Consumer(
        {**secured.confluent(), "group.id": f"reader-{uuid.uuid4().hex[:6]}",
         "enable.auto.commit": False}
    )  # fmt: skip
    records: list[Any] = []
    try:
        consumer.assign([ConfluentTopicPartition(topic, partition, start)])
        misses = 0
        while len(records) < end - start and misses < 30:
            message = consumer.poll(2)
            if message is None:
                misses += 1
                continue
            assert message.error() is None, message.error()
            records.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return records


def ok(states: dict[str, str]) -> bool:
    return all(state == "success" for state in states.values())


def test_tiering_runs_green_as_the_pipeline_principal(
    secured: SecuredBroker, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    state, states = run_dag(secured, capfd, dags["tiering"])
    assert (state, ok(states)) == ("success", True), states
    copy = latest_summary("tiering", "copy_segments")
    assert copy["status"] == "ok" and copy["counts"]["segments_copied"] > 0, copy
    assert remote_logs(secured, ORDERS) and remote_logs(secured, DOOMED)
    status = latest_summary("tiering", "status")
    assert {p["partition"] for p in status["partitions"]} == {"orders-0", "orders-1", "doomed-0"}


def test_retention_nightly_runs_green_as_the_pipeline_principal(
    secured: SecuredBroker, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    before = remote_logs(secured, ORDERS)
    assert before, "the tiering test runs first"
    admin = AdminClient(secured.confluent())
    resource = ConfigResource(
        "topic",
        ORDERS,
        incremental_configs=[
            ConfigEntry("retention.bytes", "40000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    # a group in a remote-enabled topic: its offsets are backed up (Describe on the group)
    commit_group(secured, GROUP, ORDERS, COMMITTED)
    state, states = run_dag(secured, capfd, dags["retention_nightly"])
    assert (state, ok(states)) == ("success", True), states
    assert latest_summary("retention_nightly", "expire_remote")["counts"]["segments_deleted"] > 0
    assert len(remote_logs(secured, ORDERS)) < len(before)
    backup = latest_summary("retention_nightly", "backup_consumer_offsets")
    assert backup["counts"]["groups"] == 1 and backup["counts"]["offsets"] == 2, backup


def test_data_quality_runs_green_as_the_pipeline_principal(
    secured: SecuredBroker, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    state, states = run_dag(secured, capfd, dags["data_quality"])
    assert (state, states) == (
        "success",
        {"quality": "success", "publish": "success", "status": "success"},
    )
    summary = latest_summary("data_quality", "quality")
    assert summary["status"] == "ok" and summary["counts"]["remote_segments"] > 0
    assert list(airflow_env.reports_dir().rglob("index.html")), "no Data Docs written"


def test_partition_deletion_runs_green_as_the_pipeline_principal(
    secured: SecuredBroker, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert remote_logs(secured, DOOMED), "the tiering test copies doomed first"
    conf = {"topic": DOOMED, "partitions": [0], "confirm": DOOMED, "dry_run": False}
    state, states = run_dag(secured, capfd, dags["partition_deletion"], conf)
    assert (state, ok(states)) == ("success", True), states
    assert remote_logs(secured, DOOMED) == []
    assert remote_logs(secured, ORDERS)


def test_preferred_leader_election_runs_green_as_the_pipeline_principal(
    secured: SecuredBroker, dags: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    conf = {"topic": ORDERS, "partitions": None}
    state, states = run_dag(secured, capfd, dags["preferred_leader_election"], conf)
    assert (state, ok(states)) == ("success", True), states
    summary = latest_summary("preferred_leader_election", "elect_leaders")
    assert summary["counts"] == {"partitions": 2, "already_preferred": 2}, summary


def test_restore_topic_runs_as_the_pipeline_principal(secured: SecuredBroker) -> None:
    """The plan, then orders restored into orders-restored with billing's offsets: each
    partition reads back from its restored log start, record for record."""
    target = f"{ORDERS}-restored"
    code, message = run_job(
        secured, "restore_topic", "--topic", ORDERS, "--target", target, "--dry-run"
    )
    assert code == 0, message
    summary_path = secured.directory / "outputs" / "restore.json"
    code, message = run_job(
        secured, "restore_topic", "--topic", ORDERS, "--target", target, "--restore-offsets",
        "--summary-path", str(summary_path),
    )  # fmt: skip
    assert code == 0, message
    summary = json.loads(summary_path.read_text())
    counts = summary["counts"]
    assert counts["partitions_restored"] == 2 and counts["segments_restored"] > 0, summary
    assert counts["groups_restored"] == 1 and counts["offsets_restored"] == 2, summary
    planned = {p["partition"]: p for p in summary["partitions"]}
    for partition in range(2):
        plan = planned[f"{ORDERS}-{partition}"]
        start, end = int(plan["log_start_offset"]), int(plan["next_offset"])
        assert 0 < start < end <= RECORDS, plan  # retention deleted the first segments
        records = read_back(secured, target, partition, start, end)
        assert records == [(i, value_of(i)) for i in range(start, end)]
    # clamped to the restored range: at most the next offset of each partition
    restored = committed_offsets(secured, GROUP, target, 2)
    for partition, offset in enumerate(restored):
        plan = planned[f"{ORDERS}-{partition}"]
        expected = min(max(COMMITTED[partition], int(plan["log_start_offset"])),
                       int(plan["next_offset"]))  # fmt: skip
        assert offset == expected, (partition, restored, plan)


def _expected_hint(acl: PipelineAcl) -> str:
    """The client's words for a denied request (storage_core.client.errors)."""
    option = "--cluster" if acl.resource_type == "cluster" else f"--{acl.resource_type} <name>"
    return f"--operation {acl.operation} {option}"


def _restore(secured: SecuredBroker, *args: str) -> tuple[int, str]:
    """orders restored into a new name (the bucket's orders and billing's backup)."""
    target = f"restored-{uuid.uuid4().hex[:6]}"
    return run_job(secured, "restore_topic", "--topic", ORDERS, "--target", target, *args)


def _fails_without(secured: SecuredBroker, acl: PipelineAcl) -> str:
    """Run what needs ``acl`` and return its error text (it must fail)."""
    if acl.operation == "Delete":  # the partition_deletion DAG's mark_partitions task
        from tiered_storage_plugin.deletion import DeletionRequest, mark_for_deletion

        kept = f"kept-{uuid.uuid4().hex[:6]}"
        create_remote_topic(secured, kept, 1)
        request = DeletionRequest(topic=kept, partitions=None, dry_run=False)
        with pytest.raises(BrokerResponseError) as denied:
            mark_for_deletion(secured.bootstrap, request, pipeline_security())
        return str(denied.value)
    if acl.operation == "Alter":
        code, message = run_job(secured, "preferred_leader_election", "--topic", ORDERS)
    elif acl == DESCRIBE_GROUPS:
        code, message = run_job(secured, "backup_consumer_offsets", "--dry-run")
    elif acl in (CREATE_TOPICS, ALTER_TOPIC_CONFIGS):
        code, message = _restore(secured)
    elif acl in (READ_GROUPS, READ_TOPICS):
        code, message = _restore(secured, "--restore-offsets")
    elif acl == READ_REMOTE_LOG_METADATA:
        code, message = run_job(secured, "reconcile")
    elif acl.operation == "Write":
        late = f"late-{uuid.uuid4().hex[:6]}"  # closed segments to copy
        create_remote_topic(secured, late, 1)
        produce(secured, late, 1, records=300)
        code, message = run_job(secured, "copy_segments", "--topic", late)
    elif acl == DESCRIBE_TOPICS:  # a topic named is refused (all topics: none is seen)
        code, message = run_job(secured, "cluster_status", "--topic", ORDERS)
    else:
        code, message = run_job(secured, "copy_segments")
    assert code != 0, message
    return message


@pytest.mark.parametrize(
    "acl",
    ALL_PIPELINE_ACLS,
    ids=[f"{a.operation}-{a.resource_type}-{a.name}" for a in ALL_PIPELINE_ACLS],
)
def test_a_principal_lacking_one_acl_fails_naming_it(
    secured: SecuredBroker, acl: PipelineAcl
) -> None:
    """The principal without ``acl`` (and without the on-demand DAG's ACL that implies it, as
    a principal for the scheduled DAGs only is)."""
    if acl == READ_REMOTE_LOG_METADATA:  # remote segments whose metadata reconcile reads
        tiered = f"tiered-{uuid.uuid4().hex[:6]}"
        create_remote_topic(secured, tiered, 1)
        produce(secured, tiered, 1, records=300)
        assert run_job(secured, "copy_segments", "--topic", tiered)[0] == 0
    revoked = (acl, *IMPLIED_BY.get(acl, ()))
    for each in revoked:
        secured.revoke(PRINCIPAL, each)
    try:
        error = _fails_without(secured, acl)
    finally:
        secured.grant(PRINCIPAL, revoked)
    assert "AUTHORIZATION_FAILED" in error, error
    assert _expected_hint(acl) in error, error
    if acl.resource_type == "topic" and acl.name != "*":
        assert acl.name in error, error


def test_without_describe_the_jobs_skip_the_topics_saying_which_acl(
    secured: SecuredBroker,
) -> None:
    """Metadata of every topic leaves out those the principal may not describe (as Kafka's
    does), so nothing can fail: the partitions in the log dirs are skipped, naming the ACL."""
    revoked = (DESCRIBE_TOPICS, *IMPLIED_BY[DESCRIBE_TOPICS])
    for each in revoked:
        secured.revoke(PRINCIPAL, each)
    try:
        code, _message = run_job(secured, "copy_segments")
    finally:
        secured.grant(PRINCIPAL, revoked)
    assert code == 0
    (output,) = sorted(
        (secured.directory / "outputs").glob("copy_segments-*.txt"),
        key=lambda p: p.stat().st_mtime,
    )[-1:]
    skipped = [
        line
        for line in output.read_text().splitlines()
        if line.startswith(f"partition={ORDERS}-0 event=skipped")
    ]
    assert skipped and "no Describe ACL on it for this principal" in skipped[0], skipped


def test_no_log_summary_report_or_page_holds_the_password(
    secured: SecuredBroker, airflow_home: Path
) -> None:
    """Every file the runs wrote: task logs and the Airflow database, the jobs' summaries,
    reports, plans and Data Docs, what the DAG runs and jobs printed, and the broker's log."""
    roots = [airflow_home, airflow_env.reports_dir(), secured.directory / "outputs"]
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    files.append(secured.broker.output_path)
    names = {p.name for p in files}
    # what the grep covers (it would pass on nothing otherwise)
    assert "summary.json" in names and "index.html" in names and "airflow.db" in names, names
    assert any(p.suffix == ".txt" and "tiering" in p.name for p in files)
    secrets = {"the pipeline's password": PASSWORD.encode(), "the admin's": ADMIN[1].encode()}
    for path in files:
        content = path.read_bytes()
        for what, secret in secrets.items():
            if what == "the admin's" and path == secured.broker.output_path:
                continue
            assert secret not in content, f"{what} is in {path}"
