"""``StoreSettings``: what an executor needs to reach the cluster and the remote store, as
plain (picklable) data built on the driver; tasks build their own clients from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from jobs.common.args import JobArgs
from storage_core.client.cluster import KafkaCluster
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.operations import resolve_broker_id
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSettings:
    bootstrap_server: str
    rsm_class_name: str
    rsm_config: dict[str, str]
    broker_id: int
    client_config: Path | None = None
    """Where the client's security settings are (the path, never the secrets, goes to the
    executors: each task reads the file)."""

    @classmethod
    def of(cls, args: JobArgs, broker_id: int, **extra: Any) -> Self:
        """From the job's arguments; ``extra`` fills a subclass's own fields."""
        return cls(
            bootstrap_server=args.bootstrap_server,
            client_config=args.client_config,
            rsm_class_name=args.rsm_class_name,
            rsm_config=dict(args.rsm_config),
            broker_id=broker_id,
            **extra,
        )

    def remote_storage_manager(self) -> RemoteStorageManager:
        return load_remote_storage_manager(self.rsm_class_name, self.rsm_config)


def resolve_job_broker_id(args: JobArgs, cluster: KafkaCluster) -> int:
    """``--broker-id``, else ``--broker-config``'s id, else the cluster's only broker."""
    config = None if args.broker_config_path is None else KafkaConfig.load(args.broker_config_path)
    return resolve_broker_id(args.broker_id, config, cluster.refresh_metadata([]))
