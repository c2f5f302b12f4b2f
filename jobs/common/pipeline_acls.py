"""The least ACLs the pipeline's principal needs on a cluster with an authorizer.

Measured, not guessed: every job (copy_segments, expire_remote, delete_partitions, reconcile,
quality, cluster_status, preferred_leader_election) and the partition_deletion DAG's own
DeleteTopics ran against a broker with ``kafka.authorizer.logger`` at DEBUG, and these are
exactly the (operation, resource) pairs the broker checked for the pipeline's principal
(tests/integration/security/test_pipeline_principal.py runs them green with only these, and
fails naming the ACL when one is missing). As ``storage-core acls`` commands (``*`` is every
topic, as the jobs discover remote-enabled topics themselves)::

    storage-core acls --add --allow-principal User:pipeline --operation Describe --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation DescribeConfigs --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation Describe --cluster
    storage-core acls --add --allow-principal User:pipeline --operation DescribeConfigs --cluster
    storage-core acls --add --allow-principal User:pipeline --operation Read \\
        --topic __remote_log_metadata
    storage-core acls --add --allow-principal User:pipeline --operation Write \\
        --topic __remote_log_metadata
    storage-core acls --add --allow-principal User:pipeline --operation Delete --topic '*'
    storage-core acls --add --allow-principal User:pipeline --operation Alter --cluster

The first six are ``PIPELINE_ACLS``, what the scheduled DAGs need; the last two only the
on-demand ones: the partition_deletion DAG (DeleteTopics) and the preferred_leader_election
DAG (ElectLeaders). As in Kafka, Delete on a topic implies Describe on it and Alter on the
cluster Describe on it, so with all eight granted the first and third are implied.

Nothing else is checked: no group (the jobs' consumers assign partitions and commit nothing),
no IdempotentWrite (the metadata producer is not idempotent), no DeleteRecords (expiry moves
the log start through the metadata topic, which the brokers read), no Create (the brokers
create the metadata topic). The jobs' Metadata requests list every topic: a topic the
principal may not describe is left out of the answer, so without Describe on a topic the jobs
do not see it (a job named one with ``--topic`` fails naming the ACL).

Each is an ALLOW from any host for ``User:<login of the tiered-storage connection>``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
EVERY_TOPIC = "*"


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineAcl:
    """One ACL: ``operation`` (Kafka's name: Describe, Read...) on a ``resource_type``
    (``topic`` or ``cluster``) named ``name`` (literal; ``*`` every topic), and why."""

    operation: str
    resource_type: str
    name: str = ""
    reason: str = ""
    needed_by: tuple[str, ...] = ()
    """The jobs (and DAG tasks) whose requests the broker checks against it."""

    def __post_init__(self) -> None:
        if self.resource_type not in ("topic", "cluster"):
            raise ValueError(f"resource type {self.resource_type!r}: expected topic or cluster")
        if (self.resource_type == "topic") != bool(self.name):
            raise ValueError("a topic ACL names its topic; a cluster ACL names nothing")

    def acls_arguments(self) -> list[str]:
        """The resource and operation as ``storage-core acls`` (kafka-acls.sh) takes them."""
        resource = ["--cluster"] if self.resource_type == "cluster" else ["--topic", self.name]
        return ["--operation", self.operation, *resource]

    def command(self, principal: str = "User:pipeline") -> str:
        """The ``storage-core acls --add`` command line that grants it to ``principal``."""
        return shlex.join(
            [
                "storage-core",
                "acls",
                "--add",
                "--allow-principal",
                principal,
                *self.acls_arguments(),
            ]
        )


DESCRIBE_TOPICS = PipelineAcl(
    operation="Describe",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="Metadata and ListOffsets of the topics the jobs find remote-enabled",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "delete_partitions",
        "reconcile",
        "quality",
        "cluster_status",
        "preferred_leader_election",
        "partition_deletion.mark_partitions",
    ),
)
DESCRIBE_TOPIC_CONFIGS = PipelineAcl(
    operation="DescribeConfigs",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="remote.storage.enable and the retention settings of each topic",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "quality",
        "cluster_status",
        "partition_deletion.mark_partitions",
    ),
)
DESCRIBE_CLUSTER = PipelineAcl(
    operation="Describe",
    resource_type="cluster",
    reason="DescribeLogDirs: which broker's log dir holds each partition",
    needed_by=("copy_segments", "expire_remote"),
)
DESCRIBE_CLUSTER_CONFIGS = PipelineAcl(
    operation="DescribeConfigs",
    resource_type="cluster",
    reason="each broker's remote.log.manager.copy.max.bytes.per.second (KIP-956 copy quota)",
    needed_by=("copy_segments",),
)
READ_REMOTE_LOG_METADATA = PipelineAcl(
    operation="Read",
    resource_type="topic",
    name=REMOTE_LOG_METADATA_TOPIC,
    reason="Fetch: the remote segments' metadata",
    needed_by=(
        "copy_segments",
        "expire_remote",
        "delete_partitions",
        "reconcile",
        "quality",
        "cluster_status",
    ),
)
WRITE_REMOTE_LOG_METADATA = PipelineAcl(
    operation="Write",
    resource_type="topic",
    name=REMOTE_LOG_METADATA_TOPIC,
    reason="Produce: segment copies and deletions, partition deletions",
    needed_by=("copy_segments", "expire_remote", "delete_partitions", "reconcile (repairs)"),
)
DELETE_TOPICS = PipelineAcl(
    operation="Delete",
    resource_type="topic",
    name=EVERY_TOPIC,
    reason="DeleteTopics of the partition_deletion DAG",
    needed_by=("partition_deletion.mark_partitions",),
)
ALTER_CLUSTER = PipelineAcl(
    operation="Alter",
    resource_type="cluster",
    reason="ElectLeaders of the preferred_leader_election DAG",
    needed_by=("preferred_leader_election",),
)

PIPELINE_ACLS: tuple[PipelineAcl, ...] = (
    DESCRIBE_TOPICS,
    DESCRIBE_TOPIC_CONFIGS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CLUSTER_CONFIGS,
    READ_REMOTE_LOG_METADATA,
    WRITE_REMOTE_LOG_METADATA,
)
"""What the scheduled DAGs need (tiering, retention_nightly, data_quality,
partition_deletion_sweep)."""
PARTITION_DELETION_ACLS: tuple[PipelineAcl, ...] = (DELETE_TOPICS,)
LEADER_ELECTION_ACLS: tuple[PipelineAcl, ...] = (ALTER_CLUSTER,)
ALL_PIPELINE_ACLS: tuple[PipelineAcl, ...] = (
    PIPELINE_ACLS + PARTITION_DELETION_ACLS + LEADER_ELECTION_ACLS
)
"""Every DAG's, the on-demand partition_deletion and preferred_leader_election included."""
IMPLIED_BY: dict[PipelineAcl, PipelineAcl] = {
    DESCRIBE_TOPICS: DELETE_TOPICS,
    DESCRIBE_CLUSTER: ALTER_CLUSTER,
}
"""Kafka's implied operations: Delete on a topic allows Describe on it, Alter on the cluster
Describe on it; with both on-demand DAGs' ACLs granted, these two add nothing."""
