"""The jobs' clients of the cluster: a ``KafkaCluster`` and a client-mode remote log metadata
manager, both connecting with the security settings of ``--command-config`` (the file's path
travels to the executors, each task reads it; the secrets never enter a task's closure)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from storage_core.client.client_properties import connection_config_from_file
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.tiered.operations import metadata_client
from storage_core.tiered.topic_based_rlmm import TopicBasedRemoteLogMetadataManager


class ReachesCluster(Protocol):
    """What names the cluster and how to connect to it (``JobArgs``, ``StoreSettings``)."""

    @property
    def bootstrap_server(self) -> str: ...
    @property
    def client_config(self) -> Path | None: ...


def connection_config(where: ReachesCluster) -> ConnectionConfig:
    return connection_config_from_file(where.client_config)


def kafka_cluster(where: ReachesCluster) -> KafkaCluster:
    return KafkaCluster(where.bootstrap_server, config=connection_config(where))


def remote_log_metadata_client(where: ReachesCluster) -> TopicBasedRemoteLogMetadataManager:
    return metadata_client(where.bootstrap_server, connection_config=connection_config(where))
