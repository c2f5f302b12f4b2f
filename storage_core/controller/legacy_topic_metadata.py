"""``topic-metadata.json``: where a single broker kept its topics before brokers coordinated
through the controller (the single-node store or ZooKeeper now). A broker that finds this file
while the store holds no topic moves its topics over once, before its controller starts
(``migrate_legacy_topic_metadata``):
topic ids, assignments, configs, and each partition's leader, ISR and leader epoch as they were,
so consumers and followers see no epoch change. The file is then renamed to
``topic-metadata.json.migrated`` (read once, kept for reference):

    {"version": 1, "cluster_id": "...", "topics": [
        {"name": "t", "topic_id": "<base64 uuid>", "internal": false,
         "configs": {"retention.ms": "60000"},
         "partitions": [{"partition": 0, "replicas": [0], "isr": [0],
                         "leader": 0, "leader_epoch": 3}]}]}
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import CorruptCheckpointError
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.zk_data import LeaderAndIsr, ReplicaAssignment, TopicAssignment

logger = logging.getLogger(__name__)

TOPIC_METADATA_FILE = "topic-metadata.json"
MIGRATED_SUFFIX = ".migrated"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyTopic:
    name: str
    topic_id: Uuid
    configs: dict[str, str]
    partitions: dict[int, LeaderAndIsr]
    replicas: dict[int, tuple[int, ...]]


def read_legacy_topic_metadata(path: Path) -> tuple[str, list[LegacyTopic]]:
    """``(cluster id, topics)`` of a ``topic-metadata.json``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported version {document.get('version')!r}")
        topics = []
        for entry in document["topics"]:
            states = {}
            replicas = {}
            for p in entry["partitions"]:
                index = int(p["partition"])
                replicas[index] = tuple(int(r) for r in p["replicas"])
                states[index] = LeaderAndIsr(
                    leader=int(p["leader"]),
                    leader_epoch=int(p["leader_epoch"]),
                    isr=tuple(int(r) for r in p["isr"]),
                    controller_epoch=0,
                )
            topics.append(
                LegacyTopic(
                    name=str(entry["name"]),
                    topic_id=Uuid.from_string(str(entry["topic_id"])),
                    configs={str(k): str(v) for k, v in entry["configs"].items()},
                    partitions=states,
                    replicas=replicas,
                )
            )
        return str(document.get("cluster_id", "")), topics
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorruptCheckpointError(
            f"topic metadata file {path} cannot be read ({error}); restore it from a backup:"
            " without it the topic ids and configs of this cluster are unknown"
        ) from None


def migrate_legacy_topic_metadata(log_dir: Path, zk: KafkaZkClient) -> str | None:
    """Move the topics of ``<log_dir>/topic-metadata.json`` into the store before any
    controller runs (so that the controller finds the partition states as they were); returns
    the cluster id it held, or None when there was nothing to migrate."""
    path = log_dir / TOPIC_METADATA_FILE
    if not path.exists():
        return None
    cluster_id, topics = read_legacy_topic_metadata(path)
    for topic in topics:
        assignment = TopicAssignment(
            topic=topic.name,
            topic_id=topic.topic_id,
            partitions={p: ReplicaAssignment(replicas=r) for p, r in topic.replicas.items()},
        )
        zk.create_topic(None, assignment, topic.configs)
        zk.create_partition_states(
            None,
            {TopicPartition(topic.name, p): state for p, state in topic.partitions.items()},
        )
    os.replace(path, path.with_name(path.name + MIGRATED_SUFFIX))
    logger.info("moved topic metadata into the metadata store topics=%d file=%s", len(topics), path)
    return cluster_id
