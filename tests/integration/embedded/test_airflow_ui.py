"""The documented Airflow UI command, for real, started once for this module:
``python -m embedded.airflow_ui`` starts the embedded cluster (ZooKeeper, three brokers) and
``airflow standalone``.

1. Through the REST API v2 (as the UI calls it): bad params are refused before a run exists,
   and a refused trigger followed by the form's "Unpause on trigger" leaves no run of any DAG
   (the destructive DAGs have no schedule; the hourly sweep is a DAG of its own); a dry run
   triggered with conf succeeds and writes its plan; the plugin's page answers only
   logged-in users.
2. In a headless Chromium with outbound network unreachable (an air-gapped operator): log in,
   open the status page through the UI's navigation, open the Data Docs index and find the
   validation results listed, open one and find each expectation's name and meaning, trigger
   a dry run of ``partition_deletion`` from the form. Screenshots are kept under
   ``test-artifacts/airflow-ui/`` (or ``$TEST_ARTIFACTS_DIR``).
3. Stopping the command by its process group leaves no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from embedded.ports import free_port
from embedded.processes import group_alive
from tests.integration.embedded.process_tree import alive, descendants, mentioning

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 300.0
PAGE_TIMEOUT_S = 30.0
SCHEDULER_LOOPS_S = 10.0
TOPIC = "events"
# Chromium resolves no name but loopback and sends everything else to a dead proxy: the CDN
# loads of a page fail as they would on an air-gapped machine.
OFFLINE_FLAGS = (
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
)


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

    def wait_for_run(self, dag_id: str, run_id: str) -> tuple[str, dict[str, str]]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
        deadline = time.monotonic() + RUN_TIMEOUT_S
        state = self.call("GET", path)[1]["state"]
        while state not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(2.0)
            state = self.call("GET", path)[1]["state"]
        tasks = self.call("GET", f"{path}/taskInstances")[1]["task_instances"]
        return state, {t["task_id"]: t["state"] for t in tasks}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> list[Any]:
        """The task's log as the UI reads it: one event (``level``, ``event``, ...) each."""
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/"
            f"{task_id}/logs/{try_number}?full_content=true"
        )
        status, body = self.call("GET", path)
        assert status == 200, body
        return list(body["content"])

    def is_paused(self, dag_id: str) -> bool:
        return bool(self.call("GET", f"/api/v2/dags/{dag_id}")[1]["is_paused"])

    def run_ids(self, dag_id: str) -> set[str]:
        runs = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")[1]["dag_runs"]
        return {r["dag_run_id"] for r in runs}


@dataclass
class Ui:
    process: subprocess.Popen[bytes]
    work: Path
    output: Path
    port: int
    api: Api
    password: str
    family: list[int] = field(default_factory=list)

    @property
    def reports(self) -> Path:
        return self.work / "reports"

    def bootstrap_server(self) -> str:
        """Every broker of the embedded cluster, comma-separated."""
        found = re.search(r"brokers on (127\.0\.0\.1:[\d,.:]+\d)", self.output.read_text())
        assert found, self.output.read_text()
        return found.group(1)


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


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    tmp = tmp_path_factory.mktemp("airflow_ui")
    work, port, output = tmp / "embedded", free_port(), tmp / "airflow_ui.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "embedded.airflow_ui", "--dir", str(work), "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=clean_env(),
            start_new_session=True,
        )
    started = Ui(process=process, work=work, output=output, port=port, api=Api(port), password="")
    try:
        wait_for_line(output, "Airflow UI ready", process)
        started.family = descendants(process.pid)
        password_file = work / "airflow" / "simple_auth_manager_passwords.json.generated"
        assert str(password_file) in output.read_text()
        started.password = json.loads(password_file.read_text())["admin"]
        status, body = Api(port).call(
            "POST", "/auth/token", {"username": "admin", "password": started.password}
        )
        assert status == 201, body
        started.api = Api(port, body["access_token"])
        yield started
    finally:
        if process.poll() is None or group_alive(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
            for pid in started.family + descendants(process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_a_refused_trigger_with_unpause_on_trigger_leaves_no_run_of_any_dag(ui: Ui) -> None:
    api = ui.api
    assert Api(ui.port).call("GET", "/api/v2/dags")[0] == 401  # no token, no access
    status, body = api.call("GET", "/api/v2/dags")
    assert status == 200
    assert {d["dag_id"] for d in body["dags"]} == {
        "tiering",
        "retention_nightly",
        "partition_deletion",
        "partition_deletion_sweep",
        "data_quality",
        "preferred_leader_election",
        "restore_topic",
        "restore_drill",
    }
    assert all(d["is_paused"] for d in body["dags"])  # nothing runs until a user says so

    # Airflow 3.3's trigger form with "Unpause on trigger" (ticked by default): the trigger,
    # refused before a run exists, then the unpause, sent whatever the trigger's answer
    refused = [
        ("partition_deletion", {"topic": "no such/topic", "confirm": "x"}, "no such/topic"),
        ("partition_deletion", {"topic": TOPIC, "confirm": "evnets"}, "confirm must equal"),
        ("partition_deletion", {"partitions": [0]}, "partitions and confirm need a topic"),
        ("preferred_leader_election", {"partitions": [0]}, "topic is required"),
        ("restore_topic", {"topic_id": "x" * 22}, "topic is required"),
    ]
    for dag_id, conf, reason in refused:
        status, body = api.call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
        )
        assert status == 400, body
        assert reason in body["detail"], body
        assert api.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})[0] == 200
    # the scheduler loops every second: it had its chances to start anything unpaused
    time.sleep(SCHEDULER_LOOPS_S)
    status, runs = api.call("GET", "/api/v2/dags/~/dagRuns")
    assert status == 200, runs
    assert [(r["dag_id"], r["dag_run_id"]) for r in runs["dag_runs"]] == []
    assert runs["total_entries"] == 0
    assert not api.is_paused("partition_deletion")  # unpaused as asked, and idle
    assert api.is_paused("partition_deletion_sweep")  # the sweep stays off until unpaused


def test_the_dag_list_says_what_each_dag_does_and_when_it_runs(ui: Ui) -> None:
    status, body = ui.api.call("GET", "/api/v2/dags")
    assert status == 200, body
    listed = {
        d["dag_id"]: (d["timetable_summary"], d["timetable_description"]) for d in body["dags"]
    }
    # the list shows the summary, with the description on hover
    assert listed == {
        "tiering": ("Every 5 minutes", "cron */5 * * * * (UTC)"),
        "retention_nightly": ("At 02:00 UTC", "cron 0 2 * * * (UTC)"),
        "partition_deletion_sweep": ("At 30 minutes past the hour", "cron 30 * * * * (UTC)"),
        "data_quality": ("Asset", "Triggered by assets"),
        "partition_deletion": (None, "Never, external triggers only"),
        "preferred_leader_election": (None, "Never, external triggers only"),
        "restore_topic": (None, "Never, external triggers only"),
        "restore_drill": ("At 03:00 UTC", "cron 0 3 * * * (UTC)"),
    }
    descriptions = {d["dag_id"]: d["description"] for d in body["dags"]}
    assert all(descriptions.values()), descriptions
    assert descriptions["partition_deletion_sweep"] == (
        "Delete the remote data of partitions of topics already deleted"
    )


def test_the_remote_tier_asset_lists_the_tasks_that_change_it(ui: Ui) -> None:
    status, body = ui.api.call("GET", "/api/v2/assets?name_pattern=tiered_storage_remote_tier")
    assert status == 200, body
    (asset,) = body["assets"]
    producers = {(t["dag_id"], t["task_id"]) for t in asset["producing_tasks"]}
    assert producers == {
        ("tiering", "copy_segments"),
        ("retention_nightly", "reconcile"),
        ("retention_nightly", "expire_remote"),
        ("partition_deletion", "delete_partitions"),
        ("partition_deletion_sweep", "delete_partitions"),
        ("restore_topic", "restore_topic"),
    }
    assert {d["dag_id"] for d in asset["scheduled_dags"]} == {"data_quality"}


def test_rest_api_triggers_a_dry_run_and_serves_the_plugin_page(ui: Ui) -> None:
    api = ui.api
    # a valid dry run with conf succeeds
    assert api.call("PATCH", "/api/v2/dags/partition_deletion", {"is_paused": False})[0] == 200
    conf = {"topic": TOPIC, "partitions": None, "confirm": TOPIC, "dry_run": True}
    status, run = api.call(
        "POST", "/api/v2/dags/partition_deletion/dagRuns", {"logical_date": None, "conf": conf}
    )
    assert status == 200, run
    state, task_states = api.wait_for_run("partition_deletion", run["dag_run_id"])
    assert state == "success", task_states
    assert task_states == {
        "validate_request": "success",
        "mark_partitions": "success",
        "delete_partitions": "skipped",  # the plan is mark_partitions': nothing is marked
    }
    assert not api.is_paused("partition_deletion")
    (plan,) = (ui.reports / "runs" / "partition_deletion").glob("*/mark_partitions/plan.txt")
    lines = plan.read_text().splitlines()
    assert [line.split()[0] for line in lines if line.startswith(f"{TOPIC}-")] == [
        f"{TOPIC}-0",
        f"{TOPIC}-1",
        f"{TOPIC}-2",
    ]
    assert "offsets that would go" in lines[2] and "total (3 partitions)" in lines[-1]
    # the task log as the UI shows it: no warning from a test library (hypothesis, which the
    # Kafka client's kio imports when it is installed)
    logged = api.task_log("partition_deletion", run["dag_run_id"], "mark_partitions")
    assert any("dry run: deleting topic" in str(e.get("event")) for e in logged), logged
    assert [e for e in logged if "hypothesis" in json.dumps(e).lower()] == []
    # nor any other warning (Airflow's own included: pathspec is pinned below 1.0, which
    # deprecates the pattern class Airflow 3.3 reads .airflowignore with)
    warned = [e for e in logged if e.get("level") in ("warning", "error", "critical")]
    assert warned == []

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


# Spark's log4j layout (``yy/MM/dd HH:mm:ss LEVEL``), the JVM's warnings, Spark's start notices
SPARK_OR_JVM_LINE = re.compile(
    r"^(\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} [A-Z]+ |WARNING: |Using Spark's |Setting default log"
    r" level|To adjust logging level)"
)


def test_a_spark_task_log_has_spark_and_jvm_lines_only_at_their_level(ui: Ui) -> None:
    api = ui.api
    # data_quality runs on the remote tier's events only: unpausing it starts nothing more
    assert api.call("PATCH", "/api/v2/dags/data_quality", {"is_paused": False})[0] == 200
    status, run = api.call("POST", "/api/v2/dags/data_quality/dagRuns", {"logical_date": None})
    assert status == 200, run
    state, task_states = api.wait_for_run("data_quality", run["dag_run_id"])
    assert api.call("PATCH", "/api/v2/dags/data_quality", {"is_paused": True})[0] == 200
    assert (state, task_states["quality"]) == ("success", "success"), task_states
    logged = api.task_log("data_quality", run["dag_run_id"], "quality")
    events = [(e.get("level"), str(e.get("event"))) for e in logged]
    assert any("job=quality command=" in event for _, event in events), events
    assert any(event.startswith("job=quality data_docs=") for _, event in events), events
    # the quality job starts a Spark driver: none of its or its JVM's lines is logged at info
    spark_at_info = [e for level, e in events if level == "info" and SPARK_OR_JVM_LINE.match(e)]
    assert spark_at_info == []
    assert [e for e in events if "hypothesis" in e[1].lower()] == []


# ---------------------------------------------------------------------------- browser
def artifacts_dir() -> Path:
    root = Path(os.environ.get("TEST_ARTIFACTS_DIR") or REPO / "test-artifacts")
    target = root / "airflow-ui"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    return target


def chromium() -> tuple[str, str] | None:
    """Chromium and its driver, or None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def write_status_snapshot(ui: Ui) -> None:
    """The ``status`` task's snapshot of the embedded cluster: ``jobs.cluster_status``, run
    as the task's operator runs it, writing where the task writes."""
    summary = ui.reports / "runs" / "tiering" / "manual__browser_test" / "status" / "summary.json"
    log_dirs = [
        f"--broker-log-dirs={b}={ui.work / f'broker-{b}' / 'kafka-logs'}" for b in (1, 2, 3)
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cluster_status",
            "--bootstrap-server",
            ui.bootstrap_server(),
            # the embedded cluster is secured: the job logs in as the pipeline, as the task does
            "--command-config",
            str(ui.work / "security" / "pipeline.properties"),
            *log_dirs,
            "--summary-path",
            str(summary),
            "--dag-id",
            "tiering",
            "--run-id",
            "manual__browser_test",
            "--task-id",
            "status",
        ],
        env=clean_env(),
        cwd=REPO,
        check=True,
        timeout=120,
    )


def write_data_docs(ui: Ui) -> None:
    """A quality task's Data Docs in the reports root (Great Expectations' own build, on
    tables with a hole between the remote and the local log)."""
    # Great Expectations takes seconds to import: only this test needs it
    from expectations.runner import QualityContext, pandas_frame  # noqa: PLC0415
    from tests.unit.expectations.world import healthy_world  # noqa: PLC0415

    report = ui.reports / "runs" / "data_quality" / "manual__browser_test" / "quality" / "report"
    quality = QualityContext(report, engine="pandas")
    world = healthy_world()
    world.set_partition(local_log_start_offset=45)
    segments, partitions = world.tables()
    for table, rows in (("remote_segments", segments), ("partition_offsets", partitions)):
        quality.validate(
            table,
            pandas_frame(table, rows),
            run_name="data_quality manual__browser_test",
            source=f"cluster ({ui.bootstrap_server()})",
        )


def test_an_operator_reads_the_ui_in_a_browser_without_internet(ui: Ui) -> None:
    found = chromium()
    if found is None:
        pytest.skip(
            "no Chromium here: install Debian's chromium and chromium-driver"
            " (apt-get install chromium chromium-driver) to run the browser test"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    # selenium may be missing (the test is skipped then); GE is slow to import
    from selenium.common.exceptions import WebDriverException  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415
    from selenium.webdriver.common.by import By  # noqa: PLC0415
    from selenium.webdriver.support import expected_conditions  # noqa: PLC0415
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415

    from expectations import DESCRIPTIONS, partition_offsets_suite  # noqa: PLC0415

    write_status_snapshot(ui)
    write_data_docs(ui)
    shots = artifacts_dir()
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        *OFFLINE_FLAGS,
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    # A search that a page's own navigation aborts (the redirect after logging in: "aborted
    # by navigation") is looked at again, as a missing element is, until PAGE_TIMEOUT_S.
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    base = ui.api.base

    def shot(name: str) -> None:
        driver.save_screenshot(str(shots / f"{name}.png"))

    def page_errors() -> list[str]:
        return [
            e["message"]
            for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "favicon" not in e["message"]
        ]

    def text(xpath: str) -> Any:
        return wait.until(expected_conditions.element_to_be_clickable((By.XPATH, xpath)))

    try:
        # log in
        driver.get(base + "/")
        wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
        driver.find_element(By.NAME, "username").send_keys("admin")
        driver.find_element(By.NAME, "password").send_keys(ui.password)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        text("//*[normalize-space(text())='Browse']").click()

        # the status page, through the navigation
        text("//*[normalize-space(text())='Tiered storage']").click()
        wait.until(expected_conditions.url_contains("/plugin/"))
        frame = wait.until(expected_conditions.presence_of_element_located((By.TAG_NAME, "iframe")))
        wait.until(lambda d: "/tiered-storage/" in d.current_url)
        assert driver.current_url == f"{base}/plugin/storage/tiered-storage/"
        driver.switch_to.frame(frame)
        body = wait.until(expected_conditions.presence_of_element_located((By.TAG_NAME, "body")))
        wait.until(lambda d: "Tiered storage status" in body.text)
        assert "DAG tiering, run manual__browser_test, task status" in body.text
        assert re.search(r"\d+ s old", body.text), body.text
        rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#tiering tbody tr")]
        assert [r.split()[0] for r in rows] == [f"{TOPIC}-0", f"{TOPIC}-1", f"{TOPIC}-2"]
        assert all(" KiB " in r or " MiB " in r for r in rows), rows
        assert driver.find_elements(By.TAG_NAME, "svg")
        driver.switch_to.default_content()
        shot("1-status-page")

        # the Data Docs index, offline: the validation results are listed
        driver.get(base + "/tiered-storage/docs/latest/index.html")
        listed = wait.until(
            expected_conditions.presence_of_all_elements_located(
                (By.CSS_SELECTOR, "#Validation-Results tr.clickable-row")
            )
        )
        assert len(listed) == 2
        assert any("partition_offsets of cluster" in r.text for r in listed)
        assert not [e for e in page_errors() if "is not defined" in e or "TypeError" in e]
        shot("2-data-docs-index")

        # one result: each expectation's name and meaning
        next(r for r in listed if "partition_offsets" in r.text).click()
        wait.until(expected_conditions.url_contains("/validations/partition_offsets/"))
        body = wait.until(expected_conditions.presence_of_element_located((By.TAG_NAME, "body")))
        wait.until(lambda d: "Data asset" in body.text)
        for expectation in partition_offsets_suite().expectations:
            name = expectation.expectation_type
            assert f"{name}: {DESCRIPTIONS[name]}" in body.text, name
        assert "Data asset: partition_offsets of cluster" in body.text
        shot("3-data-docs-validation")

        # a dry run of partition_deletion from the trigger form
        before = ui.api.run_ids("partition_deletion")
        driver.get(base + "/dags/partition_deletion")
        text("//*[@data-testid='trigger-dag-button']").click()
        wait.until(expected_conditions.presence_of_element_located((By.NAME, "element_topic")))
        driver.find_element(By.NAME, "element_topic").send_keys(TOPIC)
        driver.find_element(By.NAME, "element_confirm").send_keys(TOPIC)
        dry_run = driver.find_element(By.NAME, "element_dry_run")
        driver.execute_script("arguments[0].click()", dry_run)
        wait.until(lambda d: dry_run.is_selected())
        shot("4-trigger-form")
        text("//*[@data-testid='trigger-dag-submit']").click()

        # "Unpause on trigger" starts nothing more: the DAG has no schedule
        def triggered() -> set[str]:
            return ui.api.run_ids("partition_deletion") - before

        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while not triggered() and time.monotonic() < deadline:
            time.sleep(0.5)
        (run_id,) = triggered()
        state, task_states = ui.api.wait_for_run("partition_deletion", run_id)
        assert state == "success", task_states
        assert task_states["delete_partitions"] == "skipped"
        driver.get(f"{base}/dags/partition_deletion/runs/{urllib.parse.quote(run_id)}")
        text("//*[normalize-space(text())='mark_partitions']")
        shot("5-dry-run-done")
    finally:
        driver.quit()


def test_stopping_the_process_group_leaves_nothing_behind(ui: Ui) -> None:
    # ZooKeeper, three brokers, standalone and its four components at least
    assert len(ui.family) >= 9
    os.killpg(ui.process.pid, signal.SIGTERM)
    assert ui.process.wait(90) == 0
    deadline = time.monotonic() + 30
    while alive(ui.family) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive(ui.family) == [], "processes outlived the stop"
    assert "Stopped Airflow, the brokers and ZooKeeper." in ui.output.read_text()
    assert mentioning(str(ui.work)) == []  # no broker, no ZooKeeper server
