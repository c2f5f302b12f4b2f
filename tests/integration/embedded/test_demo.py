"""The README's main command on the embedded default: ``python -m embedded.demo`` (what
``make demo`` runs) succeeds end to end on its cluster (ZooKeeper, three brokers): the leader
of a partition is SIGKILLed while a producer goes on, another replica leads at a higher
epoch, the next tiering run copies from it without a gap, the killed broker rejoins the ISR,
every acknowledged record reads back, the quality runs are green. Then the whole cluster is
lost (ZooKeeper's data and the brokers' log dirs removed) and ``jobs.restore_cluster``
restores it from the bucket on a new, empty cluster: every record the bucket held reads back,
the ones only on the lost disks are counted, the consumer group resumes from its backed-up
offsets and producers continue at the restored next offset. The reports are where it says,
and every process it started is stopped. The cluster is secured (SASL_SSL, SCRAM, ACLs,
ZooKeeper SASL): a client without credentials is refused, one without ACLs denied, and no
password is in any file the demo wrote but the private ones that hold them."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.embedded.process_tree import alive, descendants, mentioning
from tests.integration.embedded.test_airflow_ui import REPO, clean_env

pytestmark = pytest.mark.timeout(900)


def start_demo(work: Path) -> subprocess.Popen[bytes]:
    """``python -m embedded.demo --dir work``, its output (stderr too) on a pipe, with SIGINT
    not ignored (see ``sigint_not_ignored``)."""
    with sigint_not_ignored():
        return subprocess.Popen(
            [sys.executable, "-m", "embedded.demo", "--dir", str(work)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=clean_env(),
        )


@contextmanager
def sigint_not_ignored() -> Iterator[None]:
    """SIGINT handled, not ignored, while a child starts. A shell without job control (a
    script's background job) starts its commands with SIGINT ignored, an ignored signal stays
    ignored across exec, and Python then leaves it so: the demo would never see the Ctrl-C
    its test sends. A handled signal is reset to its default in the child."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_demo_tiers_consumes_expires_and_reports(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    demo = start_demo(work)
    seen: set[int] = set()
    finished = threading.Event()

    def sample_descendants() -> None:  # what it starts, while it runs (not only when it prints)
        while not finished.wait(0.2):
            seen.update(descendants(demo.pid))

    sampler = threading.Thread(target=sample_descendants, daemon=True)
    sampler.start()
    lines = []
    assert demo.stdout is not None
    for raw in demo.stdout:
        lines.append(raw.decode(errors="replace"))
    finished.set()
    sampler.join(5)
    output = "".join(lines)
    assert demo.wait(60) == 0, output
    assert "Demo succeeded" in output

    steps = re.findall(r"\] (\d+)/16 ", output)
    assert steps == [str(i) for i in range(1, 17)], output
    from_remote = int(re.search(r"; (\d+) came from the remote tier", output).group(1))
    assert from_remote > 0
    assert len(re.findall(r"copy_segments: ok in [\d.]+ s; .*segments_copied=\d+", output)) == 2
    assert re.search(r"expire_remote: ok in [\d.]+ s; .*segments_deleted=\d+", output)
    # a table of leaders, epochs and ISR before the kill, after it and after the restart
    for when in ("before the kill:", "after the kill:", "after the restart:"):
        assert f"    {when}\n      events-0 " in output, output

    # the reports it names exist: Data Docs and summaries of both DAGs, the retention report,
    # the demo's own summary
    named = re.findall(r"(/\S+\.(?:html|json))", output)
    assert len(named) == 7
    for path in map(Path, named):
        assert path.is_file() and path.is_relative_to(work)
    report = json.loads(Path(next(p for p in named if p.endswith("report.json"))).read_text())
    assert report["failed"] == [] and set(report["jobs"]) == {
        "reconcile",
        "expire_remote",
        "quality",
        "backup_consumer_offsets",
    }

    demo_summary = json.loads(
        next(p for p in map(Path, named) if p.name == "demo-summary.json").read_text()
    )
    failover = demo_summary["failover"]
    killed = failover["killed_broker"]
    assert failover["leader_before"] == killed and failover["leader_after"] not in (killed, -1)
    assert failover["leader_epoch_after"] > failover["leader_epoch_before"]
    assert killed not in failover["isr_after"]
    assert failover["records_acknowledged_during"] > 0
    # the second tiering run copied from the new leader, in its epoch, and left no gap
    chain = demo_summary["remote_chain"]
    assert chain["gaps"] == [] and chain["end_offset"] > failover["tiered_end_before"]
    assert max(chain["copied_by"][str(failover["leader_after"])]) >= failover["leader_epoch_after"]
    rejoined = demo_summary["rejoined"]
    assert rejoined["broker"] == killed and killed in rejoined["isr"]
    # its replica of the partition was removed while it was down and built from the remote
    # tier: the local log starts above 0, with the leader's epochs (the new one included)
    assert rejoined["removed_replica"].startswith(str(work))
    assert rejoined["rebuilt_local_log_start"] > 0
    assert rejoined["rebuilt_epochs"] == rejoined["leader_epochs"]
    assert any(e == failover["leader_epoch_after"] for e, _ in rejoined["rebuilt_epochs"])
    # every acknowledged record, the ones written around the kill too, was read back
    total = demo_summary["records_per_partition"]
    assert total > 3000
    for partition, read in demo_summary["read_back"].items():
        assert read["first_offset"] > 0 and read["first_offset"] + read["records"] == total, (
            partition
        )

    assert_restored_from_the_bucket(output, demo_summary, work)

    # every quality run (two of tiering, one of retention_nightly) is green
    quality = sorted((work / "reports" / "runs").glob("*/*/quality/summary.json"))
    assert len(quality) == 3, quality
    for path in quality:
        assert json.loads(path.read_text())["status"] == "ok", path

    # secured: the refusals it shows, and no password outside the files that hold them
    assert re.search(r"a client without credentials is refused: \w+", output), output
    assert re.search(
        r"User:stranger \(authenticated, no ACL\) is denied: TopicAuthorizationFailedError", output
    ), output
    assert "as User:demo" in output
    assert_no_password_leaked(work)

    # it started ZooKeeper, three brokers, Airflow commands and jobs, and stopped all of them
    assert len(seen) >= 5
    assert alive(sorted(seen)) == []
    assert mentioning(str(work)) == []


def assert_restored_from_the_bucket(output: str, demo_summary: dict, work: Path) -> None:
    """Steps 10-14: the bucket made self-describing, what it holds, the wipe, the restore on a
    new cluster and what reads back from it."""
    assert re.search(r"backup_consumer_offsets: ok in [\d.]+ s; .*groups=1 offsets=3", output)
    assert re.search(r"topic_manifests: ok in [\d.]+ s; .*topics=1", output)
    in_bucket, on_disks = map(
        int, re.search(r"the bucket holds (\d+) acknowledged records; (\d+) sit", output).groups()
    )
    # the nightly drill, once: every partition (a sample of 3 of 3) restored and checked
    assert re.search(
        r"\] 11/16 restore drill DAG succeeded: events-0, events-1, events-2 restored", output
    ), output
    assert demo_summary["drill"]["drilled"] == ["events-0", "events-1", "events-2"]

    # the wipe removed ZooKeeper's data and the three brokers' log dirs, nothing else
    removed = re.findall(r"    removed (/\S+) \(\d+ files", output)
    assert sorted(removed) == sorted(
        [str(work / "zookeeper" / "zookeeper-1" / "data")]
        + [str(work / f"broker-{b}" / "kafka-logs") for b in (1, 2, 3)]
    )
    assert re.search(r"topics: __consumer_offsets, __remote_log_metadata\n", output), output
    assert re.search(r"\] 14/16 restore_cluster restored 1 topic from the bucket", output)

    restore = demo_summary["restore"]
    assert restore["topics_restored"] == 1
    assert restore["segments"] > 0 and restore["bytes"] > 0 and restore["seconds"] > 0
    assert restore["records_read_back"] == in_bucket > 0
    assert restore["records_lost_with_disks"] == on_disks
    total = demo_summary["records_per_partition"]
    for partition, held in restore["partitions"].items():
        before = demo_summary["read_back"][partition]
        # the bucket starts at the log start after retention and ends at the last copy; what
        # lies above it was acknowledged, in the active segments, and lost with the disks
        assert held["remote_log_start_offset"] == before["first_offset"], partition
        assert held["next_offset"] == held["highest_tiered_offset"] + 1, partition
        assert held["high_watermark"] == total, partition
        assert held["records_in_bucket"] == held["next_offset"] - held["remote_log_start_offset"]
        assert held["records_only_on_disks"] == total - held["next_offset"], partition
        # the group resumes where it committed before the disaster; producers continue at the
        # restored next offset
        assert (
            restore["group_resumed_at"][partition] == restore["group_committed_before"][partition]
        )
        assert restore["next_offsets"][partition] == held["next_offset"], partition
    assert restore["groups_restored"] == 1 and restore["offsets_restored"] == 3

    job = json.loads((work / "reports" / "disaster" / "restore_cluster.json").read_text())
    assert job["status"] == "ok" and job["errors"] == []
    assert job["counts"]["segments_restored"] == restore["segments"]


# The files that hold a secret by design, each readable by its owner only.
SECRET_FILES = (
    "security/passwords.json",
    "security/broker-zookeeper.jaas",
    "security/admin.properties",
    "security/pipeline.properties",
    "zookeeper/zookeeper-1/zookeeper-jaas.conf",
)


def assert_no_password_leaked(work: Path) -> None:
    """No password of the cluster (ZooKeeper's, every SCRAM user's) in any file under
    ``work`` (logs, summaries, Data Docs, reports, Airflow's logs and database, the brokers'
    and ZooKeeper's output and data) but the private files that hold them."""
    passwords = json.loads((work / "security" / "passwords.json").read_text())
    assert set(passwords) == {"kafka", "admin", "pipeline", "demo", "stranger"}
    holders = {work / p for p in SECRET_FILES}
    for path in holders:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = {user: pw.encode() for user, pw in passwords.items()}
    checked = []
    for path in sorted(work.rglob("*")):
        if not path.is_file() or path in holders or path.parent == work / "security":
            continue
        data = path.read_bytes()
        checked.append(path)
        for user, secret in secrets.items():
            assert secret not in data, f"{user}'s password is in {path}"
    # the logs, summaries and Data Docs were among them
    names = {p.name for p in checked}
    assert {"airflow-dags-test-tiering.log", "summary.json", "index.html", "broker.log"} <= names
    assert work / "airflow" / "airflow.db" in checked  # task instances' rendered fields


def test_demo_refuses_a_directory_it_did_not_create(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    result = subprocess.run(
        [sys.executable, "-m", "embedded.demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "was not created by the embedded cluster" in result.stderr
    assert precious.read_text() == "keep me"


def test_ctrl_c_stops_the_cluster_and_airflow(tmp_path: Path) -> None:
    """Ctrl-C while the tiering DAG runs: the demo exits 130 and leaves no process behind
    (ZooKeeper, the brokers, Airflow and its jobs)."""
    work = tmp_path / "demo"
    demo = start_demo(work)
    assert demo.stdout is not None
    lines = []
    for raw in demo.stdout:
        lines.append(raw.decode(errors="replace"))
        if "running DAG tiering" in lines[-1]:
            break
    time.sleep(3.0)
    started = descendants(demo.pid)
    assert len(started) >= 5, "".join(lines)  # ZooKeeper, three brokers, airflow dags test
    demo.send_signal(signal.SIGINT)
    rest, _ = demo.communicate(timeout=180)
    output = "".join(lines) + rest.decode(errors="replace")
    assert demo.returncode == 130, output
    assert "everything it started is stopped" in output
    assert alive(started) == []
    assert mentioning(str(work)) == []
