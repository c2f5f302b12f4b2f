"""The plugin inside Airflow's own api-server app: its web app is mounted under
``/tiered-storage``, every route of it answers only Airflow's logged-in users (401 without
credentials, 403 with a forged token; a browser without a session is sent to Airflow's login,
which comes back to the page), and its view is registered for the UI's navigation."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

PLUGIN_PATHS = (
    "/",
    "/status.json",
    "/docs/latest/index.html",
    "/docs/runs/d/k/t/index.html",
    "/plans/d/k",
)


def test_api_server_mounts_the_status_app_for_logged_in_users(airflow_home: Path) -> None:
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient
    from tiered_storage_plugin.web import create_app as create_plugin_app

    client = TestClient(create_app())
    # every route of the plugin's app is covered by PLUGIN_PATHS
    templates = {getattr(r, "path", "") for r in create_plugin_app().routes}
    covered = {t for t in templates if any(re.fullmatch(_pattern(t), p) for p in PLUGIN_PATHS)}
    assert covered == templates, templates - covered

    for path in PLUGIN_PATHS:
        anonymous = client.get(f"/tiered-storage{path}")
        assert anonymous.status_code == 401, (path, anonymous.status_code)
        forged = client.get(f"/tiered-storage{path}", headers={"Authorization": "Bearer x.y.z"})
        assert forged.status_code == 403, (path, forged.status_code)

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))
    page = client.get("/tiered-storage/", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200
    assert "<h1>Tiered storage status</h1>" in page.text
    client.cookies.set("_token", token)  # the UI's session cookie
    assert client.get("/tiered-storage/status.json").status_code == 200
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


def _pattern(template: str) -> str:
    """A route template (``/docs/latest/{file_path:path}``) as a regular expression."""
    pieces = re.split(r"(\{[^}]+\})", template)
    return "".join(".+" if p.startswith("{") else re.escape(p) for p in pieces)


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def test_a_browser_without_a_session_is_sent_to_the_login_and_back(airflow_home: Path) -> None:
    """A page opened directly with no session: Airflow's login with the page as ``next``
    (then the auth manager's login page, which returns there); API clients keep 401/403."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app(), follow_redirects=False)
    browser = {"Accept": BROWSER_ACCEPT}
    for path in (*PLUGIN_PATHS, "/docs/latest/validations/a/b.html?x=1"):
        page = f"/tiered-storage{path}"
        answer = client.get(page, headers=browser)
        assert answer.status_code == 303, (path, answer.status_code, answer.text)
        target = urllib.parse.urlsplit(answer.headers["location"])
        assert target.path == "/api/v2/auth/login"
        assert urllib.parse.parse_qs(target.query) == {"next": [page]}
        # Airflow's login route accepts the page and hands it on to the auth manager's login
        login = client.get(answer.headers["location"])
        assert login.status_code == 307, login.text
        assert login.headers["location"] == "/auth/login?" + urllib.parse.urlencode({"next": page})
        # a session token the server cannot read: log in again, as Airflow's UI does
        client.cookies.set("_token", "x.y.z")
        stale = client.get(page, headers=browser)
        client.cookies.clear()
        assert stale.status_code == 303, (path, stale.status_code)
        # API clients: no HTML accepted, or a bearer token
        assert client.get(page).status_code == 401
        assert client.get(page, headers={"Accept": "application/json"}).status_code == 401
        assert (
            client.get(page, headers={**browser, "Authorization": "Bearer x.y.z"}).status_code
            == 403
        )
        assert client.post(page, headers=browser).status_code != 303
