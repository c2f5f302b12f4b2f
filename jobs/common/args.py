"""The options every job takes, parsed into ``JobArgs``.

    --bootstrap-server HOST:PORT   the cluster (env STORAGE_CORE_BOOTSTRAP_SERVER,
                                   default localhost:9092)
    --command-config PATH          the client's security settings, Kafka's client.properties
                                   (env STORAGE_CORE_CLIENT_CONFIG; a file that holds a
                                   password must be readable by its owner only)
    --broker-config PATH           the broker's server.properties (env
                                   STORAGE_CORE_BROKER_CONFIG): default log dirs, broker id,
                                   remote storage manager and its rsm.config.* settings
    --log-dir DIR                  repeatable; default the broker config's log.dirs, else env
                                   STORAGE_CORE_LOG_DIRS (comma-separated)
    --broker-id N                  whose log dirs these are (default: the broker config's,
                                   else the cluster's only broker)
    --broker-log-dirs ID=DIR[,DIR] repeatable: every broker's log dirs as this host sees them,
                                   so that each partition is read from its leader's (env
                                   STORAGE_CORE_BROKER_LOG_DIRS, ``;``-separated); instead of
                                   --log-dir/--broker-id
    --topic NAME                   only this topic
    --remote-storage-manager NAME  LocalTieredStorage | S3RemoteStorageManager | dotted path
    --rsm-config KEY=VALUE         repeatable; ``rsm.config.`` prefix optional
    --summary-path PATH            where the JSON run summary goes
    --dry-run                      plan and print, change nothing
    --spark-master URL             default local[*] (env SPARK_MASTER)
    --lock-dir DIR                 run locks (env STORAGE_CORE_JOBS_LOCK_DIR)
    --lock-wait-s S                how long to wait for a concurrent run (default 0)

Settings resolve in the order: command line, then the broker config, then the environment.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jobs.common.broker_log_dirs import (
    BrokerLogDirs,
    BrokerLogDirsError,
    parse_broker_log_dirs,
    parse_broker_log_dirs_env,
)
from storage_core.errors import StorageError
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tools.key_values import rsm_settings

BOOTSTRAP_SERVER_ENV = "STORAGE_CORE_BOOTSTRAP_SERVER"
CLIENT_CONFIG_ENV = "STORAGE_CORE_CLIENT_CONFIG"
BROKER_CONFIG_ENV = "STORAGE_CORE_BROKER_CONFIG"
LOG_DIRS_ENV = "STORAGE_CORE_LOG_DIRS"
BROKER_LOG_DIRS_ENV = "STORAGE_CORE_BROKER_LOG_DIRS"
SPARK_MASTER_ENV = "SPARK_MASTER"
DEFAULT_BOOTSTRAP_SERVER = "localhost:9092"
DEFAULT_SPARK_MASTER = "local[*]"
# A run waits at most this long for a concurrent run of the same job to finish.
LOCK_WAIT_S_MAX = 3600.0


class JobArgumentError(ValueError):
    """A job option is missing or malformed; the message names the option."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobArgs:
    """The shared options, resolved. ``options`` holds the job's own (argparse names)."""

    job: str
    bootstrap_server: str
    log_dirs: tuple[Path, ...]
    broker_config_path: Path | None
    broker_id: int | None
    topic: str | None
    rsm_class_name: str
    rsm_config: Mapping[str, str]
    summary_path: Path | None
    dry_run: bool
    spark_master: str
    lock_dir: Path | None
    lock_wait_s: float
    broker_log_dirs: BrokerLogDirs = field(default_factory=dict)
    client_config: Path | None = None
    """The client's security settings (``--command-config``); PLAINTEXT when None."""
    options: Mapping[str, object] = field(default_factory=dict)

    def log_dirs_by_broker(self, broker_id: int | None) -> BrokerLogDirs:
        """Every broker's log dirs: ``--broker-log-dirs``, else this host's log dirs as
        ``broker_id``'s (the single-broker form), else nothing."""
        if self.broker_log_dirs:
            return self.broker_log_dirs
        if broker_id is None or not self.log_dirs:
            return {}
        return {broker_id: self.log_dirs}

    def require_log_dirs(self) -> tuple[Path, ...]:
        """The log dirs, or ``JobArgumentError`` saying how to give them."""
        if not self.log_dirs:
            raise JobArgumentError(
                f"{self.job} needs a log dir: pass --log-dir DIR or --broker-config"
                f" server.properties (or set {LOG_DIRS_ENV})"
            )
        return self.log_dirs

    def int_option(self, name: str) -> int:
        value = self.options[name]
        if not isinstance(value, int):
            raise JobArgumentError(f"option {name} must be an integer, got {value!r}")
        return value

    def float_option(self, name: str) -> float:
        value = self.options[name]
        if not isinstance(value, int | float):
            raise JobArgumentError(f"option {name} must be a number, got {value!r}")
        return float(value)

    def optional_float_option(self, name: str) -> float | None:
        return None if self.options.get(name) is None else self.float_option(name)

    def broker_config(self) -> KafkaConfig | None:
        path = self.broker_config_path
        return None if path is None else KafkaConfig.load(path)


def job_parser(job: str, doc: str | None) -> argparse.ArgumentParser:
    """A parser with the shared options; the job adds its own before ``parse_job_args``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m jobs.{job}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = parser.add_argument_group("options shared by every job")
    common.add_argument(
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT",
        help=f"the cluster (default ${BOOTSTRAP_SERVER_ENV}, else {DEFAULT_BOOTSTRAP_SERVER})",
    )
    common.add_argument(
        "--command-config",
        type=Path,
        default=None,
        metavar="PATH",
        help="the client's security settings as Kafka's client.properties names them"
        f" (security.protocol, sasl.*, ssl.*; default ${CLIENT_CONFIG_ENV})",
    )
    common.add_argument(
        "--broker-config",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"the broker's server.properties (default ${BROKER_CONFIG_ENV}): log.dirs,"
        " broker id, remote.log.storage.manager.class.name and rsm.config.*",
    )
    common.add_argument(
        "--log-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a log dir of the broker (repeatable; default the broker config's log.dirs,"
        f" else ${LOG_DIRS_ENV}, comma-separated)",
    )
    common.add_argument(
        "--broker-id",
        type=int,
        default=None,
        help="whose log dirs these are (default the broker config's, else the only broker)",
    )
    common.add_argument(
        "--broker-log-dirs",
        action="append",
        default=[],
        metavar="ID=DIR[,DIR]",
        help="a broker's log dirs as this host sees them (repeatable, one per broker; default"
        f" ${BROKER_LOG_DIRS_ENV}, ';'-separated): each partition is read from its leader's",
    )
    common.add_argument("--topic", default=None, help="only this topic")
    common.add_argument(
        "--remote-storage-manager",
        default=None,
        metavar="CLASS",
        help="LocalTieredStorage, S3RemoteStorageManager or a dotted path (default the broker"
        " config's remote.log.storage.manager.class.name)",
    )
    common.add_argument(
        "--rsm-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a remote storage manager setting (repeatable; the rsm.config. prefix is optional;"
        " overrides the broker config's)",
    )
    common.add_argument(
        "--summary-path", type=Path, default=None, metavar="PATH", help="write the JSON summary"
    )
    common.add_argument("--dry-run", action="store_true", help="plan and print; change nothing")
    common.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help=f"Spark master (default ${SPARK_MASTER_ENV}, else {DEFAULT_SPARK_MASTER})",
    )
    common.add_argument(
        "--lock-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory of the per-log-dir run locks (default $STORAGE_CORE_JOBS_LOCK_DIR, else"
        " <tmp>/storage-core-jobs); share it between hosts that run the same job",
    )
    common.add_argument(
        "--lock-wait-s",
        type=float,
        default=0.0,
        metavar="S",
        help="wait this long for a concurrent run of the job on the same log dirs, then report"
        " it and do nothing (default 0)",
    )
    return parser


def parse_job_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    *,
    job: str,
    environ: Mapping[str, str] | None = None,
) -> JobArgs:
    """Parse and resolve; a bad value exits through ``parser.error`` (exit code 2)."""
    env = os.environ if environ is None else environ
    ns = parser.parse_args(None if argv is None else list(argv))
    try:
        return resolve_job_args(ns, job=job, environ=env)
    except (JobArgumentError, StorageError, ValueError) as exc:
        parser.error(str(exc))


def resolve_job_args(ns: argparse.Namespace, *, job: str, environ: Mapping[str, str]) -> JobArgs:
    """``JobArgs`` from parsed options (see the module docstring for the order)."""
    shared = {
        "bootstrap_server",
        "command_config",
        "broker_config",
        "log_dir",
        "broker_id",
        "broker_log_dirs",
        "topic",
        "remote_storage_manager",
        "rsm_config",
        "summary_path",
        "dry_run",
        "spark_master",
        "lock_dir",
        "lock_wait_s",
    }
    config_path: Path | None = ns.broker_config
    if config_path is None and environ.get(BROKER_CONFIG_ENV):
        config_path = Path(environ[BROKER_CONFIG_ENV])
    broker_config = None if config_path is None else KafkaConfig.load(config_path)
    log_dirs: list[Path] = list(ns.log_dir)
    if not log_dirs and broker_config is not None:
        log_dirs = broker_config.log_dirs()
    if not log_dirs and environ.get(LOG_DIRS_ENV):
        log_dirs = [Path(p.strip()) for p in environ[LOG_DIRS_ENV].split(",") if p.strip()]
    try:
        broker_log_dirs = parse_broker_log_dirs(ns.broker_log_dirs, source="--broker-log-dirs")
        if not broker_log_dirs and environ.get(BROKER_LOG_DIRS_ENV):
            broker_log_dirs = parse_broker_log_dirs_env(
                environ[BROKER_LOG_DIRS_ENV], source=BROKER_LOG_DIRS_ENV
            )
    except BrokerLogDirsError as exc:
        raise JobArgumentError(str(exc)) from None
    if broker_log_dirs and (ns.log_dir or ns.broker_id is not None):
        raise JobArgumentError(
            "--broker-log-dirs names every broker's log dirs: leave out --log-dir and --broker-id"
        )
    rsm_class_name, rsm_config = rsm_settings(
        broker_config, ns.remote_storage_manager, ns.rsm_config
    )
    if not 0 <= ns.lock_wait_s <= LOCK_WAIT_S_MAX:
        raise JobArgumentError(f"--lock-wait-s must be within [0, {LOCK_WAIT_S_MAX:g}]")
    bootstrap = ns.bootstrap_server or environ.get(BOOTSTRAP_SERVER_ENV) or DEFAULT_BOOTSTRAP_SERVER
    client_config = ns.command_config
    if client_config is None and environ.get(CLIENT_CONFIG_ENV):
        client_config = Path(environ[CLIENT_CONFIG_ENV])
    return JobArgs(
        job=job,
        bootstrap_server=bootstrap,
        log_dirs=tuple(log_dirs),
        broker_config_path=config_path,
        broker_id=ns.broker_id,
        broker_log_dirs=broker_log_dirs,
        client_config=client_config,
        topic=ns.topic,
        rsm_class_name=rsm_class_name,
        rsm_config=rsm_config,
        summary_path=ns.summary_path,
        dry_run=ns.dry_run,
        spark_master=ns.spark_master or environ.get(SPARK_MASTER_ENV) or DEFAULT_SPARK_MASTER,
        lock_dir=ns.lock_dir,
        lock_wait_s=ns.lock_wait_s,
        options={k: v for k, v in vars(ns).items() if k not in shared},
    )
