"""A hanging transaction on the status page, as a person sees it in a headless Chromium (no
outside network), served by Airflow's own api-server app with the plugin mounted.

The snapshots are what ``jobs.cluster_status`` writes of a real broker process::

    hanging-0   0 plain  1 plain  2 O data (open, its producer idle for 20 min)  3 plain
    snapshot 1  HW 4, LSO 2: the transactions cell says the LSO, that one transaction is open
                since offset 2, how long its producer has been idle, that this is past
                transaction.max.timeout.ms (possibly hanging), highlighted
    COMMIT O at 4
    snapshot 2  HW 5, LSO 5: "none open", not highlighted

Not logged in, the page sends the browser to Airflow's login and shows none of it. Screenshots
go to ``test-artifacts/status-page/``. The broker is ``test_open_transactions_shown``'s, which
does not verify transactions (the ``Wire`` writes them without a coordinator).
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

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
from tests.integration.test_open_transactions_shown import (
    IDLE_MS,
    TOPIC,
    broker,
    status_snapshot,
)
from tests.integration.test_transaction_markers import Wire

pytestmark = pytest.mark.timeout(300)

__all__ = ["api_server", "broker", "shots"]  # fixtures, used by name
HIGHLIGHT = "rgba(255, 243, 205, 1)"


def transactions_cell(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    (row,) = [
        r
        for r in driver.find_elements(By.CSS_SELECTOR, "#tiering tbody tr")
        if r.find_element(By.TAG_NAME, "td").text == f"{TOPIC}-0"
    ]
    return row.find_elements(By.TAG_NAME, "td")[-1]


def test_a_hanging_transaction_reads_on_the_status_page(
    api_server: str,
    airflow_home: Path,
    shots: Path,
    broker: BrokerProcess,
) -> None:
    import time

    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    raw_wire.create_topic(broker.port, TOPIC, configs={"remote.storage.enable": "true"})
    wire = Wire(broker.port, TOPIC)
    plain, open_ = wire.producer_id(), wire.producer_id()
    now_ms = int(time.time() * 1000)
    assert wire.produce(plain, b"p0", b"p1", transactional=False, timestamp_ms=now_ms) == 0
    idle_since = now_ms - IDLE_MS
    assert wire.produce(open_, b"o0", transactional=True, timestamp_ms=idle_since) == 2
    assert wire.produce(plain, b"p2", transactional=False, timestamp_ms=now_ms) == 3
    reports = reset_reports()
    status_snapshot(
        broker, reports / "runs" / "tiering" / "manual__open" / "status" / "summary.json"
    )

    page_url = f"{api_server}/tiered-storage/"
    driver = browser()
    wait = WebDriverWait(driver, PAGE_TIMEOUT_S, ignored_exceptions=(WebDriverException,))
    try:
        # not logged in: Airflow's login page, nothing of the partitions
        driver.get(page_url)
        wait.until(expected_conditions.presence_of_element_located((By.NAME, "username")))
        assert urllib.parse.urlsplit(driver.current_url).path == "/auth/login"
        assert not driver.find_elements(By.ID, "tiering")
        assert "LSO" not in driver.page_source and TOPIC not in driver.page_source

        log_in(driver, wait, admin_password(airflow_home))
        wait.until(lambda d: d.current_url == page_url)
        wait.until(expected_conditions.visibility_of_element_located((By.ID, "tiering")))
        severe_entries(driver)  # the login page's own
        driver.refresh()
        wait.until(expected_conditions.visibility_of_element_located((By.ID, "tiering")))
        headers = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "#tiering thead th")]
        assert "transactions" in headers
        cell = transactions_cell(driver)
        driver.execute_script("arguments[0].scrollIntoView()", cell)
        driver.save_screenshot(str(shots / "5-open-transaction.png"))
        assert re.fullmatch(
            r"LSO 2 \(HW 4\); 1 open since offset 2; its producer last wrote 2[01] min before"
            r" the snapshot; possibly hanging: idle longer than transaction.max.timeout.ms"
            r" \(15 min\); storage-core topics describe names its producer",
            cell.text,
        ), cell.text
        assert cell.is_displayed()
        assert cell.value_of_css_property("background-color") == HIGHLIGHT
        note = driver.find_element(By.CSS_SELECTOR, "#tiering + p.note").text
        assert "An open transaction holds the last stable offset (LSO) at its first offset" in note
        assert not severe_entries(driver)

        # the coordinator commits: the next snapshot shows nothing open, not highlighted
        assert wire.end(open_, commit=True) == ErrorCode.none
        wire.close()
        time.sleep(1.1)  # the next snapshot finishes in a later second
        status_snapshot(
            broker, reports / "runs" / "tiering" / "manual__committed" / "status" / "summary.json"
        )
        driver.refresh()
        wait.until(lambda d: transactions_cell(d).text == "none open")
        cell = transactions_cell(driver)
        assert cell.value_of_css_property("background-color") != HIGHLIGHT
        driver.save_screenshot(str(shots / "6-no-open-transaction.png"))
        assert not severe_entries(driver)
    finally:
        driver.quit()
