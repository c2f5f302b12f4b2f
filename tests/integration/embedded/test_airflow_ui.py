"""The documented Airflow UI command, for real: ``python -m embedded.airflow_ui`` starts the
embedded broker and ``airflow standalone``; a user logs in through the REST API v2, is refused
a run with bad params, triggers ``partition_deletion`` with conf, sees it succeed, and stops
the command by its process group, which leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from embedded.cluster import free_port
from embedded.processes import group_alive
from tests.integration.embedded.process_tree import alive, descendants

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 300.0


class Api:
    def __init__(self, port: int, token: str | None = None) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {self.token}"} if self.token else {}),
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def clean_env() -> dict[str, str]:
    """The user's environment: none of the test session's Airflow settings leak in."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "TIERED_STORAGE", "_AIRFLOW"))
    }


def wait_for_line(path: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        output = path.read_text(errors="replace") if path.exists() else ""
        if text in output:
            return
        assert process.poll() is None, f"the command exited early:\n{output}"
        time.sleep(1.0)
    pytest.fail(f"no {text!r} within {READY_TIMEOUT_S} s:\n{path.read_text()}")


def test_airflow_ui_serves_rest_runs_and_stops_with_its_process_group(tmp_path: Path) -> None:
    work, port = tmp_path / "embedded", free_port()
    output = tmp_path / "airflow_ui.out"
    with output.open("wb") as sink:
        ui = subprocess.Popen(
            [sys.executable, "-m", "embedded.airflow_ui", "--dir", str(work), "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=clean_env(),
            start_new_session=True,
        )
    family: list[int] = []
    try:
        wait_for_line(output, "Airflow UI ready", ui)
        family = descendants(ui.pid)
        password_file = work / "airflow" / "simple_auth_manager_passwords.json.generated"
        assert str(password_file) in output.read_text()
        password = json.loads(password_file.read_text())["admin"]

        status, body = Api(port).call(
            "POST", "/auth/token", {"username": "admin", "password": password}
        )
        assert status == 201, body
        api = Api(port, body["access_token"])
        assert Api(port).call("GET", "/api/v2/dags")[0] == 401  # no token, no access

        status, body = api.call("GET", "/api/v2/dags")
        assert status == 200
        assert {d["dag_id"] for d in body["dags"]} == {
            "tiering",
            "retention_nightly",
            "partition_deletion",
            "data_quality",
        }
        assert all(d["is_paused"] for d in body["dags"])  # nothing runs until a user says so

        # bad params are refused before a run exists
        status, body = api.call(
            "POST",
            "/api/v2/dags/partition_deletion/dagRuns",
            {"logical_date": None, "conf": {"topic": "no such/topic", "confirm": "x"}},
        )
        assert status == 400
        assert "Invalid input for param topic" in body["detail"]

        # a UI-style run with conf: a dry run of deleting the demo topic
        assert api.call("PATCH", "/api/v2/dags/partition_deletion", {"is_paused": False})[0] == 200
        conf = {"topic": "events", "partitions": None, "confirm": "events", "dry_run": True}
        status, run = api.call(
            "POST", "/api/v2/dags/partition_deletion/dagRuns", {"logical_date": None, "conf": conf}
        )
        assert status == 200, run
        run_path = f"/api/v2/dags/partition_deletion/dagRuns/{run['dag_run_id']}"
        deadline = time.monotonic() + RUN_TIMEOUT_S
        state = run["state"]
        while state not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(2.0)
            state = api.call("GET", run_path)[1]["state"]
        status, tasks = api.call("GET", f"{run_path}/taskInstances")
        task_states = {t["task_id"]: t["state"] for t in tasks["task_instances"]}
        assert state == "success", task_states
        assert task_states == {
            "validate_request": "success",
            "mark_partitions": "success",
            "delete_partitions": "success",
        }
        runs = work / "reports" / "runs" / "partition_deletion"
        dry = [json.loads(p.read_text()) for p in runs.glob("*/delete_partitions/summary.json")]
        assert any(s["dry_run"] and s["status"] == "ok" for s in dry), dry

        # the plugin's page is served by the real api-server, to logged-in users only
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{api.base}/tiered-storage/", timeout=30)
        assert anonymous.value.code == 401
        page = urllib.request.urlopen(
            urllib.request.Request(
                f"{api.base}/tiered-storage/", headers={"Authorization": f"Bearer {api.token}"}
            ),
            timeout=30,
        )
        assert page.status == 200 and b"Tiered storage status" in page.read()

        # stop it by its process group: everything it started goes away
        assert len(family) >= 5  # broker, standalone and its four components at least
        os.killpg(ui.pid, signal.SIGTERM)
        assert ui.wait(90) == 0
        deadline = time.monotonic() + 30
        while alive(family) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert alive(family) == [], "processes outlived the stop"
        assert "Stopped Airflow and the broker." in output.read_text()
    finally:
        if ui.poll() is None or group_alive(ui.pid):
            os.killpg(ui.pid, signal.SIGKILL)
            for pid in family + descendants(ui.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
