"""Registers the tiered-storage pieces with Airflow: the web app under ``/tiered-storage``, a
navigation entry that shows it inside the Airflow UI, the DAGs' timetable
(``ReadableCronTimetable``: cron schedules in words), and the api-server middleware that
refuses the trigger of a destructive DAG with bad params before a run exists
(``trigger_guard``).

The operators and the hook are imported by the DAGs from the ``tiered_storage_plugin``
package directly (``plugins/`` is on ``sys.path``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from tiered_storage_plugin.dag_support import ReadableCronTimetable
from tiered_storage_plugin.paths import URL_PREFIX
from tiered_storage_plugin.trigger_guard import DestructiveTriggerGuard
from tiered_storage_plugin.web import create_app


class TieredStoragePlugin(AirflowPlugin):
    name = "tiered_storage"
    fastapi_apps = [  # noqa: RUF012 - AirflowPlugin declares these as class attributes
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "Tiered storage status"}
    ]
    # the DAGs' cron schedules, shown in words in the DAG list; every Airflow component that
    # reads a serialized DAG back needs the class registered here
    timetables = [ReadableCronTimetable]  # noqa: RUF012 - same as above
    fastapi_root_middlewares = [  # noqa: RUF012 - same as above
        {"middleware": DestructiveTriggerGuard, "name": "Destructive DAG trigger guard"}
    ]
    external_views = [  # noqa: RUF012 - same as above
        {
            "name": "Tiered storage",
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            # The UI's address for the page is /plugin/<url_route> followed by the page's
            # own path (/tiered-storage/...): a route other than "tiered-storage" keeps the
            # address from repeating it.
            "url_route": "storage",
        }
    ]
