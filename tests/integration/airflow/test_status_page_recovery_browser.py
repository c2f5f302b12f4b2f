"""Disaster recovery per topic on the status page, as a person sees it in a headless Chromium
(no outside network), served by Airflow's own api-server app with the plugin mounted.

A real broker (one process, ``LocalTieredStorage``) with remote-enabled topics; the real
``topic_manifests`` job writes the manifests of orders and events, then ``fresh`` is created;
the real ``cluster_status`` job reads each manifest back from the bucket::

    topic   manifest        drills (restore_drill summaries, as the drill writes them)
    orders  just written    3 days ago passed (orders-0); 9 h ago passed (orders-0)
    events  just written    3 days ago passed (events-0); 9 h ago FAILED (events-1: a batch
                            restored with another leader epoch, Great Expectations' outcome)
    fresh   none            never drilled
    plain   (not remote-enabled: not listed)

Not logged in, the page sends the browser to Airflow's login and shows none of it. Logged in,
the section's first line says that the restore is not proven for events (its latest drill
failed) and fresh (no manifest, never drilled), in red; events' last success is shown stale
beside its failure, which names the failing expectation; orders reads green.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.airflow.test_status_page_browser import (
    PAGE_TIMEOUT_S,
    admin_password,
    api_server,
    browser,
    log_in,
    reset_reports,
    severe_entries,
    shots,
)
from tests.integration.test_open_transactions_shown import broker
from tests.unit.airflow.test_recovery_page import drilled, epoch_mismatch_suite, write_drill

pytestmark = pytest.mark.timeout(300)

__all__ = ["api_server", "broker", "shots"]  # fixtures, used by name
REPO = Path(__file__).resolve().parents[3]
RED = "rgba(253, 236, 234, 1)"
REMOTE = {"remote.storage.enable": "true"}


def run_job(job: str, broker: BrokerProcess, summary_path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            f"jobs.{job}",
            "--bootstrap-server",
            broker.bootstrap,
            "--log-dir",
            str(broker.log_dir),
            "--broker-config",
            str(broker.config_path),
            "--summary-path",
            str(summary_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    return summary


def row_cells(driver: Any) -> dict[str, list[Any]]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#recovery tbody tr")
    cells = [r.find_elements(By.TAG_NAME, "td") for r in rows]
    return {c[0].text: c[1:] for c in cells}


def test_each_topics_manifest_and_drills_read_on_the_status_page(
    api_server: str, airflow_home: Path, shots: Path, broker: BrokerProcess, tmp_path: Path
) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    raw_wire.create_topic(broker.port, "orders", partitions=2, configs=REMOTE)
    raw_wire.create_topic(broker.port, "events", partitions=2, configs=REMOTE)
    raw_wire.create_topic(broker.port, "plain")
    run_job("topic_manifests", broker, tmp_path / "manifests.json")
    raw_wire.create_topic(broker.port, "fresh", configs=REMOTE)
    reports = reset_reports()
    snapshot = run_job(
        "cluster_status", broker, reports / "runs/tiering/manual__dr/status/summary.json"
    )

    # the status job read each manifest back from the bucket
    written = {
        json.loads(p.read_text())["topic"]: json.loads(p.read_text())["writtenAtMs"]
        for p in (tmp_path / "remote-tier").rglob("topic-manifest.json")
    }
    assert sorted(written) == ["events", "orders"]
    topics = snapshot["details"]["topics"]
    assert sorted(topics) == ["events", "fresh", "orders"]
    for name in ("events", "orders"):
        assert topics[name]["manifest_written_at_ms"] == written[name], topics[name]
        assert topics[name]["manifest_error"] is None
    assert topics["fresh"]["manifest_written_at_ms"] is None
    assert topics["fresh"]["manifest_error"] is None
    assert topics["fresh"]["manifest_key"] == (  # the store's prefix is empty here
        f"fresh-{topics['fresh']['topic_id']}/topic-manifest.json"
    )

    now = datetime.now(UTC).replace(microsecond=0)
    first, second = now - timedelta(days=3), now - timedelta(hours=9)
    write_drill(reports, "scheduled__1", first, [drilled("orders", 0), drilled("events", 0)])
    write_drill(
        reports,
        "scheduled__2",
        second,
        [drilled("orders", 0), drilled("events", 1)],
        epoch_mismatch_suite(tmp_path),
    )

    page_url = f"{api_server}/tiered-storage/"
    driver = browser()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    try:
        # not logged in: Airflow's login page, nothing of the topics
        driver.get(page_url)
        wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
        assert urllib.parse.urlsplit(driver.current_url).path == "/auth/login"
        assert not driver.find_elements(By.ID, "disaster-recovery")
        assert "orders" not in driver.page_source and "drill" not in driver.page_source

        log_in(driver, wait, admin_password(airflow_home))
        wait.until(lambda d: d.current_url == page_url)
        wait.until(expected_conditions.visibility_of_element_located((By.ID, "recovery")))
        severe_entries(driver)  # the login page's own
        driver.refresh()
        section = wait.until(
            expected_conditions.visibility_of_element_located((By.ID, "disaster-recovery"))
        )
        driver.execute_script("arguments[0].scrollIntoView()", section)
        driver.save_screenshot(str(shots / "8-disaster-recovery.png"))

        health = section.find_element(By.CSS_SELECTOR, ".health")
        assert health.text == (
            "Restore from the bucket not proven for 2 of 3 topics: events (latest drill"
            " failed); fresh (no manifest, never drilled)."
        )
        assert health.value_of_css_property("background-color") == RED
        headers = [h.text for h in section.find_elements(By.CSS_SELECTOR, "thead th")]
        assert headers == [
            "topic",
            "last topic manifest",
            "last successful restore drill",
            "latest restore drill",
        ]
        cells = row_cells(driver)
        assert list(cells) == ["events", "fresh", "orders"]  # plain is not remote-enabled

        orders_manifest = datetime.fromtimestamp(written["orders"] / 1000, UTC)
        manifest, success, latest = (c.text for c in cells["orders"])
        assert manifest.startswith(f"{orders_manifest:%Y-%m-%d %H:%M:%S} UTC ("), manifest
        assert manifest.endswith(" s ago)") or manifest.endswith(" min ago)"), manifest
        assert success == (
            f"{second:%Y-%m-%d %H:%M:%S} UTC (9 h ago), partitions 0"
            " (DAG restore_drill, run scheduled__2, task restore_drill)"
        )
        assert latest == "passed (the last successful drill)"
        assert all(c.value_of_css_property("background-color") != RED for c in cells["orders"])

        # events: its failure is not hidden behind the older success, which is stale
        _, success, latest = cells["events"]
        assert success.text == (
            f"{first:%Y-%m-%d %H:%M:%S} UTC (3 days 0 h ago), partitions 0"
            " (DAG restore_drill, run scheduled__1, task restore_drill); stale: older than"
            " 2 days"
        )
        assert latest.text.startswith(
            f"FAILED {second:%Y-%m-%d %H:%M:%S} UTC (9 h ago), partitions 1 (DAG restore_drill,"
            " run scheduled__2, task restore_drill): expect_restored_leader_epoch_equals_source"
        ), latest.text
        for cell in (success, latest):
            assert cell.value_of_css_property("background-color") == RED

        assert [c.text for c in cells["fresh"]] == [
            "no manifest yet: the tiering DAG's topic_manifests task writes it",
            "never drilled",
            "never drilled",
        ]
        assert not severe_entries(driver)
    finally:
        driver.quit()

    # the same per topic in status.json, for an API client (an alert on "not proven")
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))
    request = urllib.request.Request(
        f"{page_url}status.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        recovery = json.load(answer)["recovery"]
    assert recovery["events"]["latest_drill"]["passed"] is False
    assert recovery["events"]["last_successful_drill"]["finished"] == first.isoformat()
    assert recovery["events"]["last_successful_drill"]["partitions"] == [0]
    assert recovery["orders"]["manifest_written_at"] == orders_manifest.isoformat()
    assert recovery["fresh"] == {
        "manifest_written_at": None,
        "manifest_error": None,
        "last_successful_drill": None,
        "latest_drill": None,
    }
