"""``TieredStorageHook``: the cluster and its object store, as an Airflow connection.

Connection (conn id ``tiered_storage_default`` unless told; conn type ``generic``)::

    host, port        the bootstrap server (HOST:PORT)
    extra.log_dirs    list of the brokers' log dirs (or one comma-separated string)
    extra.remote_storage_manager   e.g. LocalTieredStorage or S3RemoteStorageManager (optional)
    extra.rsm_config  {"local.storage.dir": "/data/tier", ...} (optional)
    extra.broker_config   path to server.properties (optional)
    extra.aws_conn_id     an ``aws`` connection whose credentials, region and endpoint reach
                          the job as the standard AWS environment variables (optional)

As an environment variable, e.g.::

    AIRFLOW_CONN_TIERED_STORAGE_DEFAULT='{"conn_type": "generic", "host": "127.0.0.1",
        "port": 9092, "extra": {"log_dirs": ["/data/kafka-logs"],
        "remote_storage_manager": "LocalTieredStorage",
        "rsm_config": {"local.storage.dir": "/data/tier"}}}'

Secrets never appear on a command line: S3 credentials go through the environment only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook

DEFAULT_CONN_ID = "tiered_storage_default"


class TieredStorageConnectionError(ValueError):
    """The tiered-storage connection lacks something a job needs, or holds a wrong type."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """What every job needs to reach the cluster and its remote tier."""

    bootstrap_server: str
    log_dirs: tuple[str, ...] = ()
    remote_storage_manager: str | None = None
    rsm_config: Mapping[str, str] = field(default_factory=dict)
    broker_config: str | None = None
    aws_conn_id: str | None = None

    def __post_init__(self) -> None:
        host, sep, port = self.bootstrap_server.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise TieredStorageConnectionError(
                f"bootstrap server must be HOST:PORT, got {self.bootstrap_server!r}:"
                " set the connection's host and port"
            )

    def job_arguments(self) -> list[str]:
        """The common command-line arguments of ``python -m jobs.<name>``."""
        args = ["--bootstrap-server", self.bootstrap_server]
        for log_dir in self.log_dirs:
            args += ["--log-dir", log_dir]
        if self.broker_config:
            args += ["--broker-config", self.broker_config]
        if self.remote_storage_manager:
            args += ["--remote-storage-manager", self.remote_storage_manager]
        for key, value in sorted(self.rsm_config.items()):
            args += ["--rsm-config", f"{key}={value}"]
        return args

    @classmethod
    def from_connection(
        cls, *, host: str | None, port: int | None, extra: Mapping[str, Any]
    ) -> ClusterSettings:
        if not host or not port:
            raise TieredStorageConnectionError(
                "the tiered-storage connection needs host and port (the bootstrap server)"
            )
        return cls(
            bootstrap_server=f"{host}:{int(port)}",
            log_dirs=_string_list(extra.get("log_dirs"), "log_dirs"),
            remote_storage_manager=_optional_str(extra.get("remote_storage_manager")),
            rsm_config=_string_map(extra.get("rsm_config"), "rsm_config"),
            broker_config=_optional_str(extra.get("broker_config")),
            aws_conn_id=_optional_str(extra.get("aws_conn_id")),
        )


class TieredStorageHook(BaseHook):
    """Reads the tiered-storage connection; builds job arguments and environment."""

    conn_name_attr = "tiered_storage_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "generic"
    hook_name = "Tiered storage cluster"

    def __init__(self, tiered_storage_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.tiered_storage_conn_id = tiered_storage_conn_id
        self._settings: ClusterSettings | None = None

    def get_conn(self) -> ClusterSettings:
        return self.settings()

    def settings(self) -> ClusterSettings:
        if self._settings is None:
            conn = self.get_connection(self.tiered_storage_conn_id)
            self._settings = ClusterSettings.from_connection(
                host=conn.host, port=conn.port, extra=conn.extra_dejson
            )
        return self._settings

    def job_environment(self) -> dict[str, str]:
        """AWS credentials, region and endpoint of ``extra.aws_conn_id`` as environment
        variables (the S3 remote storage manager reads the standard AWS chain)."""
        aws_conn_id = self.settings().aws_conn_id
        if not aws_conn_id:
            return {}
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        aws = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
        credentials = aws.get_credentials()
        env = {
            "AWS_ACCESS_KEY_ID": credentials.access_key,
            "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        }
        if credentials.token:
            env["AWS_SESSION_TOKEN"] = credentials.token
        region = aws.conn_region_name
        if region:
            env["AWS_REGION"] = region
            env["AWS_DEFAULT_REGION"] = region
        endpoint = aws.conn_config.endpoint_url
        if endpoint:
            env["AWS_ENDPOINT_URL"] = endpoint
        return env


def _optional_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _string_list(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        return tuple(str(part) for part in value)
    raise TieredStorageConnectionError(
        f"connection extra {name!r} must be a list or a comma-separated string,"
        f" got {type(value).__name__}"
    )


def _string_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    raise TieredStorageConnectionError(
        f"connection extra {name!r} must be an object of key/value settings,"
        f" got {type(value).__name__}"
    )
