"""``TieredStorageHook``: the cluster and its object store, as an Airflow connection.

Connection (conn id ``tiered_storage_default`` unless told; conn type ``generic``)::

    host, port        the bootstrap servers: every broker, comma-separated
                      (``b1:9092,b2:9092,b3``; an entry without a port takes ``port``)
    extra.bootstrap_servers   the same as a list or a comma-separated string (instead of host)
    extra.log_dirs    the log dirs of a single broker (a list or one comma-separated string)
    extra.broker_log_dirs   every broker's log dirs as the workers see them: an object
                      ``{"1": ["/data/b1"], "2": "/data/b2a,/data/b2b"}`` or the jobs'
                      environment form ``"1=/data/b1;2=/data/b2a,/data/b2b"``; each job
                      reads a partition through its leader's dirs (instead of log_dirs)
    extra.remote_storage_manager   e.g. LocalTieredStorage or S3RemoteStorageManager (optional)
    extra.rsm_config  {"local.storage.dir": "/data/tier", ...} (optional)
    extra.broker_config   path to server.properties (optional)
    extra.aws_conn_id     an ``aws`` connection whose credentials, region and endpoint reach
                          the job as the standard AWS environment variables (optional)
    extra.copy_max_bytes_per_second   the copy job's upload rate for the whole cluster
                          (bytes per second, > 0), over the brokers' KIP-956
                          ``remote.log.manager.copy.max.bytes.per.second`` (optional: without
                          it the job paces to the strictest broker's value)
    login, password, extra.security_protocol, extra.sasl_mechanism, extra.ssl_ca_location
                          how the jobs authenticate to a secured cluster (client_security)

As an environment variable, e.g.::

    AIRFLOW_CONN_TIERED_STORAGE_DEFAULT='{"conn_type": "generic", "host": "127.0.0.1",
        "port": 9092, "extra": {"log_dirs": ["/data/kafka-logs"],
        "remote_storage_manager": "LocalTieredStorage",
        "rsm_config": {"local.storage.dir": "/data/tier"}}}'

A cluster of three brokers::

    AIRFLOW_CONN_TIERED_STORAGE_DEFAULT='{"conn_type": "generic",
        "host": "b1:9092,b2:9092,b3:9092",
        "extra": {"broker_log_dirs": {"1": ["/data/b1"], "2": ["/data/b2"], "3": ["/data/b3"]},
        "remote_storage_manager": "LocalTieredStorage",
        "rsm_config": {"local.storage.dir": "/data/tier"}}}'

The connection is validated when it is read: a malformed entry is named in the error.
Secrets never appear on a command line: S3 credentials go through the environment only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook

from tiered_storage_plugin.client_security import ClientSecurity, ClientSecurityError

DEFAULT_CONN_ID = "tiered_storage_default"
BOOTSTRAP_SERVERS_MAX = 64
BROKERS_MAX = 1000
LOG_DIRS_PER_BROKER_MAX = 64
# Characters that separate the entries of ``--broker-log-dirs`` and its environment form.
_LOG_DIR_SEPARATORS = (",", ";")


class TieredStorageConnectionError(ValueError):
    """The tiered-storage connection lacks something a job needs, or holds a wrong type."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """What every job needs to reach the cluster and its remote tier. ``bootstrap_server``
    names every broker (``HOST:PORT`` entries, comma-separated); ``broker_log_dirs`` maps
    broker ids to their log dirs (``log_dirs`` is the single-broker form: never both)."""

    bootstrap_server: str
    log_dirs: tuple[str, ...] = ()
    broker_log_dirs: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    remote_storage_manager: str | None = None
    rsm_config: Mapping[str, str] = field(default_factory=dict)
    broker_config: str | None = None
    aws_conn_id: str | None = None
    security: ClientSecurity = field(default_factory=ClientSecurity)
    copy_max_bytes_per_second: float | None = None

    def __post_init__(self) -> None:
        servers = self.bootstrap_server.split(",")
        if len(servers) > BOOTSTRAP_SERVERS_MAX:
            raise TieredStorageConnectionError(
                f"{len(servers)} bootstrap servers: at most {BOOTSTRAP_SERVERS_MAX}"
            )
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise TieredStorageConnectionError(
                    f"bootstrap server {server!r} (of {self.bootstrap_server!r}) is not"
                    " HOST:PORT: set the connection's host (comma-separated brokers) and port"
                )
        if self.log_dirs and self.broker_log_dirs:
            raise TieredStorageConnectionError(
                "the connection has both extra 'log_dirs' (one broker) and 'broker_log_dirs'"
                " (every broker): keep only broker_log_dirs"
            )
        if len(self.broker_log_dirs) > BROKERS_MAX:
            raise TieredStorageConnectionError(
                f"connection extra 'broker_log_dirs' names {len(self.broker_log_dirs)} brokers:"
                f" at most {BROKERS_MAX}"
            )
        for broker_id, dirs in self.broker_log_dirs.items():
            _check_broker_dirs(broker_id, dirs)

    @property
    def bootstrap_servers(self) -> tuple[str, ...]:
        """Every bootstrap server, ``HOST:PORT``."""
        return tuple(self.bootstrap_server.split(","))

    def job_arguments(self) -> list[str]:
        """The common command-line arguments of ``python -m jobs.<name>``."""
        args = ["--bootstrap-server", self.bootstrap_server]
        for log_dir in self.log_dirs:
            args += ["--log-dir", log_dir]
        for broker_id, dirs in sorted(self.broker_log_dirs.items()):
            args += ["--broker-log-dirs", f"{broker_id}=" + ",".join(dirs)]
        if self.broker_config:
            args += ["--broker-config", self.broker_config]
        if self.remote_storage_manager:
            args += ["--remote-storage-manager", self.remote_storage_manager]
        for key, value in sorted(self.rsm_config.items()):
            args += ["--rsm-config", f"{key}={value}"]
        return args

    @classmethod
    def from_connection(
        cls,
        *,
        host: str | None,
        port: int | None,
        extra: Mapping[str, Any],
        login: str | None = None,
        password: str | None = None,
    ) -> ClusterSettings:
        try:
            security = ClientSecurity.from_connection(login=login, password=password, extra=extra)
        except ClientSecurityError as error:
            raise TieredStorageConnectionError(str(error)) from None
        return cls(
            bootstrap_server=_bootstrap_servers(host, port, extra.get("bootstrap_servers")),
            log_dirs=_string_list(extra.get("log_dirs"), "log_dirs"),
            broker_log_dirs=_broker_log_dirs(extra.get("broker_log_dirs")),
            remote_storage_manager=_optional_str(extra.get("remote_storage_manager")),
            rsm_config=_string_map(extra.get("rsm_config"), "rsm_config"),
            broker_config=_optional_str(extra.get("broker_config")),
            aws_conn_id=_optional_str(extra.get("aws_conn_id")),
            security=security,
            copy_max_bytes_per_second=_optional_rate(
                extra.get("copy_max_bytes_per_second"), "copy_max_bytes_per_second"
            ),
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
                host=conn.host,
                port=conn.port,
                extra=conn.extra_dejson,
                login=conn.login,
                password=conn.password,
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


def _bootstrap_servers(host: str | None, port: int | None, listed: Any) -> str:
    """``HOST:PORT,...`` from ``extra.bootstrap_servers``, else from host (comma-separated
    entries; one without a port takes the connection's port)."""
    entries = _string_list(listed, "bootstrap_servers")
    if not entries:
        entries = tuple(part.strip() for part in (host or "").split(",") if part.strip())
    if not entries:
        raise TieredStorageConnectionError(
            "the tiered-storage connection needs host and port (the bootstrap servers:"
            " every broker as HOST:PORT, comma-separated)"
        )
    servers = []
    for entry in entries:
        if ":" in entry:
            servers.append(entry)  # checked by ClusterSettings
        elif port:
            servers.append(f"{entry}:{int(port)}")
        else:
            raise TieredStorageConnectionError(
                f"bootstrap server {entry!r} has no port and the connection has none:"
                " write it HOST:PORT or set the connection's port"
            )
    return ",".join(servers)


def _broker_log_dirs(value: Any) -> dict[int, tuple[str, ...]]:
    """``{broker_id: (dir, ...)}`` from an object or the ``ID=DIR[,DIR];...`` string."""
    if value is None or value in ("", {}):
        return {}
    if isinstance(value, str):
        from jobs.common.broker_log_dirs import BrokerLogDirsError, parse_broker_log_dirs_env

        try:
            parsed = parse_broker_log_dirs_env(value, source="connection extra 'broker_log_dirs'")
        except BrokerLogDirsError as exc:
            raise TieredStorageConnectionError(str(exc)) from None
        return {broker: tuple(str(d) for d in dirs) for broker, dirs in parsed.items()}
    if not isinstance(value, Mapping):
        raise TieredStorageConnectionError(
            "connection extra 'broker_log_dirs' must be an object {broker id: [log dir, ...]}"
            f" or a string '1=/dir;2=/dir', got {type(value).__name__}"
        )
    result: dict[int, tuple[str, ...]] = {}
    for key, dirs in value.items():
        text = str(key).strip()
        if not text.isdigit():
            raise TieredStorageConnectionError(
                f"connection extra 'broker_log_dirs': entry {key!r} is not a broker id"
                " (a non-negative integer)"
            )
        if isinstance(dirs, str):
            listed = tuple(part.strip() for part in dirs.split(",") if part.strip())
        elif isinstance(dirs, list | tuple) and all(isinstance(d, str) for d in dirs):
            listed = tuple(d.strip() for d in dirs if d.strip())
        else:
            raise TieredStorageConnectionError(
                f"connection extra 'broker_log_dirs': entry {key!r} must be a list of log dirs"
                f" or a comma-separated string, got {dirs!r}"
            )
        if int(text) in result:
            raise TieredStorageConnectionError(
                f"connection extra 'broker_log_dirs': broker {int(text)} is given twice"
            )
        result[int(text)] = listed
    return result


def _check_broker_dirs(broker_id: int, dirs: tuple[str, ...]) -> None:
    where = f"connection extra 'broker_log_dirs': broker {broker_id}"
    if not dirs:
        raise TieredStorageConnectionError(f"{where} has no log dir")
    if len(dirs) > LOG_DIRS_PER_BROKER_MAX:
        raise TieredStorageConnectionError(
            f"{where} has {len(dirs)} log dirs: at most {LOG_DIRS_PER_BROKER_MAX}"
        )
    for directory in dirs:
        if any(sep in directory for sep in _LOG_DIR_SEPARATORS):
            raise TieredStorageConnectionError(
                f"{where}: log dir {directory!r} holds ',' or ';', which separate the entries"
                " of --broker-log-dirs: rename or mount it elsewhere"
            )


def _optional_rate(value: Any, name: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        rate = float(value)
    except (TypeError, ValueError):
        rate = 0.0
    if not rate > 0 or isinstance(value, bool):
        raise TieredStorageConnectionError(
            f"connection extra {name!r} must be a number of bytes per second above 0, got {value!r}"
        )
    return rate


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
