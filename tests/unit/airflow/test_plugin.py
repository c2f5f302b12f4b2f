"""The plugin package: connection settings, the job operator (against stand-in jobs), the
status page and the web app (FastAPI TestClient)."""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

CONN = {
    "conn_type": "generic",
    "host": "127.0.0.1",
    "port": 9092,
    "extra": {
        "log_dirs": ["/data/a", "/data/b"],
        "remote_storage_manager": "S3RemoteStorageManager",
        "rsm_config": {"s3.bucket": "tier", "s3.prefix": "p"},
        "broker_config": "/etc/server.properties",
        "aws_conn_id": "aws_tier",
    },
}


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_TS_UNIT", json.dumps(CONN))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_TIER",
        "aws://AKIDUNIT:SECRETUNIT@/?region_name=eu-west-1"
        "&endpoint_url=http%3A%2F%2F127.0.0.1%3A5055",
    )


def test_hook_builds_job_arguments_and_environment(connection: None) -> None:
    from tiered_storage_plugin.hooks import TieredStorageHook

    hook = TieredStorageHook("ts_unit")
    assert hook.settings().job_arguments() == [
        "--bootstrap-server",
        "127.0.0.1:9092",
        "--log-dir",
        "/data/a",
        "--log-dir",
        "/data/b",
        "--broker-config",
        "/etc/server.properties",
        "--remote-storage-manager",
        "S3RemoteStorageManager",
        "--rsm-config",
        "s3.bucket=tier",
        "--rsm-config",
        "s3.prefix=p",
    ]
    env = hook.job_environment()
    assert env == {
        "AWS_ACCESS_KEY_ID": "AKIDUNIT",
        "AWS_SECRET_ACCESS_KEY": "SECRETUNIT",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5055",
    }
    # credentials never reach the command line
    assert not any("SECRETUNIT" in a for a in hook.settings().job_arguments())


@pytest.mark.parametrize(
    ("host", "port", "extra", "message"),
    [
        (None, 9092, {}, "needs host and port"),
        ("h", 9092, {"log_dirs": 5}, "'log_dirs' must be a list"),
        ("h", 9092, {"rsm_config": ["a=b"]}, "'rsm_config' must be an object"),
    ],
)
def test_bad_connections_are_refused(
    host: str | None, port: int, extra: dict[str, Any], message: str
) -> None:
    from tiered_storage_plugin.hooks import ClusterSettings, TieredStorageConnectionError

    with pytest.raises(TieredStorageConnectionError, match=message):
        ClusterSettings.from_connection(host=host, port=port, extra=extra)


def test_log_dirs_as_a_comma_separated_string() -> None:
    from tiered_storage_plugin.hooks import ClusterSettings

    settings = ClusterSettings.from_connection(
        host="h", port=1, extra={"log_dirs": "/a, /b", "rsm_config": {}}
    )
    assert settings.log_dirs == ("/a", "/b")


def test_run_key_is_the_data_interval_not_now() -> None:
    from tiered_storage_plugin import paths

    start = datetime(2026, 1, 2, 2, 0, tzinfo=UTC)
    end = datetime(2026, 1, 3, 2, 0, tzinfo=UTC)
    context = {"data_interval_start": start, "data_interval_end": end, "run_id": "x"}
    assert paths.run_key(context) == "20260102T020000--20260103T020000"
    manual = {"data_interval_start": None, "run_id": "manual__2026-01-02T02:00:00+00:00"}
    assert paths.run_key(manual) == "manual__2026-01-02T02_00_00_00_00"


# ------------------------------------------------------------------ the operator
FAKE_JOB = """
import argparse, json, sys
parser = argparse.ArgumentParser()
parser.add_argument("--summary-path")
parser.add_argument("--report-dir")
parser.add_argument("--dry-run", action="store_true")
args, rest = parser.parse_known_args()
summary = {{"job": "{job}", "status": "{status}", "argv": sys.argv[1:], "dry_run": args.dry_run,
           "errors": {errors}, "partitions": []}}
with open(args.summary_path, "w") as f:
    json.dump(summary, f)
if args.report_dir:
    import pathlib
    site = pathlib.Path(args.report_dir) / "gx/uncommitted/data_docs/local_site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html>docs</html>")
print("partition=orders-0 action={job} status=ok")
{tail}
"""


@pytest.fixture
def fake_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "__init__.py").write_text("")
    (project / "jobs" / "copy_segments.py").write_text(
        FAKE_JOB.format(job="copy_segments", status="ok", errors="[]", tail="")
    )
    (project / "jobs" / "quality.py").write_text(
        FAKE_JOB.format(
            job="quality",
            status="error",
            errors='[{"partition": "orders-0", "error": "expect_no_hole failed: Ry+1 < Lx"}]',
            tail='print("ERROR suite offsets failed: 1 of 6 expectations", file=sys.stderr)\n'
            "sys.exit(1)",
        )
    )
    monkeypatch.setenv("TIERED_STORAGE_PROJECT_DIR", str(project))
    monkeypatch.setenv("TIERED_STORAGE_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("AIRFLOW_CONN_TIERED_STORAGE_DEFAULT", json.dumps(CONN))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_TIER", "aws://AKIDUNIT:SECRETUNIT@/?region_name=eu-west-1")
    return tmp_path / "reports"


class _Dag:
    dag_id = "tiering"


def context() -> dict[str, Any]:
    start = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    return {"dag": _Dag(), "data_interval_start": start, "data_interval_end": start, "run_id": "r"}


def test_operator_runs_the_job_and_returns_its_summary(fake_jobs: Path) -> None:
    from tiered_storage_plugin.operators import TieringJobOperator

    op = TieringJobOperator(
        task_id="copy_segments", job="copy_segments", dry_run="True", extra_args=["--x", "1"]
    )
    summary = op.execute(context())
    assert summary["job"] == "copy_segments"
    argv = summary["argv"]
    assert argv[:2] == ["--bootstrap-server", "127.0.0.1:9092"]
    assert argv[-3:] == ["--dry-run", "--x", "1"]
    expected = fake_jobs / "runs/tiering/20260101T000500--20260101T000500/copy_segments"
    assert argv[argv.index("--summary-path") + 1] == str(expected / "summary.json")
    assert summary["dry_run"] is True
    assert "SECRETUNIT" not in json.dumps(argv)


def test_operator_fails_with_the_job_errors_and_the_report_link(fake_jobs: Path) -> None:
    from tiered_storage_plugin.operators import TieringJobError, TieringJobOperator

    op = TieringJobOperator(task_id="quality", job="quality")
    with pytest.raises(TieringJobError) as caught:
        op.execute(context())
    message = str(caught.value)
    assert "job quality exited with code 1" in message
    assert "orders-0: expect_no_hole failed: Ry+1 < Lx" in message
    assert "ERROR suite offsets failed: 1 of 6 expectations" in message
    assert (
        "/tiered-storage/docs/runs/tiering/20260101T000500--20260101T000500/quality/index.html"
        in message
    )


def test_failing_suites_fail_without_retry() -> None:
    from airflow.sdk.exceptions import AirflowFailException
    from tiered_storage_plugin.operators import is_quality_verdict, summary_failures

    verdict = {
        "job": "quality",
        "status": "error",
        "errors": [{"partition": None, "error": "remote_segments: 1 segment lacks objects"}],
        "details": {
            "success": False,
            "suites": {
                "remote_segments": {
                    "success": False,
                    "failed_expectations": [{"expectation": "objects_present"}],
                }
            },
        },
    }
    assert is_quality_verdict(verdict)
    assert summary_failures(verdict) == ["remote_segments: 1 segment lacks objects"]
    del verdict["errors"]
    assert summary_failures(verdict) == ['remote_segments: {"expectation": "objects_present"}']
    assert not is_quality_verdict({"job": "quality", "status": "failed", "details": {}})
    assert not is_quality_verdict({"job": "copy_segments", "details": {"success": False}})
    from tiered_storage_plugin.operators import DataQualityFailedError

    assert issubclass(DataQualityFailedError, AirflowFailException)


@pytest.mark.parametrize(
    ("summary", "changed"),
    [
        ({"counts": {"segments_copied": 3}, "bytes": {"copied": 100}}, True),
        ({"counts": {"segments_planned": 0}, "bytes": {"planned": 0}}, False),
        ({"counts": {"segments_deleted": 1}}, True),
        ({"counts": {"orphan_objects_deleted": 2}}, True),
        ({"counts": {"segments_copied": 3}, "dry_run": True}, False),
        ({"counts": {}, "bytes": {"deleted": 5}}, True),
        ({}, False),
    ],
)
def test_only_runs_that_changed_the_remote_tier_emit_the_asset(
    summary: dict[str, Any], changed: bool
) -> None:
    from tiered_storage_plugin.operators import changed_remote_tier

    assert changed_remote_tier(summary) is changed


def test_operator_refuses_an_unknown_job() -> None:
    from tiered_storage_plugin.operators import TieringJobOperator

    with pytest.raises(ValueError, match="unknown tiering job 'compact'"):
        TieringJobOperator(task_id="t", job="compact")


# ------------------------------------------------------------------ status page and web app
def write_summary(root: Path, key: str, finished: str, partitions: list[dict[str, Any]]) -> None:
    path = root / "runs" / "tiering" / key / "copy_segments" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps({"job": "copy_segments", "finished": finished, "partitions": partitions})
    )


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    for i in range(3):
        write_summary(
            root,
            f"2026010{i + 1}T000000--2026010{i + 1}T000000",
            f"2026-01-0{i + 1}T00:00:10Z",
            [
                {
                    "partition": "orders-0",
                    "status": "ok",
                    "local_bytes": 4096,
                    "remote_bytes": 1000 * (i + 1),
                    "log_start_offset": 0,
                    "local_log_start_offset": 100 * i,
                    "high_watermark": 500,
                    "highest_tiered_offset": 100 * (i + 1) - 1,
                    "copy_lag_bytes": 300 - 100 * i,
                },
                {"partition": "orders-1", "status": "skipped"},
            ],
        )
    (root / "runs" / "junk" / "k" / "t").mkdir(parents=True)
    (root / "runs" / "junk" / "k" / "t" / "summary.json").write_text("{not json")
    return root


def test_status_from_summaries(reports: Path) -> None:
    from tiered_storage_plugin import status

    summaries = status.read_summaries(reports)
    assert [s.finished for s in summaries] == [f"2026-01-0{i}T00:00:10Z" for i in (1, 2, 3)]
    latest, rows = status.latest_statuses(summaries)
    assert latest is not None and latest.finished == "2026-01-03T00:00:10Z"
    assert rows[0].remote_bytes == 3000 and rows[0].copy_lag_offsets == 500 - 1 - 299
    assert rows[1].partition == "orders-1" and rows[1].high_watermark is None
    points = status.chart_points(summaries)
    assert [(p.remote_bytes, p.copy_lag_bytes) for p in points] == [
        (1000, 300),
        (2000, 200),
        (3000, 100),
    ]


def authorized_client(root: Path) -> Any:
    """The app with Airflow's user check stood in for by an always-allowed user (the real
    check is exercised through Airflow's api-server in the integration tests)."""
    from fastapi.testclient import TestClient
    from tiered_storage_plugin.web import airflow_user_required, create_app

    app = create_app(root)
    app.dependency_overrides[airflow_user_required()] = lambda: None
    return TestClient(app)


def test_web_app_serves_status_and_data_docs(reports: Path) -> None:
    from tiered_storage_plugin.web import BACK_BAR_STYLE

    client = authorized_client(reports)
    page = client.get("/")
    assert page.status_code == 200
    assert "<svg" in page.text and "<polyline" in page.text and "<script" not in page.text
    assert (
        "<td>orders-0</td><td>-</td><td>-</td><td>0</td><td>200</td><td>299</td><td>500</td>"
        "<td>4.0 KiB</td><td>-</td><td>2.9 KiB</td>"
    ) in page.text
    assert "DAG tiering, run 20260103T000000--20260103T000000, task copy_segments" in page.text
    assert "Latest Data Docs" not in page.text
    body = client.get("/status.json").json()
    assert body["partitions"][0]["copy_lag_offsets"] == 200
    assert "/" not in body["source"].replace("DAG tiering, run ", "")  # no server paths
    assert str(reports) not in json.dumps(body)
    assert client.get("/docs/latest/index.html").status_code == 404

    site = reports / "runs/data_quality/k1/quality/report/gx/uncommitted/data_docs/local_site"
    (site / "validations").mkdir(parents=True)
    (site / "index.html").write_text("<html><body>suite offsets</body></html>")
    (site / "validations" / "v.html").write_text('<html><body class="x">one validation</body>')
    (site / "static").mkdir()
    (site / "static" / "favicon.ico").write_bytes(b"\x00\x00\x01\x00")
    page = client.get("/")
    assert 'href="/docs/latest/index.html"' in page.text
    back = '<nav id="tiered-storage-back" style="{}"><a href="/">&larr; Tiered storage status</a>'
    back = back.format(BACK_BAR_STYLE)
    index = client.get("/docs/latest/index.html")
    assert index.text == f"<html><body>{back}</nav>suite offsets</body></html>"
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    validation = client.get("/docs/latest/validations/v.html").text
    assert validation == f'<html><body class="x">{back}</nav>one validation</body>'
    assert client.get("/docs/latest/static/favicon.ico").content == b"\x00\x00\x01\x00"
    run = client.get("/docs/runs/data_quality/k1/quality/index.html")
    assert run.status_code == 200 and "suite offsets" in run.text
    assert client.get("/docs/runs/data_quality/k2/quality/index.html").status_code == 404
    assert client.get("/docs/latest/missing.html").status_code == 404
    assert client.get("/docs/latest/..%2F..%2F..%2F..%2Fsummary.json").status_code == 404


STATUS_ENTRY = {
    "partition": "events-0",
    "status": "ok",
    "leader": 2,
    "leader_epoch": 7,
    "log_start_offset": 0,
    "local_log_start_offset": 1000,
    "high_watermark": 2072,
    "highest_tiered_offset": 1999,
    "active_segment_base_offset": 2000,
    "local_bytes": 3 * 1024 * 1024,
    "local_segments": 2,
    "remote_bytes": 5 * 1024 * 1024,
    "remote_segments": 4,
    "copy_lag_bytes": 0,
    "copy_lag_segments": 0,
}


def write_status(root: Path, finished: str) -> None:
    path = root / "runs" / "tiering" / "k" / "status" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "job": "tiering_status",
                "dag_id": "tiering",
                "run_id": "scheduled__2026-01-01T04:15:00+00:00",
                "task_id": "status",
                "finished": finished,
                "partitions": [STATUS_ENTRY],
            }
        )
    )


def test_status_page_says_who_wrote_it_and_warns_when_stale(tmp_path: Path) -> None:
    from tiered_storage_plugin import status

    write_status(tmp_path, "2026-01-01T04:20:00.000000Z")
    summaries = status.read_summaries(tmp_path)
    at = datetime(2026, 1, 1, 5, 38, tzinfo=UTC)
    page = status.status_page(summaries, docs_href=None, now=at, tiering_interval_s=300)
    assert "DAG tiering, run scheduled__2026-01-01T04:15:00+00:00, task status" in page
    assert "finished 2026-01-01 04:20:00 UTC" in page and "1 h 18 min old" in page
    assert "Stale:" in page and "older than the tiering schedule (every 5 min)" in page
    # partition: leader and epoch, the four offsets, sizes in units with segment counts
    assert (
        "<td>events-0</td><td>2</td><td>7</td><td>0</td><td>1000</td><td>1999</td>"
        "<td>2072</td><td>3.0 MiB</td><td>2</td><td>5.0 MiB</td><td>4</td>"
    ) in page
    assert "72 offsets: 72 in the active segment (copied once it rolls)" in page
    assert "last 1 status snapshots" in page and "bytes (binary units)" in page

    fresh = datetime(2026, 1, 1, 4, 22, tzinfo=UTC)
    page = status.status_page(summaries, docs_href=None, now=fresh, tiering_interval_s=300)
    assert "2 min old" in page and "Stale:" not in page


def test_plugin_registers_the_app_and_its_view() -> None:
    import tiered_storage_airflow_plugin as module

    plugin = module.TieredStoragePlugin
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/tiered-storage"
    (view,) = plugin.external_views
    assert view["href"] == "tiered-storage/" and not view["href"].startswith("/")
    # the UI shows the page at /plugin/<url_route> + the page's own path: not doubled
    assert view["url_route"] != "tiered-storage"


def test_airflow_loads_the_plugin() -> None:
    from airflow import plugins_manager

    plugins, errors = plugins_manager._get_plugins()
    assert errors == {}
    assert [p.name for p in plugins if p.name == "tiered_storage"] == ["tiered_storage"]
    assert "hooks" not in sys.modules or "tiered_storage" not in str(
        getattr(sys.modules["hooks"], "__file__", "")
    )
    assert os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"].endswith("plugins")


def test_the_dry_run_plan_is_a_table_per_partition() -> None:
    from tiered_storage_plugin.deletion import deletion_plan, plan_table

    entries = [
        {**STATUS_ENTRY, "partition": "events-0"},
        {**STATUS_ENTRY, "partition": "events-1", "log_start_offset": 500, "high_watermark": 500},
        {**STATUS_ENTRY, "partition": "other-0"},
    ]
    rows = deletion_plan("events", [0, 1, 2], entries)
    assert [r.partition for r in rows] == ["events-0", "events-1", "events-2"]
    lines = plan_table(rows).splitlines()
    assert lines[0].split("  ")[0] == "partition" and "offsets that would go" in lines[0]
    assert lines[2].split() == [
        "events-0",
        "2",
        "3145728",
        "4",
        "5242880",
        "0..2071",
        "(2072",
        "offsets)",
    ]
    assert lines[3].endswith("none (empty)")
    assert lines[4].endswith("unknown (no remote-enabled log dir here)")
    assert lines[-1].split() == [
        "total",
        "(3",
        "partitions)",
        "4",
        "6291456",
        "8",
        "10485760",
        "2072",
        "offsets",
    ]


def test_web_app_serves_the_plan(tmp_path: Path) -> None:
    client = authorized_client(tmp_path)
    assert client.get("/plans/partition_deletion/k").status_code == 404
    plan = tmp_path / "runs/partition_deletion/k/mark_partitions/plan.txt"
    plan.parent.mkdir(parents=True)
    plan.write_text("partition ...\n")
    answer = client.get("/plans/partition_deletion/k")
    assert answer.status_code == 200 and answer.text == "partition ...\n"
    assert answer.headers["content-type"].startswith("text/plain")
    assert client.get("/plans/partition_deletion/..").status_code == 404


def test_a_skip_reason_skips_the_job() -> None:
    from airflow.sdk.exceptions import AirflowSkipException
    from tiered_storage_plugin.operators import TieringJobOperator

    operator = TieringJobOperator(task_id="d", job="delete_partitions", skip_reason="dry run")
    with pytest.raises(AirflowSkipException, match="job delete_partitions not run: dry run"):
        operator.execute({})


@pytest.mark.parametrize(
    ("dag_id", "body", "refused"),
    [
        ("partition_deletion", {"conf": {"topic": "events", "confirm": "evnets"}}, True),
        ("partition_deletion", {"conf": {"partitions": [1]}}, True),
        ("partition_deletion", {"conf": {"topic": "events", "confirm": "events"}}, False),
        ("partition_deletion", {"conf": {}}, False),  # the sweep
        ("tiering", {"conf": {"topic": "events", "confirm": "x"}}, False),
        ("partition_deletion", "not json", False),  # Airflow answers it (422)
    ],
)
def test_the_trigger_guard_refuses_what_parse_request_refuses(
    dag_id: str, body: Any, refused: bool
) -> None:
    from tiered_storage_plugin.trigger_guard import refusal

    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    reason = refusal(dag_id, raw)
    assert (reason is not None) == refused, reason
    if refused:
        assert reason.startswith("refused, no run created: ")


def test_the_quality_job_is_named_after_the_dag_run(connection: None, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from tiered_storage_plugin.hooks import TieredStorageHook
    from tiered_storage_plugin.operators import TieringJobOperator, dag_run_name

    context = {"dag": SimpleNamespace(dag_id="data_quality"), "run_id": "manual__1"}
    assert dag_run_name(context) == "data_quality manual__1"
    assert dag_run_name({"run_id": "manual__1"}) is None
    hook = TieredStorageHook("ts_unit")
    command = TieringJobOperator(task_id="q", job="quality").command(
        hook, tmp_path, run_name=dag_run_name(context)
    )
    assert command[command.index("--run-name") + 1] == "data_quality manual__1"
    copy = TieringJobOperator(task_id="c", job="copy_segments").command(hook, tmp_path, "x")
    assert "--run-name" not in copy


def chart_labels(svg: str) -> list[tuple[float, str]]:
    """(x, text) of the x-axis labels of a chart 260 px high."""
    return [
        (float(x), text)
        for x, text in re.findall(
            r'<text (?:class="x-label" )?x="([0-9.]+)" y="216" text-anchor="middle">([^<]*)</text>',
            svg,
        )
    ]


def test_chart_labels_of_snapshots_in_one_minute_are_distinct_and_inside_the_chart() -> None:
    """Two status snapshots 45 s apart: each has its own label (to the second), the day is
    said once under the axis, and the last label ends inside the chart's width."""
    from tiered_storage_plugin import status

    points = [
        status.RunPoint(label="2026-11-29T03:10:05.120Z", remote_bytes=1000, copy_lag_bytes=10),
        status.RunPoint(label="2026-11-29T03:10:50.700Z", remote_bytes=2000, copy_lag_bytes=0),
    ]
    svg = status.chart_svg(points, width=720)
    labels = chart_labels(svg)
    assert [text for _, text in labels] == ["03:10:05", "03:10:50"]
    assert "status snapshot finished (UTC, 2026-11-29)" in svg
    last_x, last = labels[-1]
    assert last_x + status._text_width(last) / 2 <= 720
    first_x, first = labels[0]
    assert first_x - status._text_width(first) / 2 >= 0


def test_chart_labels_never_overlap_and_keep_the_last_point() -> None:
    from tiered_storage_plugin import status

    for count in (2, 3, 7, 9, 17, 24):
        points = [
            status.RunPoint(
                label=f"2026-11-{1 + i // 12:02d}T{i % 12:02d}:00:{i:02d}Z",
                remote_bytes=i,
                copy_lag_bytes=0,
            )
            for i in range(count)
        ]
        labels = chart_labels(status.chart_svg(points))
        texts = [text for _, text in labels]
        assert len(set(texts)) == len(texts), texts
        assert texts[-1] == status.time_labels([p.label for p in points])[0][-1]
        for (x1, t1), (x2, t2) in itertools.pairwise(labels):
            assert x2 - x1 >= (status._text_width(t1) + status._text_width(t2)) / 2, labels
        assert labels[-1][0] + status._text_width(labels[-1][1]) / 2 <= 720
