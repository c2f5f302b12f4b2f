"""The plugin's web app, served by the Airflow api-server under ``/tiered-storage``:

    GET /                      the tiering status page (HTML, inline SVG chart)
    GET /status.json           the same data as JSON
    GET /docs/latest/<file>    the most recent Great Expectations Data Docs
    GET /docs/runs/<dag_id>/<run key>/<task_id>/<file>   the Data Docs of one quality task
                               (each page with a link back to the status page at the top)
    GET /plans/<dag_id>/<run key>  the plan of a dry run of partition_deletion (plain text)

Every route requires the Airflow user of the request, as the rest of the UI does: Airflow's
own ``requires_access_view(AccessView.WEBSITE)`` dependency reads the session cookie the UI
sets or an ``Authorization: Bearer`` token; an anonymous request gets 401, a bad token 403.
A browser opening a page without a session (a GET that accepts ``text/html`` and carries no
``Authorization`` header, answered 401, or 403 for a session token the server cannot read) is
sent instead to Airflow's login, ``/api/v2/auth/login?next=<this page>``, which hands ``next``
to the auth manager's login page (the simple auth manager's comes back to it after logging
in), as Airflow's own UI does; API clients keep their 401 and 403.
Everything is read from the reports root (``paths.reports_root()``) on each request; a missing
report is a 404. Paths are resolved and must stay inside their report directory; no absolute
path of the server is shown.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from tiered_storage_plugin import paths, recovery_page, status
from tiered_storage_plugin.deletion import PLAN_FILE

AIRFLOW_LOGIN_PATH = "/api/v2/auth/login"
DOCS_PAGE_BYTES_MAX = 64 * 1024 * 1024  # a larger Data Docs page is served as it is
BACK_BAR_STYLE = (
    "display:block;padding:6px 16px;background:#f4f4f4;border-bottom:1px solid #ccc;"
    "font:14px sans-serif"
)
_BODY_TAG = re.compile(r"<body\b[^>]*>", re.IGNORECASE)
# Airflow's detail for a token it cannot decode (a session from before a secret change): its
# UI sends the user to the login page for it, as for a 401.
INVALID_TOKEN_DETAIL = "Invalid JWT token"  # noqa: S105 - an error message, not a secret


@functools.cache
def airflow_user_required() -> Callable[..., Any]:
    """Airflow's dependency that lets in a user allowed to see the UI (cookie or token);
    the same object on every call (it is the key of a FastAPI dependency override)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return requires_access_view(AccessView.WEBSITE)


def tiering_interval_s() -> float:
    """The tiering DAG's schedule, as its DAG file reads it, in seconds between runs."""
    from tiered_storage_plugin.dag_support import (
        TIERING_SCHEDULE_DEFAULT,
        schedule_for,
        schedule_interval_s,
    )

    return schedule_interval_s(schedule_for("tiering", TIERING_SCHEDULE_DEFAULT))


def create_app(root: Path | None = None) -> FastAPI:
    """``root`` fixes the reports root (tests); by default it is read on each request."""
    app = FastAPI(
        title="Tiered storage",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(airflow_user_required())],
    )

    def reports() -> Path:
        return root if root is not None else paths.reports_root()

    @app.exception_handler(StarletteHTTPException)
    async def login_or_error(request: Request, exc: StarletteHTTPException) -> Response:
        target = login_redirect(request, exc)
        if target is not None:
            return RedirectResponse(target, status_code=303)
        return await http_exception_handler(request, exc)

    @app.get("/", response_class=HTMLResponse)
    def status_page(request: Request) -> HTMLResponse:
        every = status.read_summaries(reports(), limit=None)
        docs = status.latest_data_docs(reports())
        base = request.scope.get("root_path", "").rstrip("/")
        href = f"{base}/docs/latest/index.html" if docs is not None else None
        return HTMLResponse(
            status.status_page(
                every[-status.RUNS_MAX :],
                docs_href=href,
                now=datetime.now(UTC),
                tiering_interval_s=tiering_interval_s(),
                drills=recovery_page.drill_summaries(every),
            )
        )

    @app.get("/status.json")
    def status_json() -> JSONResponse:
        every = status.read_summaries(reports(), limit=None)
        summaries = every[-status.RUNS_MAX :]
        latest, statuses = status.latest_statuses(summaries)
        cluster_source, _ = status.latest_cluster(summaries)
        return JSONResponse(
            {
                "source": status.run_label(latest) if latest else None,
                # as jobs.cluster_status wrote it (jobs.planning.cluster_view documents it)
                "cluster": None
                if cluster_source is None
                else cluster_source.data["details"]["cluster"],
                "partitions": [
                    {**dataclasses.asdict(s), "copy_lag_offsets": s.copy_lag_offsets}
                    for s in statuses
                ],
                "runs": [dataclasses.asdict(p) for p in status.chart_points(summaries)],
                # per remote-enabled topic: its manifest and drills (recovery_page)
                "recovery": recovery_page.recovery_json(
                    status.snapshot_topics(cluster_source),
                    None
                    if cluster_source is None
                    else recovery_page.manifest_states(cluster_source.data),
                    [(d, status.run_label(d)) for d in recovery_page.drill_summaries(every)],
                ),
            }
        )

    @app.get("/docs/latest/{file_path:path}")
    def latest_docs(request: Request, file_path: str) -> Response:
        site = status.latest_data_docs(reports())
        if site is None:
            raise HTTPException(404, "no Data Docs yet: run the data_quality DAG")
        return _serve(site, file_path, status_href=_status_href(request))

    @app.get("/docs/runs/{dag_id}/{key}/{task_id}/{file_path:path}")
    def run_docs(request: Request, dag_id: str, key: str, task_id: str, file_path: str) -> Response:
        parts = (dag_id, key, task_id)
        if any(p != paths.safe_name(p) for p in parts):
            raise HTTPException(404, "no such report")
        task_dir = reports() / "runs" / dag_id / key / task_id
        site = task_dir / "report" / paths.DATA_DOCS_INDEX.parent
        if not site.is_dir():
            raise HTTPException(404, f"no Data Docs for {dag_id} {key} {task_id}")
        return _serve(site, file_path, status_href=_status_href(request))

    @app.get("/plans/{dag_id}/{key}")
    def plan(dag_id: str, key: str) -> FileResponse:
        if any(p != paths.safe_name(p) for p in (dag_id, key)):
            raise HTTPException(404, "no such plan")
        target = reports() / "runs" / dag_id / key / "mark_partitions" / PLAN_FILE
        if not target.is_file():
            raise HTTPException(404, f"no dry-run plan for {dag_id} {key}")
        return FileResponse(target, media_type="text/plain; charset=utf-8")

    return app


def login_redirect(request: Request, exc: StarletteHTTPException) -> str | None:
    """Where to send a browser that ``exc`` refused for want of a session: Airflow's login
    with this page as ``next``; None for API clients (a bearer token, or no HTML accepted)
    and for every other error."""
    if exc.status_code != 401 and not (
        exc.status_code == 403 and exc.detail == INVALID_TOKEN_DETAIL
    ):
        return None
    if request.method not in ("GET", "HEAD") or "authorization" in request.headers:
        return None
    if "text/html" not in request.headers.get("accept", ""):
        return None
    page = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return airflow_root(request) + AIRFLOW_LOGIN_PATH + "?" + urlencode({"next": page})


def airflow_root(request: Request) -> str:
    """The path Airflow is served under (``""`` at the root of its host): the plugin app's
    mount point without ``paths.URL_PREFIX``."""
    mounted = str(request.scope.get("root_path", "")).rstrip("/")
    return mounted.removesuffix(paths.URL_PREFIX)


def _status_href(request: Request) -> str:
    """The status page's path (the plugin app's root)."""
    return str(request.scope.get("root_path", "")).rstrip("/") + "/"


def _serve(site: Path, file_path: str, *, status_href: str) -> Response:
    """A file of a Data Docs site; a page gets a link back to the status page at the top."""
    base = site.resolve()
    target = (base / (file_path or "index.html")).resolve()
    if not target.is_relative_to(base) or not target.is_file():
        raise HTTPException(404, f"no such file in the report: {file_path}")
    if target.suffix != ".html" or target.stat().st_size > DOCS_PAGE_BYTES_MAX:
        return FileResponse(target)
    return HTMLResponse(with_status_link(target.read_text(errors="replace"), status_href))


def with_status_link(page: str, status_href: str) -> str:
    """``page`` with a bar linking back to the status page right after its ``<body>``."""
    bar = (
        f'<nav id="tiered-storage-back" style="{BACK_BAR_STYLE}">'
        f'<a href="{html.escape(status_href)}">&larr; Tiered storage status</a></nav>'
    )
    body = _BODY_TAG.search(page)
    if body is None:
        return bar + page
    return page[: body.end()] + bar + page[body.end() :]
