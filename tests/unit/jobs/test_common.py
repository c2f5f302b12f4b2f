"""jobs.common: options, run summary, log lines, progress, run locks, the failure contract."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from jobs.common import (
    Progress,
    RunSummary,
    job_parser,
    log_dir_locks,
    log_partition,
    parse_job_args,
    run_job,
)
from storage_core.errors import InvalidConfigError


def parse(argv: list[str], environ: dict[str, str] | None = None):
    parser = job_parser("demo", "A demo job.")
    return parse_job_args(parser, argv, job="demo", environ=environ or {})


def test_defaults_and_log_dirs_from_the_broker_config(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "broker.id=3\nlog.dirs=/a,/b\nremote.log.storage.manager.class.name=LocalTieredStorage\n"
        "rsm.config.dir=/remote\n"
    )
    args = parse(["--broker-config", str(config), "--rsm-config", "x=1"])
    assert args.bootstrap_server == "localhost:9092"
    assert args.log_dirs == (Path("/a"), Path("/b"))
    assert args.rsm_class_name == "LocalTieredStorage"
    assert args.rsm_config == {"rsm.config.dir": "/remote", "rsm.config.x": "1"}
    assert args.spark_master == "local[*]"
    assert not args.dry_run


def test_explicit_log_dirs_win_and_env_fills_in(tmp_path: Path) -> None:
    args = parse(
        ["--log-dir", "/x", "--log-dir", "/y", "--dry-run"],
        {"STORAGE_CORE_BOOTSTRAP_SERVER": "h:1", "SPARK_MASTER": "local[2]"},
    )
    assert args.log_dirs == (Path("/x"), Path("/y"))
    assert args.bootstrap_server == "h:1"
    assert args.spark_master == "local[2]"
    assert args.dry_run
    assert parse([], {"STORAGE_CORE_LOG_DIRS": "/p, /q"}).log_dirs == (Path("/p"), Path("/q"))


def test_bad_arguments_exit_2_with_the_option_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--rsm-config", "novalue"])
    assert exc.value.code == 2
    assert "--rsm-config expects KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["--broker-config", "/nonexistent/server.properties"])
    with pytest.raises(SystemExit):
        parse(["--lock-wait-s", "-1"])


def test_every_brokers_log_dirs_from_the_command_line_or_the_environment() -> None:
    args = parse(["--broker-log-dirs", "1=/b1", "--broker-log-dirs", "2=/b2a, /b2b"])
    assert args.broker_log_dirs == {1: (Path("/b1"),), 2: (Path("/b2a"), Path("/b2b"))}
    assert args.log_dirs_by_broker(None) == args.broker_log_dirs
    from_env = parse([], {"STORAGE_CORE_BROKER_LOG_DIRS": "3=/c;1=/a,/b"})
    assert from_env.broker_log_dirs == {3: (Path("/c"),), 1: (Path("/a"), Path("/b"))}
    # the single-broker form: this host's log dirs are the given broker's
    single = parse(["--log-dir", "/x"])
    assert single.broker_log_dirs == {}
    assert single.log_dirs_by_broker(4) == {4: (Path("/x"),)}
    assert single.log_dirs_by_broker(None) == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--broker-log-dirs", "/b1"], "'/b1' is not ID=DIR"),
        (["--broker-log-dirs", "one=/b1"], "'one=/b1' is not ID=DIR"),
        (["--broker-log-dirs", "1="], "broker 1 has no log dir"),
        (["--broker-log-dirs", "1=/a", "--broker-log-dirs", "1=/b"], "broker 1 is given twice"),
        (["--broker-log-dirs", "1=/a", "--log-dir", "/x"], "leave out --log-dir and --broker-id"),
    ],
)
def test_bad_broker_log_dirs_exit_2_naming_the_entry(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_log_dir_is_named() -> None:
    with pytest.raises(ValueError, match="--log-dir"):
        parse([]).require_log_dirs()


def test_summary_is_written_atomically_as_json(tmp_path: Path) -> None:
    summary = RunSummary(job="demo")
    summary.count("segments", 2)
    summary.add_bytes("copied", 10)
    summary.partition("t-0", "ok", segments=2)
    summary.error("boom", partition="t-1")
    summary.finish()
    path = tmp_path / "out" / "summary.json"
    summary.write(path)
    data = json.loads(path.read_text())
    assert data["job"] == "demo"
    assert data["status"] == "error"
    assert data["counts"] == {"segments": 2, "errors": 1}
    assert data["bytes"] == {"copied": 10}
    assert data["errors"] == [{"partition": "t-1", "error": "boom"}]
    assert data["partitions"] == [{"partition": "t-0", "status": "ok", "segments": 2}]
    assert data["started"].endswith("Z") and data["finished"].endswith("Z")
    assert data["duration_s"] >= 0
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]
    assert summary.exit_code == 1


def test_run_job_failure_is_one_line_and_the_summary_still_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    args = parse(["--summary-path", str(path)])

    def body(summary: RunSummary) -> None:
        summary.count("partitions")
        raise RuntimeError("the cluster at localhost:9092 is not reachable\n(retry later)")

    assert run_job(args, body) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["demo: error: the cluster at localhost:9092 is not reachable (retry later)"]
    data = json.loads(path.read_text())
    assert data["status"] == "failed"
    assert data["counts"]["partitions"] == 1

    assert run_job(args, lambda summary: summary.count("partitions")) == 0
    assert json.loads(path.read_text())["status"] == "ok"


def test_run_job_exits_2_on_a_wrong_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(["--summary-path", str(tmp_path / "s.json")])

    def body(summary: RunSummary) -> None:
        raise InvalidConfigError("log dir /b2 is given as broker 1's")

    assert run_job(args, body) == 2
    assert capsys.readouterr().err.strip() == "demo: error: log dir /b2 is given as broker 1's"
    assert json.loads((tmp_path / "s.json").read_text())["status"] == "failed"


def test_log_partition_and_progress_lines() -> None:
    out = io.StringIO()
    log_partition("copied", "t-0", out=out, segments=2, error="a b")
    assert out.getvalue() == 'partition=t-0 event=copied segments=2 error="a b"\n'
    err = io.StringIO()
    progress = Progress("demo", 4, out=err, interval_s=3600)
    progress.advance(1, 100)
    progress.advance(1, 100)
    progress.finish()
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[-1].startswith("progress job=demo done=2 total=4 bytes=200 percent=50")


def test_a_second_run_on_the_same_log_dir_does_not_get_the_lock(tmp_path: Path) -> None:
    dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
    with log_dir_locks(tmp_path / "locks", "demo", dirs, wait_s=0) as held_by:
        assert held_by is None
        with log_dir_locks(tmp_path / "locks", "demo", dirs[1:], wait_s=0.3) as second:
            assert second is not None and second.name.startswith("demo-")
        with log_dir_locks(tmp_path / "locks", "other", dirs, wait_s=0) as other_job:
            assert other_job is None
    with log_dir_locks(tmp_path / "locks", "demo", dirs, wait_s=0) as again:
        assert again is None


def test_discovery_records_the_partitions_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.common import discovery  # noqa: PLC0415
    from storage_core.common import TopicPartition  # noqa: PLC0415
    from storage_core.tiered.operations import (  # noqa: PLC0415
        SkippedPartition,
        SkipReason,
        TargetDiscovery,
    )

    summary = RunSummary(job="demo")
    found = TargetDiscovery(
        targets=(),
        skipped=(
            SkippedPartition(
                topic_partition=TopicPartition("orders", 1),
                why=SkipReason.LEADER_NOT_GIVEN,
                reason="leader is broker 2, not 0",
            ),
        ),
    )
    discovery.record_skipped(found, job="demo", summary=summary)
    assert capsys.readouterr().out == (
        'partition=orders-1 event=skipped job=demo reason="leader is broker 2, not 0"\n'
    )
    assert summary.partitions == [
        {"partition": "orders-1", "status": "skipped", "reason": "leader is broker 2, not 0"}
    ]
    assert summary.counts == {"partitions_skipped": 1}
