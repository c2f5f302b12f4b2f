"""The status page and the Data Docs in a headless Chromium with no outside network (as on an
air-gapped machine), served by Airflow's own api-server app with the plugin mounted.

The first snapshot is what ``jobs.cluster_status`` writes for a cluster whose broker 3 is down
(``cluster_view`` over the Metadata answer)::

    brokers 1, 2 (controller 2)
    orders-0  replicas 1,2,3  ISR 1,2   leader 1        under-replicated
    orders-1  replicas 2,3,1  ISR 2,1   leader 2        under-replicated
    orders-2  replicas 3,1,2  ISR 1,2   leader 1        under-replicated, not preferred
    lonely-0  replicas 3      ISR -     no leader       offline
    events-0  replicas 1,2    ISR 1,2   leader 1        ok

Opened without a session, the page sends the browser to Airflow's login, which comes back to
it; logged in, a person reads at a glance: a red line naming the offline and under-replicated
partitions, the brokers with the controller marked, and the partitions that need attention
first, each state in words. Without credentials an API client gets 401 and none of it.

The second is a healthy cluster whose last snapshots (two, 40 s apart) are two hours old while
tiering runs every 5 minutes: the health line says it is of then and stale, not in green, and
the chart's two time labels differ and sit inside the chart. Then the Data Docs of a quality
run: every observed value says what was counted, the page's icon loads, nothing 404s, and a
link leads back to the status page. Screenshots go to ``test-artifacts/status-page/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from embedded.ports import free_port
from tests.unit.airflow import airflow_env

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
PAGE_TIMEOUT_S = 30.0
OFFLINE_FLAGS = (
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
)


def broken_cluster() -> dict[str, Any]:
    """``cluster_view`` of the cluster above (broker 3 down)."""
    from kio.schema.errors import ErrorCode

    from jobs.planning.cluster_view import cluster_view
    from storage_core.client.metadata import (
        BrokerNode,
        ClusterMetadata,
        PartitionMetadata,
        TopicMetadata,
    )

    def partition(
        index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]
    ) -> PartitionMetadata:
        offline = tuple(r for r in replicas if r == 3)
        return PartitionMetadata(
            partition=index,
            leader_id=leader,
            leader_epoch=4,
            replicas=replicas,
            isr=isr,
            offline_replicas=offline,
            error=ErrorCode.none,
        )

    def topic(name: str, *partitions: PartitionMetadata) -> TopicMetadata:
        return TopicMetadata(
            name=name, topic_id=None, is_internal=False, partitions=partitions, error=ErrorCode.none
        )

    metadata = ClusterMetadata(
        cluster_id="c1",
        controller_id=2,
        brokers=(
            BrokerNode(node_id=1, host="127.0.0.1", port=9091),
            BrokerNode(node_id=2, host="127.0.0.1", port=9092),
        ),
        topics=(
            topic(
                "orders",
                partition(0, 1, (1, 2, 3), (1, 2)),
                partition(1, 2, (2, 3, 1), (2, 1)),
                partition(2, 1, (3, 1, 2), (1, 2)),
            ),
            topic("lonely", partition(0, -1, (3,), ())),
            topic("events", partition(0, 1, (1, 2), (1, 2))),
        ),
    )
    return cluster_view(metadata)


def healthy_cluster() -> dict[str, Any]:
    """``cluster_view`` of three brokers, every partition in sync and led by its preferred
    replica."""
    from kio.schema.errors import ErrorCode

    from jobs.planning.cluster_view import cluster_view
    from storage_core.client.metadata import (
        BrokerNode,
        ClusterMetadata,
        PartitionMetadata,
        TopicMetadata,
    )

    replicas = ((1, 2, 3), (2, 3, 1), (3, 1, 2))
    metadata = ClusterMetadata(
        cluster_id="c1",
        controller_id=1,
        brokers=tuple(BrokerNode(node_id=b, host="127.0.0.1", port=9090 + b) for b in (1, 2, 3)),
        topics=(
            TopicMetadata(
                name="orders",
                topic_id=None,
                is_internal=False,
                partitions=tuple(
                    PartitionMetadata(
                        partition=i,
                        leader_id=r[0],
                        leader_epoch=0,
                        replicas=r,
                        isr=r,
                        offline_replicas=(),
                        error=ErrorCode.none,
                    )
                    for i, r in enumerate(replicas)
                ),
                error=ErrorCode.none,
            ),
        ),
    )
    return cluster_view(metadata)


def write_snapshot(
    reports: Path,
    run_id: str,
    cluster: dict[str, Any],
    *,
    finished: datetime | None = None,
    remote_bytes: int | None = None,
) -> None:
    """A ``status`` task's summary under ``reports``: the cluster and, with ``remote_bytes``,
    one tiered partition; ``finished`` back-dates it."""
    from jobs.common.summary import RunSummary

    summary = RunSummary(job="cluster_status")
    summary.details.update(dag_id="tiering", run_id=run_id, task_id="status", cluster=cluster)
    if remote_bytes is not None:
        summary.partition(
            "orders-0",
            "ok",
            leader=1,
            leader_epoch=0,
            log_start_offset=0,
            local_log_start_offset=40,
            high_watermark=50,
            highest_tiered_offset=39,
            remote_bytes=remote_bytes,
            copy_lag_bytes=remote_bytes // 4,
        )
    summary.finish()
    if finished is not None:
        summary.finished = finished.isoformat()
    summary.write(reports / "runs" / "tiering" / run_id / "status" / "summary.json")


def reset_reports() -> Path:
    """The reports root, emptied: each test writes the runs it shows."""
    reports = airflow_env.reports_dir()
    shutil.rmtree(reports / "runs", ignore_errors=True)
    return reports


def write_data_docs(reports: Path) -> None:
    """A quality task's Data Docs (Great Expectations' own build) of tables with a hole
    between the remote and the local log, and of replicas with broker 3 out of the ISR."""
    from expectations.runner import QualityContext, pandas_frame
    from jobs.tables import build_replicas
    from tests.unit.expectations.test_replica_suites import replica
    from tests.unit.expectations.world import healthy_world

    report = reports / "runs" / "data_quality" / "manual__browser" / "quality" / "report"
    quality = QualityContext(report, engine="pandas")
    world = healthy_world()
    world.set_partition(local_log_start_offset=45)
    segments, partitions = world.tables()
    run, source = "data_quality manual__browser", "cluster c1 (127.0.0.1:9092)"
    for table, rows in (("remote_segments", segments), ("partition_offsets", partitions)):
        quality.validate(table, pandas_frame(table, rows), run_name=run, source=source)
    replicas = pandas_frame("replicas", build_replicas([replica(b, isr=(1, 2)) for b in (1, 2, 3)]))
    for suite in ("replicas", "replica_warnings"):
        quality.validate(suite, replicas, run_name=run, source=source)


@pytest.fixture(scope="module")
def api_server(airflow_home: Path) -> Iterator[str]:
    """Airflow's api-server app (the plugin's web app mounted in it) on a loopback port."""
    import uvicorn
    from airflow.api_fastapi.app import create_app

    # the server signs and checks the session tokens with it (airflow standalone makes one)
    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "status-page-browser-test")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the api-server did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


def browser() -> Any:
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not browser_path or not driver_path:
        pytest.skip("no Chromium here: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1200",
        *OFFLINE_FLAGS,
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


@pytest.fixture(scope="module")
def shots() -> Path:
    root = Path(os.environ.get("TEST_ARTIFACTS_DIR") or REPO / "test-artifacts")
    target = root / "status-page"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    return target


def admin_password(airflow_home: Path) -> str:
    """The simple auth manager's password for ``admin`` (it writes them when it starts)."""
    generated = airflow_home / "simple_auth_manager_passwords.json.generated"
    return str(json.loads(generated.read_text())["admin"])


def log_in(driver: Any, wait: Any, password: str) -> None:
    """Fill in and send the simple auth manager's login form."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def severe_entries(driver: Any) -> list[str]:
    """The browser console's errors since the last call (a failed load, a 404, a script)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_cluster_section_reads_at_a_glance_logged_in_and_not(
    api_server: str, airflow_home: Path, shots: Path
) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    write_snapshot(reset_reports(), "manual__browser", broken_cluster())
    page_url = f"{api_server}/tiered-storage/"
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(page_url, timeout=30)
    assert anonymous.value.code == 401  # an API client: no redirect

    driver = browser()
    # a search that the login page's own navigation aborts is looked at again
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    try:
        # not logged in: Airflow's login page, which will come back here; nothing of the cluster
        driver.get(page_url)
        wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
        login = urllib.parse.urlsplit(driver.current_url)
        assert login.path == "/auth/login", driver.current_url
        assert urllib.parse.parse_qs(login.query) == {"next": ["/tiered-storage/"]}
        assert "Not authenticated" not in driver.page_source
        assert not driver.find_elements(By.ID, "cluster")
        assert "127.0.0.1:9092" not in driver.page_source
        driver.save_screenshot(str(shots / "1-not-logged-in.png"))

        # logged in: back on the page
        log_in(driver, wait, admin_password(airflow_home))
        wait.until(lambda d: d.current_url == page_url)
        wait.until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "#cluster .health"))
        )
        severe_entries(driver)  # the login page's own: start the check below afresh
        driver.refresh()
        health = wait.until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "#cluster .health"))
        )
        driver.save_screenshot(str(shots / "2-cluster-section.png"))
        assert health.text == (
            "2 brokers, controller: broker 2. Partitions 1 offline (no leader): lonely-0;"
            " 3 under-replicated: orders-0, orders-1, orders-2."
        )
        assert health.value_of_css_property("background-color") == "rgba(253, 236, 234, 1)"
        section = driver.find_element(By.ID, "cluster").text
        assert "From DAG tiering, run manual__browser, task status, finished" in section
        brokers = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")]
        assert brokers == ["1 127.0.0.1:9091 3", "2 127.0.0.1:9092 controller 1"]
        rows = driver.find_elements(By.CSS_SELECTOR, "#replication tbody tr")
        cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        assert [c[0] for c in cells] == ["lonely-0", "orders-2", "orders-0", "orders-1", "events-0"]
        by_partition = {c[0]: c for c in cells}
        assert by_partition["lonely-0"][1:] == [
            "none",
            "4",
            "3",
            "3",
            "none",
            "3",
            "offline: no leader (replicas 3 are not available)",
        ]
        assert by_partition["orders-2"][1:] == [
            "1",
            "4",
            "3",
            "3, 1, 2",
            "1, 2",
            "3",
            "under-replicated: 3 not in sync; led by 1, not the preferred replica 3",
        ]
        assert by_partition["events-0"][-1] == "ok: every replica in sync"
        # the section sits above the tiering table, inside the first screen
        assert health.location["y"] < 600
        assert not severe_entries(driver)  # a favicon's 404 included
    finally:
        driver.quit()
    # the same snapshot as JSON, in the job's own format
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))
    request = urllib.request.Request(
        f"{api_server}/tiered-storage/status.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        cluster = json.load(answer)["cluster"]
    assert cluster["controller_id"] == 2
    assert cluster["under_replicated_partitions"] == ["orders-0", "orders-1", "orders-2"]
    assert cluster["offline_partitions"] == ["lonely-0"]


def test_stale_figures_say_so_and_the_chart_labels_read(
    api_server: str, airflow_home: Path, shots: Path
) -> None:
    """Two snapshots of a healthy cluster 40 s apart, two hours ago, tiering every 5 min."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    reports = reset_reports()
    first = (datetime.now(UTC) - timedelta(hours=2, minutes=3)).replace(second=5, microsecond=0)
    last = first + timedelta(seconds=40)  # the same minute
    write_snapshot(reports, "scheduled__a", healthy_cluster(), finished=first, remote_bytes=3 << 20)
    write_snapshot(reports, "scheduled__b", healthy_cluster(), finished=last, remote_bytes=4 << 20)

    page_url = f"{api_server}/tiered-storage/"
    driver = browser()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    try:
        driver.get(page_url)
        log_in(driver, wait, admin_password(airflow_home))
        wait.until(lambda d: d.current_url == page_url)
        health = wait.until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, "#cluster .health"))
        )
        driver.save_screenshot(str(shots / "3-stale-status.png"))

        # the health line says when it was seen, and is grey, not the reassuring green
        head, _, sentence = health.text.partition("), stale: ")
        assert head.startswith(f"As of {last:%Y-%m-%d %H:%M:%S} UTC (2 h "), health.text
        assert sentence == (
            "the cluster may have changed since. 3 brokers, controller: broker 1. All 3"
            " partitions fully replicated and led by their preferred replica."
        )
        assert health.value_of_css_property("background-color") == "rgba(241, 241, 241, 1)"
        assert "Stale:" in driver.find_element(By.CSS_SELECTOR, "p.stale").text

        # the chart: one label per snapshot, distinct, none cut at the edge or overlapping
        chart = driver.find_element(By.CSS_SELECTOR, "svg[role=img]")
        driver.execute_script("arguments[0].scrollIntoView()", chart)
        chart.screenshot(str(shots / "4-chart.png"))
        labels = [  # the texts that are times
            t
            for t in driver.find_elements(By.CSS_SELECTOR, "svg[role=img] text")
            if re.fullmatch(r"[0-9:. -]+", t.text)
        ]
        assert [label.text for label in labels] == [f"{first:%H:%M:%S}", f"{last:%H:%M:%S}"]
        assert f"status snapshot finished (UTC, {last:%Y-%m-%d})" in chart.text
        box = driver.execute_script("return arguments[0].getBoundingClientRect().toJSON()", chart)
        boxes = [
            driver.execute_script("return arguments[0].getBoundingClientRect().toJSON()", label)
            for label in labels
        ]
        for label in boxes:
            assert box["left"] <= label["left"] and label["right"] <= box["right"], (box, label)
            assert label["width"] > 30  # the whole text drawn
        assert boxes[0]["right"] < boxes[1]["left"], boxes
        assert not severe_entries(driver)
    finally:
        driver.quit()


def observed_values(driver: Any) -> dict[str, str]:
    """Each expectation's name -> the Observed Value cell of its row, as shown."""
    return dict(
        driver.execute_script(
            """return [...document.querySelectorAll("strong.expectation-name")].map(
                   n => [n.textContent.trim(), n.closest("td").nextElementSibling.innerText.trim()]
               )"""
        )
    )


def icon_answer(driver: Any) -> tuple[str, int, str]:
    """The page's icon link, and the status and type the server answers for it."""
    found = driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
           const link = document.querySelector("link[rel~='icon']");
           if (!link) { done(["", 0, ""]); return; }
           fetch(link.href).then(r => done([link.href, r.status, r.headers.get("content-type")]))
               .catch(e => done([link.href, -1, String(e)]));"""
    )
    return str(found[0]), int(found[1]), str(found[2])


def test_the_data_docs_read_in_the_browser(
    api_server: str, airflow_home: Path, shots: Path
) -> None:
    """Opened directly without a session, the Data Docs come back after logging in; every
    observed value says what was counted, the icon loads, nothing 404s, and a link leads back
    to the status page."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    reports = reset_reports()
    write_snapshot(reports, "manual__browser", healthy_cluster())
    write_data_docs(reports)
    index_url = f"{api_server}/tiered-storage/docs/latest/index.html"
    driver = browser()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    try:
        driver.get(index_url)
        log_in(driver, wait, admin_password(airflow_home))
        wait.until(lambda d: d.current_url == index_url)
        rows = "#Validation-Results tr.clickable-row"
        wait.until(expected_conditions.presence_of_all_elements_located((By.CSS_SELECTOR, rows)))
        severe_entries(driver)  # the login page's own: check the Data Docs afresh
        driver.refresh()
        listed = wait.until(
            expected_conditions.presence_of_all_elements_located((By.CSS_SELECTOR, rows))
        )
        assert len(listed) == 4
        href, code, kind = icon_answer(driver)
        assert href.endswith("/docs/latest/static/images/favicon.ico") and code == 200, href
        assert kind.startswith("image/"), kind
        assert not severe_entries(driver)
        driver.save_screenshot(str(shots / "5-data-docs-index.png"))

        # a validation page, four directories down (where GE's icon link missed)
        next(r for r in listed if "partition_offsets" in r.text).click()
        wait.until(expected_conditions.url_contains("/validations/partition_offsets/"))
        wait.until(lambda d: "Data asset" in d.find_element(By.TAG_NAME, "body").text)
        href, code, _ = icon_answer(driver)
        assert href.endswith("/docs/latest/static/images/favicon.ico") and code == 200, href
        observed = observed_values(driver)
        assert len(observed) == 9, observed
        for name, value in observed.items():
            assert value != "--" and "%" not in value, (name, value)
        assert observed["expect_no_partition_deletion_stuck"] == (
            "nothing to check: 2 partitions not pending deletion"
        )
        assert observed["expect_only_valid_partition_delete_transitions"] == (
            "none of 2 partitions breaks the rule"
        )
        assert observed["expect_no_hole_between_remote_and_local_log"] == (
            "1 of 2 partitions breaks the rule"
        )
        driver.save_screenshot(str(shots / "6-data-docs-validation.png"))
        stuck = driver.find_element(
            By.XPATH, "//strong[text()='expect_no_partition_deletion_stuck']"
        )
        driver.execute_script(
            "arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", stuck
        )
        driver.save_screenshot(str(shots / "7-data-docs-observed-values.png"))
        assert not severe_entries(driver)

        # back to the status page (the bar at the top), and to the Data Docs again from there
        driver.execute_script(  # Bootstrap 5 scrolls smoothly unless told not to
            "document.getElementById('tiered-storage-back')"
            ".scrollIntoView({block: 'start', behavior: 'instant'})"
        )
        back = driver.find_element(By.CSS_SELECTOR, "#tiered-storage-back a")
        assert back.text == "\u2190 Tiered storage status"
        back.click()
        wait.until(lambda d: d.current_url == f"{api_server}/tiered-storage/")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Tiered storage status"
        driver.find_element(By.LINK_TEXT, "Latest Data Docs").click()
        wait.until(lambda d: d.current_url == index_url)
        assert not severe_entries(driver)
    finally:
        driver.quit()
