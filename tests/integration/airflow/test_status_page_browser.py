"""The status page's cluster section in a headless Chromium with no outside network (as on an
air-gapped machine), served by Airflow's own api-server app with the plugin mounted.

The snapshot is what ``jobs.cluster_status`` writes for a cluster whose broker 3 is down
(``cluster_view`` over the Metadata answer)::

    brokers 1, 2 (controller 2)
    orders-0  replicas 1,2,3  ISR 1,2   leader 1        under-replicated
    orders-1  replicas 2,3,1  ISR 2,1   leader 2        under-replicated
    orders-2  replicas 3,1,2  ISR 1,2   leader 1        under-replicated, not preferred
    lonely-0  replicas 3      ISR -     no leader       offline
    events-0  replicas 1,2    ISR 1,2   leader 1        ok

Logged in (the UI's session cookie), a person reads at a glance: a red line naming the
offline and under-replicated partitions, the brokers with the controller marked, and the
partitions that need attention first, each state in words. Without credentials the page
answers 401 and shows none of it. Screenshots go to ``test-artifacts/status-page/``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
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


def write_snapshot(reports: Path) -> None:
    from kio.schema.errors import ErrorCode

    from jobs.common.summary import RunSummary
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
    summary = RunSummary(job="cluster_status")
    summary.details.update(
        dag_id="tiering",
        run_id="manual__browser",
        task_id="status",
        cluster=cluster_view(metadata),
    )
    summary.finish()
    summary.write(reports / "runs" / "tiering" / "manual__browser" / "status" / "summary.json")


@pytest.fixture(scope="module")
def api_server(airflow_home: Path) -> Iterator[str]:
    """Airflow's api-server app (the plugin's web app mounted in it) on a loopback port."""
    import uvicorn
    from airflow.api_fastapi.app import create_app

    write_snapshot(airflow_env.reports_dir())
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


def shots_dir() -> Path:
    root = Path(os.environ.get("TEST_ARTIFACTS_DIR") or REPO / "test-artifacts")
    target = root / "status-page"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    return target


def test_the_cluster_section_reads_at_a_glance_logged_in_and_not(api_server: str) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page_url = f"{api_server}/tiered-storage/"
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(page_url, timeout=30)
    assert anonymous.value.code == 401

    shots = shots_dir()
    driver = browser()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S)
    try:
        # not logged in: nothing of the cluster is shown
        driver.get(page_url)
        body = wait.until(expected_conditions.presence_of_element_located((By.TAG_NAME, "body")))
        assert "Not authenticated" in body.text, body.text
        assert not driver.find_elements(By.ID, "cluster")
        assert "127.0.0.1:9092" not in driver.page_source
        driver.save_screenshot(str(shots / "1-not-logged-in.png"))
        driver.get_log("browser")  # the 401 is logged: start the check below afresh

        # logged in: the UI's session cookie
        token = get_auth_manager().generate_jwt(
            SimpleAuthManagerUser(username="admin", role="ADMIN")
        )
        driver.add_cookie({"name": "_token", "value": token, "path": "/"})
        driver.get(page_url)
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
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not [e for e in severe if "favicon" not in e["message"]], severe
    finally:
        driver.quit()
    # the same snapshot as JSON, in the job's own format
    request = urllib.request.Request(
        f"{api_server}/tiered-storage/status.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        cluster = json.load(answer)["cluster"]
    assert cluster["controller_id"] == 2
    assert cluster["under_replicated_partitions"] == ["orders-0", "orders-1", "orders-2"]
    assert cluster["offline_partitions"] == ["lonely-0"]
