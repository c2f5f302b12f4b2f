"""The plugin inside Airflow's own api-server app: its web app is mounted under
``/tiered-storage`` and its view is registered for the UI's navigation."""

from __future__ import annotations

from pathlib import Path


def test_api_server_mounts_the_status_app(airflow_home: Path) -> None:
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    page = client.get("/tiered-storage/")
    assert page.status_code == 200
    assert "<h1>Tiered storage status</h1>" in page.text
    missing = client.get("/tiered-storage/docs/runs/nope/k/quality/index.html")
    assert missing.status_code == 404

    (info,) = [p for p in plugins_manager.get_plugin_info() if p["name"] == "tiered_storage"]
    (view,) = info["external_views"]
    assert (view["name"], view["href"], view["destination"]) == (
        "Tiered storage",
        "tiered-storage/",
        "nav",
    )
    assert [app["url_prefix"] for app in info["fastapi_apps"]] == ["/tiered-storage"]
